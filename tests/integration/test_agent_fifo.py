"""The Agent's end of the hang-event FIFO: real events from the Profiler, and bad input."""

from __future__ import annotations

import asyncio
import os

import pytest
from fifo_events import event_bytes
from profiler_builds import run_scenario
from waiting import wait_until_async

from comminsight.agent.receivers.fifo_reader import EventDecoder, FifoError, HangEventFifo
from comminsight_gen.abi import shm_v1


def test_profiler_hang_event_reaches_the_agent_reader(tmp_path):
    with HangEventFifo(tmp_path) as fifo:  # open before the Profiler looks for a reader
        out = run_scenario("hang", "plain", tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.5")
        events = fifo.read_available()
    assert out["counters"]["fifo_events_dropped"] == 0
    assert out["counters"]["fifo_events_written"] == 1  # counted before the scenario finalized
    # the watchdog's report, then the finalize of the (only) communicator with the op in flight
    assert [e.event_type for e in events] == ["hang_suspected", "process_exit"]
    assert [e.event_seq for e in events] == [1, 2]
    assert events[1].op_index == events[0].op_index and events[1].comm_id == 0xA9
    e = events[0]
    assert (e.event_type, e.comm_id, e.comm_name, e.rank, e.nranks) == (
        "hang_suspected",
        0xA9,
        "dp:0",
        0,
        2,
    )
    assert (e.op_kind, e.func, e.op_seq, e.op_index) == ("coll", "AllReduce", 1, 1)
    assert e.channels_started == 1 and e.coll_enqueued == 2 and e.coll_completed == 1
    assert e.age_ns >= e.threshold_ns == 500_000_000
    assert e.pid > 0 and e.hostname == os.uname().nodename
    assert fifo.stats.events == 2 and fifo.stats.rejected == fifo.stats.bytes_discarded == 0


def test_events_split_across_reads_are_joined():
    d = EventDecoder("test")
    raw = event_bytes(comm_id=7) + event_bytes(comm_id=8, event_type=2)
    assert d.feed(raw[:100]) == []
    got = d.feed(raw[100:700]) + d.feed(raw[700:])
    assert [(e.comm_id, e.event_type) for e in got] == [(7, "hang_suspected"), (8, "hang_cleared")]
    assert d.stats.by_type == {"hang_suspected": 1, "hang_cleared": 1}


def test_garbage_is_skipped_and_the_next_event_still_read():
    d = EventDecoder("/x/hang-events.fifo")
    got = d.feed(b"hello, not an event\n" * 3 + event_bytes(comm_id=9))
    assert [e.comm_id for e in got] == [9]
    assert d.stats.bytes_discarded == 60
    assert "/x/hang-events.fifo" in d.stats.last_error and "60 bytes" in d.stats.last_error


def test_a_magic_split_by_garbage_is_not_lost():
    """Resync keeps a possible magic prefix at the end of a buffer for the next read."""
    d = EventDecoder("test")
    raw = event_bytes(comm_id=3)
    assert d.feed(b"x" * 600 + raw[:2]) == []
    assert [e.comm_id for e in d.feed(raw[2:])] == [3]
    assert d.stats.bytes_discarded == 600


def test_wrong_version_or_size_is_rejected_and_named():
    d = EventDecoder("test")
    got = d.feed(
        event_bytes(abi_version=2, comm_id=1)
        + event_bytes(event_size=256, comm_id=2)
        + event_bytes(comm_id=3)
    )
    assert [e.comm_id for e in got] == [3]
    assert d.stats.rejected == 2 and d.stats.events == 1
    assert "event_size 256" in d.stats.last_error or "abi_version 2" in d.stats.last_error


def test_codes_from_a_newer_profiler_decode_as_unknown():
    d = EventDecoder("test")
    (e,) = d.feed(event_bytes(event_type=99, func=250, datatype=250, op_kind=77, local_rank=-1))
    assert (e.event_type, e.func, e.datatype, e.op_kind) == (
        "unknown(99)",
        shm_v1.FUNC_LABELS[shm_v1.Func.UNKNOWN],
        shm_v1.DATATYPE_LABELS[shm_v1.Datatype.UNKNOWN],
        "unknown",
    )
    assert e.local_rank is None and e.peer is None


def test_a_regular_file_in_the_fifo_place_is_named(tmp_path):
    (tmp_path / "fifos").mkdir()
    (tmp_path / "fifos" / "hang-events.fifo").write_text("not a fifo")
    with pytest.raises(FifoError, match="hang-events.fifo exists but is not a FIFO"):
        HangEventFifo(tmp_path).open()


def test_a_file_in_the_fifos_directory_place_is_named(tmp_path):
    (tmp_path / "fifos").write_text("")
    with pytest.raises(FifoError, match="cannot create the hang-event FIFO .*fifos/hang-events"):
        HangEventFifo(tmp_path).open()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_an_unwritable_home_is_named(tmp_path):
    (tmp_path / "fifos").mkdir(mode=0o500)
    try:
        with pytest.raises(FifoError, match="cannot create the hang-event FIFO .*hang-events"):
            HangEventFifo(tmp_path).open()
    finally:
        (tmp_path / "fifos").chmod(0o700)


def test_last_writer_leaving_does_not_spin_the_loop(tmp_path):
    """Events arrive through the event loop; a writer closing its end is not end-of-file."""

    async def main() -> tuple[list, int]:
        loop = asyncio.get_running_loop()
        got: list = []
        calls = 0

        def on_events(events):
            nonlocal calls
            calls += 1
            got.extend(events)

        fifo = HangEventFifo(tmp_path)
        fifo.open()
        fifo.attach(loop, on_events)
        for comm_id in (1, 2):
            fd = os.open(fifo.path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, event_bytes(comm_id=comm_id))
            os.close(fd)  # like the Profiler: one open per event
            await wait_until_async(lambda n=comm_id: len(got) == n, 30, f"event {comm_id} read")
        for _ in range(100):  # loop turns, not time: a wake-up on the closed end comes in these
            await asyncio.sleep(0)
        fifo.close()
        return got, calls

    got, calls = asyncio.run(main())
    assert [e.comm_id for e in got] == [1, 2]
    assert calls == 2  # called only when events came, not on every loop turn
