"""Rule: no hang, but a rank joins ops consistently later than its peers (needs earlier
snapshots)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from comminsight.agent.hangs.finding import MS, Finding, comm_label
from comminsight.agent.state.snapshot import CommView, NodeSnapshot
from comminsight_gen.models.hang_report_v1 import Verdict


def join_samples(comm_id: int, snapshots: Sequence[NodeSnapshot]) -> dict[int, dict[int, int]]:
    """op index -> {rank: wall-clock enqueue time} for ops seen enqueued on every rank, over
    the snapshots, the oldest sample of an op kept (CommView.join_points)."""
    samples: dict[int, dict[int, int]] = {}
    for snap in snapshots:
        comm = snap.comms.get(comm_id)
        if comm is None:
            continue
        for op_index, times in comm.join_points:
            samples.setdefault(op_index, times)
    return samples


def find_straggler(
    comm: CommView,
    snapshots: Sequence[NodeSnapshot],
    factor: float,
    min_lag_ns: int,
    min_ops: int,
) -> Finding | None:
    # one member (a relay's class of every rank) is late to nobody: its samples are not read
    if comm.nranks < 2 or len(comm.members) < 2:
        return None
    samples = join_samples(comm.comm_id, snapshots)
    if len(samples) < min_ops:
        return None
    delays: dict[int, list[int]] = {m.rank: [] for m in comm.members}
    for times in samples.values():
        first = min(times.values())
        for rank, t in times.items():
            delays.setdefault(rank, []).append(t - first)
    median = {rank: int(statistics.median(d)) for rank, d in delays.items() if d}
    slow = {}
    for rank, lag in median.items():
        peers = [v for r, v in median.items() if r != rank]
        if not peers:  # one member: a relay's class of every rank, late to nobody
            continue
        limit = max(int(factor * statistics.median(peers)), min_lag_ns)
        if lag > limit:
            slow[rank] = (lag, limit)
    if not slow:
        return None
    limit_ns = min(limit for _, limit in slow.values())
    ranks = sorted(slow)
    return Finding(
        Verdict.straggler,
        comm,
        key="r" + ".".join(map(str, ranks)),
        summary=(
            f"rank(s) {ranks} on {comm_label(comm)} join ops late: median "
            f"{', '.join(f'{slow[r][0] / MS:.0f} ms' for r in ranks)} after the first rank "
            f"over {len(samples)} ops"
        ),
        culprits={
            r: f"joins {slow[r][0] / MS:.0f} ms after the first rank (median of "
            f"{len(delays[r])} ops; limit {slow[r][1] / MS:.0f} ms)"
            for r in ranks
        },
        join_delays_ns=median,
        threshold_ns=limit_ns,
    )
