"""Rule: every rank enqueued op N and all have it in flight past the threshold; inconclusive
where the ranks not in view are on other nodes."""

from __future__ import annotations

from comminsight.agent.hangs.finding import Finding, comm_label, rank_list
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp
from comminsight_gen.models.hang_report_v1 import Verdict


def all_joined(
    comm: CommView, waiting: list[CommMember], op_index: int, op: InflightOp, wait_s: float
) -> Finding | None:
    if comm.missing_ranks and comm.nnodes == 1:
        return uninitialized(comm, op_index, op, wait_s)
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


def uninitialized(comm: CommView, op_index: int, op: InflightOp, wait_s: float) -> Finding:
    """Ranks of a single-node communicator with no row here that never had one have not
    initialized it (it is created at first use): they have not joined the op the others
    wait in. Unless a collective of it completed: that took every rank, so they had
    initialized it and their rows went (an Agent that started after they left never saw
    them)."""
    missing = comm.missing_ranks
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
