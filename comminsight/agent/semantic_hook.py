"""The Semantic Engine inside the Agent: one GpuEngine per profiled process, on a thread of its
own, writing step summaries to `<home>/semantics/step/live-<node>-<pid>-<start>.jsonl` (`.partial`
while the process runs).

Ingest must never wait for step recovery, so `feed` only queues the batch (records the ring
copy already made; nothing is copied again). The worker turns the batches into engine ops and
places them. When more than `max_queued` records wait, new batches are dropped and counted,
and the GPU's next op carries them as lost records (the Step it falls in reports
records_lost). `finished` closes a GPU whose process is gone: its last Step is written.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from pathlib import Path

import numpy as np

from comminsight.agent.engine_hook import GpuStream
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.offline import SummaryFile
from comminsight.semantic.shm_input import CommInfo, engine_ops
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.templates import TemplateSet
from comminsight_gen.models.step_summary_v1 import ProducerMode

log = logging.getLogger(__name__)

MAX_QUEUED_RECORDS = 1 << 20


class _Gpu:
    def __init__(self, gpu: GpuStream, engine: GpuEngine, out: SummaryFile) -> None:
        self.gpu = gpu
        self.engine = engine
        self.out = out
        self.lost = 0  # records dropped before reaching the engine, not yet reported
        self.finished = False


class SemanticEngineHook:
    name = "semantic engine"

    def __init__(
        self,
        home: str | Path,
        templates: TemplateSet,
        max_queued: int = MAX_QUEUED_RECORDS,
    ) -> None:
        self.out_dir = Path(home) / "semantics" / "step"
        self.templates = templates
        self.max_queued = max_queued
        self.dropped_records = 0
        self.steps_written = 0
        self._items: deque = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._gpus: dict[GpuStream, _Gpu] = {}
        self._stopping = False
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

    def idle(self) -> bool:
        """Nothing queued and nothing being processed (for tests and shutdown)."""
        with self._cond:
            return not self._items and not self._busy

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the worker and flush every GPU's file (open Steps stay unwritten)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout_s)
        for g in self._gpus.values():
            if not g.finished:
                g.out.sync()
                g.out.close()

    # ---- the worker ----------------------------------------------------------------------

    _busy = False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._busy = False
                    self._cond.wait()
                if self._stopping:
                    return
                kind, gpu, payload = self._items.popleft()
                self._busy = True
                if kind == "ops":
                    self._queued -= len(payload[0])
            try:
                self._handle(kind, gpu, payload)
            except Exception:  # one GPU's bad data must not stop the others
                log.exception("semantic engine: GPU pid %d failed", gpu.pid)

    def _state(self, gpu: GpuStream) -> _Gpu:
        g = self._gpus.get(gpu)
        if g is None:
            identity = GpuIdentity(
                host=gpu.node_name,
                global_rank=gpu.global_rank if gpu.global_rank is not None else gpu.pid,
                pid=gpu.pid,
                local_rank=gpu.local_rank,
                cuda_device=gpu.cuda_device,
                job_id=gpu.job_id,
            )
            # open while the process runs, sealed (renamed) when it finishes: the archive
            # takes only sealed files
            name = f"live-{gpu.node_name}-{gpu.pid}-{gpu.start_real_ns}.jsonl.partial"
            path = self.out_dir / name
            engine = GpuEngine(identity, self.templates, mode=ProducerMode.live)
            g = self._gpus[gpu] = _Gpu(gpu, engine, SummaryFile(path, 0, 0))
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
        for op in engine_ops(records, comms, gpu.start_real_ns, gpu.start_mono_ns):
            if g.lost:
                op.lost_before, g.lost = op.lost_before + g.lost, 0
            self._write(g, g.engine.feed(op))
        g.out.flush()  # visible to readers (the API); fsync only when the GPU finishes

    def _write(self, g: _Gpu, summaries: list) -> None:
        if summaries:
            g.out.add(summaries)
            self.steps_written += len(summaries)
