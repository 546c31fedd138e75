"""How far a GPU's live engine trails its input: the completion time of the newest op the
Agent ingested for the GPU minus that of the newest op the engine has placed into a Step.

Ops wait in the engine's reorder window (a few hundred ops) and, until it has chosen how to cut
Steps, in its selection probe; they wait in the hook's queue while the engine thread is busy,
and in the replay log while a failed engine backs off. All of that is lag; an idle job is not
(both ends stand still).
"""

from __future__ import annotations

import numpy as np

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
