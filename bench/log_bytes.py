"""Bytes of inspector_logs per op: as the writer writes them (raw) and as they stay on disk once
sealed and compressed, for each form of op line (COMMINSIGHT_PROFILER_LOG_FORMAT: compact, the
default, and inspector, NVIDIA Inspector's objects).

Two sources. (1) Simulated jobs (DDP, Megatron, FSDP; 8 ranks) through the real plugin with
its defaults, except segments sealed at 1 MiB so that many are sealed and compressed by the
writer thread while the job runs, as a long job's are: raw bytes per op are the segments'
uncompressed bytes over their op lines, sealed bytes per op the `.jsonl.zst` files' size
over theirs. The simulator's clocks are regular, which flatters compression, so (2) the
segments that real H200 runs left (tests/data/gpu: DDP, FSDP, TP x DP through NCCL 2.28,
written in the Inspector form) are measured as written and with each op line rewritten in
the compact form key for key as the writer writes it, and compressed here at levels 1, 3
and 6 with the zstandard package: sealed bytes per op, and the compression speed on one
core, from which the writer thread's cost per op follows.

Prints JSON lines {"bench","metric","value","unit", ...}: log_bytes_per_op (form raw or
sealed, lines compact or inspector, with source, workload and level), compact_to_inspector
(the ratio of the two forms' raw bytes in one run), compress_mb_per_s and compress_ns_per_op.

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
# one per op line, in either form (a compact line's kind is followed by its next key)
OP_MARKERS = (b'"kind":"coll"', b'"kind":"p2p"', b'"kind":"c",', b'"kind":"p",')
FORMS = ("compact", "inspector")
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
        raw_per_op = {}
        for lines in FORMS:
            raw_per_op[lines] = simulated_form(steps, shape, lines)
        emit_ratio(raw_per_op, source="simulated", **shape)


def emit_ratio(raw_per_op: dict[str, float], **labels) -> None:
    """The compact form's raw bytes per op over the Inspector form's, in one run."""
    ratio = round(raw_per_op["compact"] / raw_per_op["inspector"], 3)
    emit("compact_to_inspector", ratio, "ratio", form="raw", **labels)


def simulated_form(steps: int, shape: dict, lines: str) -> float:
    """One simulated job written in one form: its bytes per op emitted; raw bytes per op."""
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
                ("COMMINSIGHT_PROFILER_LOG_FORMAT", lines),
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
    labels = {"source": "simulated", "lines": lines, **shape, "segment_bytes": SEGMENT_BYTES}
    raw = round(raw_bytes / raw_ops, 1)
    emit("log_bytes_per_op", raw, "bytes", form="raw", ops=raw_ops, **labels)
    emit(
        "log_bytes_per_op",
        round(sealed_bytes / sealed_ops, 1) if sealed_ops else None,
        "bytes",
        form="sealed",
        level="default",
        sealed_ops=sealed_ops,
        **labels,
    )
    return raw


def compact_form(line: bytes) -> bytes:
    """An Inspector-form op line rewritten in the compact form, key for key in the order the
    Profiler's writer puts them (logwriter.c: put_compact_op_line); any other line as it is."""
    obj = json.loads(line)
    ci = obj.get("ci") or {}
    if ci.get("kind") not in ("coll", "p2p"):
        return line
    coll = ci["kind"] == "coll"
    h = obj["header"]
    perf = obj["coll_perf"] if coll else obj["p2p_perf"]
    p = "coll" if coll else "p2p"
    out = {"kind": "c" if coll else "p", "q": ci["ring_seq"], "c": f"{int(h['id'], 16):016x}"}
    if "comm_name" in h:
        out["cn"] = h["comm_name"]
    out |= {"r": h["rank"], "n": h["n_ranks"], "nn": h["nnodes"], "f": perf[p]}
    out |= {"s": perf[f"{p}_sn"], "i": ci["op_index"], "e": ci["count"]}
    out |= {"b": perf[f"{p}_msg_size_bytes"], "d": ci["datatype"]}
    if coll:
        if "root" in ci:
            out["rt"] = ci["root"]
        out |= {"a": ci["algo"], "pt": ci["proto"], "ch": ci["n_channels"], "w": ci["n_warps"]}
    else:
        out |= {"pe": perf["p2p_peer"], "ch": ci["n_channels"]}
    if "stream" in ci:
        out["st"] = ci["stream"].removeprefix("0x")
    if ci.get("graph_captured"):
        out["gc"] = True
    if "group_id" in ci:
        out["gr"] = ci["group_id"]
    if ci.get("tid"):
        out["t"] = ci["tid"]
    out["ts"] = perf[f"{p}_timing_source"]
    bw = perf[f"{p}_busbw_gbs"]
    start = ci["host_start_mono_ns"]
    text = json.dumps(out, separators=(",", ":"))[:-1]
    if isinstance(bw, float | int):
        text += f',"bw":{bw:.6f}'  # the writer's %.6f
    text += f',"h":{start},"hs":{ci["host_stop_mono_ns"] - start}'
    if "host_complete_mono_ns" in ci:
        text += f',"hc":{ci["host_complete_mono_ns"] - start}'
    if "gpu_start_globaltimer_ns" in ci:
        g0 = ci["gpu_start_globaltimer_ns"]
        text += f',"g0":{g0},"gd":{ci["gpu_stop_globaltimer_ns"] - g0}'
    text += f',"cc":{ci["channels_completed"]}'
    text += ',"fc":true}' if ci.get("forced_complete") else "}"
    return ('{"ci":' + text + "}").encode()


def real_gpu_logs() -> None:
    with tempfile.TemporaryDirectory(prefix="log-bytes-gpu-") as tmp:
        for archive in sorted(GPU_LOGS.glob("*.tar.gz")):
            run = archive.name.removesuffix(".tar.gz")
            out = Path(tmp) / run
            with tarfile.open(archive) as tar:
                tar.extractall(out, filter="data")
            written = [read_segment(p) for p in sorted(out.rglob("ci-*.jsonl"))]
            compact = [
                b"".join(compact_form(line) + b"\n" for line in s.splitlines()) for s in written
            ]
            raw_per_op = {}
            for lines, segments in (("inspector", written), ("compact", compact)):
                raw_per_op[lines] = real_form(run, lines, segments)
            emit_ratio(raw_per_op, source="h200", run=run)


def real_form(run: str, lines: str, segments: list[bytes]) -> float:
    """One real run's segments in one form: bytes per op raw and sealed at each level (and the
    compression speed on the largest run); raw bytes per op."""
    raw = b"".join(segments)
    ops = op_lines(raw)
    labels = {"source": "h200", "run": run, "lines": lines, "ops": ops}
    raw_per_op = round(len(raw) / ops, 1)
    emit("log_bytes_per_op", raw_per_op, "bytes", form="raw", **labels)
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
            speed = {"level": level, "run": run, "lines": lines}
            emit(
                "compress_mb_per_s",
                round(rounds * len(raw) / cpu / 1e6, 1),
                "MB/s",
                counted="CPU time of this process, one core",
                **speed,
            )
            emit("compress_ns_per_op", round(cpu / (rounds * ops) * 1e9, 1), "ns", **speed)
    return raw_per_op


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    simulated(args.steps)
    real_gpu_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
