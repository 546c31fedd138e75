"""Offline Step recovery over Dask workers on one machine: records per second with 1 and with
2 workers, the scaling between them, the workers' peak memory, and what the reduction
carries per rank.

The job is synthetic (bench/synthetic_job.py: tensor parallelism in groups of 8, data
parallelism across them, written as the Profiler writes its segments, compressed), generated
once and kept under build/bench-engine-distributed/. The large job is 1,024 ranks of 98,000
ops (100 M records); the small one has a quarter of the ranks and as many ops each, so that
the workers' peak memory at the two sizes shows whether it grows with the job (it should
not: a worker holds one process's ops at a time). Each run starts its own LocalCluster (one
single-threaded process per worker; its start is not timed), recovers the Steps into a fresh
directory, and is checked: every GPU has the job's Steps, and the step files of 1 and 2
workers are the same bytes.

Prints JSON lines {"bench","metric","value","unit", ...}, with ranks, records and workers in
each: records_per_s, scaling_efficiency (records_per_s with 2 workers over twice that with
1), worker_rss_max_mib (the largest peak RSS of a worker, VmHWM), client_rss_max_mib (this
process's), reduce_bytes_per_rank (what the communicators, facts and cut rounds sent the
client, pickled, over the ranks), steps_bytes_per_rank (what placement sent back: Step
counts, the summaries staying in the step files).

    python bench/engine_distributed.py [--ranks 1024] [--small-ranks 256] [--steps 2000]
        [--workers 1 2]                                  (make bench-engine-distributed)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from distributed import Client, LocalCluster
from synthetic_job import Shape, generate

from comminsight.semantic.dask_cluster import worker_config
from comminsight.semantic.distributed_steps import recover_steps_distributed

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "bench-engine-distributed"


def emit(metric: str, value, unit: str, **extra) -> None:
    line = {"bench": "engine_distributed", "metric": metric, "value": value, "unit": unit}
    print(json.dumps({**line, **extra}), flush=True)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.iterdir()):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def run(logs: Path, shape: Shape, workers: int, scratch: Path) -> dict:
    with worker_config():  # the workers as `comminsight steps --workers` starts them
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
            local_directory=str(scratch),
        )
    out = scratch / f"steps-{workers}"
    try:
        with Client(cluster) as client:
            pids = list(client.run(os.getpid).values())
            received: dict[str, int] = {}
            start = time.perf_counter()
            result = recover_steps_distributed(
                logs, client, out_dir=out, received=received, keep_summaries=False
            )
            wall = time.perf_counter() - start
            rss = max(peak_rss_mib(pid) for pid in pids)
    finally:
        cluster.close()
    steps = {g.steps for g in result.gpus}
    if result.problems or len(result.gpus) != shape.ranks:
        raise RuntimeError(f"recovery met problems: {result.problems[:3]}")
    reduce = sum(v for k, v in received.items() if k != "steps")
    return {
        "records": result.ops,
        "wall_s": wall,
        "rss": rss,
        "reduce": reduce / shape.ranks,
        "steps_bytes": received.get("steps", 0) / shape.ranks,
        "steps": sorted(steps),
        "confidence": result.cut.confidence,
        "digest": digest(out),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--small-ranks", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for ranks in (args.small_ranks, args.ranks):
        shape = Shape(ranks=ranks, steps=args.steps)
        t = time.perf_counter()
        logs = generate(CACHE, shape, jobs=os.cpu_count() or 2)
        labels = {"ranks": ranks, "records": shape.records}
        emit("generate_s", round(time.perf_counter() - t, 1), "s", cached=True, **labels)
        done = {}
        for workers in args.workers:
            scratch = Path(tempfile.mkdtemp(prefix="engine-distributed-", dir=CACHE))
            try:
                r = done[workers] = run(logs, shape, workers, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if r["records"] != shape.records or r["steps"] != [args.steps]:
                raise RuntimeError(f"expected {args.steps} Steps on every GPU, found {r['steps']}")
            w = {"workers": workers, **labels}
            emit("records_per_s", round(r["records"] / r["wall_s"]), "records/s", **w)
            emit("wall_s", round(r["wall_s"], 1), "s", **w)
            emit("worker_rss_max_mib", round(r["rss"], 1), "MiB", **w)
            emit("reduce_bytes_per_rank", round(r["reduce"]), "bytes", **w)
            emit("steps_bytes_per_rank", round(r["steps_bytes"]), "bytes", **w)
        if 1 in done and 2 in done:
            rate = {k: v["records"] / v["wall_s"] for k, v in done.items()}
            emit("scaling_efficiency", round(rate[2] / (2 * rate[1]), 3), "ratio", **labels)
            same = done[1]["digest"] == done[2]["digest"]
            emit("step_files_identical", int(same), "bool", **labels)
        emit("client_rss_max_mib", round(peak_rss_mib(os.getpid()), 1), "MiB", **labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
