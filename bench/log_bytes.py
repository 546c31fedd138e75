"""Bytes of inspector_logs per op: as the writer writes them (raw) and as they stay on disk once
sealed and compressed.

Two sources. (1) Simulated jobs (DDP, Megatron, FSDP; 8 ranks) through the real plugin with
its defaults, except segments sealed at 1 MiB so that many are sealed and compressed by the
writer thread while the job runs, as a long job's are: raw bytes per op are the segments'
uncompressed bytes over their op lines, sealed bytes per op the `.jsonl.zst` files' size
over theirs. The simulator's clocks are regular, which flatters compression, so (2) the
segments that real H200 runs left (tests/data/gpu: DDP, FSDP, TP x DP through NCCL 2.28) are
compressed here at levels 1, 3 and 6 with the zstandard package: sealed bytes per op, and
the compression speed on one core, from which the writer thread's cost per op follows.

Prints JSON lines {"bench","metric","value","unit", ...}: log_bytes_per_op (form raw or
sealed, with source, workload and level), compress_mb_per_s and compress_ns_per_op.

    python bench/log_bytes.py [--steps 20]     (make bench-log-bytes)
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import zstandard

from comminsight.log_segments import is_compressed, read_segment, segments_in
from comminsight.sim import SimConfig, run_simulation

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
GPU_LOGS = ROOT / "tests" / "data" / "gpu"
OP_MARKERS = (b'"kind":"coll"', b'"kind":"p2p"')
SEGMENT_BYTES = 1 << 20
LEVELS = (1, 3, 6)
WORKLOADS = (
    {"workload": "ddp", "ranks": 8},
    {"workload": "megatron", "ranks": 8, "tp": 2, "pp": 2},
    {"workload": "fsdp", "ranks": 8},
)


def emit(metric: str, value, unit: str, **extra) -> None:
    line = {"bench": "log_bytes", "metric": metric, "value": value, "unit": unit, **extra}
    print(json.dumps(line), flush=True)


def op_lines(data: bytes) -> int:
    # a marker inside a name would be escaped (\"kind\"): each op line holds exactly one
    return sum(data.count(m) for m in OP_MARKERS)


def simulated(steps: int) -> None:
    for shape in WORKLOADS:
        with tempfile.TemporaryDirectory(prefix="log-bytes-") as tmp:
            config = SimConfig(
                plugin=str(PLUGIN),
                home=tmp,
                steps=steps,
                time_scale=0.01,
                comm_names=True,
                env=(
                    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
                    ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", str(SEGMENT_BYTES)),
                ),
                **shape,
            )
            result = run_simulation(config)
            if result.errors:
                raise RuntimeError(f"the simulation failed: {result.errors}")
            raw_bytes = raw_ops = sealed_bytes = sealed_ops = 0
            for path in segments_in(Path(tmp) / "inspector_logs"):
                data = read_segment(path)
                ops = op_lines(data)
                raw_bytes += len(data)
                raw_ops += ops
                if is_compressed(path):
                    sealed_bytes += path.stat().st_size
                    sealed_ops += ops
            labels = {"source": "simulated", **shape, "segment_bytes": SEGMENT_BYTES}
            emit("log_bytes_per_op", round(raw_bytes / raw_ops, 1), "bytes", form="raw", **labels)
            emit(
                "log_bytes_per_op",
                round(sealed_bytes / sealed_ops, 1) if sealed_ops else None,
                "bytes",
                form="sealed",
                level="default",
                sealed_ops=sealed_ops,
                **labels,
            )


def real_gpu_logs() -> None:
    with tempfile.TemporaryDirectory(prefix="log-bytes-gpu-") as tmp:
        for archive in sorted(GPU_LOGS.glob("*.tar.gz")):
            run = archive.name.removesuffix(".tar.gz")
            out = Path(tmp) / run
            with tarfile.open(archive) as tar:
                tar.extractall(out, filter="data")
            segments = [read_segment(p) for p in sorted(out.rglob("ci-*.jsonl"))]
            raw = b"".join(segments)
            ops = op_lines(raw)
            labels = {"source": "h200", "run": run, "ops": ops}
            emit("log_bytes_per_op", round(len(raw) / ops, 1), "bytes", form="raw", **labels)
            for level in LEVELS:
                compressor = zstandard.ZstdCompressor(level=level, write_checksum=True)
                sealed = sum(len(compressor.compress(s)) for s in segments)
                emit(
                    "log_bytes_per_op",
                    round(sealed / ops, 1),
                    "bytes",
                    form="sealed",
                    level=level,
                    **labels,
                )
                if run.startswith("tpdp4"):  # the largest: a speed worth timing
                    rounds, start = 0, time.process_time()
                    while rounds < 3 or time.process_time() - start < 1.0:
                        for s in segments:
                            compressor.compress(s)
                        rounds += 1
                    cpu = time.process_time() - start
                    emit(
                        "compress_mb_per_s",
                        round(rounds * len(raw) / cpu / 1e6, 1),
                        "MB/s",
                        level=level,
                        run=run,
                        counted="CPU time of this process, one core",
                    )
                    emit(
                        "compress_ns_per_op",
                        round(cpu / (rounds * ops) * 1e9, 1),
                        "ns",
                        level=level,
                        run=run,
                    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    simulated(args.steps)
    real_gpu_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
