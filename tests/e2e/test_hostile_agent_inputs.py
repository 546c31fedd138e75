"""The Agent's inputs under attack and accident: the hang-event FIFO, SHM files in shms/,
Inject's metadata, dead processes' regions. Each case gets its named error (health, metrics,
log) while the Agent goes on serving; work per poll stays bounded whatever the input claims;
what a dead process recorded reaches its logs before its region goes."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import fifo_events
import numpy as np
import pytest
import waiting
from live_agent import LiveAgent
from logged_ops import is_op, ring_seq
from profiler_builds import builds

from comminsight.agent.hangs.store import HangStore
from comminsight.agent.node.service import RECENT_EVENTS
from comminsight.agent.receivers import log_recovery
from comminsight.agent.receivers.fifo_reader import EVENT_SIZE, HangEventFifo
from comminsight.agent.receivers.home_check import HomeError, check_config_file, check_home
from comminsight.agent.receivers.inject_names import READ_BUDGET, InjectNames
from comminsight.agent.receivers.log_recovery import recover, segment_prefix
from comminsight.agent.receivers.producers import QUARANTINE, ProducerSet
from comminsight.config import ConfigError, load_settings
from comminsight.log_segments import verify_segment
from comminsight.shm_reader import BUSY, HEADER, SLOT, RingCursor, ShmError, ShmRegion
from comminsight.sim import SimConfig, read_ground_truth, run_simulation
from comminsight.sim.faults import parse_fault
from comminsight_gen.abi import fifo_event_v1, shm_v1
from comminsight_gen.models.inspector_log_v1 import CiGap, CiSeal

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
NOBODY = 65534
SIM_ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"))


# ---- helpers -----------------------------------------------------------------------------


def wait_until(condition, what: str, timeout_s: float = 60.0):
    """tests/waiting.py's wait_until, `what` first as this module's calls give it."""
    return waiting.wait_until(condition, timeout_s, what)


def get(agent: LiveAgent, path: str, timeout_s: float = 30.0):
    with urllib.request.urlopen(agent.base_url + path, timeout=timeout_s) as r:
        body = r.read()
        return r.status, body


def health(agent: LiveAgent) -> dict:
    return json.loads(get(agent, "/api/v1/health")[1])


def metric(agent: LiveAgent, name: str, labels: str = "") -> float | None:
    text = get(agent, "/metrics")[1].decode()
    key = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return None


def event_bytes(**fields) -> bytes:
    """A suspected hang whose function is unknown (func 0) unless the fields say otherwise."""
    return fifo_events.event_bytes(**{"func": 0, **fields})


def write_fifo(path: Path, data: bytes) -> None:
    """Blocking writes, as much as the reader takes (the pipe holds 64 KiB)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 16]) :]
    finally:
        os.close(fd)


def hold_agent_lock(home: Path):
    (home / "metadata").mkdir(parents=True, exist_ok=True)
    f = open(home / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held by the caller
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def sim(home: Path, ranks: int = 2, steps: int = 1, faults=(), env=(), **settings):
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        workload="ddp",
        ranks=ranks,
        steps=steps,
        time_scale=0.01,
        env=SIM_ENV + tuple(env),
        faults=tuple(parse_fault(f) for f in faults),
        **settings,
    )
    return run_simulation(config)


@pytest.fixture(scope="module")
def region_bytes(tmp_path_factory) -> bytes:
    """A real Profiler's finished region (the simulator's rank 0), as bytes to forge from."""
    home = tmp_path_factory.mktemp("template")
    lock = hold_agent_lock(home)
    result = sim(home)
    assert not result.errors
    link = sorted((home / "shms").glob("*.shm"))[0]
    data = link.resolve().read_bytes()
    lock.close()
    return data


def forged_region(home: Path, data: bytes, name: str = "forged.shm", **fields) -> Path:
    """A regular region file in home/shms/ whose header fields are replaced; by default it
    claims this (live) test process as its producer, so the Agent keeps polling it. Its clock
    fields stay the real producer's, so its records stay within its clock however long ago
    the region was recorded (a loaded machine may reach a test minutes after the fixture)."""
    buf = bytearray(data)
    header = np.frombuffer(buf, dtype=HEADER, count=1)
    fields.setdefault("pid", os.getpid())
    fields.setdefault("state", shm_v1.FileState.LIVE)
    if "process_start_ticks" in HEADER.names:
        fields.setdefault("process_start_ticks", _start_ticks(fields["pid"]))
    if "boot_id" in HEADER.names:
        fields.setdefault("boot_id", b"")
    for key, value in fields.items():
        header[0][key] = value
    path = home / "shms" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(bytes(buf))
    return path


