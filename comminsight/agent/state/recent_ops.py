"""The bounded in-memory window of completed ops behind /api/v1/ops/recent.

Ingest hands every batch here as raw shm v1 op slots (numpy); only the last
COMMINSIGHT_AGENT_RECENT_OPS Coll/P2P records of each process are kept, still raw, so keeping
the window costs a slice per batch and no per-record Python. Records are decoded into the
API's OpRecord only when someone asks, newest first. A process's window outlives its retired
SHM file (the last ones are often what an operator wants after a crash), up to
RETIRED_WINDOWS processes.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from comminsight.agent.state.snapshot import InflightOp
from comminsight.shm_reader import (
    ROOTED_FUNCS,
    enum_label,
    label_or_none,
    rank_or_none,
    record_text,
)
from comminsight.slot_timing import bus_bandwidth_gbs, durations_s
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.agent_master_api_v1 import OpKind, OpRecord, TimingSource

RETIRED_WINDOWS = 256
_FUNC_NAME = re.compile(r"[^A-Za-z0-9]")


@dataclass(frozen=True)
class Origin:
    """The process the records of one window came from."""

    pid: int
    global_rank: int | None
    node_name: str
    start_real_ns: int
    start_mono_ns: int

    def to_real_ns(self, mono_ns: int) -> int:
        return max(0, self.start_real_ns + (mono_ns - self.start_mono_ns))


class RecentOps:
    def __init__(self, per_process: int) -> None:
        self.per_process = per_process
        # (pid, start_real_ns) -> (origin, records); a recycled pid is another process
        self._windows: OrderedDict[tuple[int, int], tuple[Origin, np.ndarray]] = OrderedDict()

    def add(self, origin: Origin, ops: np.ndarray) -> None:
        """Keep the newest of a process's completed ops (Coll/P2P records, ring order)."""
        if self.per_process == 0 or not len(ops):
            return
        ops = ops[-self.per_process :]
        key = (origin.pid, origin.start_real_ns)
        _, old = self._windows.get(key, (origin, ops[:0]))
        keep = self.per_process - len(ops)
        window = np.concatenate((old[len(old) - keep :] if keep else old[:0], ops))
        self._windows[key] = (origin, window)

    def set_live(self, keys: set[tuple[int, int]]) -> None:
        """The processes still mapped; windows of the others are kept up to RETIRED_WINDOWS."""
        retired = [k for k in self._windows if k not in keys]
        for key in retired[: max(0, len(retired) - RETIRED_WINDOWS)]:
            del self._windows[key]

    def query(
        self,
        *,
        comm_id: int | None = None,
        global_rank: int | None = None,
        func: str | None = None,
        limit: int = 100,
        process: Callable[[int, int], bool] | None = None,
    ) -> list[OpRecord]:
        """The newest `limit` ops matching every given filter, newest first; `process`
        (pid, start_real_ns) -> whether that process's ops may be shown."""
        func_code = _func_code(func) if func is not None else None
        if func_code is False:
            return []  # no NCCL function by that name: nothing can match
        picked: list[tuple[int, Origin, np.ndarray]] = []
        for origin, window in self._windows.values():
            if global_rank is not None and origin.global_rank != global_rank:
                continue
            if process is not None and not process(origin.pid, origin.start_real_ns):
                continue
            mask = np.ones(len(window), bool)
            if comm_id is not None:
                mask &= window["comm_id"] == np.uint64(comm_id)
            if func_code is not None:
                mask &= window["func"] == func_code
            # Ring order is the process's publication order; a GPU completion time converted
            # to host time can be a little out of it, so rows sort by the running maximum,
            # which keeps each process's order and interleaves processes by time (they
            # share the node's CLOCK_MONOTONIC).
            order = np.maximum.accumulate(window["complete_mono_ns"])[mask][-limit:]
            rows = window[mask][-limit:]
            picked.extend(zip(order[::-1].tolist(), [origin] * len(rows), rows[::-1], strict=True))
        picked.sort(key=lambda item: item[0], reverse=True)
        return [op_record(row, origin) for _, origin, row in picked[:limit]]

    def collectives(self, pid: int, start_real_ns: int, comm_id: int) -> dict[int, InflightOp]:
        """A process's completed collectives on one communicator still in its window, by the
        communicator's op index, as InflightOps (whose signature() ranks must agree on)."""
        entry = self._windows.get((pid, start_real_ns))
        if entry is None:
            return {}
        window = entry[1]
        rows = window[
            (window["comm_id"] == np.uint64(comm_id)) & (window["kind"] == shm_v1.RecordKind.COLL)
        ]
        out = {}
        for row in rows:
            func = enum_label(shm_v1.FUNC_LABELS, shm_v1.Func, int(row["func"]))
            out[int(row["comm_op_index"])] = InflightOp(
                kind=shm_v1.RecordKind.COLL,
                func=func,
                datatype=enum_label(shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(row["datatype"])),
                seq=int(row["op_seq"]),
                op_index=int(row["comm_op_index"]),
                count=int(row["count"]),
                bytes=int(row["bytes"]),
                peer=rank_or_none(int(row["peer"])) if func in ROOTED_FUNCS else None,
                n_channels=int(row["n_channels"]),
                channels_started=int(row["channels_started"]),
                channels_stopped=int(row["kernel_ch_count"]),
                enqueue_mono_ns=int(row["host_start_mono_ns"]),
                start_mono_ns=None,
            )
        return out


