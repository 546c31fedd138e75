"""Semantic Engine offline: parse inspector_logs and recover Steps, on one core.

The logs are real: a simulated tensor + pipeline + data parallel job on 8 ranks (TP 2 x PP 2 x
DP 2) drives the real plugin (dist/libnccl-profiler-comminsight.so), whose writer thread
produces the segments the engine reads in production: op lines in the compact form (the
default, about 350 bytes of JSON per op), and once more in the Inspector form (about 950; the
metrics of that run carry the suffix _inspector, so the two forms compare in one run). The
model is 7B-class: 32 layers, so a GPU issues about 68 ops per Step (16 layers of its pipeline
stage, two tensor-parallel all-reduces each, the pipeline sends and receives, the data
parallel reduce-scatter and all-gather). A second, GPT-2-small-sized job (12 layers, 28 ops per
Step) shows how the rate depends on the ops per Step: Step summaries cost per Step.

The measured work is `recover_steps` exactly as `comminsight steps` runs it, without output
files: read every segment and check its seal, decode every line, restore issue order, select
a template, place every op into Steps, build the summaries. records_per_s = op records
consumed per second of this thread's CPU time (the median of --repeat runs). For scale, on the
same logs: parse_records_per_s is the input side alone (read, seal check, decode into
columns), msgspec_records_per_s a full msgspec decode of every line (a pure-Python reader's
floor), us_per_step the rest of recover_steps per Step recovered. The 12-layer job's metrics
carry the suffix _12_layers.

Budget (architecture §8): >= 1 M records/s.
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

from comminsight.log_segments import read_segment
from comminsight.semantic.log_input import _DECODER, read_gpu_logs
from comminsight.semantic.offline import recover_steps
from comminsight.sim import SimConfig, run_simulation

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"


def emit(metric: str, value: float, unit: str) -> None:
    value = round(value, 3) if isinstance(value, float) else value
    print(json.dumps({"bench": "engine_parse", "metric": metric, "value": value, "unit": unit}))


JOBS = (("", 32, 1000), ("_12_layers", 12, 1000))  # metric suffix, layers, Steps
FORMS = (("", "compact"), ("_inspector", "inspector"))  # metric suffix, log format


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--logs", help="measure these inspector_logs instead of generating them")
    args = ap.parse_args()
    if args.logs:
        measure(Path(args.logs), args.repeat, "")
        return
    if not PLUGIN.exists():
        sys.exit(f"engine_parse: {PLUGIN} is missing; run `make build-profiler`")
    for job_suffix, layers, steps in JOBS:
        for form_suffix, log_format in FORMS:
            with tempfile.TemporaryDirectory(prefix="ci-engine-bench-") as tmp:
                sim = run_simulation(
                    SimConfig(
                        plugin=str(PLUGIN),
                        home=tmp,
                        workload="tp-pp-dp",
                        ranks=8,
                        steps=steps,
                        layers=layers,
                        time_scale=0.005,
                        env=(
                            ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
                            ("COMMINSIGHT_PROFILER_LOG_FORMAT", log_format),
                        ),
                    )
                )
                if sim.errors:
                    sys.exit(f"engine_parse: the simulation failed: {sim.errors}")
                measure(Path(tmp) / "inspector_logs", args.repeat, job_suffix + form_suffix)


def measure(logs: Path, repeat: int, suffix: str) -> None:
    rates, cpus, ops, steps = [], [], 0, 0
    for _ in range(repeat):
        t0 = time.thread_time()
        result = recover_steps(logs)
        cpu = time.thread_time() - t0
        ops, steps = result.ops, sum(len(g.summaries) for g in result.gpus)
        rates.append(ops / cpu)
        cpus.append(cpu)
    parse = []
    for _ in range(repeat):
        t0 = time.thread_time()
        parsed = sum(len(b) for log in read_gpu_logs(logs)[0] for b in log.batches())
        parse.append(time.thread_time() - t0)
    lines = 0
    t0 = time.thread_time()
    for log in read_gpu_logs(logs)[0]:
        for path in log.segments:
            for line in read_segment(path).splitlines():
                _DECODER.decode(line)
                lines += 1
    decode_cpu = time.thread_time() - t0
    emit("records_per_s" + suffix, statistics.median(rates), "records/s")
    emit("records" + suffix, ops, "records")
    emit("steps_recovered" + suffix, steps, "steps")
    emit("ops_per_step" + suffix, ops / max(1, steps), "ops")
    emit("parse_records_per_s" + suffix, parsed / statistics.median(parse), "records/s")
    emit("msgspec_records_per_s" + suffix, lines / decode_cpu, "lines/s")
    emit(
        "us_per_step" + suffix,
        (statistics.median(cpus) - statistics.median(parse)) / max(1, steps) * 1e6,
        "us",
    )


if __name__ == "__main__":
    main()