def _start_ticks(pid: int) -> int:
    """The start time a Profiler in pid would record (1 for a pid that is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return 1
    return int(stat[stat.rfind(b")") + 1 :].split()[19])


# ---- the hang-event FIFO ------------------------------------------------------------------


def _regular_file(fifo: Path) -> None:
    fifo.write_text("not a fifo")


def _other_owner(fifo: Path) -> None:
    os.mkfifo(fifo, 0o600)
    os.chown(fifo, NOBODY, NOBODY)


def _world_writable(fifo: Path) -> None:
    os.mkfifo(fifo, 0o600)
    os.chmod(fifo, 0o666)  # mkfifo's mode passes through the umask


def _symlink(fifo: Path) -> None:
    target = fifo.parent.parent / "elsewhere.fifo"
    os.mkfifo(target, 0o600)
    fifo.symlink_to(target)


@ROOT_ONLY
@pytest.mark.parametrize(
    "plant, reason",
    [(_other_owner, "other_owner"), (_world_writable, "writable_by_others"), (_symlink, "symlink")],
)
def test_a_fifo_the_agent_must_not_trust_is_refused_and_replaced(tmp_path, plant, reason):
    fifo = tmp_path / "fifos" / "hang-events.fifo"
    fifo.parent.mkdir(mode=0o700)
    plant(fifo)
    with LiveAgent(tmp_path) as agent:
        st = os.lstat(fifo)
        assert fifo.is_fifo() and not fifo.is_symlink()
        assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o600)
        reasons = health(agent)["reasons"]
        assert any("hang-event FIFO was replaced" in r and str(fifo) in r for r in reasons)
        assert metric(agent, "comminsight_agent_fifo_refused_total", f'reason="{reason}"') == 1
        write_fifo(fifo, event_bytes(comm_id=42))  # the new FIFO is read
        wait_until(lambda: agent.service.fifo.stats.events == 1, "the event")
    if reason == "symlink":
        assert (tmp_path / "elsewhere.fifo").is_fifo()  # the link's target is left alone


def test_a_regular_file_in_the_fifo_place_is_refused_and_the_agent_serves_on(tmp_path):
    fifo = tmp_path / "fifos" / "hang-events.fifo"
    fifo.parent.mkdir(mode=0o700)
    _regular_file(fifo)
    with LiveAgent(tmp_path) as agent:
        body = health(agent)
        assert body["status"] == "degraded"
        assert any(
            r.startswith("hang events are not received") and "is not a FIFO" in r
            for r in body["reasons"]
        )
        assert metric(agent, "comminsight_agent_fifo_refused_total", 'reason="not_fifo"') == 1
    assert fifo.read_text() == "not a fifo"  # nothing of anyone's is deleted


@ROOT_ONLY
def test_a_bad_fifo_in_a_directory_others_control_is_not_replaced(tmp_path):
    fifos = tmp_path / "fifos"
    fifos.mkdir(mode=0o700)
    _world_writable(fifos / "hang-events.fifo")
    os.chown(fifos, NOBODY, NOBODY)
    with LiveAgent(tmp_path) as agent:
        reasons = health(agent)["reasons"]
        assert any("not replaced" in r and "owned by uid 65534" in r for r in reasons), reasons
        assert get(agent, "/api/v1/node")[0] == 200
    assert os.lstat(fifos / "hang-events.fifo").st_mode & 0o777 == 0o666  # left as it was


def test_megabytes_of_magic_are_read_between_api_requests(tmp_path):
    data = fifo_event_v1.MAGIC.to_bytes(4, "little") * (1 << 20)  # 4 MiB of 'CIFE'
    with LiveAgent(tmp_path) as agent:
        writer = threading.Thread(target=write_fifo, args=(agent.service.fifo.path, data))
        writer.start()
        stats = agent.service.fifo.stats
        wait_until(lambda: stats.rejected, "the reader to start on the flood")
        assert get(agent, "/api/v1/health")[0] == 200  # answered while the flood is read
        writer.join(120)
        # every 4-byte step is a header with a wrong version; the last 508 bytes wait for more
        expected = (len(data) - EVENT_SIZE) // 4 + 1
        wait_until(lambda: stats.rejected == expected, "the whole flood to be read")
        assert stats.rejected_by_reason == {"abi_version": expected}
        assert stats.events == 0
        assert (
            metric(agent, "comminsight_agent_fifo_events_rejected_total", 'reason="abi_version"')
            == expected
        )
        # one log line for a million rejections, not a million lines
        assert stats.log.lines <= 1 + 120 // stats.log.period_s


def test_a_flood_of_forged_events_is_held_in_a_bounded_store(tmp_path):
    n = 20 * RECENT_EVENTS  # the store's bound, many times over
    rng = np.random.default_rng(7)
    events = np.zeros(n, dtype=fifo_event_v1.EVENT_DTYPE)
    events["magic"] = fifo_event_v1.MAGIC
    events["abi_version"] = fifo_event_v1.PROTOCOL_VERSION
    events["event_size"] = EVENT_SIZE
    events["event_type"] = rng.integers(0, 1 << 16, n)  # mostly codes no Profiler sends
    events["pid"] = rng.integers(1, 1 << 22, n)
    events["comm_id"] = rng.integers(1, 1 << 62, n)
    with LiveAgent(tmp_path) as agent:
        write_fifo(agent.service.fifo.path, events.tobytes())
        stats = agent.service.fifo.stats
        wait_until(lambda: stats.events == n, "every forged event", timeout_s=300)
        store = agent.call(lambda: len(agent.service.hang_events))
        assert store == RECENT_EVENTS
        assert stats.evicted == n - RECENT_EVENTS  # counted, not silently gone
        assert set(stats.by_type) <= {"hang_suspected", "hang_cleared", "process_exit", "unknown"}
        assert metric(agent, "comminsight_agent_fifo_events_evicted_total") == n - RECENT_EVENTS


def test_malformed_events_are_counted_in_metrics_and_the_good_one_read(tmp_path):
    with LiveAgent(tmp_path) as agent:
        write_fifo(
            agent.service.fifo.path,
            b"garbage!" * 8
            + event_bytes(abi_version=7)
            + event_bytes(event_size=256)
            + event_bytes(comm_id=5),
        )
        stats = agent.service.fifo.stats
        wait_until(lambda: stats.events == 1, "the good event")
        for reason in ("no_magic", "abi_version", "event_size"):
            labels = f'reason="{reason}"'
            assert metric(agent, "comminsight_agent_fifo_events_rejected_total", labels) == 1
        # the garbage, and the rest of each rejected event after its magic
        discarded = 64 + 2 * (EVENT_SIZE - 4)
        assert metric(agent, "comminsight_agent_fifo_bytes_discarded_total") == discarded
        assert any("hang-event FIFO input rejected" in r for r in health(agent)["reasons"])
        assert agent.service.hang_events[-1].comm_id == 5


def test_fifo_reader_decodes_a_bounded_amount_per_callback(tmp_path):
    """Without an event loop: one read_available() takes at most its budget."""
    with HangEventFifo(tmp_path) as fifo:
        fd = os.open(fifo.path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, event_bytes() * 120)  # 60 KiB: fits the pipe
        os.close(fd)
        assert len(fifo.read_available(max_bytes=10 * EVENT_SIZE)) == 10
        assert len(fifo.read_available()) == 110


# ---- SHM files ------------------------------------------------------------------------------


def test_a_fifo_named_shm_does_not_block_the_agent_and_is_named(tmp_path):
    shms = tmp_path / "shms"
    shms.mkdir()
    os.mkfifo(shms / "x.shm", 0o600)
    with LiveAgent(tmp_path) as agent:
        body = health(agent)
        assert any("x.shm" in r and "not a regular file" in r for r in body["reasons"])
        assert (
            metric(agent, "comminsight_agent_shm_refusals_total", 'reason="not_regular_file"') == 1
        )
    assert (shms / "quarantine" / "x.shm").is_fifo() and not (shms / "x.shm").exists()


@ROOT_ONLY
def test_shm_files_of_another_owner_or_linked_elsewhere_are_refused(tmp_path, region_bytes):
    other = forged_region(tmp_path, region_bytes, "other.shm")
    os.chown(other, NOBODY, NOBODY)
    secret = tmp_path / "secret"  # (a target outside tmp_path would be removed at teardown)
    secret.write_text("root's")
    (tmp_path / "shms" / "link.shm").symlink_to(secret)
    with LiveAgent(tmp_path) as agent:
        reasons = " | ".join(health(agent)["reasons"])
        assert "other.shm" in reasons and "owned by uid 65534" in reasons
        assert "link.shm" in reasons and "not followed" in reasons
        assert agent.service.producers.producers == {}
    assert secret.read_text() == "root's"


def _sparse_copy(path: Path, data: bytes, head: bytes) -> Path:
    """A file of len(data) bytes of which only `head` is written: the rest is a hole."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, len(data))
        os.pwrite(fd, head, 0)
    finally:
        os.close(fd)
    return path