def _func_code(name: str) -> int | bool:
    for code, label in shm_v1.FUNC_LABELS.items():
        if label == name and code != shm_v1.Func.UNKNOWN:
            return int(code)
    return False


def op_record(row: np.void, origin: Origin) -> OpRecord:
    """One op slot as the API's OpRecord."""
    one = np.array([row], dtype=row.dtype)
    func = int(row["func"])
    timing = int(row["timing_source"])
    completed = int(row["complete_mono_ns"])
    # a call swept before the host saw it stop has no span (slot_timing): none, not 0
    swept = timing == shm_v1.TimingSource.COLLECTIVE_CPU and int(row["host_stop_mono_ns"]) == 0
    has_timing = timing != shm_v1.TimingSource.NONE and completed > 0 and not swept
    seconds = float(durations_s(one)[0]) if has_timing else None
    gpu = timing == shm_v1.TimingSource.KERNEL_GPU and int(row["gpu_end_ticks"]) > 0
    peer = rank_or_none(int(row["peer"]))
    is_coll = int(row["kind"]) == shm_v1.RecordKind.COLL
    flags = int(row["flags"])
    func_name = _func_name(row, func)
    algbw = busbw = None
    if seconds:
        algbw = int(row["bytes"]) / 1e9 / seconds
        busbw = float(bus_bandwidth_gbs(one, np.array([seconds]))[0])
    return OpRecord(
        comm_id=f"{int(row['comm_id']):016x}",
        comm_rank=max(0, int(row["rank"])),
        global_rank=origin.global_rank,
        node_name=origin.node_name,
        pid=origin.pid,
        seq=int(row["op_seq"]),
        kind=OpKind.coll if is_coll else OpKind.p2p,
        func=func_name,
        datatype=enum_label(shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(row["datatype"])),
        count=int(row["count"]),
        size_bytes=int(row["bytes"]),
        root=peer if is_coll and func_name in ROOTED_FUNCS else None,
        peer=None if is_coll else peer,
        algo=label_or_none(shm_v1.ALGO_LABELS, shm_v1.Algo, int(row["algo"])),
        proto=label_or_none(shm_v1.PROTO_LABELS, shm_v1.Proto, int(row["proto"])),
        n_channels=int(row["n_channels"]),
        n_warps=int(row["n_warps"]),
        stream_id=int(row["stream"]) or None,
        graph_captured=bool(flags & shm_v1.SlotFlags.GRAPH_CAPTURED),
        forced_complete=bool(flags & shm_v1.SlotFlags.FORCED_COMPLETE),
        enqueued_mono_ns=int(row["host_start_mono_ns"]),
        completed_mono_ns=completed if has_timing else None,
        completed_real_ns=origin.to_real_ns(completed) if has_timing else None,
        gpu_start_ns=int(row["gpu_start_ticks"]) if gpu else None,
        gpu_end_ns=int(row["gpu_end_ticks"]) if gpu else None,
        timing_source=TimingSource(
            enum_label(shm_v1.TIMING_SOURCE_LABELS, shm_v1.TimingSource, timing)
        ),
        duration_us=seconds * 1e6 if seconds is not None else None,
        algbw_gbs=algbw,
        busbw_gbs=busbw,
        step=None,  # the Semantic Engine assigns steps (its own issue)
        user_tag=int(row["user_tag"]) or None,
        kernel_variant=(record_text(row["kernel_variant"]) or None) if is_coll else None,
        sym_coll=is_coll and bool(flags & shm_v1.SlotFlags.SYM_COLL),
    )


def _func_name(row: np.void, func: int) -> str:
    if func != shm_v1.Func.UNKNOWN:
        return enum_label(shm_v1.FUNC_LABELS, shm_v1.Func, func)
    # An NCCL function this build does not know: its own name, cut to the API's FuncName.
    name = _FUNC_NAME.sub("", record_text(row["raw_name"]))[:32]
    return name if name[:1].isalpha() else "Unknown"
