"""The op lines of inspector_logs as tests compare them, whichever form the writer used.

An op line is written in the compact form (kinds c and p, the default) or the Inspector form
(kinds coll and p2p, header + coll_perf / p2p_perf + ci); both carry the same facts under
other names. Tests that check what was logged read them through `logged_op`, so the same
assertions hold for either form (COMMINSIGHT_PROFILER_LOG_FORMAT).
"""

from __future__ import annotations

from dataclasses import dataclass

from msgspec import UNSET

from comminsight.log_segments import ring_seq_of as ring_seq  # noqa: F401 (for the tests)
from comminsight_gen.models.inspector_log_v1 import (
    CiColl,
    CiCollCompact,
    CiP2p,
    CiP2pCompact,
    InspectorLogRecord,
)

COLL_KINDS = (CiColl, CiCollCompact)
P2P_KINDS = (CiP2p, CiP2pCompact)
OP_KINDS = COLL_KINDS + P2P_KINDS


@dataclass(frozen=True)
class LoggedOp:
    coll: bool
    comm_id: int
    comm_name: str | None
    rank: int
    n_ranks: int
    func: str
    seq: int  # coll_sn, or the P2P counter
    size: int
    count: int
    peer: int | None  # p2p peer or rooted collective's root
    timing_source: str
    busbw: float | None
    ring_seq: int
    op_index: int | None
    host_start_mono_ns: int
    host_stop_mono_ns: int
    host_complete_mono_ns: int | None
    gpu_start_globaltimer_ns: int | None
    gpu_stop_globaltimer_ns: int | None
    group_id: int | None
    channels_completed: int
    forced_complete: bool


def _opt(value):
    return None if value is UNSET else value


def _value(v):
    return getattr(v, "value", v)


def is_op(record: InspectorLogRecord) -> bool:
    return isinstance(record.ci, OP_KINDS)


def is_coll(record: InspectorLogRecord) -> bool:
    return isinstance(record.ci, COLL_KINDS)


def logged_op(record: InspectorLogRecord) -> LoggedOp:
    """The facts of an op line (either form)."""
    ci = record.ci
    if isinstance(ci, (CiCollCompact, CiP2pCompact)):
        coll = isinstance(ci, CiCollCompact)
        g0 = _opt(ci.g0)
        return LoggedOp(
            coll=coll,
            comm_id=int(ci.c, 16),
            comm_name=_opt(ci.cn),
            rank=ci.r,
            n_ranks=ci.n,
            func=ci.f,
            seq=ci.s,
            size=ci.b,
            count=ci.e,
            peer=_opt(ci.rt) if coll else _opt(ci.pe),
            timing_source=_value(ci.ts),
            busbw=_opt(ci.bw),
            ring_seq=ci.q,
            op_index=ci.i,
            host_start_mono_ns=ci.h,
            host_stop_mono_ns=ci.h + ci.hs,
            host_complete_mono_ns=None if ci.hc is UNSET else ci.h + ci.hc,
            gpu_start_globaltimer_ns=g0,
            gpu_stop_globaltimer_ns=None if g0 is None else g0 + ci.gd,
            group_id=_opt(ci.gr),
            channels_completed=ci.cc,
            forced_complete=ci.fc is True,
        )
    coll = isinstance(ci, CiColl)
    h = record.header
    if coll:
        p = record.coll_perf
        func, seq, size, peer = p.coll, p.coll_sn, p.coll_msg_size_bytes, _opt(ci.root)
        timing, busbw = p.coll_timing_source, p.coll_busbw_gbs
    else:
        p = record.p2p_perf
        func, seq, size, peer = p.p2p, p.p2p_sn, p.p2p_msg_size_bytes, p.p2p_peer
        timing, busbw = p.p2p_timing_source, p.p2p_busbw_gbs
    return LoggedOp(
        coll=coll,
        comm_id=int(h.id, 16),
        comm_name=_opt(h.comm_name),
        rank=h.rank,
        n_ranks=h.n_ranks,
        func=func,
        seq=seq,
        size=size,
        count=ci.count,
        peer=peer,
        timing_source=_value(timing),
        busbw=busbw if isinstance(busbw, float | int) else None,
        ring_seq=ci.ring_seq,
        op_index=_opt(ci.op_index),
        host_start_mono_ns=ci.host_start_mono_ns,
        host_stop_mono_ns=ci.host_stop_mono_ns,
        host_complete_mono_ns=_opt(ci.host_complete_mono_ns),
        gpu_start_globaltimer_ns=_opt(ci.gpu_start_globaltimer_ns),
        gpu_stop_globaltimer_ns=_opt(ci.gpu_stop_globaltimer_ns),
        group_id=_opt(ci.group_id),
        channels_completed=_opt(ci.channels_completed) or 0,
        forced_complete=ci.forced_complete is True,
    )


def logged_ops(records, coll_only: bool = False) -> list[LoggedOp]:
    """The op lines among `records` (only the collectives with `coll_only`), as LoggedOps."""
    kinds = COLL_KINDS if coll_only else OP_KINDS
    return [logged_op(r) for r in records if isinstance(r.ci, kinds)]
