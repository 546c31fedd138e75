"""Timing arithmetic of shm v1 op slots, for whole batches at once (numpy): how long each op
took and its bus bandwidth. Shared by the Agent's metrics and the Semantic Engine's live input,
so both report the same numbers for the same op; the Profiler's log writer computes the same in
C (profiler/src/op_timing.h), and contract-tests/test_op_timing.py holds the two together.
"""

from __future__ import annotations

import numpy as np

from comminsight_gen.abi import shm_v1

# The enum members as plain ints: numpy compares an array with an int directly, while each use
# of an IntEnum member goes through the enum's attribute lookup (a live engine fed small
# batches spent a fifth of its time here)
_KERNEL_GPU = int(shm_v1.TimingSource.KERNEL_GPU)
_KERNEL_CPU = int(shm_v1.TimingSource.KERNEL_CPU)
_COLLECTIVE_CPU = int(shm_v1.TimingSource.COLLECTIVE_CPU)
_ALL_REDUCE = int(shm_v1.Func.ALL_REDUCE)
_GATHERED = (
    int(shm_v1.Func.ALL_GATHER),
    int(shm_v1.Func.REDUCE_SCATTER),
    int(shm_v1.Func.ALL_TO_ALL),
)


def _span(records: np.ndarray, start: str, end: str) -> np.ndarray:
    """end - start, 0 where the clocks run backwards (unsigned fields would wrap)."""
    a, b = records[start], records[end]
    return np.where(b >= a, b - a, 0).astype(np.uint64)


def durations_ns(records: np.ndarray) -> np.ndarray:
    """By the shm protocol's timing_source: the GPU span of the kernel; else enqueue to the
    host's sight of the last channel stop; else, with no kernel events, the call's host start
    to stop (none where the host never saw it stop: swept at finalize, say); else 0."""
    source = records["timing_source"]
    host = np.where(
        records["host_stop_mono_ns"] > 0,
        _span(records, "host_start_mono_ns", "host_stop_mono_ns"),
        0,
    )
    return np.select(
        [source == _KERNEL_GPU, source == _KERNEL_CPU, source == _COLLECTIVE_CPU],
        [
            _span(records, "gpu_start_ticks", "gpu_end_ticks"),
            _span(records, "host_start_mono_ns", "complete_mono_ns"),
            host,
        ],
        0,
    ).astype(np.uint64)


def durations_s(records: np.ndarray) -> np.ndarray:
    return durations_ns(records).astype(np.float64) / 1e9


def bandwidths_gbs(records: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NCCL Inspector's algorithm and bus bandwidths, GB/s; 0 where the time is 0: the
    traffic (n x the bytes of a gathered op) over the time, and that x the collective's
    factor."""
    n = np.maximum(records["nranks"].astype(np.float64), 1.0)
    func = records["func"]
    traffic = records["bytes"].astype(np.float64)
    gathered = (func == _GATHERED[0]) | (func == _GATHERED[1]) | (func == _GATHERED[2])
    traffic = np.where(gathered, traffic * n, traffic)
    factor = np.where(func == _ALL_REDUCE, 2 * (n - 1) / n, np.where(gathered, (n - 1) / n, 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(seconds > 0, traffic / 1e9 / seconds, 0.0)
    return algbw, algbw * factor


def bus_bandwidth_gbs(records: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """NCCL's bus bandwidth (the Inspector's formulas), GB/s; 0 where the time is 0."""
    return bandwidths_gbs(records, seconds)[1]
