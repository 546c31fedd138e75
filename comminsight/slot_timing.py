"""Timing arithmetic of shm v1 op slots, for whole batches at once (numpy): how long each op
took and its bus bandwidth. Shared by the Agent's metrics and the Semantic Engine's live input,
so both report the same numbers for the same op.
"""

from __future__ import annotations

import numpy as np

from comminsight_gen.abi import shm_v1


def durations_s(records: np.ndarray) -> np.ndarray:
    """GPU span where the record has one, else host enqueue to completion."""
    gpu = records["timing_source"] == shm_v1.TimingSource.KERNEL_GPU
    span = np.where(
        gpu,
        records["gpu_end_ticks"] - records["gpu_start_ticks"],
        records["complete_mono_ns"] - records["host_start_mono_ns"],
    )
    return span.astype(np.float64) / 1e9


def bus_bandwidth_gbs(records: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """NCCL's bus bandwidth (the Inspector's formulas), GB/s; 0 where the time is 0."""
    n = np.maximum(records["nranks"].astype(np.float64), 1.0)
    func = records["func"]
    traffic = records["bytes"].astype(np.float64)
    gathered = (
        (func == shm_v1.Func.ALL_GATHER)
        | (func == shm_v1.Func.REDUCE_SCATTER)
        | (func == shm_v1.Func.ALL_TO_ALL)
    )
    traffic = np.where(gathered, traffic * n, traffic)
    factor = np.where(
        func == shm_v1.Func.ALL_REDUCE, 2 * (n - 1) / n, np.where(gathered, (n - 1) / n, 1.0)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(seconds > 0, traffic / 1e9 / seconds, 0.0)
    return algbw * factor
