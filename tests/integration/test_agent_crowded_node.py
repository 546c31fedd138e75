"""The Agent on a crowded node: an ended process's region goes as soon as its records are safe,
the Agent's descriptors do not grow with the processes that came and went, and entries in
shms/ that are no regions are not listed again on every pass.

Everything is counted (files, descriptors, directory listings), never timed.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
from agent_home import hold_agent_lock, run_sim
from profiler_builds import builds

from comminsight.agent.receivers import producers as producers_module
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.snapshot import build_snapshot
from comminsight.shm_reader import op_records
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.faults import parse_fault
from comminsight_gen.abi import shm_v1

HOUR_NS = 3600 * 10**9


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def region_files(home) -> list:
    links = list((home / "shms").glob("*.shm"))
    return links + [p.resolve() for p in links if p.is_symlink()]


def test_an_ended_process_region_is_released_once_drained_not_after_the_delay(tmp_path):
    """The processes ended cleanly and their logs are sealed: their regions (16 MiB of a
    tmpfs each by default) go at the first pass that has read them, while diagnosis still
    sees the processes and their communicators for the whole retirement delay."""
    lock = hold_agent_lock(tmp_path)
    run_sim(tmp_path, ranks=4)
    files = region_files(tmp_path)
    assert len(files) == 8  # 4 links and their 4 regions
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    assert producers.remover.wait(60)  # region files are removed in a thread of their own
    assert not [p for p in files if os.path.lexists(p)], "regions kept after their drain"
    assert producers.counters.regions_released == 4
    assert len(producers.producers) == 4 and producers.counters.producers_retired == 0
    assert all(p.released for p in producers.producers.values())
    snapshot = build_snapshot([p.region for p in producers.producers.values()])
    assert {v.pid for v in snapshot.processes} == {p.pid for p in producers.producers.values()}
    # their communicator rows as they ended are still there to diagnose
    assert all(len(p.region.comm_entries()) for p in producers.producers.values())
    # the node's view lists the job that just ended for the whole delay
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    assert len(producers.producers) == 4 and producers.counters.producers_retired == 0
    lock.close()


def test_a_region_whose_removal_is_under_way_is_not_taken_for_a_new_one(tmp_path, monkeypatch):
    """Region files are removed in a thread of their own (the kernel frees 16 MiB of memory
    for each): until they are gone, the passes that list shms/ must not open them again as
    new processes, even once the processes are forgotten."""
    lock = hold_agent_lock(tmp_path)
    run_sim(tmp_path, ranks=2)
    files = region_files(tmp_path)
    gate = threading.Event()
    real_unlink = Path.unlink

    def slow_unlink(self, missing_ok=False):
        gate.wait(60)
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", slow_unlink)
    producers = ProducerSet(tmp_path)
    for _ in range(3):  # read, released, then forgotten at once (no retirement delay)
        producers.poll(time.monotonic_ns(), retire_after_ns=0)
    assert producers.counters.regions_released == 2
    assert producers.producers == {} and producers.counters.producers_retired == 2
    assert all(os.path.lexists(p) for p in files)  # still being removed
    records = producers.counters.records
    (tmp_path / "shms" / "new-entry").write_bytes(b"")  # shms/ changes: listed again
    for _ in range(2):
        producers.poll(time.monotonic_ns(), retire_after_ns=0)
    assert producers.listing.scans >= 2
    assert producers.producers == {} and producers.counters.records == records
    gate.set()
    assert producers.remover.wait(60)
    assert not [p for p in files if os.path.lexists(p)]
    producers.close()
    lock.close()


def test_a_killed_process_region_is_released_once_its_records_are_recovered(tmp_path):
    """A rank SIGKILLed mid-run (no exit handler): the Agent writes what only its region
    held into its logs, and the region goes then, not after the delay."""
    lock = hold_agent_lock(tmp_path)
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        steps=3,
        time_scale=0.01,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50")),
        faults=(parse_fault("die:rank=1,op=5"),),
        hang_hold_s=1.0,  # rank 0 waits for the dead one this long, then the run is cut
    )
    run_simulation(config)
    files = region_files(tmp_path)
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    killed = [p for p in producers.producers.values() if not p.closed]
    assert len(killed) == 1 and killed[0].recovered is not None
    assert producers.remover.wait(60)
    assert killed[0].released and not [p for p in files if os.path.lexists(p)]
    for _ in range(3):  # died with its communicator live: remembered for diagnosis
        producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    assert killed[0] in producers.producers.values()
    producers.close()
    lock.close()


def test_descriptors_stay_bounded_while_processes_come_and_go(tmp_path):
    """Each mapped region holds two descriptors (the Agent's and the mapping's): kept for
    every ended process until the retirement delay, 500 short-lived processes took an Agent
    past 1,000 descriptors and its API, recovery and archive failed under ulimit -n 1024."""
    lock = hold_agent_lock(tmp_path)
    producers = ProducerSet(tmp_path)
    rounds, ranks = 5, 4

    def one_round() -> None:
        run_sim(tmp_path, ranks=ranks, steps=1)
        producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
        producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)

    one_round()  # the simulator's own pipes and the like are open from the first run on
    before = open_fds()
    for _ in range(rounds - 1):
        one_round()
    assert open_fds() - before <= 1, "descriptors held for ended processes"
    assert producers.counters.regions_released == rounds * ranks
    assert not [p for p in producers.producers.values() if not p.released]
    producers.close()
    lock.close()


def test_ended_processes_remembered_are_bounded(tmp_path, monkeypatch):
    """Processes that died with live communicators are remembered for diagnosis, each
    costing every pass: past MAX_ENDED_REMEMBERED the oldest are forgotten early."""
    import comminsight.agent.receivers.producers as producers_module

    monkeypatch.setattr(producers_module, "MAX_ENDED_REMEMBERED", 2)
    lock = hold_agent_lock(tmp_path)
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        steps=2,
        time_scale=0.01,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50")),
        faults=(parse_fault("die:rank=1,op=3"),),
        hang_hold_s=1.0,  # rank 0 waits for the dead one this long, then the run is cut
    )
    producers = ProducerSet(tmp_path)
    remembered = []
    for _ in range(3):  # each run: rank 1 dies, then rank 0 ends once the run is cut
        run_simulation(config)
        for _ in range(3):
            producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
            remembered.append(sum(p.released for p in producers.producers.values()))
    assert producers.counters.regions_released == 6
    assert max(remembered) == 2  # the bound, reached
    # the last run's two are remembered, its rank that died with its communicator live too
    assert len(producers.producers) == 2 and producers.counters.producers_retired == 4
    assert sum(not p.closed for p in producers.producers.values()) == 1
    producers.close()
    lock.close()


def test_entries_in_shms_that_are_no_regions_are_not_listed_every_pass(tmp_path, monkeypatch):
    """Thousands of entries that are no regions (other names, and *.shm names the Agent
    cannot quarantine) cost a full directory listing per pass: an idle Agent spent 42 % of a
    core on 20,000. An unchanged directory is listed once; a region added later is found."""
    lock = hold_agent_lock(tmp_path)
    shms = tmp_path / "shms"
    shms.mkdir(mode=0o700)
    for i in range(2000):
        (shms / f"junk-{i}").write_bytes(b"")
    for i in range(50):
        (shms / f"dir-{i}.shm").mkdir()  # refused; cannot be moved once quarantine/ is a file
    (shms / "quarantine").write_text("not a directory")
    old = time.time_ns() - 3600 * 10**9
    os.utime(shms, ns=(old, old))  # settled long ago, whatever the clock's granularity
    listed = []
    real_scandir = os.scandir

    def counting_scandir(path="."):
        if os.fspath(path) == os.fspath(shms):
            listed.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    producers = ProducerSet(tmp_path)
    for _ in range(20):
        producers.poll(time.monotonic_ns())
    assert producers.counters.files_refused == 50  # each refused once, not on every pass
    assert len(listed) == 1, f"{len(listed)} listings of an unchanged shms/ in 20 passes"
    run_sim(tmp_path, ranks=2, steps=1)  # new regions change the directory: found
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    assert len(producers.producers) == 2 and len(listed) == 2
    producers.close()
    lock.close()


def test_a_ring_sized_down_to_fit_is_named_in_health(tmp_path):
    """A Profiler that sized its ring down for a small SHM file system says so in its
    header; the Agent names it among its health reasons while the process runs."""
    lock = hold_agent_lock(tmp_path)
    run_sim(tmp_path, ranks=1, steps=1)
    (link,) = (tmp_path / "shms").glob("*.shm")
    with open(link.resolve(), "r+b") as f:
        header = np.frombuffer(bytearray(f.read(shm_v1.HEADER_DTYPE.itemsize)), shm_v1.HEADER_DTYPE)
        asked = int(header[0]["ring_capacity"]) * 4
        header[0]["ring_slots_configured"] = asked
        header[0]["shm_dir_bytes"] = 64 * 1024 * 1024
        header[0]["shm_dir_free_bytes"] = 40 * 1024 * 1024
        header[0]["sizing_local_ranks"] = 8
        # a process that runs on: this one (started before the region was made)
        header[0]["state"] = shm_v1.FileState.LIVE
        header[0]["pid"] = os.getpid()
        header[0]["process_start_ticks"] = 0
        f.seek(0)
        f.write(header.tobytes())
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
    assert not producers.counters.regions_released
    (reason,) = [r for r in producers.problems() if "sized down" in r]
    assert f"not the {asked} configured" in reason and "64.0 MiB, 40.0 MiB free" in reason
    producers.close()
    lock.close()


def test_regions_beyond_the_mapped_bound_wait_their_turn_and_lose_nothing(tmp_path, monkeypatch):
    """Processes that start faster than the Agent drains the ended ones: at most
    MAX_MAPPED_REGIONS are mapped (a descriptor each); the others wait in shms/, named in
    health, and are read in later passes, every record of them."""
    monkeypatch.setattr(producers_module, "MAX_MAPPED_REGIONS", 2)
    lock = hold_agent_lock(tmp_path)
    truths = run_sim(tmp_path, ranks=4)
    producers = ProducerSet(tmp_path)
    mapped_most, ops = 0, 0
    for _ in range(8):
        batches = producers.poll(time.monotonic_ns(), retire_after_ns=HOUR_NS)
        ops += sum(len(op_records(b.records)) for b in batches)
        mapped = [p for p in producers.producers.values() if not p.released]
        mapped_most = max(mapped_most, len(mapped))
        if producers.regions_waiting:
            (problem,) = producers.problems()
            assert f"{producers.regions_waiting} SHM regions" in problem and "at most 2" in problem
    assert mapped_most == 2
    assert producers.counters.regions_deferred > 0 and producers.regions_waiting == 0
    assert len(producers.producers) == 4 and all(p.released for p in producers.producers.values())
    assert producers.counters.records_lost == 0
    assert ops == sum(1 for t in truths for op in t.ops if op["completed"])
    producers.close()
    lock.close()
