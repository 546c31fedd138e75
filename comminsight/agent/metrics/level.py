"""How much of the node's detail /metrics carries (COMMINSIGHT_AGENT_METRICS_LEVEL).

`job`, the default, is what a fleet can afford: a job of 100,000 GPUs with a series per GPU,
communicator, op type and histogram bucket is millions of series. At this level the node's
ranks of one job fold together: operations and bytes per (job, host, communicator, op type),
latency histograms and the mean bus bandwidth (the histogram's sum and count, no buckets) per
(job, host, op type and, for bandwidth, message-size bucket), the oldest op in flight per
(job, host, communicator), Step durations per (job, host); a job's labels are its SLURM step
and array index, the node and Kubernetes namespace as well (process_labels.JOB_LABELS), which
its ranks on one node share. Each rank keeps one series, the seconds it spent in completed
operations, with its pod and container too: that tells a slow rank apart.

`rank` adds the pod, container, rank, local_rank, gpu, cuda_device and UUID labels to every
series and keeps the communicator on the histograms: for a small job, or a node under
investigation.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType

JOB, RANK = "job", "rank"
LEVELS = (JOB, RANK)
EMPTY: Mapping = MappingProxyType({})


def fold(series: Mapping, key: Callable[[tuple], Hashable], retired: Mapping = EMPTY) -> dict:
    """The series (anything with plus(): _Series, StepTimes) summed by a coarser key, with
    the retired parts (expired series, by the same label values) added to the sums that
    still have a live part: a sum then never falls while it is exposed."""
    out: dict = {}
    for k, s in series.items():
        coarse = key(k)
        same = out.get(coarse)
        out[coarse] = s if same is None else same.plus(s)
    for k, s in retired.items():
        coarse = key(k)
        if coarse in out:
            out[coarse] = out[coarse].plus(s)
    return out


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"metrics level {level!r} is none of {', '.join(LEVELS)}")
    return level
