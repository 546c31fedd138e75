"""A relay's reduction: the rows of every node below it folded, per communicator, into classes
of ranks in the same state (agent-master-slave RankClass).

The state is what hang diagnosis compares (RankClass's comment lists it); a class carries one
representative's real rows, with its monotonic times moved onto the relay's clock, and the
other ranks as runs. A healthy communicator is one class or a few (ranks a report apart); a
hang is the waiting class and the culprit's class of one. A relay below this one sends
classes already: each is folded in as it is, its ranks joining a class of the same state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.state.node_state import process_key
from comminsight.agent.state.rank_runs import RankRuns
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb


def _inflight_state(g: pb.CommProgress) -> tuple | None:
    if not g.HasField("oldest_inflight"):
        return None
    op = g.oldest_inflight
    return (
        op.op_index,
        op.seq,
        op.kind,
        op.func,
        op.datatype,
        op.algo,
        op.proto,
        op.peer_or_root if op.HasField("peer_or_root") else None,
        op.count,
        op.size_bytes,
        op.channels_started,
        op.channels_completed,
        op.n_channels,
        op.gpu_started_mono_ns != 0,
    )


# Ranks whose latest collective was enqueued in different spans of this length are different
# classes: a rank that joins ops this much later than its peers (the straggler verdict's
# least lag) stays apart from them, so the master still sees it join late
JOIN_SPAN_NS = 50_000_000


def state_key(
    m: pb.CommunicatorMember,
    g: pb.CommProgress,
    p: pb.ProcessInfo,
    fresh: bool,
    joined_span: int = 0,
) -> tuple:
    """Everything two ranks of a communicator must share to be one class. joined_span: when
    the latest collective was enqueued, in JOIN_SPAN_NS (on the relay's clock)."""
    c, p2p = g.collectives, g.p2p
    return (
        m.comm_id,
        joined_span,
        m.nranks,
        m.nnodes,
        m.name,
        m.name_source,
        m.finalize_mono_ns != 0,
        c.enqueued,
        c.gpu_started,
        c.completed,
        p2p.enqueued,
        p2p.gpu_started,
        p2p.completed,
        g.inflight_count,
        _inflight_state(g),
        g.hang_flagged_seq if g.HasField("hang_flagged_seq") else None,
        p.ingest_state,
        p.alive,
        fresh,
        p.job_id,
    )


@dataclass(frozen=True, slots=True)
class _Unit:
    """One rank's row, or a class a relay below sent, on its way into a class here."""

    order: tuple[int, int]  # (when its oldest op was enqueued on the relay's clock, rank)
    node: NodeRecord  # the record that sent it
    origin: str  # the node that runs it
    member: pb.CommunicatorMember
    progress: pb.CommProgress
    process: pb.ProcessInfo
    runs: RankRuns | None  # a folded class's other ranks; None for a rank's own row
    node_count: int  # nodes of a folded class (counted by the relay below)
    sums: tuple[int, int] | None  # a folded class's ops and bytes completed, all its ranks
    # (node, pid, pid_namespace): the process of a rank's own row; None for a folded class of
    # several processes
    where: tuple[str, int, int] | None
    size: int  # ranks in it

    @property
    def ops_completed(self) -> int:
        return self.sums[0] if self.sums else self.progress.ops_completed_total

    @property
    def bytes_completed(self) -> int:
        return self.sums[1] if self.sums else self.progress.bytes_completed_total


NOT_IN_FLIGHT = 1 << 64  # sorts after every enqueue time


def _unit(node: NodeRecord, origin: str, m, g, p, runs=None, node_count=0, sums=None) -> _Unit:
    since = (
        node.to_master(g.oldest_inflight.enqueued_mono_ns)
        if g.HasField("oldest_inflight")
        else NOT_IN_FLIGHT
    )
    where = (origin, *process_key(p)) if not runs else None
    size = 1 + len(runs) if runs else 1
    return _Unit((since, m.comm_rank), node, origin, m, g, p, runs, node_count, sums, where, size)


# A class this small that is not its communicator's largest is an outlier (a culprit, the
# ranks of a node that died): its processes' rows all travel as classes of one, so that the
# master sees every communicator such a process is in, as diagnosis asks of a culprit
OUTLIER_MAX = 16


def rank_classes(
    nodes: Iterable[NodeRecord], now_mono_ns: int, stale_ns: int
) -> list[pb.RankClass]:
    """The classes of every node's rows (slaves', the relay's own) and of the classes relays
    below sent, ordered by communicator and lowest rank. The representative of a class is the
    rank that waited longest in its oldest op (else the lowest rank).

    What diagnosis asks of a rank beyond its own row is kept whole, rank by rank: every row of
    a process in a small minority class (OUTLIER_MAX: a culprit, a node that died), of a
    process whose rank is the peer of a send or receive in flight, and of the process that
    represents any other minority class (whether it waits elsewhere is what tells a rank
    stuck outside NCCL from one busy in another communicator)."""
    groups: dict[tuple, list[_Unit]] = {}
    for key, unit in _units(nodes, now_mono_ns, stale_ns):
        groups.setdefault(key, []).append(unit)
    classes = list(groups.values())
    sizes = [sum(u.size for u in units) for units in classes]
    largest = _largest(classes, sizes)
    alone = {
        u.where
        for units, size in zip(classes, sizes, strict=True)
        if size <= OUTLIER_MAX and size < largest[units[0].member.comm_id]
        for u in units
        if u.where is not None
    }
    alone |= _p2p_peers(classes)
    if alone:
        classes = _split(classes, alone, set())
        sizes = [sum(u.size for u in units) for units in classes]
        largest = _largest(classes, sizes)
    # the representatives of the minority classes left: their other rows alone too
    represented = {
        (rep.where, rep.member.comm_id)
        for units, size in zip(classes, sizes, strict=True)
        if size < largest[units[0].member.comm_id]
        and (rep := min(units, key=_order)).where is not None
    }
    if represented:
        classes = _split(classes, {where for where, _ in represented}, represented)
    built = [(units, _ranks(units)) for units in classes]
    built.sort(key=lambda b: (b[0][0].member.comm_id, b[1].starts[0]))
    return [_message(units, ranks) for units, ranks in built]


def _order(u: _Unit) -> tuple[int, int]:
    return u.order


def _largest(classes: list[list[_Unit]], sizes: list[int]) -> dict[int, int]:
    """Per communicator, the size of its largest class."""
    out: dict[int, int] = {}
    for units, size in zip(classes, sizes, strict=True):
        comm = units[0].member.comm_id
        if size > out.get(comm, 0):
            out[comm] = size
    return out


def _p2p_peers(classes: list[list[_Unit]]) -> set[tuple[str, int]]:
    """(node, pid) of every rank that a rank of its communicator sends to or receives from
    with the op in flight: a pipeline wait names its peer, whose own rows must be seen."""
    wanted = {
        (u.member.comm_id, u.progress.oldest_inflight.peer_or_root)
        for units in classes
        for u in units
        if u.progress.oldest_inflight.kind == pb.OP_KIND_P2P
        and u.progress.oldest_inflight.HasField("peer_or_root")
    }
    if not wanted:  # nothing in flight between two ranks: no pass over every rank's rows
        return set()
    return {
        u.where
        for units in classes
        for u in units
        if u.where is not None and (u.member.comm_id, u.member.comm_rank) in wanted
    }


def _split(
    classes: Iterable[list[_Unit]], alone: set, kept_rows: set[tuple[tuple[str, int], int]]
) -> list[list[_Unit]]:
    """Classes less the rows of the processes in `alone`, each of which becomes a class of
    its own, but for the rows in kept_rows ((node, pid), comm_id)."""
    out: list[list[_Unit]] = []
    for units in classes:
        kept = []
        for u in units:
            if u.where in alone and (u.where, u.member.comm_id) not in kept_rows:
                out.append([u])
            else:
                kept.append(u)
        if kept:
            out.append(kept)
    return out


def _units(nodes: Iterable[NodeRecord], now_mono_ns: int, stale_ns: int):
    """(state key, unit) for every row and class below."""
    for node in nodes:
        rows = node.rows
        for key, m in rows.members.items():
            g = rows.progress.get(key)
            p = rows.processes.get(process_key(m))
            if g is None or p is None or m.comm_rank >= m.nranks:
                continue  # a rank outside its communicator has no place in a rank set
            fresh = now_mono_ns - node.to_master(p.heartbeat_mono_ns) <= stale_ns
            span = node.to_master(g.collectives.enqueued_mono_ns) // JOIN_SPAN_NS
            yield state_key(m, g, p, fresh, span), _unit(node, node.name, m, g, p)
        for rc, runs in zip(node.classes, node.class_runs, strict=True):
            fresh = now_mono_ns - node.to_master(rc.process.heartbeat_mono_ns) <= stale_ns
            sums = (rc.ops_completed_sum, rc.bytes_completed_sum)
            unit = _unit(
                node, rc.node_name, rc.member, rc.progress, rc.process, runs, rc.nodes, sums
            )
            span = node.to_master(rc.progress.collectives.enqueued_mono_ns) // JOIN_SPAN_NS
            yield state_key(rc.member, rc.progress, rc.process, fresh, span), unit


def _ranks(units: list[_Unit]) -> RankRuns:
    ranks = RankRuns.of(u.member.comm_rank for u in units)
    return RankRuns.union_all([ranks, *(u.runs for u in units if u.runs)])


def _message(units: list[_Unit], ranks: RankRuns) -> pb.RankClass:
    rep = min(units, key=lambda u: u.order)
    runs = _without(ranks, rep.member.comm_rank)
    nodes = len({u.origin for u in units if not u.runs}) + sum(u.node_count for u in units)
    ops = sum(u.ops_completed for u in units)
    nbytes = sum(u.bytes_completed for u in units)
    return pb.RankClass(
        ops_completed_sum=ops,
        bytes_completed_sum=nbytes,
        member=_moved_member(rep.node, rep.member),
        progress=_moved_progress(rep.node, rep.progress),
        process=_moved_process(rep.node, rep.process),
        node_name=rep.origin,
        rank_runs=runs.flat(),
        size=len(runs) + 1,
        nodes=nodes,
    )


def _without(runs: RankRuns, rank: int) -> RankRuns:
    """runs less one rank they hold (the representative)."""
    starts, ends = list(runs.starts), list(runs.ends)
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if s <= rank < e:
            pieces = [(a, b) for a, b in ((s, rank), (rank + 1, e)) if b > a]
            starts[i : i + 1] = [a for a, _ in pieces]
            ends[i : i + 1] = [b for _, b in pieces]
            break
    return RankRuns(tuple(starts), tuple(ends))


# ---- the representative's times, on the relay's clock -------------------------------------


def _moved_member(node: NodeRecord, m: pb.CommunicatorMember) -> pb.CommunicatorMember:
    out = pb.CommunicatorMember()
    out.CopyFrom(m)
    out.init_mono_ns = node.to_master(m.init_mono_ns)
    out.finalize_mono_ns = node.to_master(m.finalize_mono_ns)
    return out


def _moved_progress(node: NodeRecord, g: pb.CommProgress) -> pb.CommProgress:
    out = pb.CommProgress()
    out.CopyFrom(g)
    for stages in (out.collectives, out.p2p):
        stages.enqueued_mono_ns = node.to_master(stages.enqueued_mono_ns)
        stages.gpu_started_mono_ns = node.to_master(stages.gpu_started_mono_ns)
        stages.completed_mono_ns = node.to_master(stages.completed_mono_ns)
    if out.HasField("oldest_inflight"):
        op = out.oldest_inflight
        op.enqueued_mono_ns = node.to_master(op.enqueued_mono_ns)
        op.gpu_started_mono_ns = node.to_master(op.gpu_started_mono_ns)
    out.hang_flagged_mono_ns = node.to_master(out.hang_flagged_mono_ns)
    out.sampled_mono_ns = node.to_master(out.sampled_mono_ns)
    return out


def _moved_process(node: NodeRecord, p: pb.ProcessInfo) -> pb.ProcessInfo:
    out = pb.ProcessInfo()
    out.CopyFrom(p)
    out.heartbeat_mono_ns = node.to_master(p.heartbeat_mono_ns)
    out.started_mono_ns = node.to_master(p.started_mono_ns)
    return out
