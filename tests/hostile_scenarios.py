"""Scenarios for tests/test_hostile_profiler.py: the real plugin in a fresh process each, facing
a hostile home, a full disk or another process's leftovers.

    python tests/hostile_scenarios.py SCENARIO PLUGIN.so

Each prints one JSON object. Waits poll for a condition with a generous deadline (the CI box is
a loaded 2-core machine); none of them is a measurement.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from log_files import segment_data
from plugin_scenarios import Driver, home, snapshot
from waiting import wait_until

from comminsight.shm_reader import ShmError, ShmRegion

DEADLINE_S = 60.0
OPS = int(os.environ.get("SCENARIO_OPS", "40"))


def own_region() -> ShmRegion | None:
    """This process's region wherever its link went (the home's shms/, or the private one)."""
    for base in [
        home(),
        *Path(os.environ.get("XDG_RUNTIME_DIR", "/nonexistent")).glob("comminsight-*"),
    ]:
        shms = base / "shms"
        try:
            if not shms.is_dir():
                continue
        except OSError:  # a home too long for the kernel to look up
            continue
        # other processes' regions may be there too (dead ones, kept for their Agent)
        for p in shms.glob(f"ci-*-{os.getpid()}-*.shm"):
            try:
                r = ShmRegion(p, shm_dir=os.environ.get("COMMINSIGHT_PROFILER_SHM_DIR"))
            except ShmError:  # an earlier process's link with this pid (a test may plant one)
                continue
            if int(r.header["pid"]) == os.getpid():
                return r
    return None


def train(d: Driver) -> dict:
    """A short training run: OPS all-reduces on one communicator, all completed."""
    res = d.init(0xC1, name="dp:0")
    for seq in range(OPS):
        d.coll(res.context, seq)
    out = {"init_result": res.result, "context": res.context is not None}
    r = own_region()
    if r is not None:
        wait_until(
            lambda: r.counter("log_records_written") >= OPS + 1, DEADLINE_S, "the log writer"
        )
    out.update(snapshot(r))
    if r is not None:
        out["comm_capacity"] = int(r.header["comm_capacity"])
    held = os.environ.get("SCENARIO_HOLD_FILE")  # alive, its communicator too, until it exists
    if held:
        wait_until(lambda: os.path.exists(held), DEADLINE_S, f"{held} to be created")
    d.abi.finalize(res.context)
    out["ops_issued"] = OPS
    return out


def hang_with_fifo(d: Driver) -> dict:
    """An op stuck past the threshold: the watchdog tries the FIFO (whatever is there)."""
    res = d.init(0xC2, name="tp:0")
    op = d.coll(res.context, 0, finish=False)
    d.abi.start_kernel_ch(res.context, op, 0, 5)
    r = own_region()
    wait_until(lambda: r.counter("hangs_flagged") >= 1, DEADLINE_S, "the watchdog")
    out = snapshot(r)
    d.abi.finalize(res.context)
    return out


def autostart(d: Driver) -> dict:
    """Init with autostart on, and wait for the background thread's first pass to be over."""
    res = d.init(0xC3)
    r = own_region()
    wait_until(lambda: r.counter("heartbeat_count") >= 3, DEADLINE_S, "three heartbeats")
    d.coll(res.context, 0)
    d.abi.finalize(res.context)
    return {"init_result": res.result}


