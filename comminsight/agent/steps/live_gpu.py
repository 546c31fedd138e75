"""One GPU of the live Semantic Engine: its engine, its summary file and what the worker keeps
of it between passes, and the names that tie it to its file and to a checkpoint.

A GPU's summary file is `live-<node>-<pid>-<start><suffix>.jsonl` (the suffix names one GPU of
a process that drives several; `.partial` while the process runs, sealed when it has exited).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from msgspec import UnsetType

from comminsight.agent.state.process_labels import ProcessLabels, index_label
from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.replay import ReplayEntry, ReplayLog
from comminsight.agent.steps.restarts import EngineFailure, RestartBudget
from comminsight.agent.steps.restored_context import PlacedRecords
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.offline import SummaryFile
from comminsight.semantic.op_batch import CommTable, SegmentTable
from comminsight_gen.models.semantic_engine_v1 import GpuState, ShmPosition


class LiveGpu:
    def __init__(
        self, gpu: GpuStream, name: str, engine: GpuEngine, out: SummaryFile, replay_max: int
    ) -> None:
        self.gpu = gpu
        self.name = name  # live-<node>-<pid>-<start><suffix>.jsonl (suffix: GpuStream)
        self.engine = engine
        self.out = out
        self.lost = 0  # records dropped before reaching the engine, not yet reported
        self.finished = False
        self.skip_through = -1  # ring records up to this seq were placed before a restart
        # while skipping them after an Agent restart: those of its last Steps, gathered to
        # give its cut the context it had (restored_context)
        self.placed_before: PlacedRecords | None = None
        self.last_position = None  # of the latest op fed
        self.comms = CommTable()  # the GPU's communicators, shared by its batches
        self.segments = SegmentTable()
        self.saved: GpuState | None = None  # a finished process's state, carried over
        self.checkpoint: GpuState | None = None  # the last state saved: where a restart resumes
        self.replay = ReplayLog(replay_max)  # what the engine was handed since `checkpoint`
        self.budget = RestartBudget()
        self.failures = 0
        self.restarts = 0
        self.last_failure: EngineFailure | None = None
        self.suspect: ReplayEntry | None = None  # the entry the engine failed on last
        self.retry_at: float | None = None  # backing off until then (CLOCK_MONOTONIC s)
        self.reported = out.written  # summaries counted in steps_written (restarts rewrite)
        self.seal_due = False  # finished, but sealing its file failed: sealed on a retry
        self.retired = False  # its SHM file is gone: dropped once sealed
        # restored from a checkpoint: whether its ring was checked for records it lost while
        # no Agent ran (lapped_rings), and what waits for its logs until they are read
        self.logs_checked = True
        self.parked: list | None = None  # (kind, payload) items, in order
        self.parked_until = 0.0  # CLOCK_MONOTONIC s: the logs are waited for until then
        self.parked_retry_at = 0.0
        self.not_ops = np.empty(0, np.int64)  # ring seqs its logs show were no op records

    def context_start(self) -> int:
        """The first ring record a restored GPU's cut needs again: that of its last Steps
        written (restored_context), else the first after its checkpoint."""
        start = self.skip_through + 1
        placed = self.placed_before
        if placed is not None:
            # never further back than the records it keeps (a damaged file may name record
            # 0), with room for the ring records between them that are no ops
            start = min(start, max(placed.lowest_ring, start - 2 * placed.most_records))
        return max(start, 0)


def summary_name(gpu: GpuStream) -> str:
    return f"live-{gpu.node_name}-{gpu.pid}-{gpu.start_real_ns}{gpu.suffix}.jsonl"


def labelled_stream(gpu: GpuStream, host: str) -> GpuStream:
    """gpu with the /metrics labels its producer's header would have given it."""
    labels = ProcessLabels(
        job_id=gpu.job_id or "",
        host=host,
        rank=index_label(gpu.global_rank),
        local_rank=index_label(gpu.local_rank),
        cuda_device=index_label(gpu.cuda_device),
    )
    return replace(gpu, labels=labels)


def stream_of(state: GpuState) -> GpuStream | None:
    """The GPU stream a checkpointed state names (one GPU of its process; its monotonic
    start comes from its logs), with the labels its producer's header gave it."""
    position, key = state.input, state.gpu
    if not isinstance(position, ShmPosition) or isinstance(key.pid, UnsetType):
        return None
    local_rank = None if isinstance(key.local_rank, UnsetType) else key.local_rank
    device = None if isinstance(key.cuda_device, UnsetType) else key.cuda_device
    job_id = None if isinstance(key.job_id, UnsetType) else key.job_id
    gpu = GpuStream(
        key.host,
        key.pid,
        position.producer_start_real_ns,
        key.global_rank,
        device,
        local_rank=local_rank,
        job_id=job_id,
        shm_file=position.shm_file,
        host=key.host,  # Inject's lines name the process by it
    )
    return labelled_stream(gpu, key.host)
