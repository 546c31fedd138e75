"""Live input: op slots (shm v1) from the Agent's ingest, as the engine's `EngineOp`s.

The Agent hands each process's completed Coll/P2P records in ring order, with what its
communicator table says about the communicators (name, nodes), which a slot does not repeat.
Durations and bus bandwidth are computed for the whole batch at once (the metrics' formulas).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from comminsight.semantic.ops import EngineOp
from comminsight.shm_reader import enum_label
from comminsight.slot_timing import bus_bandwidth_gbs, durations_s
from comminsight_gen.abi import shm_v1

_FUNC_LABELS = {int(k): v for k, v in shm_v1.FUNC_LABELS.items()}


@dataclass(frozen=True)
class CommInfo:
    name: str | None
    nnodes: int | None


@dataclass(frozen=True)
class RingPosition:
    """Where an op is in its producer's ring (semantic-engine ShmPosition)."""

    ring_seq: int

    def order(self) -> tuple[int, int]:
        return (0, self.ring_seq)

    def after(self) -> RingPosition:
        return RingPosition(self.ring_seq + 1)

    def resume_here(self) -> RingPosition:
        return self


def engine_ops(
    records: np.ndarray, comms: dict[int, CommInfo], start_real_ns: int, start_mono_ns: int
) -> list[EngineOp]:
    """The ops of a batch of Coll/P2P slots of one process."""
    if not len(records):
        return []
    seconds = durations_s(records)
    busbw = bus_bandwidth_gbs(records, seconds)
    duration = np.maximum(np.rint(seconds * 1e9), 0).astype(np.int64)
    to_real = start_real_ns - start_mono_ns
    out = []
    for r, dur, bw in zip(records.tolist(), duration.tolist(), busbw.tolist(), strict=True):
        # tolist() gives tuples in dtype field order: index by name once, below
        out.append(_op(r, dur, bw, comms, to_real))
    return out


_F = {name: i for i, name in enumerate(shm_v1.OP_SLOT_DTYPE.names)}


def _op(r: tuple, duration: int, busbw: float, comms: dict, to_real: int) -> EngineOp:
    comm_id = r[_F["comm_id"]]
    info = comms.get(comm_id)
    complete = r[_F["complete_mono_ns"]]
    issue = r[_F["host_start_mono_ns"]]
    start = max(issue, complete - duration)
    is_coll = r[_F["kind"]] == shm_v1.RecordKind.COLL
    peer = r[_F["peer"]]
    func = r[_F["func"]]
    return EngineOp(
        kind="coll" if is_coll else "p2p",
        func=_FUNC_LABELS.get(func) or enum_label(shm_v1.FUNC_LABELS, shm_v1.Func, func),
        comm_id=f"{comm_id:016x}",
        comm_name=info.name if info is not None else None,
        comm_nranks=max(1, r[_F["nranks"]]),
        comm_nnodes=info.nnodes if info is not None else None,
        comm_rank=max(0, r[_F["rank"]]),
        peer=None if is_coll or peer == shm_v1.NO_RANK else peer,
        seq=r[_F["op_seq"]],
        size_bytes=r[_F["bytes"]],
        issue_ns=issue,
        start_ns=start,
        end_ns=complete,
        start_real_ns=max(0, start + to_real),
        end_real_ns=max(0, complete + to_real),
        start_mono_ns=start,
        end_mono_ns=complete,
        duration_ns=duration,
        busbw_gbs=busbw,
        ring_seq=r[_F["seq"]],
        position=RingPosition(r[_F["seq"]]),
    )
