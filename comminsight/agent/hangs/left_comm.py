"""Ranks that left a communicator this node saw them in, while its other ranks may still wait.

A rank leaves when its communicator is destroyed or aborted (its row goes FINALIZED: NCCL
finalizes the Profiler's context on ncclCommAbort as on ncclCommDestroy) or when its process
ends and the Agent retires its region (its rows vanish). Either way the communicator's other
ranks can never complete a collective again. Snapshots alone cannot tell a vanished row from
a rank on another node, so `MembersSeen` remembers the last row of every rank of every
communicator the snapshots still show: a rank missing now but seen before has left.
"""

from __future__ import annotations

from collections.abc import Iterable

from comminsight.agent.state.current_run import current_run
from comminsight.agent.state.rank_runs import RankRuns
from comminsight.agent.state.snapshot import CommMember, CommView, NodeSnapshot
from comminsight_gen.abi import shm_v1


class MembersSeen:
    """comm_id -> {rank: the last row of that rank seen}, for the communicators the latest
    snapshot still shows (active or torn down); the others are forgotten, which bounds it."""

    def __init__(self) -> None:
        self._rows: dict[int, dict[int, CommMember]] = {}

    @classmethod
    def from_snapshots(cls, snapshots: Iterable[NodeSnapshot]) -> MembersSeen:
        seen = cls()
        for snap in snapshots:
            seen.note(snap)
        return seen

    def note(self, snapshot: NodeSnapshot) -> None:
        shown = {**snapshot.comms, **snapshot.torn_down}
        for comm_id in [c for c in self._rows if c not in shown]:
            del self._rows[comm_id]
        for comm_id, comm in shown.items():
            now = (*comm.members, *comm.departed)
            ranks = {m.rank for m in now}
            # a rank a relay's class stands for now is shown, though not by a row of its own:
            # its old row (a class's former representative) is no evidence, and kept it would
            # pile up to every rank of the job
            classes = RankRuns.union_all([m.stands_for for m in now if m.stands_for])
            before = [
                m
                for rank, m in self._rows.get(comm_id, {}).items()
                if rank not in ranks and rank not in classes
            ]
            # a rank remembered from an earlier run of this id (a reused home) never left
            # this one: it is forgotten once the rows shown now are another run's
            rows = current_run([*before, *now], snapshot.heartbeat_stale_ns) if before else now
            self._rows[comm_id] = {m.rank: m for m in rows}

    def of(self, comm_id: int) -> dict[int, CommMember]:
        return self._rows.get(comm_id, {})


def left_members(
    comm: CommView,
    seen: MembersSeen,
    op_index: int,
    wait_began_ns: int,
    now: int,
    threshold_ns: int,
) -> list[CommMember]:
    """The ranks of `comm` that left it while its other ranks wait in op `op_index` (the
    oldest of them since wait_began_ns): its FINALIZED rows that `left_for_good` keeps, and
    ranks with no row now whose row this node saw before (a FINALIZED one judged alike). A
    vanished ACTIVE row counts only for a process of the snapshot's own node (node_name
    None): in a master's job snapshot a node whose report is late loses its rows too, and
    that is no evidence that its ranks left; a FINALIZED one seen before is, wherever it was
    (once a slave retires an exited rank's process, its rows are gone from the master)."""
    left = {m.rank: m for m in comm.departed}
    before = seen.of(comm.comm_id)
    for rank in comm.missing_ranks:
        m = before.get(rank)
        if rank in left or m is None:
            continue
        if m.process.node_name is None or m.state == shm_v1.CommState.FINALIZED:
            left[rank] = m
    return [
        left[r]
        for r in sorted(left)
        if left_for_good(left[r], op_index, wait_began_ns, now, threshold_ns)
    ]


def left_for_good(
    m: CommMember, op_index: int, wait_began_ns: int, now: int, threshold_ns: int
) -> bool:
    """Whether a rank's departure is where the others' wait in op N starts, rather than part
    of the teardown of a hang already there.

    A rank that left before the others had waited the threshold in N left a running job: no
    hang was there yet to tear down. That is the uneven-inputs end of data-parallel training
    (a rank out of data destroys its process group and exits while its peers go on into the
    next all-reduce), and no grace applies: its row says it is gone for good. One that left
    later and never joined N is the first of a teardown slowed down (an aborted job's ranks
    leave in any order, and the hang it ends was diagnosed while it was there). One that
    joined N and left counts once it finalized more than the threshold ago: NCCL failed its
    op and aborted its communicator, while ranks tearing a communicator down finalize within
    moments of each other, the hang threshold apart never."""
    if m.state != shm_v1.CommState.FINALIZED:
        return True  # its row is gone: its process ended and its region was retired
    if m.finalize_mono_ns < wait_began_ns + threshold_ns and m.coll_enqueued <= op_index:
        return True
    return m.coll_enqueued > op_index and now - m.finalize_mono_ns > threshold_ns