def _no_free_space(monkeypatch) -> None:
    # the file system the test runs on has room for any hole; a full tmpfs has none
    monkeypatch.setattr("comminsight.shm_reader._free_bytes", lambda fd: 0)


def test_a_sparse_region_its_file_system_cannot_fill_is_refused_unmapped(
    tmp_path, region_bytes, monkeypatch
):
    # a reader touching a hole through its shared mapping makes tmpfs allocate the page, and
    # a full tmpfs answers that with SIGBUS: the Agent died (rc 135) on a forged 2 GiB file
    forged = forged_region(tmp_path, region_bytes, "whole.shm")
    data = forged.read_bytes()
    forged.unlink()
    sparse = _sparse_copy(tmp_path / "shms" / "sparse.shm", data, data[: HEADER.itemsize])
    assert os.stat(sparse).st_blocks * 512 < len(data)  # the file system keeps the hole
    ShmRegion(sparse).close()  # holes that free space can fill: a sound region
    _no_free_space(monkeypatch)
    with pytest.raises(ShmError, match="a sparse file .* whose holes its file system cannot"):
        ShmRegion(sparse)
    with LiveAgent(tmp_path) as agent:
        body = health(agent)
        assert any("sparse.shm" in r and "a sparse file" in r for r in body["reasons"])
        assert metric(agent, "comminsight_agent_shm_refusals_total", 'reason="sparse"') == 1
        assert get(agent, "/api/v1/communicators")[0] == 200
    assert (tmp_path / "shms" / "quarantine" / "sparse.shm").exists()


