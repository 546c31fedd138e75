"""A synthetic training job's inspector_logs, written as the Profiler writes them, at any size.

The layout is tensor parallelism inside groups of TP ranks and data parallelism across them
(ranks r and r + TP share a data-parallel communicator), as Megatron-LM lays out a job
without pipeline stages. Every Step each rank runs `layers` tensor-parallel all-reduces (the
forward and backward of each layer), `buckets` data-parallel gradient all-reduces and one
scalar all-reduce over the world (a loss or gradient norm), after an idle gap (the optimizer
and data loading); the GPU runs each op after the host enqueued it. Lines are the writer's
Inspector form (profiler/src/logwriter.c, COMMINSIGHT_PROFILER_LOG_FORMAT=inspector), field
for field and in its order, so the engine's fast scanner reads them (the compact form, the
writer's default, is read as fast: make bench-engine); each process's segments begin with
segment_start, carry a comm_init per communicator before its first op, end with a seal
(counts and CRC-32) and are compressed with zstd as the Profiler leaves them (`.jsonl.zst`).

    python bench/synthetic_job.py OUT_DIR [--ranks 1024] [--steps 2000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import zstandard

HOST_FMT = "node{:05d}"
PID_BASE = 10_000
START_MONO = 5_000_000_000_000
START_REAL = 1_796_000_000_000_000_000
SEGMENT_BYTES = 64 << 20  # the Profiler's default
LEVEL = 1  # the Profiler's default


@dataclass(frozen=True)
class Shape:
    ranks: int = 1024
    tp: int = 8
    steps: int = 2000
    layers: int = 40
    buckets: int = 8
    gpus_per_node: int = 8

    @property
    def ops_per_step(self) -> int:
        return self.layers + self.buckets + 1

    @property
    def records(self) -> int:
        return self.ranks * self.steps * self.ops_per_step

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Comm:
    comm_id: int
    name: str
    rank: int
    nranks: int
    nnodes: int
    nbytes: int  # of each of its ops
    exec_ns: int
    datatype: str
    elem: int  # bytes per element


def comms_of(shape: Shape, rank: int) -> tuple[Comm, Comm, Comm]:
    """(tensor-parallel, data-parallel, world) communicators of a rank."""
    group, member = divmod(rank, shape.tp)
    dp_size = shape.ranks // shape.tp
    nodes = max(1, shape.ranks // shape.gpus_per_node)
    tp = Comm(
        0x1000_0000_0000 + group,
        f"tp:{group}",
        member,
        shape.tp,
        1,
        8 << 20,
        400_000,
        "ncclBfloat16",
        2,
    )
    dp_nodes = min(dp_size, nodes)
    dp = Comm(
        0x2000_0000_0000 + member,
        f"dp:{member}",
        group,
        dp_size,
        dp_nodes,
        64 << 20,
        3_000_000,
        "ncclFloat32",
        4,
    )
    world = Comm(
        0x3000_0000_0000, "default_pg:0", rank, shape.ranks, nodes, 4, 30_000, "ncclFloat32", 4
    )
    return tp, dp, world


def _identity(c: Comm, host: str, pid: int, local_rank: int) -> str:
    return (
        f'{{"comm_id":"{c.comm_id:016x}","comm_name":"{c.name}","name_source":"nccl",'
        f'"comm_rank":{c.rank},"nranks":{c.nranks},"nnodes":{c.nnodes},'
        f'"local_rank":{local_rank},"pid":{pid},"host":"{host}"}}'
    )


def _op_format(c: Comm, host: str, pid: int) -> bytes:
    """The writer's op line for the communicator, its per-op numbers left as %d: dump
    timestamp, coll_sn, ring_seq, op_index, group_id, host start, stop, complete, GPU start
    and stop."""
    exec_us = c.exec_ns // 1000
    n = c.nranks
    algbw = c.nbytes / 1e9 / (exec_us / 1e6) if exec_us else 0.0
    busbw = algbw * 2.0 * (n - 1) / n
    channels = 24 if c.nbytes > 1 << 20 else 4
    line = (
        f'{{"header":{{"id":"0x{c.comm_id:x}","comm_name":"{c.name}","rank":{c.rank},'
        f'"n_ranks":{n},"nnodes":{c.nnodes}}},"metadata":{{"inspector_output_format_version":'
        f'"v4.0","git_rev":"comminsight-0.1.0","rec_mechanism":"nccl_profiler_interface",'
        f'"dump_timestamp_us":%d,"hostname":"{host}","pid":{pid}}},"coll_perf":{{"coll":'
        f'"AllReduce","coll_sn":%d,"coll_msg_size_bytes":{c.nbytes},"coll_exec_time_us":'
        f'{exec_us},"coll_timing_source":"kernel_gpu","coll_algobw_gbs":{algbw:.6f},'
        f'"coll_busbw_gbs":{busbw:.6f}}},"ci":{{"kind":"coll","schema_version":1,"ring_seq":%d,'
        f'"op_index":%d,"count":{c.nbytes // c.elem},"datatype":"{c.datatype}","algo":"RING",'
        f'"proto":"SIMPLE","n_channels":{channels},"n_warps":16,"graph_captured":false,'
        f'"group_id":%d,"tid":{pid},"host_start_mono_ns":%d,"host_stop_mono_ns":%d,'
        f'"host_complete_mono_ns":%d,"gpu_start_globaltimer_ns":%d,"gpu_stop_globaltimer_ns":%d,'
        f'"channels_completed":{channels},"forced_complete":false}}}}\n'
    )
    return line.encode()


class _Segments:
    """One process's segments: opened with segment_start, sealed at SEGMENT_BYTES, compressed."""

    def __init__(self, out: Path, stem: str, start_line) -> None:
        self.out, self.stem, self.start_line = out, stem, start_line
        self.index = 0
        self.parts: list[bytes] = []
        self.size = self.records = self.ops = 0
        self.first = self.last = 0
        self.compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)

    def add(self, line: bytes, ring_seq: int, op: bool, mono: int) -> None:
        if not self.parts:
            self._open(ring_seq, mono)
        self.parts.append(line)
        self.size += len(line)
        self.records += 1
        self.ops += op
        self.first = self.first or ring_seq
        self.last = ring_seq
        if self.size >= SEGMENT_BYTES:
            self.seal("size", mono)

    def _open(self, next_seq: int, mono: int) -> None:
        line = self.start_line(self.index, next_seq, mono)
        self.parts, self.size, self.records, self.ops = [line], len(line), 1, 0
        self.first = self.last = 0

    def seal(self, reason: str, mono: int) -> None:
        if not self.parts:
            return
        body = b"".join(self.parts)
        ring = self.records - 1
        seal = (
            f'{{"ci":{{"kind":"seal","schema_version":1,"segment_index":{self.index},'
            f'"record_count":{self.records},"byte_count":{len(body)},"crc32":{zlib.crc32(body)},'
            f'"op_count":{self.ops},"ring_record_count":{ring},"lost_count":0,'
            f'"first_ring_seq":{self.first},"last_ring_seq":{self.last},"reason":"{reason}",'
            f'"sealed_mono_ns":{mono},"sealed_real_ns":{START_REAL + mono - START_MONO}}}}}\n'
        ).encode()
        name = f"{self.stem}-{self.index:06d}.jsonl.zst"
        tmp = self.out / (name + ".tmp")
        tmp.write_bytes(self.compressor.compress(body + seal))
        os.replace(tmp, self.out / name)
        self.index += 1
        self.parts = []


