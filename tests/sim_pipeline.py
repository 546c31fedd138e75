"""A simulated job through the real Profiler (plain build, fast heartbeat and log flush), and
what it left: every sealed inspector_logs line by global rank, and keys that match an op of
the simulation's ground truth to its log line."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from logged_ops import LoggedOp
from profiler_builds import builds

from comminsight.log_segments import segments_in, verify_segment
from comminsight.sim import SimConfig, read_ground_truth, run_simulation
from comminsight_gen.models.inspector_log_v1 import CiSegmentStart

FAST = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"),
    ("COMMINSIGHT_PROFILER_LOG_FLUSH_MS", "20"),
)


def logs_by_rank(home: Path) -> dict[int, list]:
    """Every line of every sealed segment, grouped by the writing process's global rank."""
    by_pid: dict[int, list] = defaultdict(list)
    rank_of_pid: dict[int, int] = {}
    for path in segments_in(home / "inspector_logs"):
        seg = verify_segment(path)  # record count, byte count and CRC-32 all check out
        start = seg.records[0].ci
        assert isinstance(start, CiSegmentStart), f"{path} does not begin with segment_start"
        rank_of_pid[start.process.pid] = start.process.global_rank
        by_pid[start.process.pid] += seg.records[1:]
    assert not list((home / "inspector_logs").glob("*.partial")), "a segment was left unsealed"
    return {rank_of_pid[pid]: lines for pid, lines in by_pid.items()}


def truth_key(op: dict, p2p_index: int) -> tuple:
    seq = op["seq"] if op["seq"] is not None else p2p_index
    return (int(op["comm_id"], 16), op["func"], seq, op["count"], op["bytes"])


def log_key(op: LoggedOp) -> tuple:
    """An op line's (logged_ops.logged_op) key, as truth_key makes one of a simulated op."""
    return (op.comm_id, op.func, op.seq, op.count, op.size)


def simulate(home: Path, **kw):
    kw.setdefault("time_scale", 0.01)
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        env=FAST + tuple(kw.pop("env", ())),
        **kw,
    )
    result = run_simulation(config)
    assert not result.errors, result.errors
    return result, read_ground_truth(result.run_dir)
