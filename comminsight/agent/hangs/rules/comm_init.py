"""Rule: a single-node communicator with fewer member rows than ranks and no op yet."""

from __future__ import annotations

from comminsight.agent.hangs.finding import Finding, comm_label
from comminsight.agent.state.snapshot import CommView
from comminsight_gen.models.hang_report_v1 import Verdict


def comm_init_stuck(comm: CommView, now: int, threshold_ns: int) -> Finding | None:
    # Rows missing on a single-node communicator mean ranks that never initialized it; any op
    # enqueued proves init finished everywhere (NCCL init is collective), so require none.
    # cheapest first: the missing ranks of a relay's classes are computed from their runs
    if comm.nnodes != 1 or any(m.coll_enqueued or m.p2p_enqueued for m in comm.members):
        return None
    missing = comm.missing_ranks
    if not missing:
        return None
    waited_ns = now - min(m.init_mono_ns for m in comm.members)
    if waited_ns <= threshold_ns:
        return None
    return Finding(
        Verdict.comm_init_stuck,
        comm,
        key="init",
        summary=(
            f"{comm_label(comm)}: ranks {missing} have not initialized the communicator; "
            f"{comm.ranks_present} of {comm.nranks} waiting for {waited_ns / 1e9:.1f} s"
        ),
        culprits={r: "no communicator row on this node (init not reached)" for r in missing},
    )
