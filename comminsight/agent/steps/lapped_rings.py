"""A ring that lapped its checkpoint while no Agent ran.

A GPU restored from the checkpoint (or a process that began while an earlier Agent that never
checkpointed it followed the home) needs its first ring records to reach back to where its
cut's context begins: its last Steps' first records, or the checkpoint. A ring that overwrote
them holds them no more, but its process's inspector logs do, and they are handed on first.
Until the log writer has written them, what comes for the GPU waits (parks), in order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from comminsight.agent.steps.live_gpu import LiveGpu
from comminsight.agent.steps.log_records import covered_through, op_slots, process_segments

log = logging.getLogger(__name__)

# A restored GPU whose ring lapped its checkpoint waits this long at most for its process's
# log writer to write the records it lost (it drains the ring every
# COMMINSIGHT_PROFILER_LOG_FLUSH_MS, 200 ms by default), looking again every LOG_RETRY_S.
LOG_WAIT_S = 10.0
LOG_RETRY_S = 0.2


class LappedRings:
    def __init__(self, logs_dir: Path) -> None:
        self._logs_dir = logs_dir

    def waiting(self, g: LiveGpu, kind: str, payload) -> bool:
        """Whether g waits for its logs already: the item waits behind the others."""
        if g.parked is None:
            return False
        g.parked.append((kind, payload))
        return True

    def lapped(self, g: LiveGpu, kind: str, payload) -> bool:
        """Whether g's first ops batch begins past where its cut's context begins (looked
        at once per GPU, at its first batch with records)."""
        if g.logs_checked or kind != "ops" or not len(payload[0]):
            return False
        g.logs_checked = True
        return int(payload[0]["seq"][0]) > g.context_start()

    def park(self, g: LiveGpu, kind: str, payload, now: float) -> None:
        g.parked, g.parked_until = [(kind, payload)], now + LOG_WAIT_S

    def fill(self, g: LiveGpu, now: float) -> Iterator[tuple]:
        """The (gpu, kind, payload) items to hand g: its records from its logs, from its
        context's start to its ring's first record, then what waited; once the logs reach
        that far, or their wait is over (what they lack then is lost, as are the records the
        writer itself missed: its gap lines). Nothing while they are waited for."""
        ring_first = int(g.parked[0][1][0]["seq"][0])
        segments = process_segments(self._logs_dir, g.gpu.pid, g.gpu.start_real_ns)
        through = covered_through(segments) if segments is not None else 0
        if through < ring_first - 1 and segments is not None and now < g.parked_until:
            g.parked_retry_at = now + LOG_RETRY_S
            return
        parked, g.parked = g.parked, None
        start, records, not_ops = g.context_start(), 0, []
        if segments is not None:
            for slots, comms in op_slots(segments, start, ring_first, not_ops):
                yield g.gpu, "ops", (slots, comms)
                records += len(slots)
        g.not_ops = np.array(not_ops, np.int64)
        log.warning(
            "semantic engine: pid %d: its ring had overwritten ring records %d to %d since "
            "its checkpoint; %d op records of them read back from its inspector logs%s",
            g.gpu.pid,
            start,
            ring_first - 1,
            records,
            "" if through >= ring_first - 1 else f" (they reach ring record {through} only)",
        )
        for kind, payload in parked:
            yield g.gpu, kind, payload

    def next_retry(self, gpus: Iterable[LiveGpu]) -> float:
        return min(
            (g.parked_retry_at for g in gpus if g.parked is not None),
            default=float("inf"),
        )

    def due(self, gpus: Iterable[LiveGpu], now: float) -> Iterator[LiveGpu]:
        """The GPUs whose logs are due to be looked at again."""
        for g in list(gpus):
            if g.parked is not None and g.parked_retry_at <= now:
                yield g
