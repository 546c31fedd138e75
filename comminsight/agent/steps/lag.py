"""How far a GPU's live engine trails its input: the completion time of the newest op the
Agent ingested for the GPU minus that of the newest op the engine has placed into a Step.

Ops wait in the engine's reorder window (a few hundred ops) and, until it has chosen how to cut
Steps, in its selection probe; they wait in the hook's queue while the engine thread is busy,
and in the replay log while a failed engine backs off. All of that is lag; an idle job is not
(both ends stand still).
"""

from __future__ import annotations

import threading

import numpy as np

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.replay import newest_end
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.op_batch import OpBatch


def newest_placed_end(engine: GpuEngine, held_before: OpBatch | None, fed: OpBatch) -> int | None:
    """The latest completion time among the ops that the engine placed while taking `fed`:
    ops it held before (`held_before`, its reorder window then) or was handed now, and keeps
    neither in its window nor in its probe after. None when it placed none of them."""
    if engine.runner is None:  # still choosing: everything it took waits in the probe
        return None
    parts = [b for b in (held_before, fed) if b is not None and len(b)]
    if not parts:
        return None
    orders = np.concatenate([b["order"] for b in parts])
    ends = np.concatenate([b["end"] for b in parts])
    waiting = [b["order"] for b in (engine.held, engine.pending) if b is not None and len(b)]
    if waiting:
        placed = ~np.isin(orders, np.concatenate(waiting))
        ends = ends[placed]
    return int(ends.max()) if len(ends) else None


class GpuLag:
    """The two ends of one GPU's lag (CLOCK_MONOTONIC ns of op completions)."""

    __slots__ = ("ingested_end_ns", "placed_end_ns", "first_end_ns")

    def __init__(self) -> None:
        self.ingested_end_ns = 0  # newest op handed to the hook
        self.placed_end_ns: int | None = None  # newest op placed
        self.first_end_ns: int | None = None  # first op handed: the lag's start until a placing

    def ingested(self, end_ns: int, first_end_ns: int) -> None:
        if self.first_end_ns is None:
            self.first_end_ns = first_end_ns
        self.ingested_end_ns = max(self.ingested_end_ns, end_ns)

    def placed(self, end_ns: int | None) -> None:
        if end_ns is not None and (self.placed_end_ns is None or end_ns > self.placed_end_ns):
            self.placed_end_ns = end_ns

    def lag_ns(self) -> int | None:
        behind = self.placed_end_ns if self.placed_end_ns is not None else self.first_end_ns
        if behind is None:
            return None
        return max(0, self.ingested_end_ns - behind)


class NodeLags:
    """The lag of each GPU whose process runs: ingest notes the ops it hands over, the
    engine's thread those it placed, health reads both. A GPU is added by ingest and
    forgotten by the thread when sealed, hence the lock."""

    def __init__(self) -> None:
        self._lags: dict[GpuStream, GpuLag] = {}
        self._lock = threading.Lock()

    def ingested(self, gpu: GpuStream, records: np.ndarray) -> None:
        with self._lock:
            lag = self._lags.get(gpu)
            if lag is None:
                lag = self._lags[gpu] = GpuLag()
            lag.ingested(newest_end(records), int(records["complete_mono_ns"].min()))

    def get(self, gpu: GpuStream) -> GpuLag | None:
        return self._lags.get(gpu)

    def forget(self, gpu: GpuStream) -> None:
        with self._lock:
            self._lags.pop(gpu, None)