def test_a_refused_file_that_cannot_be_quarantined_is_said_to_stay_in_place(tmp_path):
    """shms/quarantine made a link once the Agent runs: nothing is moved through it, and
    health says where the refused file is (it said "quarantined")."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "shms").mkdir(mode=0o700)
    (tmp_path / "shms" / "quarantine").symlink_to(elsewhere)
    (tmp_path / "shms" / "bad.shm").write_bytes(b"\0" * 64)
    with LiveAgent(tmp_path) as agent:
        body = health(agent)
    (reason,) = [r for r in body["reasons"] if "bad.shm" in r]
    assert "left in place, not read again" in reason and "quarantined" not in reason, reason
    assert (tmp_path / "shms" / "bad.shm").exists() and not list(elsewhere.iterdir())


def test_a_region_sized_with_ftruncate_alone_is_read(tmp_path, region_bytes):
    # stand-ins and older producers size the file and write what they use: holes remain
    forged = forged_region(tmp_path, region_bytes, "whole.shm")
    data = forged.read_bytes()
    forged.unlink()
    head = data[: len(data) // 2]
    path = _sparse_copy(tmp_path / "shms" / "r.shm", data, head)
    with LiveAgent(tmp_path) as agent:
        agent.wait_passes(3)
        assert len(agent.service.producers.producers) == 1
        assert not metric(agent, "comminsight_agent_shm_refusals_total", 'reason="sparse"')
    assert path.exists()


def test_holes_punched_while_mapped_stop_the_reading_only_when_unfillable(
    tmp_path, region_bytes, monkeypatch
):
    path = tmp_path / "r.shm"
    path.write_bytes(region_bytes)
    region = ShmRegion(path)
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            punched = _punch_hole(fd, len(region_bytes) // 2, len(region_bytes) // 2)
        finally:
            os.close(fd)
        if not punched:
            pytest.skip("this file system cannot punch holes")
        assert region.shrunk() is None
        _no_free_space(monkeypatch)
        assert "holes its file system can no longer fill" in (region.shrunk() or "")
    finally:
        region.close()


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    punch_hole_keep_size = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    return libc.fallocate(fd, punch_hole_keep_size, offset, length) == 0


def test_a_sized_region_not_yet_allocated_is_waited_for(tmp_path, region_bytes, monkeypatch):
    # between ftruncate and posix_fallocate a Profiler's new file is a zeroed hole
    path = _sparse_copy(tmp_path / "new.shm", region_bytes, b"")
    for _ in range(2):
        with pytest.raises(ShmError) as waited:
            ShmRegion(path)
        assert waited.value.not_ready, str(waited.value)
        _no_free_space(monkeypatch)


def test_capacities_no_profiler_makes_are_named(tmp_path, region_bytes):
    from comminsight.shm_reader import COMM_SLOTS_MAX, RING_SLOTS_MAX

    for name, value in (
        ("comm_capacity", COMM_SLOTS_MAX + 1),
        ("ring_capacity", RING_SLOTS_MAX * 2),
    ):
        path = forged_region(tmp_path, region_bytes, f"{name}.shm", **{name: value})
        with pytest.raises(ShmError, match=f"header.{name}: {value}, more than any Profiler"):
            ShmRegion(path)


def test_a_ring_head_of_two_to_the_63_is_named_and_costs_one_ring_of_work(tmp_path, region_bytes):
    forged_region(tmp_path, region_bytes, ring_head=1 << 63)
    with LiveAgent(tmp_path) as agent:
        agent.wait_passes(3)
        counters = agent.service.producers.counters
        cap = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_capacity"])
        work = (counters.seqs_read, counters.slots_copied)
        assert work[0] <= cap + 1 and work[1] == 0
        agent.wait_passes(20)
        assert (counters.seqs_read, counters.slots_copied) == work  # no more work per poll
        body = health(agent)
        assert body["status"] == "degraded"
        assert any(f"header.ring_head {1 << 63} is not plausible" in r for r in body["reasons"])
        assert counters.records_lost == 0  # a forged head loses nothing real
        assert metric(agent, "comminsight_agent_shm_rings_unread") == 1


def test_a_random_comm_table_is_ignored_and_named(tmp_path, region_bytes):
    h = np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]
    start, rows = int(h["comm_table_offset"]), int(h["comm_capacity"])
    buf = bytearray(region_bytes)
    end = start + rows * shm_v1.COMM_ENTRY_DTYPE.itemsize
    buf[start:end] = np.random.default_rng(3).bytes(end - start)
    forged_region(tmp_path, bytes(buf))
    with LiveAgent(tmp_path) as agent:
        agent.wait_passes(3)
        body = health(agent)
        assert body["status"] == "degraded" and body["communicators_total"] == 0
        assert any(
            "communicator table rows break the shm v1 protocol" in r for r in body["reasons"]
        )
        (producer,) = agent.service.producers.producers.values()
        assert producer.region.bad_rows == rows  # every random row is refused
        assert metric(agent, "comminsight_agent_shm_comm_rows_invalid") == rows
        assert get(agent, "/api/v1/communicators")[0] == 200


def _ring(cap: int = 8):
    from types import SimpleNamespace

    return SimpleNamespace(header={"ring_head": 0}, ring_capacity=cap, ring=np.zeros(cap, SLOT))


def _publish(region, first: int, end: int) -> None:
    for t in range(first, end):
        region.ring[t % region.ring_capacity]["seq"] = t + 1
        region.ring[t % region.ring_capacity]["op_seq"] = t
    region.header["ring_head"] = end


def test_a_slot_still_being_written_is_read_later_not_lost():
    r = _ring()
    cursor = RingCursor(r)
    _publish(r, 0, 6)
    r.ring[3]["seq"] = 4 | int(BUSY)  # ticket 3 claimed (seq = ticket + 1, busy), not done
    assert list(cursor.poll()["op_seq"]) == [0, 1, 2]
    assert list(cursor.poll()["op_seq"]) == [] and cursor.lost == 0  # still being written
    r.ring[3]["seq"] = 4
    assert list(cursor.poll()["op_seq"]) == [3, 4, 5] and cursor.lost == 0


def test_a_slot_its_dead_writer_left_busy_is_lost_on_the_final_poll():
    r = _ring()
    cursor = RingCursor(r)
    _publish(r, 0, 4)
    r.ring[2]["seq"] = 3 | int(BUSY)
    assert list(cursor.poll(final=True)["op_seq"]) == [0, 1, 3]
    assert cursor.lost == 1 and cursor.lost_ranges == [(3, 3)]


# ---- Inject metadata ------------------------------------------------------------------------


def group_line(scratch: Path, pid: int, comm_name: str) -> bytes:
    """One inject-metadata group line, as Inject writes it."""
    from comminsight.inject.metadata import MetadataFile

    meta = MetadataFile(scratch / str(pid), {"rank": 0}, pid=pid, host="h")
    desc, _, name = comm_name.partition(":")
    meta.write(
        "group",
        api="new_process_group",
        group_name=name,
        group_desc=desc,
        comm_name=comm_name,
        naming="nccl-config",
        reason="",
        rank=0,
        group_rank=0,
        group_size=1,
        global_ranks=[0],
    )
    (written,) = (scratch / str(pid)).rglob("*.jsonl")
    return written.read_bytes()


def test_a_200_mb_metadata_line_is_refused_once_and_never_read_twice(tmp_path):
    inject = tmp_path / "metadata" / "inject"
    inject.mkdir(parents=True)
    path = inject / "p.jsonl"
    first = group_line(tmp_path / "scratch", 1, "default_pg:1")  # Inject's lines, whole
    with open(path, "wb") as f:
        f.write(first)
        f.seek(200 << 20)  # sparse: 200 MB of NUL bytes and no newline
        f.write(b"x\n" + group_line(tmp_path / "scratch", 2, "default_pg:2"))
    size = path.stat().st_size
    names = InjectNames(tmp_path)
    passes = 0
    while names._files.get("p.jsonl") is None or names._files["p.jsonl"].offset < size:
        names.refresh()
        passes += 1
        assert passes <= size // READ_BUDGET + 2, "a pass must make progress"
    assert names.rejected == {"line_too_long": 1}
    huge = first.count(b"\n") + 1
    assert (
        names.errors["p.jsonl"].startswith(f"line {huge}: ") and "limit" in names.errors["p.jsonl"]
    )
    assert names.named_by_inject("h", 1, "default_pg:1")
    assert names.named_by_inject("h", 2, "default_pg:2")  # the line after it still counts
    assert names.bytes_read == size  # every byte once
    names.refresh()
    assert names.bytes_read == size


def test_a_long_metadata_line_is_named_in_agent_health(tmp_path):
    inject = tmp_path / "metadata" / "inject"
    inject.mkdir(parents=True)
    line = group_line(tmp_path / "scratch", 3, "default_pg:3")
    with LiveAgent(tmp_path) as agent:
        agent.call(setattr, agent.service.inject_names, "max_line", 1000)  # a lower limit
        (inject / "q.jsonl").write_bytes(b"y" * 5000 + b"\n" + line)
        agent.wait_passes(2)
        reasons = health(agent)["reasons"]
        assert any("q.jsonl" in r and "1000-byte limit" in r for r in reasons)
        labels = 'reason="line_too_long"'
        assert metric(agent, "comminsight_agent_inject_lines_rejected_total", labels) == 1


# ---- dead processes -------------------------------------------------------------------------


def _segments_of(logs: Path, prefix: str) -> list[Path]:
    return sorted(p for p in logs.iterdir() if p.name.startswith(prefix))


def _logged_seqs(paths: list[Path]) -> tuple[list[int], set[int], list]:
    """Op ring seqs, every ring seq the lines cover (gaps too) and the seals."""
    ops, covered, seals = [], set(), []
    for path in paths:
        records = verify_segment(path).records if not path.name.endswith(".partial") else []
        if path.name.endswith(".partial"):
            from comminsight.log_segments import decode_lines

            data = path.read_bytes()
            records = decode_lines(path, data[: data.rfind(b"\n") + 1])
        else:
            seals.append(verify_segment(path).seal)
        for rec in records:
            ci = rec.ci
            if is_op(rec):
                ops.append(ring_seq(ci))
            if isinstance(ci, CiGap):
                covered.update(range(ci.first_lost_ring_seq, ci.last_lost_ring_seq + 1))
            elif ring_seq(ci):
                covered.add(ring_seq(ci))
    return ops, covered, seals


def test_a_sigkilled_rank_loses_no_op_its_shm_held(tmp_path, monkeypatch):
    home = tmp_path / "home"
    lock = hold_agent_lock(home)
    # The Agent releases the region once its records are recovered: a second mapping, taken
    # just before, keeps what the ring held for the comparison below.
    kept: dict[int, ShmRegion] = {}
    release = ShmRegion.release

    def keep_then_release(region: ShmRegion) -> None:
        if not region.released:
            kept[region.pid] = ShmRegion(region.path, shm_dir=str(region.target.parent))
        release(region)

    monkeypatch.setattr(ShmRegion, "release", keep_then_release)
    with LiveAgent(home) as agent:
        result = sim(
            home,
            faults=("die:rank=1,op=6",),
            # the writer drains the ring only at its end: the kill leaves every record in SHM
            env=(("COMMINSIGHT_PROFILER_LOG_FLUSH_MS", "600000"),),
            hang_hold_s=1.0,
        )
        dead_truth = next(t for t in read_ground_truth(result.run_dir) if t.rank == 1)
        producers = agent.service.producers
        dead = wait_until(
            lambda: next(
                (p for p in producers.producers.values() if p.recovered and p.recovered.path),
                None,
            ),
            "the dead rank's records to be recovered",
        )
        region = wait_until(lambda: kept.get(dead.pid), "the dead rank's region released")
        head = int(region.header["ring_head"])
        ring_ops = RingCursor(region).poll(1 << 20)
        prefix = segment_prefix(region)
    lock.close()
    kinds = ring_ops["kind"]
    shm_op_seqs = ring_ops["seq"][
        (kinds == shm_v1.RecordKind.COLL) | (kinds == shm_v1.RecordKind.P2P)
    ]
    ops, covered, seals = _logged_seqs(_segments_of(home / "inspector_logs", prefix))
    assert sorted(ops) == sorted(int(s) for s in shm_op_seqs)  # each op once, none missing
    assert len(ops) == sum(1 for o in dead_truth.ops if o["completed"]) > 0
    assert covered == set(range(1, head + 1))  # every ring record or a gap line
    assert [s.reason.value for s in seals if isinstance(s, CiSeal)][-1] == "recovered"
    assert dead.recovered.ops > 0  # ops that only SHM held, now in the logs


def test_recovery_starts_after_the_last_whole_line_of_the_partial(tmp_path, region_bytes):
    """A writer killed mid-write: its .partial ends in a cut line; the recovered segment
    takes over from the last whole one, so each record is in the logs exactly once."""
    region_path = forged_region(tmp_path, region_bytes, flags=shm_v1.HeaderFlags.LOGS_ENABLED)
    logs = tmp_path / "inspector_logs"
    logs.mkdir()
    region = ShmRegion(region_path)
    full = recover(region, logs)  # everything, to cut a .partial from
    lines = full.path.read_bytes().splitlines(keepends=True)[:-1]  # without its seal
    full.path.unlink()
    keep = 6
    partial = logs / (full.path.name + ".partial")
    partial.write_bytes(b"".join(lines[:keep]) + lines[keep][: len(lines[keep]) // 2])
    again = recover(region, logs)
    region.close()
    assert again.path.name.endswith("000001.jsonl")
    ops, covered, _ = _logged_seqs([partial, again.path])
    head = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_head"])
    assert covered == set(range(1, head + 1))
    assert len(ops) == len(set(ops)) == full.ops


@pytest.mark.parametrize("sealed", [False, True], ids=["partial", "sealed"])
def test_a_segment_full_of_garbage_costs_the_recovery_a_bounded_read(
    tmp_path, region_bytes, sealed, monkeypatch, caplog
):
    """A dead writer's segment whose end is megabytes of lines that are not records (or a
    sealed one whose last line is no seal): the recovery reads a bounded tail, says so, and
    takes the segment for what its first line says it starts after. Nothing is lost: the
    records after that are written (again), each ring seq covered."""
    region_path = forged_region(tmp_path, region_bytes, flags=shm_v1.HeaderFlags.LOGS_ENABLED)
    logs = tmp_path / "inspector_logs"
    logs.mkdir()
    region = ShmRegion(region_path)
    full = recover(region, logs)
    first_line = full.path.read_bytes().splitlines(keepends=True)[0]
    full.path.unlink()
    garbage = logs / (full.path.name + ("" if sealed else ".partial"))
    with garbage.open("wb") as f:
        f.write(first_line)
        f.write(b"not a record\n" * 1_000_000)  # 13 MB: more than the tail the search reads
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(
        log_recovery.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at)
    )
    with caplog.at_level(logging.WARNING):
        again = recover(region, logs)
    region.close()
    assert sum(reads) <= 2 * log_recovery.MAX_TAIL_BYTES, "the whole file was read"
    assert any(
        str(garbage) in r.getMessage() and "first line" in r.getMessage() for r in caplog.records
    )
    ops, covered, _ = _logged_seqs([again.path])
    head = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_head"])
    assert covered == set(range(1, head + 1)) and len(ops) == full.ops


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_regions_of_dead_processes_are_retired_at_agent_start(tmp_path, region_bytes):
    dead = forged_region(tmp_path, region_bytes, "dead.shm", pid=_dead_pid())
    # a pid reused by a process that started after the region was made: not its producer
    newer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        reused = forged_region(
            tmp_path, region_bytes, "reused.shm", pid=newer.pid, process_start_ticks=0
        )
        live = forged_region(tmp_path, region_bytes, "live.shm")
        agent = LiveAgent(tmp_path)
        # The regions' heartbeats are as old as the fixture's run; the Agent sees them two
        # hours later on a clock of its own, so how long the machine has been up, or how long
        # the test took to get here, never decides whether they are past the retirement delay.
        agent.service.poll_once = agent_clock_ahead(agent.service.poll_once, 2 * HOUR_NS)
        with agent:
            wait_until(lambda: not dead.exists() and not reused.exists(), "the stale regions")
            agent.wait_passes(3)
            assert live.exists()  # this test process runs: never removed
            assert agent.service.producers.counters.producers_retired == 2
    finally:
        newer.send_signal(signal.SIGKILL)
        newer.wait()


HOUR_NS = 3600 * 10**9


def agent_clock_ahead(poll_once, ahead_ns: int):
    """The service's pass, run at the monotonic time `ahead_ns` from now."""
    return lambda now_mono_ns=None: poll_once(time.monotonic_ns() + ahead_ns)


