"""Rule: point-to-point waits past the threshold (a peer dead, stuck outside NCCL or not
joined, an exchange stalled, a cycle of sends and receives)."""

from __future__ import annotations

from comminsight.agent.hangs.finding import Finding, comm_label, comm_label_id
from comminsight.agent.hangs.rules.all_joined import no_row_reason
from comminsight.agent.hangs.rules.not_joined import outside_nccl
from comminsight.agent.hangs.rules.process_died import death_reason
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp, NodeSnapshot
from comminsight_gen.models.hang_report_v1 import Verdict


def p2p_wait(
    comm: CommView,
    snapshot: NodeSnapshot,
    now: int,
    threshold_ns: int,
    as_shown: NodeSnapshot | None = None,
) -> Finding | None:
    """A rank waits past the threshold in a Send or Recv (a pipeline stage waiting for its
    neighbour's activations, say). Its peer is the rank to look at, and if that peer itself
    waits in a point-to-point op on this communicator, the peer's peer, down the chain of
    waits: the rank at the end of it is where the hang starts (dead, in host code, or busy in
    another communicator), and a chain that comes back on itself is a cycle of ranks that
    all wait to receive (or all wait to send): a mismatched call order.

    Point-to-point op indexes count each rank's own sends and receives, so unlike
    collectives they say nothing across ranks; the verdict rests on what the peers are
    doing now."""
    waits = [
        m
        for m in comm.members
        if m.inflight is not None
        and not m.inflight.is_coll
        and m.inflight.peer is not None
        and not m.inflight.unproven  # untimed: nothing shows it still runs
        and not m.process.ended  # see waiting_members
        and now - m.inflight.enqueue_mono_ns > threshold_ns
    ]
    if not waits:
        return None
    first = min(waits, key=lambda m: (m.inflight.enqueue_mono_ns, m.rank))
    op = first.inflight
    wait_s = (now - op.enqueue_mono_ns) / 1e9
    by_rank = {m.rank: m for m in comm.members}
    chain = [first]
    while True:
        m = chain[-1]
        peer = by_rank.get(m.inflight.peer)
        if peer is None or peer.inflight is None or peer.inflight.is_coll:
            break
        if peer in chain:
            cycle = chain[chain.index(peer) :]
            if len(cycle) == 2 and {x.inflight.func for x in cycle} == {"Send", "Recv"}:
                # a Send and its Recv, both posted: the transfer itself does not finish
                return p2p_stalled(comm, cycle, now, threshold_ns)
            # a batched exchange that cannot finish: behind another op, or with a rank whose
            # process ended (its other ops are no longer in view) - not a proven call order
            if all(m.p2p_enqueued - m.p2p_completed > 1 for m in cycle) and any(
                # an untimed op of another communicator, presumed done, may still be what
                # it waits in first: no call order is proven wrong while it may
                m.process.ended or blocked_elsewhere(m, as_shown or snapshot)
                for m in cycle
            ):
                return p2p_exchange(comm, cycle, op)
            return p2p_cycle(comm, cycle, op)
        chain.append(peer)
    last = chain[-1]
    path = " -> ".join(f"rank {m.rank} ({m.inflight.func})" for m in chain)
    culprit_rank = last.inflight.peer
    peer = by_rank.get(culprit_rank)
    head = (
        f"rank {first.rank} waits in {op.func} {'from' if op.func == 'Recv' else 'to'} rank "
        f"{op.peer} on {comm_label(comm)} for {wait_s:.1f} s"
        + (f" (waits: {path} -> rank {culprit_rank})" if len(chain) > 1 else "")
    )
    if peer is None:
        if comm.nnodes > 1:
            return Finding(
                Verdict.inconclusive,
                comm,
                key=f"p2p:{first.rank}:{op.op_index}",
                summary=f"{head}; rank {culprit_rank} is on another node",
                culprits={},
                op=op,
            )
        why, verdict = no_row_reason(comm), None
    elif not peer.process.alive:
        why, verdict = death_reason(peer), Verdict.process_died
    elif outside_nccl(peer, snapshot):
        idle_s = (now - peer.last_activity_mono_ns) / 1e9
        why = (
            f"has no op in flight toward rank {last.rank} (nothing in flight on any "
            f"communicator, idle {idle_s:.1f} s)"
        )
        verdict = Verdict.stuck_outside_nccl
    elif peer.inflight is not None:  # a collective of this communicator
        why = (
            f"waits in {peer.inflight.func} #{peer.inflight.op_index} on this communicator "
            f"instead of the {'Send' if last.inflight.func == 'Recv' else 'Recv'} rank "
            f"{last.rank} waits for"
        )
        verdict = None
    else:
        elsewhere = [
            r
            for r in snapshot.members_of_process(peer.process)
            if r.comm_id != comm.comm_id and r.inflight is not None
        ]
        where = (
            f"{comm_label_id(elsewhere[0].comm_id, elsewhere[0].name)} "
            f"#{elsewhere[0].inflight.op_index}"
            if elsewhere
            else "another communicator"
        )
        why = f"has no op in flight toward rank {last.rank}: in flight on {where}"
        verdict = None
    return Finding(
        verdict or Verdict.rank_not_joined,
        comm,
        key=f"p2p:{first.rank}:{op.op_index}",
        summary=f"{head}; rank {culprit_rank} {why.split(';')[0]}",
        culprits={culprit_rank: why},
        op=op,
    )


