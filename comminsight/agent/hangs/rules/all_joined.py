"""Rule: every rank enqueued op N and all have it in flight past the threshold; inconclusive
where the ranks not in view are on other nodes."""

from __future__ import annotations

from comminsight.agent.hangs.finding import Finding, comm_label, rank_list
from comminsight.agent.hangs.world_ranks import world_process
from comminsight.agent.state.snapshot import (
    CommMember,
    CommView,
    InflightOp,
    NodeSnapshot,
    ProcessView,
)
from comminsight_gen.models.hang_report_v1 import Verdict


def all_joined(
    comm: CommView,
    waiting: list[CommMember],
    op_index: int,
    op: InflightOp,
    wait_s: float,
    snapshot: NodeSnapshot,
) -> Finding | None:
    if comm.missing_ranks and comm.nnodes == 1:
        return uninitialized(comm, op_index, op, wait_s, snapshot)
    if comm.missing_ranks:  # the rest are on other nodes: only the master can conclude
        return inconclusive(comm, op_index, op, wait_s)
    if len(waiting) < len(comm.members):
        return None  # someone is not stuck yet: wait for the next poll
    # A member whose kernel never started while the others' did points at its GPU/launch.
    unstarted = [m for m in waiting if m.inflight.start_mono_ns is None]
    culprits = (
        {m.rank: "kernel never started while the other ranks' did" for m in unstarted}
        if 0 < len(unstarted) < len(waiting)
        else {}
    )
    channels = ", ".join(
        f"r{m.rank} {m.inflight.channels_started}/{m.inflight.channels_stopped}"
        f"/{m.inflight.n_channels}"
        for m in waiting
    )
    return Finding(
        Verdict.all_joined_none_complete,
        comm,
        key=str(op_index),
        summary=(
            f"all {comm.nranks} ranks joined {op.func} #{op_index} (seq {op.seq}) on "
            f"{comm_label(comm)} and none completed in {wait_s:.1f} s "
            f"(channels started/stopped/total: {channels})"
        ),
        culprits=culprits,
        op=op,
        joined_index=op_index,
    )


def uninitialized(
    comm: CommView, op_index: int, op: InflightOp, wait_s: float, snapshot: NodeSnapshot
) -> Finding:
    """Ranks of a single-node communicator with no row here that never had one have not
    initialized it (it is created at first use): they have not joined the op the others
    wait in. Unless a collective of it completed: that took every rank, so they had
    initialized it and their rows went (an Agent that started after they left never saw
    them). Where the communicator is the job's world, each such rank's process is known
    (world_ranks): one alive with nothing in flight on any communicator is stuck in host
    code before its first collective."""
    missing = comm.missing_ranks
    if not completed_everywhere(comm):
        found = before_first_collective(comm, snapshot, op_index, op, wait_s)
        if found is not None:
            return found
    what = (
        f"have no row for {comm_label(comm)} on this node, though they initialized it"
        if completed_everywhere(comm)
        else f"have not initialized {comm_label(comm)}"
    )
    return Finding(
        Verdict.rank_not_joined,
        comm,
        key=str(op_index),
        summary=(
            f"ranks {rank_list(missing)} {what}: {comm.ranks_present} rank(s) wait in {op.func} "
            f"#{op_index} (seq {op.seq}) for {wait_s:.1f} s"
        ),
        culprits={r: no_row_reason(comm) for r in missing},
        op=op,
        joined_index=op_index,
    )


def before_first_collective(
    comm: CommView, snapshot: NodeSnapshot, op_index: int, op: InflightOp, wait_s: float
) -> Finding | None:
    """Every rank missing from the job's world communicator is a process here, alive, with
    nothing in flight on any communicator: stuck outside NCCL, named by its process."""
    missing = list(comm.missing_ranks)
    if not missing or len(missing) > MAX_NAMED:
        return None
    processes = {r: world_process(comm, snapshot, r) for r in missing}
    if any(p is None or not p.alive or not idle(p, snapshot) for p in processes.values()):
        return None
    return Finding(
        Verdict.stuck_outside_nccl,
        comm,
        key=str(op_index),
        summary=(
            f"ranks {rank_list(comm.missing_ranks)} are stuck outside NCCL before their first "
            f"collective on {comm_label(comm)} (nothing in flight on any communicator): "
            f"{comm.ranks_present} rank(s) wait in {op.func} #{op_index} (seq {op.seq}) for "
            f"{wait_s:.1f} s"
        ),
        culprits={
            r: "has not created the communicator (its first collective) and has nothing in "
            "flight on any communicator"
            for r in missing
        },
        op=op,
        joined_index=op_index,
        culprit_processes=processes,
    )


# ranks named by process at most: a world missing more is not one rank stuck in host code
MAX_NAMED = 64


def idle(p: ProcessView, snapshot: NodeSnapshot) -> bool:
    """No op in flight on any of the process's communicators (it may have none yet)."""
    return all(
        r.coll_enqueued <= r.coll_completed and r.p2p_enqueued <= r.p2p_completed
        for r in snapshot.members_of_process(p)
    )


def completed_everywhere(comm: CommView) -> int:
    """How many of the communicator's collectives completed, by its rows here: each took
    every rank, so every rank had initialized the communicator when one did."""
    return max((m.coll_completed for m in comm.members), default=0)


def no_row_reason(comm: CommView) -> str:
    """Why a rank of a single-node communicator has no row here, as far as the rows that are
    here tell."""
    done = completed_everywhere(comm)
    if not done:
        return "has not initialized the communicator (no row on this node)"
    return (
        f"has no row on this node, though it initialized the communicator (op #{done - 1} "
        "completed on every rank): its process ended and its region was retired, or its "
        "Profiler could not track the communicator"
    )


def inconclusive(comm: CommView, op_index: int, op: InflightOp, wait_s: float) -> Finding:
    return Finding(
        Verdict.inconclusive,
        comm,
        key=str(op_index),
        summary=(
            f"{comm.ranks_present} local rank(s) wait in {op.func} #{op_index} (seq {op.seq}) "
            f"on {comm_label(comm)} for {wait_s:.1f} s; ranks {comm.missing_ranks} are on "
            "other nodes"
        ),
        culprits={},
        op=op,
        joined_index=op_index,
    )
