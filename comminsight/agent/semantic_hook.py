"""The Semantic Engine inside the Agent: one GpuEngine per profiled process, on a thread of its
own, writing step summaries to `<home>/semantics/step/live-<node>-<pid>-<start>.jsonl`
(`.partial` while the process runs, sealed when it has exited).

Ingest must never wait for step recovery, so `feed` only queues the batch (records the ring
copy already made; nothing is copied again). The worker turns the batches into engine ops and
places them. When more than `max_queued` records wait, new batches are dropped and counted,
and the GPU's next op carries them as lost records (the Step it falls in reports
records_lost). `finished` closes a GPU whose process is gone: its last Step is written.

Every COMMINSIGHT_SEMANTIC_CHECKPOINT_S the worker checkpoints every engine to
`<home>/semantics/step/engine-live.checkpoint.json` (semantic-engine v1, mode live: the ring
position of the first op not yet placed). An Agent started again for the same home restores
the engines of processes still running, skips the ring records they had placed, truncates
their summaries to the checkpointed length, and goes on: no Step lost or written twice, as
long as the ring still holds the records that came after the checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

import msgspec
import numpy as np
from msgspec import UnsetType

from comminsight.agent.engine_hook import GpuStream
from comminsight.semantic.checkpoint import (
    CheckpointError,
    CheckpointFile,
    gpu_state,
    restore_engine,
)
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.offline import SummaryFile
from comminsight.semantic.op_batch import CommTable, SegmentTable
from comminsight.semantic.shm_input import CommInfo, engine_batch
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.templates import TemplateSet
from comminsight_gen.models.semantic_engine_v1 import GpuState, ShmPosition
from comminsight_gen.models.step_summary_v1 import ProducerMode

log = logging.getLogger(__name__)

MAX_QUEUED_RECORDS = 1 << 20
CHECKPOINT_NAME = "engine-live.checkpoint.json"


class _Gpu:
    def __init__(self, gpu: GpuStream, engine: GpuEngine, out: SummaryFile) -> None:
        self.gpu = gpu
        self.engine = engine
        self.out = out
        self.lost = 0  # records dropped before reaching the engine, not yet reported
        self.finished = False
        self.skip_through = -1  # ring records up to this seq were placed before a restart
        self.last_position = None  # of the latest op fed
        self.comms = CommTable()  # the GPU's communicators, shared by its batches
        self.segments = SegmentTable()
        self.saved: GpuState | None = None  # a finished process's state, carried over


def coalesce(items: list) -> list:
    """The queued items GPU by GPU, in order, each run of one GPU's op batches merged into
    one: the engine's cost is mostly per batch, and GPUs are independent of each other."""
    by_gpu: dict = {}
    for kind, gpu, payload in items:
        run = by_gpu.setdefault(gpu, [])
        if kind == "ops" and run and run[-1][0] == "ops":
            records, comms = run[-1][2]
            records.append(payload[0])
            comms.update(payload[1])
        elif kind == "ops":
            run.append(("ops", gpu, ([payload[0]], dict(payload[1]))))
        else:
            run.append((kind, gpu, payload))
    out = []
    for run in by_gpu.values():
        for kind, gpu, payload in run:
            if kind == "ops":
                records, comms = payload
                payload = (records[0] if len(records) == 1 else np.concatenate(records), comms)
            out.append((kind, gpu, payload))
    return out


