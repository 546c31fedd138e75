"""Where the Agent hands completed ops to the Semantic Engine, one stream per GPU.

After every ingest pass the Agent calls `feed(gpu, records, comms)` with the Coll/P2P records
of one GPU in ring order (a process that drives several GPUs is split by its
communicator members: producer_gpus), and what its communicator table says
of the communicators; `finished(gpu)` once the process is gone and its ring drained;
`retired(gpu)` once its SHM file is removed too (no Agent can meet the process again). The
Agent runs `comminsight.agent.steps.semantic_hook.SemanticEngineHook` (COMMINSIGHT_SEMANTIC_ENABLE);
`PassThroughEngine` only counts what it is handed, for an Agent with the engine turned off
and for measuring the hand-off itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from comminsight.agent.state.process_labels import NO_PROCESS, ProcessLabels
from comminsight.semantic.shm_input import CommInfo


@dataclass(frozen=True)
class GpuStream:
    """The identity of one GPU's op stream on this node."""

    node_name: str
    pid: int
    start_real_ns: int  # with pid: one process, even if the pid is reused
    global_rank: int | None
    cuda_device: int | None
    start_mono_ns: int = field(default=0, compare=False)  # with start_real_ns: the clock pair
    local_rank: int | None = field(default=None, compare=False)
    job_id: str | None = field(default=None, compare=False)
    shm_file: str | None = field(default=None, compare=False)  # its SHM file's name
    # which GPU of a process that drives several ("" for one; ".dev<N>" or ".rank<N>", as the
    # offline reader names them)
    suffix: str = ""
    # the GPU's /metrics labels (job, host, ranks, device, UUID)
    labels: ProcessLabels = field(default=NO_PROCESS, compare=False)
    # the process's host name as it gives it (Inject's lines name the process by it) and the
    # user whose directory it was found in (None: the Agent's own home)
    host: str = field(default="", compare=False)
    uid: int | None = field(default=None, compare=False)


class EngineHook(Protocol):
    name: str

    def feed(self, gpu: GpuStream, records: np.ndarray, comms: dict[int, CommInfo]) -> None: ...

    def finished(self, gpu: GpuStream) -> None: ...

    def retired(self, gpu: GpuStream) -> None: ...

    def present(self, shm_files: set[str]) -> None: ...


@dataclass
class PassThroughEngine:
    """Counts the records handed over per GPU; recovers nothing."""

    name: str = "pass-through (Semantic Engine disabled)"
    records_by_gpu: dict[GpuStream, int] = field(default_factory=dict)
    finished_gpus: set[GpuStream] = field(default_factory=set)

    def feed(self, gpu: GpuStream, records: np.ndarray, comms: dict[int, CommInfo]) -> None:
        self.records_by_gpu[gpu] = self.records_by_gpu.get(gpu, 0) + len(records)

    def finished(self, gpu: GpuStream) -> None:
        self.finished_gpus.add(gpu)

    def retired(self, gpu: GpuStream) -> None:
        pass  # what was counted stays readable

    def present(self, shm_files: set[str]) -> None:
        pass  # nothing is resumed
