"""`comminsight trace <logs> -o trace.json`: a Chrome / Perfetto trace with a process per rank,
a track per communicator (its stream) and a steps track, every op and every recovered Step a
slice, each Step's slice beginning with its first op and ending after its last."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

import forked_python
import pytest
from engine_inputs import tp_pp_dp_logs

from comminsight.semantic.offline import recover_steps

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    home = tmp_path_factory.mktemp("trace")
    logs = tp_pp_dp_logs(home, ranks=4, steps=6)
    out = home / "trace.json"
    proc = forked_python.run(
        [sys.executable, "-m", "comminsight.cli", "trace", str(logs), "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "written to" in proc.stdout
    return json.loads(out.read_text()), recover_steps(logs, keep_ops=True)


def test_a_process_per_rank_a_track_per_communicator_and_a_steps_track(traced):
    trace, result = traced
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names) == sorted(g.gpu.global_rank for g in result.gpus) == [0, 1, 2, 3]
    assert all(name.startswith(f"rank {pid} (") for pid, name in names.items())
    for gpu in result.gpus:
        pid = gpu.gpu.global_rank
        tracks = {
            e["tid"]: e["args"]["name"]
            for e in events
            if e["name"] == "thread_name" and e["pid"] == pid
        }
        assert tracks[0] == "steps"
        comms = {op.comm_id for op in gpu.kept_ops}
        assert sorted(t.split()[-1] for tid, t in tracks.items() if tid) == sorted(comms)


def test_every_op_and_every_step_is_a_slice_on_its_track(traced):
    trace, result = traced
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] > 0 for e in slices)
    for gpu in result.gpus:
        pid = gpu.gpu.global_rank
        mine = [e for e in slices if e["pid"] == pid]
        ops = [e for e in mine if e["cat"] in ("coll", "p2p")]
        steps = [e for e in mine if e["cat"] == "step"]
        assert len(ops) == len(gpu.kept_ops) > 0
        assert Counter(e["name"] for e in ops) == Counter(op.func for op in gpu.kept_ops)
        assert len(steps) == len(gpu.summaries) > 0
        assert all(e["tid"] == 0 for e in steps) and all(e["tid"] > 0 for e in ops)


def test_each_step_slice_begins_with_its_first_op_and_ends_after_its_last(traced):
    trace, result = traced
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_op = defaultdict(list)
    for e in slices:
        if e["cat"] != "step":
            by_op[(e["pid"], e["name"], e["args"]["seq"])].append(e)
    for gpu in result.gpus:
        pid = gpu.gpu.global_rank
        steps = {e["name"]: e for e in slices if e["pid"] == pid and e["cat"] == "step"}
        for s in gpu.summaries:
            step = steps[f"step {s.step_index}" + (" (warm-up)" if s.warmup else "")]
            end = step["ts"] + step["dur"]
            first, last = (
                next(
                    e
                    for e in by_op[(pid, ref.func, ref.seq)]
                    if ref.comm_id in _track(trace, pid, e["tid"])
                )
                for ref in (s.first_op, s.last_op)
            )
            # a Step begins when its first op does, and lasts until its last op has ended
            # (an op issued later may start earlier, on another stream)
            assert abs(first["ts"] - step["ts"]) <= 1
            assert last["ts"] + last["dur"] <= end + 1


def _track(trace: dict, pid: int, tid: int) -> str:
    return next(
        e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name" and e["pid"] == pid and e["tid"] == tid
    )
