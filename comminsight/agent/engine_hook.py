"""Where the Agent hands completed ops to the Semantic Engine, one stream per GPU.

The Agent calls `feed(gpu, records)` after every ingest pass with the Coll/P2P records of one
process (one process drives one GPU), in ring order. The Semantic Engine is its own issue;
until it lands the Agent runs `PassThroughEngine`, which only counts what it was handed so
the hand-off itself is exercised and visible. It recovers no Steps and writes no summaries,
and says so in its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class GpuStream:
    """The identity of one GPU's op stream on this node."""

    node_name: str
    pid: int
    start_real_ns: int  # with pid: one process, even if the pid is reused
    global_rank: int | None
    cuda_device: int | None


class EngineHook(Protocol):
    name: str

    def feed(self, gpu: GpuStream, records: np.ndarray) -> None: ...


@dataclass
class PassThroughEngine:
    """Counts the records handed over per GPU; recovers nothing."""

    name: str = "pass-through (no Semantic Engine in this build)"
    records_by_gpu: dict[GpuStream, int] = field(default_factory=dict)

    def feed(self, gpu: GpuStream, records: np.ndarray) -> None:
        self.records_by_gpu[gpu] = self.records_by_gpu.get(gpu, 0) + len(records)
