"""Ops in flight that were not timed on the GPU, presumed done where the job's progress
shows them done, and the op a rank really waits in found past them.

With COMMINSIGHT_PROFILER_GPU_TIMING=sampled NCCL times only some ops on the GPU. An untimed
op has no kernel events: the Profiler counts it in flight until the kernel of a later NCCL
group of its communicator starts, and marks it `unproven` (shm comm_entry
inflight_unproven). Where a rank has no GPU-timed op in flight, its Profiler shows its newest
untimed op (ops of a communicator complete in order: if that one is done, all are). Such ops
may have completed long ago: the last op of a communicator used once per Step (an embedding
group), or the last ops before a rank stops in its own code, would read as hangs of their own
and hide where the job is really stuck; and a rank that ran on past an op a peer never joined
shows a later op than the one it waits in.

Per communicator, untimed ops before a bound B count as done, where B is the first op index
that
  - some rank never enqueued, or a rank that left never will (a collective cannot complete
    without every rank),
  - a rank shows a GPU-timed op in flight at (its kernel is not done: nor is anything after),
  - the ranks' recent records disagree at (a mismatched call: see rules/diverged.py), or
  - a rank enqueued after its process began to wait in an op of another communicator (a
    process's ops run in order: queued behind a stuck op, it cannot have run).
Where a rank is out of view (on another node: only a master sees all) or its process is dead
or frozen, nothing says it ran its untimed ops: B is then the first op no rank completed.
Another rank's completion always proves the ops before it. A rank with untimed ops at B or
past it waits in op B, described from its recent records (the Agent's window of what each
process recorded, untimed ops included from the moment NCCL stopped them on the host) where
they hold it, else as its Profiler showed it, or, where it showed an older op, as waiting in
nothing the diagnosis can name; so does a rank that shows a timed op past B (its Profiler
shows a timed op in flight before any untimed one: the untimed ones before it, B among them,
are hidden behind it). The fourth rule depends on the waits the others leave, so the bounds
are found again until they stop moving (MAX_ROUNDS; each round only lowers them, and the
last round's stand).

Not seen: a rank that aborted its communicator in the middle of an untimed op looks like
one that finished it and left (its Profiler counts its ops done at finalize, as NCCL's
destroy waits for them); its peers' wait is then taken for done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from comminsight.agent.hangs.op_rhythm import rhythm_key
from comminsight.agent.state.snapshot import CommMember, CommView, InflightOp, NodeSnapshot
from comminsight.shm_reader import ROOTED_FUNCS

# A member's recently recorded collectives on its communicator, by op index
# (finding.CompletedOps; untimed ops are recorded when NCCL stops them on the host).
RecordedOps = Callable[[CommMember], dict[int, InflightOp]]
# a process (ProcessView.key) -> (communicator id, enqueue time) of each collective it waits in
Waits = dict[tuple[str | None, int, int], list[tuple[int, int]]]

# Rounds of the fixed point; each only withdraws presumptions, so it settles fast (a chain of
# communicators each queued behind the next needs one round per link).
MAX_ROUNDS = 8


def presume_untimed_done(
    snapshot: NodeSnapshot, recorded_ops: RecordedOps | None = None
) -> NodeSnapshot:
    """The snapshot with untimed ops presumed done where the ranks' progress allows, and
    each rank's op in flight the one it waits in."""
    views = (*snapshot.comms.values(), *snapshot.torn_down.values())
    if not any(_hides_untimed(m) for c in views for m in c.members):
        return snapshot
    records = _once_each(recorded_ops) if recorded_ops is not None else (lambda m: {})
    waits: Waits = {}
    comms = snapshot.comms
    for _ in range(MAX_ROUNDS):
        comms = {cid: _presumed(c, records, waits) for cid, c in snapshot.comms.items()}
        settled = _waits_of(comms.values())
        if settled == waits:
            break
        waits = settled
    torn_down = {cid: _presumed(c, records, waits) for cid, c in snapshot.torn_down.items()}
    return dataclasses.replace(snapshot, comms=comms, torn_down=torn_down)


def _once_each(recorded_ops: RecordedOps) -> RecordedOps:
    """recorded_ops asked once per row: each round asks again for the same windows, and a
    window is thousands of records turned into ops."""
    seen: dict[tuple, dict[int, InflightOp]] = {}

    def records(m: CommMember) -> dict[int, InflightOp]:
        key = (*m.process.key, m.process.start_real_ns, m.comm_id)
        if key not in seen:
            seen[key] = recorded_ops(m)
        return seen[key]

    return records


def _unproven(m: CommMember) -> bool:
    return m.inflight is not None and m.inflight.unproven and m.inflight.is_coll


def _hides_untimed(m: CommMember) -> bool:
    """Its row shows an untimed collective, or a timed one past ops it has not completed:
    untimed ones, which the Profiler does not show while a timed op is in flight."""
    op = m.inflight
    return op is not None and op.is_coll and (op.unproven or op.op_index > m.coll_completed)