def test_exited_processes_awaiting_retirement_cost_no_table_copies(tmp_path):
    lock = hold_agent_lock(tmp_path)
    assert not sim(tmp_path, ranks=8).errors
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns(), retire_after_ns=3600 * 10**9)
    # (a Profiler of another home starting meanwhile may remove some dead regions)
    assert producers.producers
    regions = [p.region for p in producers.producers.values()]
    for p in producers.producers.values():  # what the metrics, snapshot and health read
        p.region.comm_entries()
    copies = sum(r.table_copies for r in regions)
    probes = []
    import comminsight.agent.receivers.producers as module

    real = module.process_runs
    module.process_runs = lambda *a: probes.append(a) or real(*a)
    try:
        for _ in range(50):
            producers.poll(time.monotonic_ns(), retire_after_ns=3600 * 10**9)
            for r in regions:
                r.comm_entries()
    finally:
        module.process_runs = real
    assert sum(r.table_copies for r in regions) == copies  # frozen: answered from one copy
    assert probes == []  # dead is for ever: no more liveness probes
    assert producers.counters.slots_copied == producers.counters.records
    producers.close()
    lock.close()
    shutil.rmtree(tmp_path / "shms", ignore_errors=True)


# ---- regions truncated, ring slots and headers forged --------------------------------------


