"""`comminsight demo`: what this build can do, run end to end on an embedded default.

Only the protocol layer exists so far, so that is what runs: the registry, the resolved
configuration, and one op record taken through the shm v1 layout the Profiler will write and
the Agent will read — encoded with the generated numpy dtype, decoded through the generated
cffi cdef, and checked field by field. It says plainly what is not built yet.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from rich.console import Console
from rich.table import Table

from comminsight.config import load_settings
from comminsight_gen.abi import shm_v1
from comminsight_gen.registry import PROTOCOLS

# One all-reduce as the Profiler records it: 8 MiB of bf16 on a 16-rank ring, 24 channels.
SAMPLE_OP = {
    "seq": 1,
    "kind": shm_v1.RecordKind.COLL,
    "func": shm_v1.Func.ALL_REDUCE,
    "datatype": shm_v1.Datatype.BFLOAT16,
    "algo": shm_v1.Algo.RING,
    "proto": shm_v1.Proto.SIMPLE,
    "timing_source": shm_v1.TimingSource.KERNEL_GPU,
    "n_channels": 24,
    "n_warps": 17,
    "kernel_ch_count": 24,
    "comm_id": 0x9F3C2A1B00D4E5F6,
    "rank": 3,
    "nranks": 16,
    "peer": shm_v1.NO_RANK,
    "op_seq": 41,
    "count": 4 << 20,
    "bytes": 8 << 20,
    "host_start_mono_ns": 1_000_000,
    "host_stop_mono_ns": 1_003_100,
    "complete_mono_ns": 1_090_000,
    "gpu_start_ticks": 5_000_000_000,
    "gpu_end_ticks": 5_000_061_240,
}


def run(console: Console) -> int:
    console.rule("CommInsight demo")
    with tempfile.TemporaryDirectory(prefix="comminsight-demo-") as home:
        settings = load_settings(env={**os.environ, "COMMINSIGHT_HOME": home})
        console.print(
            f"home: {settings.home} (temporary); agent would listen on "
            f"{settings.agent_listen}; hang threshold {settings.profiler_hang_timeout_s} s"
        )

        table = Table(title=f"{len(PROTOCOLS)} protocols")
        for column in ("protocol", "kind", "producer → consumers"):
            table.add_column(column)
        for p in PROTOCOLS:
            table.add_row(
                f"{p.id} v{p.version}", p.kind, f"{p.producer} → {', '.join(p.consumers)}"
            )
        console.print(table)

        slot = np.zeros(1, dtype=shm_v1.OP_SLOT_DTYPE)
        for name, value in SAMPLE_OP.items():
            slot[name] = value
        raw = slot.tobytes()
        ffi = shm_v1.ffi()
        buffer = bytearray(raw)  # must outlive c_slot, which points into it
        c_slot = ffi.cast("ci_shm_op_slot_v1_t *", ffi.from_buffer(buffer))
        mismatched = [n for n, v in SAMPLE_OP.items() if getattr(c_slot, n) != int(v)]
        duration_ns = c_slot.gpu_end_ticks - c_slot.gpu_start_ticks
        algbw = c_slot.bytes / duration_ns  # bytes/ns == GB/s
        busbw = algbw * 2 * (c_slot.nranks - 1) / c_slot.nranks  # NCCL's all-reduce factor
        console.print(
            f"op record: {len(raw)} bytes (shm v1 op_slot); written through numpy, read through "
            f"cffi: {shm_v1.FUNC_LABELS[shm_v1.Func(c_slot.func)]} seq {c_slot.op_seq}, "
            f"{c_slot.bytes >> 20} MiB, {duration_ns / 1000:.1f} µs on the GPU, "
            f"algbw {algbw:.1f} GB/s, busbw {busbw:.1f} GB/s"
        )
        if mismatched:
            console.print(f"[red]layout disagreement in {mismatched}[/red]")
            return 1
        console.print("[green]numpy and cffi agree on every field.[/green]")
    console.print(
        "Not built yet, so not run: the Profiler plugin, the simulated NCCL, the Agent "
        "(API, metrics, hang diagnosis), the Semantic Engine and Inject."
    )
    return 0
