"""When an op ran, on the host's CLOCK_MONOTONIC: one rule for every reader of op records.

A record has the host times around it (issue: the enqueue; complete: when the Profiler saw
it finish, which lags the GPU by up to the proxy's polling interval, ~100 ms seen in
simulation under load) and, where the kernel was timed, the GPU's globaltimer at its start
and end. The GPU clock is not the host's, but their difference is nearly constant within a
log segment: no op can end on the GPU after the host saw it complete, so the offset is at
least max(gpu_stop - complete) over the segment's timed ops, and that bound is tight where
one op's completion was seen at once (most are). Timed ops get their GPU start and end on
the host clock; the others start at max(issue, complete - duration) and end at complete.
Lines the C scanner read get the same from engine_core.c (ci_gpu_offset, ci_op_columns);
this is the rule for the lines Python decodes one by one.
"""

from __future__ import annotations

import numpy as np


def host_start(issue: np.ndarray, complete: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """When an op began on the host clock where no GPU timing places it: its measured
    duration before its completion, never before it was issued."""
    return np.maximum(issue, complete - duration)


def op_times(
    issue: np.ndarray,
    complete: np.ndarray,
    duration: np.ndarray,
    gpu_start: np.ndarray,
    gpu_stop: np.ndarray,
    timed: np.ndarray,
    offset: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each op on the host's monotonic clock (module docstring)."""
    start = host_start(issue, complete, duration)
    if offset is None:
        return start, complete
    gpu_start_host = np.maximum(issue, gpu_start - offset)
    start = np.where(timed, gpu_start_host, start)
    end = np.where(timed, np.maximum(gpu_start_host, gpu_stop - offset), complete)
    return start, end