def write_rank(out: Path, shape: Shape, rank: int) -> int:
    """Rank `rank`'s segments into out; its record count."""
    host = HOST_FMT.format(rank // shape.gpus_per_node)
    pid, local_rank = PID_BASE + rank, rank % shape.gpus_per_node
    start_mono = START_MONO + rank * 1000
    comms = comms_of(shape, rank)
    stem = f"ci-{host}-{pid}-{start_mono}"
    idents = [_identity(c, host, pid, local_rank) for c in comms]

    def start_line(index: int, next_seq: int, mono: int) -> bytes:
        live = ",".join(idents) if index else ""
        return (
            f'{{"ci":{{"kind":"segment_start","schema_version":1,"segment_index":{index},'
            f'"process":{{"host":"{host}","pid":{pid},"start_real_ns":{START_REAL},'
            f'"profiler_version":"0.1.0","global_rank":{rank},"local_rank":{local_rank},'
            f'"world_size":{shape.ranks}}},"clock":{{"mono_ns":{mono},'
            f'"real_ns":{START_REAL + mono - START_MONO}}},"communicators":[{live}],'
            f'"next_ring_seq":{next_seq}}}}}\n'
        ).encode()

    segments = _Segments(out, stem, start_line)
    mono = start_mono + 1_000_000
    ring = 0
    for ident in idents:
        ring += 1
        line = (
            f'{{"ci":{{"kind":"comm_init","schema_version":1,"ring_seq":{ring},"comm":{ident},'
            f'"profiler_abi":"v5","init_mono_ns":{mono},'
            f'"init_real_ns":{START_REAL + mono - START_MONO}}}}}\n'
        ).encode()
        segments.add(line, ring, False, mono)
        mono += 1_000_000
    formats = [_op_format(c, host, pid) for c in comms]
    per_step = [0] * shape.layers + [1] * shape.buckets + [2]
    sn = [0, 0, 0]
    group = 0
    offset = START_REAL - START_MONO
    for _ in range(shape.steps):
        mono += 20_000_000  # the optimizer and data loading: the GPU idle, the host busy
        gpu_free = mono
        for which in per_step:
            c = comms[which]
            ring += 1
            group += 1
            start = mono
            stop = start + 8_000
            gpu_start = max(gpu_free, stop + 5_000)
            gpu_end = gpu_start + c.exec_ns
            gpu_free = gpu_end
            complete = gpu_end + 20_000
            values = (
                (offset + complete) // 1000,
                sn[which],
                ring,
                sn[which],
                group,
                start,
                stop,
                complete,
                offset + gpu_start,
                offset + gpu_end,
            )
            segments.add(formats[which] % values, ring, True, complete)
            sn[which] += 1
            mono = stop + 30_000  # the host enqueues the next op
        mono = gpu_free  # the step ends when its last op does
    segments.seal("finalize", mono + 1_000_000)
    return ring


def _write_one(args) -> int:
    out, shape, rank = args
    return write_rank(Path(out), Shape(**shape), rank)


def generate(out: Path, shape: Shape, jobs: int = 2) -> Path:
    """The job's logs under out/<shape key>/inspector_logs, written once (a marker file says
    they are complete)."""
    root = out / f"job-{shape.key()}"
    logs = root / "inspector_logs"
    done = root / "complete.json"
    if done.exists():
        return logs
    logs.mkdir(parents=True, exist_ok=True)
    tasks = [(str(logs), asdict(shape), r) for r in range(shape.ranks)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        records = sum(pool.map(_write_one, tasks, chunksize=4))
    done.write_text(json.dumps({"shape": asdict(shape), "records": records}) + "\n")
    return logs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=Shape.ranks)
    parser.add_argument("--steps", type=int, default=Shape.steps)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    shape = Shape(ranks=args.ranks, steps=args.steps)
    print(generate(args.out, shape, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