class SemanticEngineHook:
    name = "semantic engine"

    def __init__(
        self,
        home: str | Path,
        templates: TemplateSet,
        max_queued: int = MAX_QUEUED_RECORDS,
        checkpoint_s: float = 10.0,
    ) -> None:
        self.out_dir = Path(home) / "semantics" / "step"
        self.templates = templates
        self.max_queued = max_queued
        self.checkpoint_s = checkpoint_s
        self.dropped_records = 0
        self.steps_written = 0
        self.failed: dict[GpuStream, str] = {}  # why a GPU's engine gave up (logged once)
        self.restored = 0  # GPUs resumed from a checkpoint
        self._items: deque = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._busy = False
        self._gpus: dict[GpuStream, _Gpu] = {}
        self._stopping = False
        self._checkpoint = CheckpointFile(
            self.out_dir / CHECKPOINT_NAME, templates.digest(), ProducerMode.live
        )
        # (pid, producer start) -> the state an earlier Agent left for a process
        self._saved: dict[tuple[int, int], GpuState] = {}
        for state in self._checkpoint.load().values():
            if isinstance(state.input, ShmPosition) and not isinstance(state.gpu.pid, UnsetType):
                self._saved[(state.gpu.pid, state.input.producer_start_real_ns)] = state
        self._next_checkpoint = time.monotonic() + checkpoint_s
        self._thread = threading.Thread(target=self._run, name="semantic-engine", daemon=True)
        self._thread.start()

    # ---- ingest side (the Agent's loop) --------------------------------------------------

    def feed(self, gpu: GpuStream, records: np.ndarray, comms: dict[int, CommInfo]) -> None:
        with self._cond:
            if self._queued + len(records) > self.max_queued:
                self.dropped_records += len(records)
                self._items.append(("lost", gpu, len(records)))
            else:
                self._queued += len(records)
                self._items.append(("ops", gpu, (records, comms)))
            self._cond.notify()

    def finished(self, gpu: GpuStream) -> None:
        with self._cond:
            self._items.append(("finished", gpu, None))
            self._cond.notify()

    @property
    def queued_records(self) -> int:
        with self._cond:
            return self._queued

    def idle(self) -> bool:
        """Nothing queued and nothing being processed (for tests and shutdown)."""
        with self._cond:
            return not self._items and not self._busy

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the worker, checkpoint, and flush every GPU's file (open Steps are in the
        checkpoint, not in the files)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout_s)
        self._save_checkpoint()
        for g in self._gpus.values():
            g.out.close()

    # ---- the worker ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._busy = False
                    self._cond.wait(timeout=self.checkpoint_s)
                    if time.monotonic() >= self._next_checkpoint:
                        break
                if self._stopping:
                    return
                items = list(self._items)
                self._items.clear()
                self._busy = bool(items)
                self._queued -= sum(len(p[0]) for kind, _, p in items if kind == "ops")
            for kind, gpu, payload in coalesce(items):
                if gpu in self.failed:
                    continue
                try:
                    self._handle(kind, gpu, payload)
                except Exception as e:  # one GPU's bad data must not stop the others
                    # once: its engine's state is no longer to be trusted, and the same
                    # error would come with every batch
                    log.exception(
                        "semantic engine: GPU pid %d failed; its ops are skipped", gpu.pid
                    )
                    self.failed[gpu] = f"{type(e).__name__}: {e}"[:300]
            if time.monotonic() >= self._next_checkpoint:
                self._save_checkpoint()

    def _state(self, gpu: GpuStream) -> _Gpu:
        g = self._gpus.get(gpu)
        if g is not None:
            return g
        name = f"live-{gpu.node_name}-{gpu.pid}-{gpu.start_real_ns}.jsonl"
        saved = self._saved.pop((gpu.pid, gpu.start_real_ns), None)
        if saved is not None:
            g = self._restore(gpu, saved, name)
            if g is not None:
                self._gpus[gpu] = g
                return g
        identity = GpuIdentity(
            host=gpu.node_name,
            global_rank=gpu.global_rank if gpu.global_rank is not None else gpu.pid,
            pid=gpu.pid,
            local_rank=gpu.local_rank,
            cuda_device=gpu.cuda_device,
            job_id=gpu.job_id,
        )
        engine = GpuEngine(identity, self.templates, mode=ProducerMode.live)
        # open while the process runs, sealed (renamed) when it finishes: the archive takes
        # only sealed files
        out = SummaryFile(self.out_dir / f"{name}.partial", 0, 0)
        g = self._gpus[gpu] = _Gpu(gpu, engine, out)
        return g

    def _restore(self, gpu: GpuStream, state: GpuState, name: str) -> _Gpu | None:
        if state.output.file == name:  # sealed: the process had finished
            engine = GpuEngine(GpuIdentity(gpu.node_name, 0), self.templates)
            g = _Gpu(gpu, engine, SummaryFile(None, 0, 0))
            g.finished, g.saved = True, state
            return g
        try:
            engine = restore_engine(state, self.templates, mode=ProducerMode.live)
        except CheckpointError as e:
            log.warning("semantic engine: pid %d starts over: %s", gpu.pid, e)
            return None
        out = SummaryFile(
            self.out_dir / state.output.file,
            state.output.byte_offset,
            state.output.summaries_written,
        )
        g = _Gpu(gpu, engine, out)
        g.skip_through = state.input.last_ring_seq
        self.restored += 1
        log.info("semantic engine: pid %d resumed after ring record %d", gpu.pid, g.skip_through)
        return g

    def _handle(self, kind: str, gpu: GpuStream, payload) -> None:
        g = self._state(gpu)
        if g.finished:
            return
        if kind == "lost":
            g.lost += payload
            return
        if kind == "finished":
            g.finished = True
            self._write(g, g.engine.finish())
            g.out.seal()
            return
        records, comms = payload
        if g.skip_through >= 0:
            # a restarted Agent reads the ring from its oldest record: skip what the engine
            # had placed; records overwritten since are lost
            records = records[records["seq"] > g.skip_through]
            if len(records):
                g.lost += max(0, int(records["seq"][0]) - (g.skip_through + 1))
                g.skip_through = -1
        batch = engine_batch(
            records, comms, gpu.start_real_ns, gpu.start_mono_ns, g.comms, g.segments
        )
        if len(batch):
            batch.cols["lost_before"][0] += g.lost
            g.lost = 0
            self._write(g, g.engine.feed(batch))
            g.last_position = batch.position(len(batch) - 1)
        g.out.flush()  # visible to readers (the API); fsync at checkpoints

    def _write(self, g: _Gpu, summaries: list) -> None:
        if summaries:
            g.out.add(summaries)
            self.steps_written += len(summaries)

    def _save_checkpoint(self) -> None:
        self._next_checkpoint = time.monotonic() + self.checkpoint_s
        states = {}
        for g in self._gpus.values():
            if g.out.path is None:
                if g.saved is not None:
                    states[g.saved.output.file] = g.saved
                continue
            if g.finished:
                position = g.last_position.after() if g.last_position is not None else None
            else:
                position = g.engine.resume_point(g.last_position)
            if position is None:
                continue
            size = g.out.sync() if g.out.path.name.endswith(".partial") else 0
            states[g.out.path.name] = gpu_state(
                g.engine,
                position,
                g.out.path.name,
                size,
                g.out.written,
                shm_file=g.gpu.shm_file,
                producer_start_real_ns=g.gpu.start_real_ns,
            )
        for state in self._saved.values():  # processes not seen since the restart: kept
            if (self.out_dir / state.output.file).exists():  # unless their file is gone
                states[state.output.file] = state
        if states:
            try:
                self._checkpoint.save(states)
            except (OSError, msgspec.EncodeError) as e:
                log.error("semantic engine: cannot write its checkpoint: %s", e)
