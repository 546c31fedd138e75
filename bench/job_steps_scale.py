"""What GET /api/v1/job-steps costs a master as the job grows (one core, this process).

Synthetic step-summary files, one per node as master_store keeps them: NODES nodes x 8 GPUs
(tensor-parallel inside a node, data-parallel across), each node's Agent started a few
iterations after the first. Prints JSON lines {"bench","metric","value","unit"}:
- first_answer: the first request (reads each file's tail, reconciles);
- next_step_answer: after every GPU wrote one more Step (reads only the new lines, reconciles);
- unchanged_answer: nothing new (a cached reconciliation);
- the ratio of the second to the first, the point of reading incrementally.
Absolute numbers vary with the machine; compare ratios within one run.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from comminsight.agent.api.job_steps_view import JobStepsView

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "contract-tests/fixtures/json/step-summary/v1/valid/job-comm-seqs.json"
GPUS_PER_NODE = 8
HISTORY = 400  # Steps each GPU already wrote
TP_OPS, DP_OPS = 64, 6


def emit(metric: str, value: float, unit: str) -> None:
    print(
        json.dumps(
            {"bench": "job_steps_scale", "metric": metric, "value": round(value, 4), "unit": unit}
        ),
        flush=True,
    )


def line(base: dict, node: int, local: int, iteration: int) -> bytes:
    out = []
    for g in range(GPUS_PER_NODE):
        rank = node * GPUS_PER_NODE + g
        record = {
            **base,
            "host": f"node-{node:04d}",
            "global_rank": rank,
            "pid": 1000 + rank,
            "step_index": local,
            "start_real_ns": iteration * 1_000_000,
            "end_real_ns": iteration * 1_000_000 + 900_000,
            "comm_seqs": [
                {
                    "kind": "coll",
                    "comm_id": f"a{node:015x}",
                    "first_seq": iteration * TP_OPS,
                    "last_seq": iteration * TP_OPS + TP_OPS - 1,
                    "op_count": TP_OPS,
                },
                {
                    "kind": "coll",
                    "comm_id": f"d{g:015x}",
                    "first_seq": iteration * DP_OPS,
                    "last_seq": iteration * DP_OPS + DP_OPS - 1,
                    "op_count": DP_OPS,
                },
            ],
        }
        out.append(json.dumps(record).encode() + b"\n")
    return b"".join(out)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(nodes: int) -> None:
    base = json.loads(FIXTURE.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for n in range(nodes):
            late = n % 5
            lines = b"".join(line(base, n, it - late, it) for it in range(late, HISTORY))
            (directory / f"node-{n:04d}.jsonl").write_bytes(lines)
        view = JobStepsView([directory])

        def ask():
            page = view.page(job=None, since_step=0, cursor=None, limit=20)
            assert not page.disagreements and all(n.offset is not None for n in page.nodes)

        first = timed(ask)
        for n in range(nodes):
            late = n % 5
            with open(directory / f"node-{n:04d}.jsonl", "ab") as f:
                f.write(line(base, n, HISTORY - late, HISTORY))
        following = timed(ask)
        unchanged = timed(ask)
    gpus = nodes * GPUS_PER_NODE
    emit(f"first_answer_{gpus}_gpus", first, "s")
    emit(f"next_step_answer_{gpus}_gpus", following, "s")
    emit(f"unchanged_answer_{gpus}_gpus", unchanged, "s")
    emit(f"next_step_over_first_{gpus}_gpus", following / first, "ratio")


if __name__ == "__main__":
    for nodes in [int(a) for a in sys.argv[1:]] or [16, 64]:
        run(nodes)
