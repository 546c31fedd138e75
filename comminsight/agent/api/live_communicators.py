"""A node's communicators (`/communicators`, `/communicators/{comm_id}`) from its live SHM rows.

Every other answer of a node is rendered from the agent-master-slave rows (views), as a
master's are. Communicators stay here until CommunicatorMember carries the rank's GPU UUID
(shm v1 comm_entry.cuda_uuid): CommRank.device_uuid is the rank's device, which differs from
the process's (ProcessInfo.device_uuid, its first communicator's) for a process that drives
several GPUs. With that field, this module goes, and a node answers these through
views.communicators too.

Each function reads the state of one moment (`LiveNode`: the mapped SHM regions, read once
per request) and returns agent-master-api v1 models; nothing here writes anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from comminsight.agent.core.inject_names import InjectNames
from comminsight.agent.core.process_labels import uuid_text
from comminsight.agent.core.producer_clock import on_reader_clock
from comminsight.agent.core.producers import Producer
from comminsight.agent.core.snapshot import (
    NO_FLAGGED_SEQ,
    ProcessView,
    inflight_op,
    process_view,
    rank_or_none,
)
from comminsight.shm_reader import ROOTED_FUNCS, label_or_none, record_text
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.agent_master_api_v1 import (
    CommProgress,
    CommRank,
    Communicator,
    CommunicatorState,
    InflightOp,
    InflightState,
    NameSource,
    OpKind,
    SeqProgress,
)

MS = 1_000_000


@dataclass(frozen=True)
class LiveRow:
    """One non-free communicator row of one process."""

    row: np.void
    process: ProcessView
    producer: Producer

    def mono(self, name: str) -> int:
        """The row's time field `name` on this Agent's clock (0: never)."""
        return on_reader_clock(int(self.row[name]), self.producer.region.mono_offset_ns)


@dataclass(frozen=True)
class LiveNode:
    node_name: str
    now_mono_ns: int
    now_real_ns: int
    rows: list[LiveRow]
    inject_names: InjectNames | None = None  # names Inject set (name_source INJECT)


def read_live_node(
    producers: Iterable[Producer],
    node_name: str,
    stale_ns: int,
    now_mono_ns: int,
    now_real_ns: int,
    inject_names: InjectNames | None = None,
) -> LiveNode:
    rows = []
    for producer in producers:
        view = _process_view(producer, now_mono_ns, stale_ns)
        for row in producer.region.comm_entries():
            if int(row["state"]) != shm_v1.CommState.FREE:
                rows.append(LiveRow(row, view, producer))
    return LiveNode(node_name, now_mono_ns, now_real_ns, rows, inject_names)


def _process_view(producer: Producer, now_mono_ns: int, stale_ns: int) -> ProcessView:
    # alive as the rows have it (node_state.process_info): this process, not any of its pid
    return process_view(producer.region, now_mono_ns, stale_ns, lambda _pid: producer.alive())


# ---- progress and in-flight ops -------------------------------------------------------


def _seq_progress(
    enqueued: tuple[int, int], started: tuple[int, int], completed: tuple[int, int]
) -> SeqProgress:
    """Each stage as (ops that reached it, when the last one did); op index = count - 1."""

    def seq(n: int) -> int | None:
        return n - 1 if n > 0 else None

    (started, started_at), (completed, completed_at) = started, completed
    return SeqProgress(
        last_enqueued_seq=seq(enqueued[0]),
        last_enqueued_mono_ns=enqueued[1] or None,
        last_gpu_started_seq=seq(started),
        last_gpu_started_mono_ns=started_at or None,
        last_completed_seq=seq(completed),
        last_completed_mono_ns=completed_at or None,
    )


def inflight_count(row: np.void) -> int:
    """Ops enqueued and not completed, from the counters that move with every op (the row's
    inflight_count is refreshed only at heartbeats)."""
    colls = int(row["coll_enqueued"]) - int(row["coll_completed"])
    p2ps = int(row["p2p_enqueued"]) - int(row["p2p_completed"])
    return max(0, colls) + max(0, p2ps)


def inflight_model(live: LiveRow, node: LiveNode) -> InflightOp | None:
    row, proc = live.row, live.process
    op = inflight_op(row, live.producer.region.mono_offset_ns)
    if op is None:
        return None
    is_coll = op.is_coll
    flagged = int(row["hang_flagged_seq"])
    started = op.channels_started > 0 or op.start_mono_ns is not None
    return InflightOp(
        comm_id=f"{int(row['comm_id']):016x}",
        comm_rank=max(0, int(row["rank"])),
        global_rank=proc.global_rank,
        node_name=node.node_name,
        pid=max(1, proc.pid),
        seq=op.seq,
        kind=OpKind.coll if is_coll else OpKind.p2p,
        func=op.func,
        datatype=op.datatype,
        count=op.count,
        size_bytes=op.bytes,
        root=op.peer if is_coll and op.func in ROOTED_FUNCS else None,
        peer=None if is_coll else op.peer,
        algo=label_or_none(shm_v1.ALGO_LABELS, shm_v1.Algo, int(row["inflight_algo"])),
        proto=label_or_none(shm_v1.PROTO_LABELS, shm_v1.Proto, int(row["inflight_proto"])),
        n_channels=op.n_channels or None,
        channels_started=op.channels_started,
        channels_completed=op.channels_stopped,
        state=InflightState.gpu_started if started else InflightState.enqueued,
        inflight_count=max(1, inflight_count(row)),
        enqueued_mono_ns=op.enqueue_mono_ns,
        enqueued_real_ns=proc.to_real_ns(op.enqueue_mono_ns),
        gpu_started_mono_ns=op.start_mono_ns,
        age_ms=max(0, node.now_mono_ns - op.enqueue_mono_ns) // MS,
        hang_flagged=flagged != NO_FLAGGED_SEQ and flagged == op.op_index,
    )


def comm_progress(live: LiveRow, node: LiveNode) -> CommProgress:
    r = live.row
    coll = _seq_progress(
        (int(r["coll_enqueued"]), live.mono("coll_enqueued_mono_ns")),
        (int(r["coll_started"]), live.mono("coll_started_mono_ns")),
        (int(r["coll_completed"]), live.mono("coll_completed_mono_ns")),
    )
    p2p = _seq_progress(
        (int(r["p2p_enqueued"]), live.mono("p2p_enqueued_mono_ns")),
        (int(r["p2p_started"]), live.mono("p2p_started_mono_ns")),
        (int(r["p2p_completed"]), live.mono("p2p_completed_mono_ns")),
    )
    last = max(
        live.mono(f)
        for f in (
            "coll_enqueued_mono_ns",
            "coll_started_mono_ns",
            "coll_completed_mono_ns",
            "p2p_enqueued_mono_ns",
            "p2p_started_mono_ns",
            "p2p_completed_mono_ns",
        )
    )
    return CommProgress(
        collectives=coll,
        p2p=p2p,
        last_progress_real_ns=live.process.to_real_ns(last) if last else None,
        last_progress_age_ms=max(0, node.now_mono_ns - last) // MS if last else None,
        inflight_count=inflight_count(r),
        oldest_inflight=inflight_model(live, node),
    )


# ---- communicators --------------------------------------------------------------------


def communicators(node: LiveNode, open_reports: dict[str, list[str]], full: bool) -> list:
    """Every communicator a mapped process has a row for, by comm_id; open_reports maps a
    comm_id to its open hang report ids."""
    by_id: dict[int, list[LiveRow]] = {}
    for live in node.rows:
        by_id.setdefault(int(live.row["comm_id"]), []).append(live)
    return [
        communicator(rows, node, open_reports.get(f"{cid:016x}", []), full)
        for cid, rows in sorted(by_id.items())
    ]


def communicator(
    rows: list[LiveRow], node: LiveNode, report_ids: list[str], full: bool
) -> Communicator:
    rows = sorted(rows, key=lambda live: int(live.row["rank"]))
    first = rows[0].row
    named = next((live for live in rows if record_text(live.row["name"])), None)
    finalized = all(int(live.row["state"]) == shm_v1.CommState.FINALIZED for live in rows)
    nranks = max(1, int(first["nranks"]))
    ranks_seen = sorted({int(live.row["rank"]) for live in rows if int(live.row["rank"]) >= 0})
    inflight = [op for live in rows if (op := inflight_model(live, node)) is not None]
    finalize_times = [
        live.process.to_real_ns(live.mono("finalize_mono_ns"))
        for live in rows
        if int(live.row["finalize_mono_ns"])
    ]
    nnodes = int(first["nnodes"])
    return Communicator(
        comm_id=f"{int(first['comm_id']):016x}",
        name=record_text(named.row["name"])[:1024] if named is not None else None,
        name_source=_name_source(row_name_source(named, node.inject_names) if named else 0),
        nranks=nranks,
        nnodes=nnodes if nnodes > 0 else None,
        state=CommunicatorState.finalized if finalized else CommunicatorState.active,
        ranks_seen=ranks_seen,
        complete=set(ranks_seen) >= set(range(nranks)),
        nodes=[node.node_name],
        created_real_ns=min(int(live.row["init_real_ns"]) for live in rows),
        finalized_real_ns=max(finalize_times) if finalized and finalize_times else None,
        # coll/p2p_completed move with every completion; ops_total only at heartbeats
        ops_completed_total=sum(
            int(live.row["coll_completed"]) + int(live.row["p2p_completed"]) for live in rows
        ),
        bytes_completed_total=sum(int(live.row["bytes_total"]) for live in rows),
        ranks_inflight=len({op.comm_rank for op in inflight}),
        oldest_inflight_age_ms=max((op.age_ms for op in inflight), default=None),
        open_hang_report_ids=sorted(report_ids),
        ranks=[comm_rank(live, node) for live in rows] if full else None,
    )


def row_name_source(live: LiveRow, inject_names: InjectNames | None) -> int:
    code = int(live.row["name_source"])
    if inject_names is None:
        return code
    name = record_text(live.row["name"])
    return inject_names.name_source(
        code, live.process.host, live.process.pid, name, live.producer.uid
    )


def _name_source(code: int) -> NameSource:
    try:
        return NameSource(shm_v1.NameSource(code).name.lower())
    except ValueError:  # a code a newer Profiler may send: where the name came from is unknown
        return NameSource.none


def comm_rank(live: LiveRow, node: LiveNode) -> CommRank:
    r, proc = live.row, live.process
    device = int(r["cuda_device"])
    return CommRank(
        comm_rank=max(0, int(r["rank"])),
        global_rank=proc.global_rank,
        local_rank=rank_or_none(int(r["local_rank"])),
        node_name=node.node_name,
        pid=max(1, proc.pid),
        cuda_device=device if device >= 0 else None,
        device_uuid=uuid_text(r["cuda_uuid"]) or None,
        alive=proc.alive,
        progress=comm_progress(live, node),
    )