def test_a_region_truncated_while_mapped_is_quarantined_not_a_sigbus(tmp_path, region_bytes):
    """Reading a mapping past the end of its truncated file raises SIGBUS, which would end
    the Agent (and this test process): the region is dropped before anything reads it."""
    path = forged_region(tmp_path, region_bytes, "cut.shm")
    intact = forged_region(tmp_path, region_bytes, "intact.shm")
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns())
    assert set(producers.producers) == {path, intact}
    region = producers.producers[path].region
    os.truncate(path, 8192)
    assert len(region.comm_entries()) == 0  # what health reads between two passes
    producers.poll(time.monotonic_ns())
    assert list(producers.producers) == [intact]  # the other region is still read
    why = producers.counters.refused["cut.shm"]
    assert "shrank to 8192 bytes while mapped" in why and str(path) in why
    assert producers.counters.refused_by_reason == {"shrunk": 1}
    assert (tmp_path / "shms" / QUARANTINE / "cut.shm").exists()
    assert "shrank" in (tmp_path / "shms" / QUARANTINE / "cut.shm.reason").read_text()
    producers.close()


# ---- the home and its configuration file ---------------------------------------------------


def _agent_exit(env: dict, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Run the Agent to its refusal (it exits before it serves anything)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    return subprocess.run(
        [sys.executable, "-m", "comminsight.agent.main"],
        env={**clean, "COMMINSIGHT_AGENT_LISTEN": "127.0.0.1:0", **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=Path(__file__).resolve().parents[2],
    )


@ROOT_ONLY
def test_a_home_that_is_another_users_symbolic_link_is_refused(tmp_path):
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    home = tmp_path / "home"
    home.symlink_to(target)
    os.lchown(home, NOBODY, NOBODY)
    done = _agent_exit({"COMMINSIGHT_HOME": str(home)})
    assert done.returncode == 1
    assert f"{home}: is a symbolic link owned by uid 65534" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(target.iterdir()) == []  # nothing written where the link points
    os.lchown(home, os.geteuid(), os.getegid())  # this user's own link is an installation's
    check_home(home)


@ROOT_ONLY
def test_a_config_link_of_another_user_is_refused_and_no_content_is_echoed(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secrethash:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True, mode=0o700)
    conf = home / "etc" / "comminsight.conf"
    conf.symlink_to(secret)
    env = {"COMMINSIGHT_HOME": str(home)}
    # root's own link is followed, but what it finds is refused without being shown
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert f"{conf}:1: expected KEY=VALUE" in str(err.value)
    assert "secrethash" not in str(err.value) and "root:" not in str(err.value)
    done = _agent_exit(env)
    assert done.returncode == 2 and "expected KEY=VALUE" in done.stderr
    assert "secrethash" not in done.stderr + done.stdout and "Traceback" not in done.stderr
    os.lchown(conf, NOBODY, NOBODY)  # another user's link is not followed at all
    with pytest.raises(ConfigError, match="symbolic link owned by uid 65534"):
        load_settings(env)
    with pytest.raises(HomeError, match="symbolic link owned by uid 65534"):
        check_config_file(conf)
    done = _agent_exit(env)
    assert done.returncode == 2 and "symbolic link owned by uid 65534" in done.stderr


def test_a_fifo_in_the_default_config_place_is_named_not_skipped(tmp_path):
    (tmp_path / "etc").mkdir(mode=0o700)
    conf = tmp_path / "etc" / "comminsight.conf"
    os.mkfifo(conf, 0o600)
    with pytest.raises(ConfigError) as err:
        load_settings({"COMMINSIGHT_HOME": str(tmp_path)})
    assert str(err.value) == (
        f"{conf}: cannot read configuration file: is a FIFO, not a regular file"
    )
    with pytest.raises(HomeError, match="is a FIFO, not a regular file"):
        check_config_file(conf)
    conf.unlink()  # nothing there: the defaults, as before
    assert load_settings({"COMMINSIGHT_HOME": str(tmp_path)}).home == str(tmp_path)


# ---- a full disk ---------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """mount(dir) makes dir a 256 KiB tmpfs; fill() fills it; free() empties it again."""
    mounted = []

    class Disk:
        def mount(self, where: Path) -> Path:
            where.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(where)],
                capture_output=True,
            )
            if done.returncode:
                pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
            mounted.append(where)
            return where

        def fill(self) -> None:
            with open(mounted[-1] / "filler", "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError as e:
                    assert e.errno == 28  # ENOSPC

        def free(self) -> None:
            (mounted[-1] / "filler").unlink()

    yield Disk()
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


@ROOT_ONLY
def test_a_recovery_that_meets_a_full_disk_keeps_the_region_and_is_retried(
    tmp_path, region_bytes, full_disk
):
    logs = full_disk.mount(tmp_path / "inspector_logs")
    full_disk.fill()
    dead = forged_region(
        tmp_path, region_bytes, "dead.shm", pid=_dead_pid(), flags=shm_v1.HeaderFlags.LOGS_ENABLED
    )
    head = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_head"])
    producers = ProducerSet(tmp_path)
    t0, hour = time.monotonic_ns(), 3600 * 10**9
    producers.poll(t0, retire_after_ns=60 * 10**9)  # reads its ring; recovery comes next
    for later in (1, 2):  # long past the retirement delay: kept, tried again, named
        producers.poll(t0 + later * hour, retire_after_ns=60 * 10**9)
        assert dead.exists() and len(producers.producers) == 1
    assert producers.counters.recovery_failures == 2
    (problem,) = producers.problems()
    assert "could not be recovered yet" in problem and "No space left on device" in problem
    assert "retried (2 attempts)" in problem and "[Errno" not in problem
    assert sorted(p.name for p in logs.iterdir()) == ["filler"]  # no partial left behind
    full_disk.free()
    producers.poll(t0 + 3 * hour, retire_after_ns=60 * 10**9)
    assert producers.remover.wait(60)
    assert not dead.exists() and producers.producers == {}  # retired once written
    assert producers.problems() == [] and producers.counters.records_unrecovered == 0
    _, covered, _ = _logged_seqs(sorted(logs.glob("*.jsonl")))
    assert covered == set(range(1, head + 1))  # every record, or a gap line naming it


def test_a_recovery_that_fails_for_another_reason_is_retired_counted_and_named(
    tmp_path, region_bytes
):
    dead = forged_region(
        tmp_path, region_bytes, "dead.shm", pid=_dead_pid(), flags=shm_v1.HeaderFlags.LOGS_ENABLED
    )
    (tmp_path / "inspector_logs").write_text("not a directory")  # ENOTDIR: not a space problem
    head = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_head"])
    producers = ProducerSet(tmp_path)
    t0 = time.monotonic_ns()
    producers.poll(t0, retire_after_ns=60 * 10**9)
    assert dead.exists()  # not before the retirement delay
    producers.poll(t0 + 3600 * 10**9, retire_after_ns=60 * 10**9)
    assert producers.remover.wait(60)
    assert not dead.exists()
    assert producers.counters.recovery_failures == 1
    cap = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_capacity"])
    assert producers.counters.records_unrecovered == min(head, cap) > 0
    (problem,) = producers.problems()
    assert problem.startswith("SHM file dead.shm retired: pid ")
    assert f"{min(head, cap)} records only its SHM region held were not written" in problem


def _ring_ops(region_path: Path) -> tuple[int, int]:
    """(the region's ring head, how many op records its ring still holds)."""
    region = ShmRegion(region_path)
    try:
        slots = RingCursor(region).poll(1 << 20)
        kinds = slots["kind"]
        ops = int(((kinds == shm_v1.RecordKind.COLL) | (kinds == shm_v1.RecordKind.P2P)).sum())
        return int(region.header["ring_head"]), ops
    finally:
        region.close()


def test_a_rank_dead_before_its_first_log_leaves_every_op_in_a_fresh_home(tmp_path, region_bytes):
    """A rank killed before its log writer's first pass: the home has no inspector_logs yet.
    The Agent's recovery makes the directory (0700, as the Profiler would) and writes every
    record the region holds into it."""
    home = tmp_path / "home"
    dead = forged_region(
        home, region_bytes, "dead.shm", pid=_dead_pid(), flags=shm_v1.HeaderFlags.LOGS_ENABLED
    )
    head, ring_ops = _ring_ops(dead)
    logs = home / "inspector_logs"
    assert not logs.exists() and ring_ops > 0
    with LiveAgent(home) as agent:
        counters = agent.service.producers.counters
        wait_until(
            lambda: counters.records_recovered or counters.recovery_failures,
            "the dead rank's recovery",
        )
        assert counters.recovery_failures == 0, agent.service.producers.problems()
    assert logs.is_dir() and not logs.is_symlink()
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    ops, covered, seals = _logged_seqs(sorted(logs.iterdir()))
    assert len(ops) == len(set(ops)) == ring_ops  # every op, once
    assert covered == set(range(1, head + 1))  # every ring record, or a gap line naming it
    assert [s.reason.value for s in seals if isinstance(s, CiSeal)] == ["recovered"]


def test_a_logs_directory_that_cannot_be_made_yet_is_made_on_a_later_pass(
    tmp_path, region_bytes, monkeypatch
):
    """A fresh home whose disk is full when the recovery first tries to make inspector_logs
    (mkdir fails with ENOSPC): the region is kept, and a later pass makes the directory and
    writes every record."""
    dead = forged_region(
        tmp_path, region_bytes, "dead.shm", pid=_dead_pid(), flags=shm_v1.HeaderFlags.LOGS_ENABLED
    )
    head, ring_ops = _ring_ops(dead)
    logs = tmp_path / "inspector_logs"
    real_mkdir = os.mkdir
    refused = []

    def mkdir(path, mode=0o777, **kw):
        if Path(path) == logs and not refused:
            refused.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    producers = ProducerSet(tmp_path)
    t0, hour = time.monotonic_ns(), 3600 * 10**9
    producers.poll(t0, retire_after_ns=60 * 10**9)  # reads its ring; recovery comes next
    producers.poll(t0 + hour, retire_after_ns=60 * 10**9)
    assert refused and dead.exists() and not logs.exists()  # kept: its records come first
    (problem,) = producers.problems()
    assert "could not be recovered yet" in problem and "No space left on device" in problem
    assert str(logs) in problem
    producers.poll(t0 + 2 * hour, retire_after_ns=60 * 10**9)
    assert producers.remover.wait(60)
    assert not dead.exists() and producers.producers == {}  # retired once written
    assert producers.problems() == [] and producers.counters.records_unrecovered == 0
    assert producers.counters.recovery_failures == 1
    ops, covered, _ = _logged_seqs(sorted(logs.iterdir()))
    assert len(ops) == len(set(ops)) == ring_ops
    assert covered == set(range(1, head + 1))


@ROOT_ONLY
def test_a_logs_link_another_user_planted_is_not_followed_by_the_recovery(tmp_path, region_bytes):
    """inspector_logs not there yet, and in its place a link another user made to a directory
    of this user: the recovery writes nothing through it and names the link."""
    dead = forged_region(
        tmp_path, region_bytes, "dead.shm", pid=_dead_pid(), flags=shm_v1.HeaderFlags.LOGS_ENABLED
    )
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    logs = tmp_path / "inspector_logs"
    logs.symlink_to(target)
    os.lchown(logs, NOBODY, NOBODY)
    producers = ProducerSet(tmp_path)
    t0 = time.monotonic_ns()
    producers.poll(t0, retire_after_ns=60 * 10**9)
    producers.poll(t0 + 3600 * 10**9, retire_after_ns=60 * 10**9)
    assert list(target.iterdir()) == []
    (problem,) = producers.problems()
    assert f"{logs}: is a symbolic link owned by uid {NOBODY}" in problem
    assert producers.remover.wait(60)
    assert not dead.exists()  # not retried: the link stays another user's


@ROOT_ONLY
def test_a_hang_report_that_meets_a_full_disk_is_retried_and_named(tmp_path, full_disk):
    from home_files import hang_report_fixture

    full_disk.mount(tmp_path / "metadata")
    store = HangStore(tmp_path)
    kept = hang_report_fixture("rank-not-joined-open.json")
    assert store.save(kept)
    full_disk.fill()
    died = hang_report_fixture("process-died-no-op.json")
    assert not store.save(died)
    hangs = tmp_path / "metadata" / "hangs"
    assert sorted(p.name for p in hangs.iterdir()) == [f"{kept.report_id}.json"]  # no .tmp
    assert "No space left on device" in store.write_errors[died.report_id]
    assert str(store.path_of(died.report_id)) in store.write_errors[died.report_id]
    assert store.retry_unwritten() == 1 and store.write_failures == 2
    assert died.report_id in store.reports  # served by the API meanwhile
    full_disk.free()
    assert store.retry_unwritten() == 0 and store.write_errors == {}
    again = HangStore(tmp_path)
    again.load()
    assert again.reports == {kept.report_id: kept, died.report_id: died}


@pytest.mark.parametrize("field", ["start_real_ns", "start_mono_ns"])
def test_a_header_clock_of_two_to_the_64_minus_one_is_refused_by_name(
    tmp_path, region_bytes, field
):
    forged_region(tmp_path, region_bytes, "clock.shm", **{field: (1 << 64) - 1})
    good = forged_region(tmp_path, region_bytes, "good.shm")
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns())
    assert list(producers.producers) == [good]
    why = producers.counters.refused["clock.shm"]
    assert f"header.{field}: {(1 << 64) - 1} is not a time" in why
    assert producers.counters.refused_by_reason == {f"header.{field}": 1}
    producers.close()


