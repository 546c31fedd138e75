"""Live input: op slots (shm v1) from the Agent's ingest, as the engine's `OpBatch`es.

The Agent hands each process's completed Coll/P2P records in ring order, with what its
communicator table says about the communicators (name, nodes), which a slot does not repeat.
Durations and bus bandwidth are computed for the whole batch at once: the bandwidth as the log
writer and the metrics take it (slot_timing), the duration as the engine's log readers do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from comminsight.semantic.native import NONE
from comminsight.semantic.op_batch import Comm, CommTable, OpBatch, SegmentTable, func_code
from comminsight.semantic.op_times import host_start
from comminsight.shm_reader import enum_label
from comminsight.slot_timing import bus_bandwidth_gbs, durations_ns
from comminsight_gen.abi import shm_v1

_FUNC_LABELS = {int(k): v for k, v in shm_v1.FUNC_LABELS.items()}
# Up to this many ops, a batch's functions and communicators are told apart in Python: an
# Agent's pass often hands a GPU a few ops, and np.unique costs tens of microseconds a call
SMALL_BATCH = 256
_KERNEL_GPU = int(shm_v1.TimingSource.KERNEL_GPU)
_INT64_MAX = (1 << 63) - 1  # a tag above it is one NCCL reserves: none, as logs read it


@dataclass(frozen=True)
class CommInfo:
    name: str | None
    nnodes: int | None


def engine_batch(
    records: np.ndarray,
    comms: dict[int, CommInfo],
    start_real_ns: int,
    start_mono_ns: int,
    table: CommTable,
    segments: SegmentTable,
) -> OpBatch:
    """The ops of a batch of Coll/P2P slots of one process (`table`, `segments`: the GPU's,
    shared by all its batches)."""
    n = len(records)
    if not n:
        return OpBatch.empty(table, segments)
    span = durations_ns(records)
    busbw = bus_bandwidth_gbs(records, span.astype(np.float64) / 1e9)  # as the log writer's
    to_real = start_real_ns - start_mono_ns
    complete = records["complete_mono_ns"].astype(np.int64)
    issue = records["host_start_mono_ns"].astype(np.int64)
    # the engine's duration, as its log readers take it from a compact line (op_times): the
    # GPU span where the kernel was timed, else from the enqueue to the completion seen
    duration = np.where(
        records["timing_source"] == _KERNEL_GPU,
        span.astype(np.int64),
        np.maximum(complete - issue, 0),
    )
    # the GPU span where the kernel was timed: the slot has no GPU-to-host clock offset to place it
    start = host_start(issue, complete, duration)
    is_coll = records["kind"] == shm_v1.RecordKind.COLL
    peer = records["peer"].astype(np.int64)
    ring = records["seq"].astype(np.int64)
    cols = {
        "kind": np.where(is_coll, 0, 1).astype(np.int64),
        "func": _func_codes(records["func"]),
        "comm": _comm_indices(records, comms, table),
        "peer": np.where(is_coll | (peer == shm_v1.NO_RANK), NONE, peer),
        "seq": records["op_seq"].astype(np.int64),
        "size": records["bytes"].astype(np.int64),
        "issue": issue,
        "start": start,
        "end": complete,
        "start_real": np.maximum(0, start + to_real),
        "end_real": np.maximum(0, complete + to_real),
        "end_mono": complete,
        "duration": duration,
        "busbw": np.ascontiguousarray(busbw, np.float64),
        "ring_seq": ring,
        "lost_before": np.zeros(n, np.int64),
        "pos_seg": np.full(n, -1, np.int64),
        "pos_offset": ring,
        "pos_record": np.zeros(n, np.int64),
        "pos_end": np.zeros(n, np.int64),
        "order": ring,
        "arrival": np.zeros(n, np.int64),
        "group_id": records["group_id"].astype(np.int64),
        "datatype": records["datatype"].astype(np.int64),
        # a uint64 in the ring: NCCL's reserved tags (the top bit) are none here, as in logs
        "user_tag": np.where(
            records["user_tag"] > np.uint64(_INT64_MAX), np.uint64(0), records["user_tag"]
        ).astype(np.int64),
    }
    return OpBatch(cols, table, segments)


def _func_codes(funcs: np.ndarray) -> np.ndarray:
    if len(funcs) <= SMALL_BATCH:
        values = funcs.tolist()
        # registered in sorted order, as np.unique gives them (func_code numbers them)
        codes = {v: _func_code(v) for v in sorted(set(values))}
        return np.array([codes[v] for v in values], np.int64)
    values, inverse = np.unique(funcs, return_inverse=True)
    codes = [_func_code(int(v)) for v in values]
    return np.array(codes, np.int64)[inverse.reshape(-1)]


def _func_code(value: int) -> int:
    label = _FUNC_LABELS.get(value) or enum_label(shm_v1.FUNC_LABELS, shm_v1.Func, value)
    return func_code(label)


def _comm_indices(records: np.ndarray, comms: dict[int, CommInfo], table: CommTable):
    """Each op's communicator (as a CommTable index): by comm id, size and rank. New ones
    join the table in the order of their (id, size, rank): the same whatever the batch size."""
    ids = records["comm_id"].astype(np.uint64).view(np.int64)
    nranks = records["nranks"].astype(np.int64)
    ranks = records["rank"].astype(np.int64)
    if len(records) <= SMALL_BATCH:
        keys = list(zip(ids.tolist(), nranks.tolist(), ranks.tolist(), strict=True))
        index = {k: _comm_index(k, comms, table) for k in sorted(set(keys))}
        return np.array([index[k] for k in keys], np.int64)
    distinct, inverse = np.unique(
        np.stack((ids, nranks, ranks), axis=1), axis=0, return_inverse=True
    )
    indices = [_comm_index(tuple(k), comms, table) for k in distinct.tolist()]
    return np.array(indices, np.int64)[inverse.reshape(-1)]


def _comm_index(key: tuple[int, int, int], comms: dict[int, CommInfo], table: CommTable) -> int:
    raw_id, nranks, rank = key
    comm_id = raw_id & 0xFFFFFFFFFFFFFFFF
    info = comms.get(comm_id)
    return table.index(
        Comm(
            f"{comm_id:016x}",
            info.name if info is not None else None,
            max(1, nranks),
            info.nnodes if info is not None else None,
            max(0, rank),
        )
    )
