"""Score the Semantic Engine on logs of real training (bench/gpu/train_steps.py): did it find
every Step, each between the right optimizer markers?

    python bench/gpu/steps_report.py DIR [DIR ...]

Each DIR holds inspector_logs/ and markers/markers.rank<R>.json (CLOCK_MONOTONIC after every
optimizer step, the script's ground truth, which the engine never sees). For each rank: the
Steps recovered against the steps run, and how many recovered Steps lie inside their marker
interval (first op started after the previous step's marker, last op completed before this
step's marker). Both judged by the ops' host enqueue times (the host clock the markers use;
completion times are GPU times converted to it, a few ms off early in a run). Prints JSON
lines {"bench","metric","value","unit", ...}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from comminsight.semantic.log_input import read_gpu_logs
from comminsight.semantic.offline import recover_steps


def emit(metric: str, value, unit: str, **extra) -> None:
    print(
        json.dumps({"bench": "gpu_steps", "metric": metric, "value": value, "unit": unit, **extra})
    )


def report(run_dir: Path) -> bool:
    result = recover_steps(run_dir / "inspector_logs")
    ok = not result.problems
    for problem in result.problems:
        emit("problem", problem, "", run=run_dir.name)
    logs = {log.stream: log for log in read_gpu_logs(run_dir / "inspector_logs")[0]}
    for gpu in result.gpus:
        rank = gpu.gpu.global_rank
        markers = json.loads((run_dir / "markers" / f"markers.rank{rank}.json").read_text())
        ends = markers["steps"]
        issued = {op.ring_seq: op.issue_ns for op in logs[gpu.stream].ops()}
        inside = 0
        for i, s in enumerate(gpu.summaries):
            lo = ends[i - 1] if i > 0 else 0
            hi = ends[i] if i < len(ends) else float("inf")
            first, last = issued[s.first_op.ring_seq], issued[s.last_op.ring_seq]
            inside += lo <= first and last <= hi
        exact = len(gpu.summaries) == len(ends) and inside == len(ends)
        ok &= exact
        emit(
            f"{markers['mode']}_rank{rank}",
            exact,
            "bool",
            steps_run=len(ends),
            steps_found=len(gpu.summaries),
            inside_marker_interval=inside,
            method=gpu.method,
            ops=gpu.ops,
            ops_per_step=sorted({s.op_count for s in gpu.summaries}),
        )
    return ok


if __name__ == "__main__":
    results = [report(Path(d)) for d in sys.argv[1:]]
    emit("all_exact", all(results), "bool")
    sys.exit(0 if all(results) else 1)