# ---- hang events misframed -----------------------------------------------------------------


def test_a_partial_write_before_a_genuine_event_is_skipped_and_the_event_read(tmp_path):
    from comminsight.agent.receivers.fifo_reader import EventDecoder

    genuine = event_bytes(pid=4242, rank=1, nranks=2, comm_id=7)
    decoder = EventDecoder("test")
    assert decoder.feed(genuine[:8]) == []  # a magic, version and size, then nothing
    (event,) = decoder.feed(genuine)
    assert (event.pid, event.rank, event.comm_id) == (4242, 1, 7)
    assert decoder.stats.rejected_by_reason == {"pid": 1}
    assert "pid 33554433" in decoder.stats.last_error
    (again,) = decoder.feed(genuine)  # framed again: nothing more rejected
    assert again.pid == 4242 and decoder.stats.rejected == 1 and decoder.stats.events == 2


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"pid": -5}, "pid"),
        ({"rank": 9, "nranks": 2}, "rank"),
        ({"reserved0": 1}, "reserved"),
    ],
)
def test_an_event_with_impossible_fields_is_rejected_by_name(fields, reason):
    from comminsight.agent.receivers.fifo_reader import EventDecoder

    decoder = EventDecoder("test")
    bad = event_bytes(**{"pid": 10, "nranks": 2, **fields})
    got = decoder.feed(bad + event_bytes(pid=11, nranks=2))
    assert [e.pid for e in got] == [11]  # the next event is read all the same
    assert decoder.stats.rejected_by_reason == {reason: 1} and decoder.stats.events == 1