def p2p_stalled(
    comm: CommView, pair: list[CommMember], now: int, threshold_ns: int
) -> Finding | None:
    if any(now - m.inflight.enqueue_mono_ns <= threshold_ns for m in pair):
        return None  # the second side has just posted: give the transfer its time
    send = next(m for m in pair if m.inflight.func == "Send")
    recv = next(m for m in pair if m.inflight.func == "Recv")
    if (send.inflight.count, send.inflight.datatype) != (
        recv.inflight.count,
        recv.inflight.datatype,
    ):
        return Finding(
            Verdict.op_mismatch,
            comm,
            key=f"p2p:{send.rank}.{recv.rank}",
            summary=(
                f"rank {send.rank} sends {send.inflight.count} {send.inflight.datatype} to "
                f"rank {recv.rank}, which receives {recv.inflight.count} "
                f"{recv.inflight.datatype} on {comm_label(comm)}"
            ),
            culprits={
                m.rank: f"{m.inflight.func} of {m.inflight.count} {m.inflight.datatype}"
                for m in pair
            },
            op=recv.inflight,
        )
    wait_s = (now - min(m.inflight.enqueue_mono_ns for m in pair)) / 1e9
    return Finding(
        Verdict.all_joined_none_complete,
        comm,
        key=f"p2p:{send.rank}.{recv.rank}",
        summary=(
            f"rank {send.rank}'s Send and rank {recv.rank}'s Recv on {comm_label(comm)} are "
            f"both posted and not complete in {wait_s:.1f} s"
        ),
        culprits={},
        op=recv.inflight,
    )


def p2p_cycle(comm: CommView, cycle: list[CommMember], op: InflightOp) -> Finding:
    """Ranks each waiting in a point-to-point op on the next one's: a call-order mismatch
    (every one receives first, or every one sends a message too large to buffer first)."""
    path = " -> ".join(f"rank {m.rank} ({m.inflight.func})" for m in cycle)
    return Finding(
        Verdict.op_mismatch,
        comm,
        key="p2p-cycle:" + ".".join(str(m.rank) for m in sorted(cycle, key=lambda m: m.rank)),
        summary=(
            f"ranks wait on each other in point-to-point ops on {comm_label(comm)}: {path} "
            f"-> rank {cycle[0].rank}: the calls are ordered so that none can proceed"
        ),
        culprits={
            m.rank: f"waits in {m.inflight.func} with rank {m.inflight.peer}, which waits in "
            f"{cycle[(i + 1) % len(cycle)].inflight.func} too"
            for i, m in enumerate(cycle)
        },
        op=op,
    )


def blocked_elsewhere(m: CommMember, snapshot: NodeSnapshot) -> bool:
    """m's process has an op of another communicator in flight that was enqueued before m's
    or whose kernel runs on the GPU and does not finish: what it waits in first (a batched
    exchange queued behind it, or beside it on the GPU, cannot finish either). An untimed op
    counts whenever it was enqueued: its row shows the newest of the untimed ops, and an older
    one may be the first."""
    mine = m.inflight.enqueue_mono_ns
    return any(
        other.inflight is not None
        and (
            other.inflight.enqueue_mono_ns < mine
            or other.inflight.channels_started > 0
            or other.inflight.unproven
        )
        for view in snapshot.comms.values()
        if view.comm_id != m.comm_id
        for other in view.members
        if other.process.key == m.process.key
    )


def p2p_exchange(comm: CommView, cycle: list[CommMember], op: InflightOp) -> Finding:
    """Ranks whose oldest ops are sends to each other (or receives) while each has more ops
    in flight: the view shows only the oldest op, and a batched exchange (Megatron's
    batch_isend_irecv: a Send and a Recv toward each neighbour in one NCCL group) looks so
    whenever it does not finish because one of the ranks is stuck in an op of another
    communicator queued before it (blocked_elsewhere; without one, two Sends facing each
    other are a call-order mismatch, as on real GPUs). No call order is proven wrong: no
    culprit here; incidents place it behind what the ranks wait in first."""
    path = " -> ".join(f"rank {m.rank} ({m.inflight.func})" for m in cycle)
    return Finding(
        Verdict.all_joined_none_complete,
        comm,
        key="p2p-exchange:" + ".".join(str(m.rank) for m in sorted(cycle, key=lambda m: m.rank)),
        summary=(
            f"ranks exchange point-to-point ops on {comm_label(comm)} and none completes: "
            f"{path} -> rank {cycle[0].rank}, each with "
            + ", ".join(f"{m.p2p_enqueued - m.p2p_completed}" for m in cycle)
            + " op(s) in flight (a batched exchange, its other ops not shown)"
        ),
        culprits={},
        op=op,
    )
