"""Which rows of one communicator id belong to the run being diagnosed, a pure function.

A home outlives its jobs: one job ends, the next starts in the same home, and the Agent still
holds the first one's regions (it retires a drained region a minute or more after its process
ended), rows ACTIVE where the job was killed and FINALIZED where it ended. Real NCCL gives a
communicator a fresh id in every run, but nothing stops an id from repeating (the simulator
derives it from a seed; any launcher may), and rows of two runs under one id made one
communicator of both: a finished run's FINALIZED rows turned the next run's communicator into
one "torn down", its ranks "left", and the verdict named the earlier run's pids.

A run is a set of processes whose communicators share ids and that ran together. Of the rows
of one communicator id, those of the current run are:

- of the job (the SHM header's job_id) whose process started last: a communicator never spans
  two jobs;
- per rank, the row of the process that started last: a rank of one communicator lives in one
  process, so a second row of the same rank is another run's;
- not of a process that ended (`ProcessView.ended`) before a live member initialized the
  communicator: NCCL's init is collective, every rank takes part in it. "Before" means its
  last sign of life (heartbeat, init, last op, finalize) is more than `margin_ns` older than
  that init; the margin (the Agent's stale-heartbeat period) covers ranks whose inits NCCL
  returns from at different moments.

Rows of processes that never ended and agree on job and rank are never set aside.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # core.snapshot calls this module while it builds its rows
    from comminsight.agent.state.snapshot import CommMember


def current_run(rows: Sequence[CommMember], margin_ns: int) -> list[CommMember]:
    """The rows of `rows` (one communicator id's, ACTIVE and FINALIZED, from any process)
    that belong to its latest run, in their input order."""
    if len(rows) < 2:
        return list(rows)
    newest = max(rows, key=_started)
    job = newest.process.job_id
    same_job = [m for m in rows if m.process.job_id == job]
    by_rank: dict[int, CommMember] = {}
    for m in same_job:
        have = by_rank.get(m.rank)
        if have is None or _started(m) > _started(have):
            by_rank[m.rank] = m
    kept = [m for m in same_job if by_rank[m.rank] is m]
    live_inits = [m.init_mono_ns for m in kept if not m.process.ended]
    if not live_inits:  # the whole run ended: its newest process stands for it
        live_inits = [m.init_mono_ns for m in kept if m.process is newest.process]
    joined_at = max(live_inits)
    return [m for m in kept if not (m.process.ended and last_seen(m) + margin_ns < joined_at)]


def last_seen(m: CommMember) -> int:
    """The last moment this row's process is known to have been alive (reader's clock)."""
    return max(m.process.heartbeat_mono_ns, m.last_activity_mono_ns, m.finalize_mono_ns)


def _started(m: CommMember) -> tuple[int, int]:
    """When its process made its region (its first communicator), then when this row began."""
    return (m.process.start_mono_ns, m.init_mono_ns)
