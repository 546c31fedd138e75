"""Semantic Engine offline: parse inspector_logs and recover Steps, on one core.

The logs are real: a simulated tensor + pipeline + data parallel run (8 ranks) drives the real
plugin (dist/libnccl-profiler-comminsight.so), whose writer thread produces the segments the
engine reads in production. The measured work is `recover_steps` exactly as `comminsight steps`
runs it, without output files: read and decode every line, restore issue order, select a
template, place every op into Steps, build the summaries. records_per_s = op records consumed
per second of this thread's CPU time (the median of --repeat runs); decode_records_per_s is
the JSON decoding alone, for scale.

DESIGN budget: >= 1 M records/s.
Prints JSON lines {"bench","metric","value","unit"}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from comminsight.semantic.log_input import _DECODER, read_gpu_logs
from comminsight.semantic.offline import recover_steps
from comminsight.sim import SimConfig, run_simulation

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"


def emit(metric: str, value: float, unit: str) -> None:
    value = round(value, 3) if isinstance(value, float) else value
    print(json.dumps({"bench": "engine_parse", "metric": metric, "value": value, "unit": unit}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not PLUGIN.exists():
        sys.exit(f"engine_parse: {PLUGIN} is missing; run `make build-profiler`")
    with tempfile.TemporaryDirectory(prefix="ci-engine-bench-") as tmp:
        sim = run_simulation(
            SimConfig(
                plugin=str(PLUGIN),
                home=tmp,
                workload="tp-pp-dp",
                ranks=8,
                steps=args.steps,
                time_scale=0.005,
                env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
            )
        )
        if sim.errors:
            sys.exit(f"engine_parse: the simulation failed: {sim.errors}")
        logs = Path(tmp) / "inspector_logs"
        rates, ops, steps = [], 0, 0
        for _ in range(args.repeat):
            t0 = time.thread_time()
            result = recover_steps(logs)
            cpu = time.thread_time() - t0
            ops, steps = result.ops, sum(len(g.summaries) for g in result.gpus)
            rates.append(ops / cpu)
        lines = 0
        t0 = time.thread_time()
        for log in read_gpu_logs(logs)[0]:
            for path in log.segments:
                for line in path.read_bytes().splitlines():
                    _DECODER.decode(line)
                    lines += 1
        decode_cpu = time.thread_time() - t0
    emit("records_per_s", statistics.median(rates), "records/s")
    emit("records", ops, "records")
    emit("steps_recovered", steps, "steps")
    emit("decode_records_per_s", lines / decode_cpu, "lines/s")


if __name__ == "__main__":
    main()