def _waits_of(comms) -> Waits:
    """Per process, the collectives it still waits in after the presumptions: (comm id,
    enqueue time)."""
    out: Waits = {}
    for c in comms:
        for m in c.members:
            if m.inflight is not None and m.inflight.is_coll:
                key = m.process.key
                out.setdefault(key, []).append((c.comm_id, m.inflight.enqueue_mono_ns))
    return {k: sorted(v) for k, v in out.items()}


def _presumed(comm: CommView, records: RecordedOps, waits: Waits) -> CommView:
    members = comm.members
    if not any(_hides_untimed(m) for m in members):
        return comm
    bound = _bound(comm, records, waits)
    presumed = tuple(_presume(m, bound, records) for m in members)
    if all(a is b for a, b in zip(presumed, members, strict=True)):
        return comm
    return dataclasses.replace(comm, members=presumed)


def _bound(comm: CommView, records: RecordedOps, waits: Waits) -> int:
    members = comm.members
    proven = max(m.coll_completed for m in members)  # every op before it is done everywhere
    out_of_view = set(comm.missing_ranks) - {m.rank for m in comm.departed}
    if out_of_view or any(not m.process.alive for m in members):
        # ranks out of view (other nodes: only a master sees whether they joined), or a rank
        # dead or frozen: nothing says it ran its untimed ops, and its peers may wait in them
        return proven
    # a rank that left the communicator joins nothing more
    bound = min(m.coll_enqueued for m in (*members, *comm.departed))
    for m in members:
        if m.inflight is not None and m.inflight.is_coll and not m.inflight.unproven:
            bound = min(bound, m.inflight.op_index)
    shown: dict[int, set[tuple]] = {}
    for m in members:
        if _unproven(m):
            shown.setdefault(m.inflight.op_index, set()).add(rhythm_key(m.inflight))
            behind = _first_queued_behind(m, comm.comm_id, waits, records)
            if behind is not None:
                bound = min(bound, behind)
    for index, keys in shown.items():
        if len(keys) > 1:  # the ranks enqueued different ops there
            bound = min(bound, index)
    bound = _first_difference(members, records, proven, bound)
    return max(bound, proven)


def _first_queued_behind(
    m: CommMember, comm_id: int, waits: Waits, records: RecordedOps
) -> int | None:
    """The first op of m here that its process enqueued after it began to wait in an op of
    another communicator (queued behind that wait, it cannot have run); None where it waits
    nowhere else, or began to only after its ops here."""
    shown = m.inflight
    began = min(
        (at for cid, at in waits.get(m.process.key, ()) if cid != comm_id),
        default=None,
    )
    if began is None or shown.enqueue_mono_ns <= began:
        return None
    # its records say which op came first after that; without them, the one its row shows
    after = [
        index
        for index, op in records(m).items()
        if m.coll_completed <= index < shown.op_index and op.enqueue_mono_ns > began
    ]
    return min(after, default=shown.op_index)


def _first_difference(
    members: tuple[CommMember, ...], records: RecordedOps, low: int, high: int
) -> int:
    """The first index in [low, high) at which every rank's records hold an op and they
    differ; high where none does."""
    if high <= low:
        return high
    windows = [records(m) for m in members]
    if not all(windows):
        return high
    # only the indexes every window holds: a window is the Agent's last few thousand records
    # of a process, however far apart low and high are
    held = set.intersection(*(set(w) for w in windows))
    for index in sorted(i for i in held if low <= i < high):
        if len({rhythm_key(w[index]) for w in windows}) > 1:
            return index
    return high


def _presume(m: CommMember, bound: int, records: RecordedOps) -> CommMember:
    if not _hides_untimed(m):
        return m
    shown = m.inflight
    if not shown.unproven:
        if shown.op_index <= bound:
            return m
        # a timed op, queued behind untimed ones that did not finish: it waits in the first
        waited = _described(m, bound, records)
        return dataclasses.replace(m, inflight=waited) if waited is not None else m
    if m.coll_enqueued <= bound:  # every op it issued is below the bound
        return dataclasses.replace(
            m, coll_completed=max(m.coll_completed, m.coll_enqueued), inflight=None
        )
    if shown.op_index == bound:
        return m
    waited = _described(m, bound, records)
    if shown.op_index > bound:
        # it ran on past the op it waits in; where its records do not hold that op, the
        # Profiler's newer one stands for it (the right op index is lost, not the wait)
        return dataclasses.replace(m, inflight=waited) if waited is not None else m
    # its ops past the bound are not described where its records lack the one at the bound:
    # it then waits in nothing the diagnosis can name, and its counters still say it is busy
    return dataclasses.replace(m, coll_completed=max(m.coll_completed, bound), inflight=waited)


def _described(m: CommMember, index: int, records: RecordedOps) -> InflightOp | None:
    """m's op at index from its records, as the Profiler's in-flight view would show it."""
    op = records(m).get(index)
    if op is None:
        return None
    # the in-flight view carries NCCL's root argument of every collective, the records only
    # that of rooted ones: take the shown op's for the others, so both read alike
    peer = op.peer if op.func in ROOTED_FUNCS else m.inflight.peer
    return dataclasses.replace(
        op,
        peer=peer,
        unproven=True,
        channels_started=0,
        channels_stopped=0,
        start_mono_ns=None,
    )
