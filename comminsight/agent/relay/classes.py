"""A relay's reduction: the rows of every node below it folded, per communicator, into classes
of ranks in the same state (agent-master-slave RankClass).

The state is what hang diagnosis compares (RankClass's comment lists it); a class carries one
representative's real rows, with its monotonic times moved onto the relay's clock, and the
other ranks as runs. A healthy communicator is one class or a few (ranks a report apart); a
hang is the waiting class and the culprit's class of one. A relay below this one sends
classes already: each is folded in as it is, its ranks joining a class of the same state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from comminsight.agent.core.rank_runs import BadRuns, RankRuns
from comminsight.agent.master.job_view import NodeRecord
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


def state_key(
    m: pb.CommunicatorMember, g: pb.CommProgress, p: pb.ProcessInfo, fresh: bool
) -> tuple:
    """Everything two ranks of a communicator must share to be one class."""
    c, p2p = g.collectives, g.p2p
    return (
        m.comm_id,
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


@dataclass
class _Class:
    """A class being built: its representative (rows, the node record that sent them and the
    node that runs it) and every rank in it."""

    node: NodeRecord
    origin: str
    member: pb.CommunicatorMember
    progress: pb.CommProgress
    process: pb.ProcessInfo
    singles: list[int]  # ranks of slave rows
    folded: list[RankRuns] = field(default_factory=list)  # ranks of classes folded in
    nodes: set[str] = field(default_factory=set)  # nodes of slave rows, by name
    node_count: int = 0  # nodes of classes folded in (each counted by the relay below)
    # (node, pid) of every rank's own row in it; classes folded in from below add none
    processes: set[tuple[str, int]] = field(default_factory=set)

    def size(self) -> int:
        return len(self.singles) + sum(len(r) for r in self.folded)

    def copy(self) -> _Class:
        return dataclasses.replace(
            self,
            singles=list(self.singles),
            folded=list(self.folded),
            nodes=set(self.nodes),
            processes=set(self.processes),
        )

    def wait_since(self) -> int:
        """When the representative's oldest op was enqueued, on the relay's clock; ops not
        in flight sort last."""
        g = self.progress
        if not g.HasField("oldest_inflight"):
            return 1 << 64
        return self.node.to_master(g.oldest_inflight.enqueued_mono_ns)

    def take(self, other: _Class) -> None:
        """Fold `other` in; it represents the class when it waited longer (else when its
        rank is lower)."""
        self.singles += other.singles
        self.folded += other.folded
        self.nodes |= other.nodes
        self.processes |= other.processes
        self.node_count += other.node_count
        mine = (self.wait_since(), self.member.comm_rank)
        if (other.wait_since(), other.member.comm_rank) < mine:
            self.node, self.origin = other.node, other.origin
            self.member, self.progress, self.process = other.member, other.progress, other.process


# A class this small that is not its communicator's largest is an outlier (a culprit, the
# ranks of a node that died): its processes' rows all travel as classes of one, so that the
# master sees every communicator such a process is in, as diagnosis asks of a culprit
OUTLIER_MAX = 16


def rank_classes(
    nodes: Iterable[NodeRecord], now_mono_ns: int, stale_ns: int
) -> list[pb.RankClass]:
    """The classes of every node's rows (slaves', the relay's own) and of the classes relays
    below sent, ordered by communicator and lowest rank. The rows of an outlier's process are
    classes of one rank each (OUTLIER_MAX)."""
    units = list(_units(nodes, now_mono_ns, stale_ns))
    classes = _grouped(units, alone=set())
    largest: dict[int, int] = {}
    for c in classes.values():
        comm = c.member.comm_id
        largest[comm] = max(largest.get(comm, 0), c.size())
    alone = {
        where
        for c in classes.values()
        if c.size() <= OUTLIER_MAX and c.size() < largest[c.member.comm_id]
        for where in c.processes
    }
    if alone:
        classes = _grouped(units, alone)
    built = [(c, _ranks(c)) for c in classes.values()]
    built.sort(key=lambda b: (b[0].member.comm_id, b[1].starts[0]))
    return [_message(c, ranks) for c, ranks in built]


def _units(nodes: Iterable[NodeRecord], now_mono_ns: int, stale_ns: int):
    """(state key, a class of the one row or folded class) for every row and class below."""
    for node in nodes:
        for key, m in node.rows.members.items():
            g = node.rows.progress.get(key)
            p = node.rows.processes.get(m.pid)
            if g is None or p is None:
                continue
            fresh = now_mono_ns - node.to_master(p.heartbeat_mono_ns) <= stale_ns
            one = _Class(node, node.name, m, g, p, [m.comm_rank], nodes={node.name})
            one.processes = {(node.name, m.pid)}
            yield state_key(m, g, p, fresh), one
        for rc in node.classes:
            fresh = now_mono_ns - node.to_master(rc.process.heartbeat_mono_ns) <= stale_ns
            try:
                others = RankRuns.from_flat(rc.rank_runs, rc.member.nranks)
            except BadRuns:  # checked when the batch was applied; never folded unchecked
                continue
            folded = _Class(
                node,
                rc.node_name,
                rc.member,
                rc.progress,
                rc.process,
                [rc.member.comm_rank],
                [others],
                node_count=rc.nodes,
            )
            # a class of one is a rank's own row: its process can be told apart
            folded.processes = {(rc.node_name, rc.process.pid)} if not others else set()
            yield state_key(rc.member, rc.progress, rc.process, fresh), folded


def _grouped(units: list[tuple[tuple, _Class]], alone: set[tuple[str, int]]) -> dict:
    """Units of one state folded together, except the rows of processes in `alone`."""
    classes: dict[tuple, _Class] = {}
    for i, (key, unit) in enumerate(units):
        if unit.processes & alone:
            key = (*key, i)  # a class of its own
        found = classes.get(key)
        if found is None:
            classes[key] = unit.copy()
        else:
            found.take(unit)
    return classes


def _ranks(c: _Class) -> RankRuns:
    ranks = RankRuns.of(c.singles)
    for runs in c.folded:
        ranks = ranks.union(runs)
    return ranks


def _message(c: _Class, ranks: RankRuns) -> pb.RankClass:
    runs = _without(ranks, c.member.comm_rank)
    return pb.RankClass(
        member=_moved_member(c.node, c.member),
        progress=_moved_progress(c.node, c.progress),
        process=_moved_process(c.node, c.process),
        node_name=c.origin,
        rank_runs=runs.flat(),
        size=len(runs) + 1,
        nodes=len(c.nodes) + c.node_count,
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
