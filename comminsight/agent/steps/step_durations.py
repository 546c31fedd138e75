"""How long each GPU's training Steps take, as the live Semantic Engine writes them:
`comminsight_step_duration_seconds`, a histogram per profiled GPU under the labels a fleet
joins on (process_labels), so a dashboard shows a job's Step rate and Step time per rank and a
straggling rank's Steps apart.

The engine's thread adds the Steps it writes (`StepDurations.add`); the Agent's pass takes
what was added since the last pass (`take`) and folds it into the node's metrics, which expire
a GPU's series with the rest of its process's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from comminsight.agent.state.process_labels import ProcessLabels

# training Steps last from tens of milliseconds (small models) to minutes (large ones)
STEP_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_EDGES = np.array(STEP_BUCKETS_S)


@dataclass
class StepTimes:
    """One GPU's Steps: a histogram of their durations."""

    count: int = 0
    sum_s: float = 0.0
    buckets: np.ndarray = field(default_factory=lambda: np.zeros(len(STEP_BUCKETS_S) + 1, np.int64))
    seen_mono_ns: int = 0  # the last pass its process was live

    def add(self, durations_s: list[float]) -> None:
        d = np.asarray(durations_s, dtype=np.float64)
        self.count += len(d)
        self.sum_s += float(d.sum())
        self.buckets += np.bincount(
            np.searchsorted(_EDGES, d, side="left"), minlength=len(self.buckets)
        )

    def plus(self, other: StepTimes) -> StepTimes:
        """A new histogram, the sum of both (GPUs of one job at scrape time)."""
        return StepTimes(
            self.count + other.count,
            self.sum_s + other.sum_s,
            self.buckets + other.buckets,
            max(self.seen_mono_ns, other.seen_mono_ns),
        )

    def merge(self, other: StepTimes) -> None:
        self.count += other.count
        self.sum_s += other.sum_s
        self.buckets += other.buckets


class StepDurations:
    """The Steps written since the last `take`, by GPU: the engine's thread adds, the Agent's
    loop takes. Bounded by the number of GPUs, not of Steps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: dict[ProcessLabels, StepTimes] = {}

    def add(self, labels: ProcessLabels, durations_s: list[float]) -> None:
        if not durations_s:
            return
        with self._lock:
            self._new.setdefault(labels, StepTimes()).add(durations_s)

    def take(self) -> dict[ProcessLabels, StepTimes]:
        with self._lock:
            new, self._new = self._new, {}
        return new