def _forge_slots(path: Path, n: int, seed: int) -> None:
    """Random bytes in the first n ring slots, with the seq and kind a reader expects."""
    rng = np.random.default_rng(seed)
    with open(path, "r+b") as f:
        header = np.frombuffer(bytearray(f.read(HEADER.itemsize)), HEADER, 1).copy()
        slots = np.frombuffer(rng.integers(0, 256, n * SLOT.itemsize, np.uint8).tobytes(), SLOT)
        slots = slots.copy()
        slots["seq"] = np.arange(1, n + 1)
        slots["kind"] = rng.integers(1, 3, n)
        f.seek(int(header["ring_offset"][0]))
        f.write(slots.tobytes())
        header["ring_head"] = n
        f.seek(0)
        f.write(header.tobytes())


def test_random_ring_slots_with_a_valid_seq_are_dropped_counted_and_named(tmp_path, region_bytes):
    forged = forged_region(tmp_path, region_bytes, "random.shm")
    _forge_slots(forged, 32, seed=7)
    genuine = forged_region(tmp_path, region_bytes, "genuine.shm")
    head = int(np.frombuffer(region_bytes, dtype=HEADER, count=1)[0]["ring_head"])
    with LiveAgent(tmp_path) as agent:
        agent.wait_passes(3)
        counters = agent.service.producers.counters
        assert counters.slots_rejected == 32  # random fields: none in range
        assert counters.records == min(head, 1 << 16)  # the genuine region loses nothing
        assert sum(counters.slots_rejected_by_reason.values()) == 32
        body = health(agent)
        assert body["status"] == "degraded"
        (named,) = [r for r in body["reasons"] if "random.shm" in r]
        assert "32 ring records break the shm v1 protocol and were dropped" in named
        assert "ring seq " in named
        assert body["ingest_lag_ms"] is None or body["ingest_lag_ms"] < 3.6e6
        total = sum(
            float(line.split()[-1])
            for line in get(agent, "/metrics")[1].decode().splitlines()
            if line.startswith("comminsight_agent_shm_slots_rejected_total{")
        )
        assert total == 32
    assert genuine.exists()


# ---- thousands of Inject files -------------------------------------------------------------


def test_thousands_of_inject_files_are_read_in_turns_once_and_logged_once(tmp_path, caplog):
    from comminsight.agent.receivers.inject_names import FILES_PER_PASS

    inject = tmp_path / "metadata" / "inject"
    inject.mkdir(parents=True)
    good = group_line(tmp_path / "scratch", 7, "default_pg:7")
    n = 3 * FILES_PER_PASS + 5
    for i in range(n):  # a bad line, then a line whose newline never comes
        (inject / f"h.{100000 + i}.jsonl").write_bytes(b"{not json\n" + good[:-1])
    (inject / "h.7.jsonl").write_bytes(good)
    names = InjectNames(tmp_path)
    with caplog.at_level(logging.WARNING, logger="comminsight.agent.receivers.inject_names"):
        for expected in range(1, 5):
            names.refresh()
            assert names.files_opened == min(expected * FILES_PER_PASS, n + 1)
        assert names.named_by_inject("h", 7, "default_pg:7")  # reached in its turn
        assert len(names.errors) == n  # every bad file named
        work = (names.files_opened, names.bytes_read)
        for _ in range(20):
            names.refresh()
        assert (names.files_opened, names.bytes_read) == work  # unchanged: lstat only
    warnings = [r for r in caplog.records if "inject metadata" in r.getMessage()]
    assert len(warnings) == 1  # the rest summed into a later line, not one per file
    path = inject / "h.100000.jsonl"
    with open(path, "ab") as f:
        f.write(b"\n")  # the cut line completes: read again
    names.refresh()
    assert names.files_opened == work[0] + 1
    assert names.named_by_inject("h", 7, "default_pg:7")


def test_inject_files_of_processes_long_gone_are_not_read(tmp_path):
    inject = tmp_path / "metadata" / "inject"
    inject.mkdir(parents=True)
    dead, alive = _dead_pid(), os.getpid()
    hours_ago = time.time() - 2 * 3600
    for pid in (dead, alive):
        path = inject / f"h.{pid}.jsonl"
        path.write_bytes(group_line(tmp_path / "scratch", pid, f"pg:{pid}"))
        os.utime(path, (hours_ago, hours_ago))
    fresh = inject / "h.1.jsonl"  # (pid 1 runs, but the point is its age)
    fresh.write_bytes(group_line(tmp_path / "scratch", 2, "pg:fresh"))
    names = InjectNames(tmp_path)
    names.refresh()
    assert not names.named_by_inject("h", dead, f"pg:{dead}") and names.stale_ignored == 1
    assert names.named_by_inject("h", alive, f"pg:{alive}")  # old, but its process runs
    assert names.named_by_inject("h", 2, "pg:fresh")
