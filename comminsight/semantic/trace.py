"""Chrome / Perfetto trace of recovered Steps and their ops (the JSON trace event format).

One process per rank ("rank N (host)"), one thread (track) per communicator the rank used —
PyTorch runs each communicator's ops on its own stream, so a communicator's track is its
stream's — plus a "steps" track whose slices are the Steps. Times are microseconds of the
ranks' wall clock (CLOCK_REALTIME), so ranks line up as well as their clocks do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from comminsight.durable_files import write_atomically
from comminsight.semantic.ops import EngineOp
from comminsight.semantic.step_builder import GpuIdentity
from comminsight_gen.models.step_summary_v1 import StepSummary

STEPS_TID = 0


def _us(ns: int) -> float:
    return ns / 1000.0


def gpu_events(gpu: GpuIdentity, ops: Iterable[EngineOp], steps: list[StepSummary]) -> list:
    pid = gpu.global_rank
    events: list[dict] = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": pid,
            "args": {"name": f"rank {pid} ({gpu.host})"},
        },
        {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": STEPS_TID, "args": {"name": "steps"}},
    ]
    tids: dict[str, int] = {}
    for op in ops:
        tid = tids.get(op.comm_id)
        if tid is None:
            tid = tids[op.comm_id] = len(tids) + 1
            label = f"{op.comm_name or 'comm'} {op.comm_id}"
            events.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}}
            )
        events.append(
            {
                "ph": "X",
                "cat": op.kind,
                "name": op.func,
                "pid": pid,
                "tid": tid,
                # the op's span on the host clock, as Steps are placed: its start is clamped
                # to the host issue time, so the span can be shorter than the kernel time
                "ts": _us(op.start_real_ns),
                "dur": _us(max(0, op.end_real_ns - op.start_real_ns)),
                "args": {
                    "duration_us": _us(op.duration_ns),
                    "seq": op.seq,
                    "bytes": op.size_bytes,
                    "busbw_gbs": round(op.busbw_gbs, 3),
                    "peer": op.peer,
                },
            }
        )
    for s in steps:
        events.append(
            {
                "ph": "X",
                "cat": "step",
                "name": f"step {s.step_index}" + (" (warm-up)" if s.warmup else ""),
                "pid": pid,
                "tid": STEPS_TID,
                "ts": _us(s.start_real_ns),
                "dur": _us(s.duration_ns),
                "args": {
                    "ops": s.op_count,
                    "bytes": s.total_bytes,
                    "busbw_gbs": round(s.busbw_gbs, 3),
                    "anomalies": [a.description for a in s.anomalies],
                    "recovery": s.recovery.template_name
                    if s.recovery.template_name
                    else f"period of {s.recovery.period_ops} ops",
                },
            }
        )
    return events


def write_trace(path: str | Path, events: list[dict]) -> None:
    body = {"traceEvents": events, "displayTimeUnit": "ms"}
    write_atomically(Path(path), json.dumps(body, separators=(",", ":")).encode())