def disk_fill(d: Driver) -> dict:
    """inspector_logs on a small file system: fill it, keep training while it is full, give the
    space back (delete SCENARIO_FILLER), keep training, finalize."""
    filler = Path(os.environ["SCENARIO_FILLER"])
    res = d.init(0xC4, name="dp:0")
    ctx = res.context
    r = own_region()
    seq = 0

    def burst(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            d.coll(ctx, seq)
            seq += 1

    def full() -> bool:
        burst(50)
        return r.counter("log_write_errors") > 0

    wait_until(full, DEADLINE_S, "the disk to fill")
    burst(int(os.environ.get("SCENARIO_OPS_WHILE_FULL", "400")))
    # everything issued so far has been either written or dropped
    wait_until(
        lambda: (
            r.counter("log_records_written") + r.counter("log_records_dropped")
            >= r.counter("ring_head")
        ),
        DEADLINE_S,
        "the writer to reach the ring head",
    )
    dropped_while_full = r.counter("log_records_dropped")
    # space returns once every rank has seen the disk full: a rank still filling it when
    # another freed the space would fill it again, for good, before its own end
    ranks = int(os.environ.get("SCENARIO_RANKS", "1"))
    full_seen = Path(os.environ.get("SCENARIO_FULL_SEEN", filler.parent.parent))
    (full_seen / f"full-{os.getpid()}").touch()
    wait_until(
        lambda: len(list(full_seen.glob("full-*"))) >= ranks, DEADLINE_S, "every rank's disk full"
    )
    filler.unlink(missing_ok=True)  # space returns (the first of several ranks frees it)
    out = {
        "ops_issued": seq,
        "dropped_while_full": dropped_while_full,
        "init_result": res.result,
        "pid": os.getpid(),
    }
    if os.environ.get("SCENARIO_END_AT_ONCE") == "1":  # training ends as space returns
        d.abi.finalize(ctx)
        return {**out, "counters": log_counters(r)}
    logs = home() / "inspector_logs"

    def gap_on_disk() -> bool:
        try:  # segments are sealed, compressed and renamed meanwhile: asked again if one goes
            return any(b'"kind":"gap"' in data for _, data in segment_data(logs))
        except FileNotFoundError:
            return False

    wait_until(gap_on_disk, DEADLINE_S, "a gap line once space returned")
    burst(100)
    wait_until(lambda: r.counter("log_records_written") >= 100, DEADLINE_S, "writing after the gap")
    out["ops_issued"] = seq
    d.abi.finalize(ctx)
    return {**out, "counters": log_counters(r)}


def log_counters(r: ShmRegion) -> dict:
    names = (
        "ring_head",
        "log_records_written",
        "log_records_dropped",
        "log_records_lost",
        "log_write_errors",
        "log_segments_sealed",
        "log_segments_compressed",
        "log_compress_errors",
        "records_dropped_busy",
    )
    return {c: r.counter(c) for c in names}


def full_at_finalize(d: Driver) -> dict:
    """The disk fills and is still full when training ends: the plugin must finalize at once;
    what it could not write is counted in SHM and the segment is left .partial."""
    res = d.init(0xC5, name="dp:0")
    ctx = res.context
    r = own_region()
    seq = 0

    def full() -> bool:
        nonlocal seq
        for _ in range(50):
            d.coll(ctx, seq)
            seq += 1
        return r.counter("log_write_errors") > 0

    wait_until(full, DEADLINE_S, "the disk to fill")
    d.abi.finalize(ctx)
    return {"ops_issued": seq, "counters": log_counters(r)}


def read_only_after_a_segment(d: Driver) -> dict:
    """A run writes and seals its logs in the home; the home is then remounted read-only
    (SCENARIO_REMOUNT) and a second run writes nothing there. That is a disk that broke
    mid-run: its records are dropped and counted, the logs do not move elsewhere."""
    import subprocess

    first = d.init(0xC7, name="dp:0")
    for seq in range(OPS):
        d.coll(first.context, seq)
    r = own_region()
    d.abi.finalize(first.context)  # the last communicator: the segment is sealed and closed
    written_before = r.counter("log_records_written")
    subprocess.run(["mount", "-o", "remount,ro", os.environ["SCENARIO_REMOUNT"]], check=True)
    second = d.init(0xC8, name="dp:1")
    for seq in range(OPS):
        d.coll(second.context, seq)
    d.abi.finalize(second.context)
    return {"written_before": written_before, "pid": os.getpid(), "counters": log_counters(r)}


def blocked_compression(d: Driver) -> dict:
    """Small segments (SCENARIO: COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES) whose compression is
    blocked for some: a non-empty directory where segment 0's `.jsonl.zst` goes (the rename
    fails), a directory where segment 1's `.jsonl.zst.partial` goes (it cannot be created),
    and a file left at segment 2's `.jsonl.zst.partial` (a killed process's, to be replaced)."""
    res = d.init(0xC9, name="dp:0")
    r = own_region()
    host = bytes(r.header["hostname"]).split(b"\0")[0].decode()
    stem = f"ci-{host}-{os.getpid()}-{int(r.header['start_mono_ns'])}"
    logs = home() / "inspector_logs"
    planted = {
        "dir_at_final_name": logs / f"{stem}-000000.jsonl.zst",
        "dir_at_partial_name": logs / f"{stem}-000001.jsonl.zst.partial",
        "file_at_partial_name": logs / f"{stem}-000002.jsonl.zst.partial",
    }
    wait_until(logs.is_dir, DEADLINE_S, "the log writer's first pass")  # it makes the directory
    planted["dir_at_final_name"].mkdir()
    (planted["dir_at_final_name"] / "keep").write_text("not the Profiler's\n")
    planted["dir_at_partial_name"].mkdir()
    planted["file_at_partial_name"].write_bytes(b"half a frame")
    seq = 0
    while r.counter("log_segments_sealed") < 4:
        for _ in range(20):
            d.coll(res.context, seq)
            seq += 1
        wait_until(
            lambda n=seq: r.counter("log_records_written") >= n, DEADLINE_S, "the log writer"
        )
    d.abi.finalize(res.context)
    planted_now = {
        k: "dir" if p.is_dir() else "file" if p.exists() else "gone" for k, p in planted.items()
    }
    names = {k: str(p) for k, p in planted.items()}
    return {"ops_issued": seq, "counters": log_counters(r), "planted": planted_now, "names": names}


def killed(d: Driver) -> dict:
    """Dies by SIGKILL after init: no exit handler runs, its region stays behind."""
    import signal

    res = d.init(0xC6)
    d.coll(res.context, 0)
    r = own_region()
    print(json.dumps({"region": str(r.path.resolve()), "pid": os.getpid()}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


SCENARIOS = {
    f.__name__: f
    for f in (
        train,
        hang_with_fifo,
        autostart,
        disk_fill,
        full_at_finalize,
        read_only_after_a_segment,
        blocked_compression,
        killed,
    )
}

if __name__ == "__main__":
    scenario, plugin = sys.argv[1], sys.argv[2]
    result = SCENARIOS[scenario](Driver(plugin, int(os.environ.get("SCENARIO_ABI", "5"))))
    print(json.dumps(result))
    sys.stdout.flush()
