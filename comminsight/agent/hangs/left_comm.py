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

from comminsight.agent.core.snapshot import CommMember, CommView, NodeSnapshot
from comminsight.agent.hangs.runs import current_run
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
            before = [m for rank, m in self._rows.get(comm_id, {}).items() if rank not in ranks]
            # a rank remembered from an earlier run of this id (a reused home) never left
            # this one: it is forgotten once the rows shown now are another run's
            rows = current_run([*before, *now], snapshot.heartbeat_stale_ns) if before else now
            self._rows[comm_id] = {m.rank: m for m in rows}

    def of(self, comm_id: int) -> dict[int, CommMember]:
        return self._rows.get(comm_id, {})


def left_members(comm: CommView, seen: MembersSeen, now: int, grace_ns: int) -> list[CommMember]:
    """The ranks of `comm` that left: its FINALIZED rows finalized more than grace_ns ago
    (ranks tearing a communicator down finalize within moments of each other, the hang
    threshold apart never), and ranks with no row now whose row this node saw before. A
    vanished row counts only for a process of the snapshot's own node (node_name None): in a
    master's job snapshot a node whose report is late loses its rows too, and that is no
    evidence that its ranks left."""
    left = {m.rank: m for m in comm.departed}
    before = seen.of(comm.comm_id)
    for rank in comm.missing_ranks:
        m = before.get(rank)
        if rank not in left and m is not None and m.process.node_name is None:
            left[rank] = m
    return [
        left[r]
        for r in sorted(left)
        if left[r].state != shm_v1.CommState.FINALIZED or now - left[r].finalize_mono_ns > grace_ns
    ]
