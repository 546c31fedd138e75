"""The Semantic Engine inside the Agent: one GpuEngine per GPU of each profiled process, on a
thread of its own, writing step summaries to
`<home>/semantics/step/live-<node>-<pid>-<start><suffix>.jsonl` (the suffix names one GPU of a
process that drives several; `.partial` while the process runs, sealed when it has exited).

SemanticEngineHook puts its parts together and runs the worker's pass over them; each part
has one job, in a module of its own:

- engine_worker: the thread, and the queue `feed` fills (ingest never waits for recovery);
- gpu_engines: each GPU's engine, fed its ops, its Steps cut with those of the node's other
  GPUs (live_cut.LiveJobCut), finished and sealed once its process has ended;
- engine_restarts: an engine that failed, restored from its last checkpoint and handed again
  what came since, within a budget of restarts;
- live_checkpoint: every engine's state, every COMMINSIGHT_SEMANTIC_CHECKPOINT_S and at stop;
  an Agent started again for the same home goes on from it, no Step lost or written twice;
- summary_disk: the summaries written, and the writes a full or read-only disk refused;
- lapped_rings, ended_processes: what no Agent read while none ran, read back from the
  processes' inspector logs;
- engine_status: what health and metrics read.

Data flows one way, ingest -> queue -> pass -> engines -> summary files and checkpoint, and
the modules import only downward (live_gpu, summary_disk, live_checkpoint, gpu_engines, then
the parts that drive gpu_engines). A part whose work brings more items (the records its logs
give back) returns them, and the pass hands them on as it hands queued ones; where a part's
work must start that of a part above it (the checkpoint after the disk takes writes again, a
restart when an engine fails to give its state), the pass hands it that work for the call.

The worker thread itself never ends on an exception: a write that fails is the disk's
(summary_disk), anything else outside one GPU's engine is counted for health and the next
batches go on. What its passes free, glibc would keep resident at the highest peak so far;
the worker hands it back to the system after its passes, at most every TRIM_EVERY_S
(heap_trim).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from comminsight.agent.core.heap_trim import HeapTrim
from comminsight.agent.steps import engine_status
from comminsight.agent.steps.ended_processes import EndedProcesses
from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.engine_restarts import EngineRestarts
from comminsight.agent.steps.engine_status import EngineHeld, GpuEngineStatus
from comminsight.agent.steps.engine_worker import MAX_QUEUED_RECORDS, EngineWorker, coalesce
from comminsight.agent.steps.gpu_engines import GpuEngines
from comminsight.agent.steps.lag import NodeLags
from comminsight.agent.steps.lapped_rings import LappedRings
from comminsight.agent.steps.live_checkpoint import CHECKPOINT_NAME, LiveCheckpoint
from comminsight.agent.steps.live_gpu import LiveGpu
from comminsight.agent.steps.replay import DEFAULT_MAX_RECORDS
from comminsight.agent.steps.restarts import FailureCounts
from comminsight.agent.steps.step_durations import StepDurations
from comminsight.agent.steps.summary_disk import StorageFault, SummaryDisk
from comminsight.semantic.live_cut import LiveJobCut
from comminsight.semantic.offline import role_template
from comminsight.semantic.shm_input import CommInfo
from comminsight.semantic.templates import TemplateSet
from comminsight_gen import home_v1_names as home_names

__all__ = [
    "CHECKPOINT_NAME",
    "EngineHeld",
    "GpuEngineStatus",
    "SemanticEngineHook",
    "StorageFault",
    "coalesce",
]

log = logging.getLogger(__name__)


class SemanticEngineHook:
    name = "semantic engine"

    def __init__(
        self,
        home: str | Path,
        templates: TemplateSet,
        max_queued: int = MAX_QUEUED_RECORDS,
        checkpoint_s: float = 10.0,
        replay_max: int = DEFAULT_MAX_RECORDS,
        heap_trim: HeapTrim | None = None,
        node_name: str | None = None,
        markers_of: Callable[[GpuStream], np.ndarray | None] | None = None,
    ) -> None:
        """markers_of(gpu): its process's optimizer-step markers so far (Inject's), or None;
        called from the engine's thread at each cut."""
        self.out_dir = Path(home) / home_names.SEMANTICS / home_names.STEP
        self.logs_dir = Path(home) / home_names.INSPECTOR_LOGS
        self.node_name = node_name or socket.gethostname()  # the Agent's: in summary names
        self.templates = templates
        self.counts = FailureCounts()
        self.disk = SummaryDisk()
        self.lags = NodeLags()  # written by feed (ingest), read by health
        self.checkpoint = LiveCheckpoint(
            self.out_dir, templates, checkpoint_s, replay_max, self.disk
        )
        # Steps are cut over every GPU of the node at once (one answer for a job's ranks)
        self.live_cut = LiveJobCut(
            role_template=lambda batches: role_template(templates, batches), markers_of=markers_of
        )
        # what the worker frees goes back to the system (see heap_trim)
        self.heap_trim = heap_trim if heap_trim is not None else HeapTrim()
        self.engines = GpuEngines(
            self.out_dir,
            templates,
            replay_max,
            self.live_cut,
            self.checkpoint,
            self.disk,
            self.lags,
            self.counts,
            self.heap_trim,
        )
        self.restarts = EngineRestarts(self.engines, self.counts)
        self.lapped = LappedRings(self.logs_dir)
        self.ended = EndedProcesses(
            self.node_name, self.out_dir, self.logs_dir, self.engines, self.checkpoint, self.disk
        )
        self.worker = EngineWorker(max_queued, self._pass, self._next_due, self._final_pass)
        self.worker.start()

    # ---- ingest side (the Agent's loop) --------------------------------------------------

    def feed(self, gpu: GpuStream, records: np.ndarray, comms: dict[int, CommInfo]) -> None:
        if len(records):
            self.lags.ingested(gpu, records)
        self.worker.feed(gpu, records, comms)

    def finished(self, gpu: GpuStream) -> None:
        self.worker.put("finished", gpu, None)

    def present(self, shm_files: set[str]) -> None:
        """The node's SHM files after the Agent's first pass: a process resumed from the
        checkpoint whose file is not among them ended while no Agent ran."""
        self.worker.put("present", None, frozenset(shm_files))

    def retired(self, gpu: GpuStream) -> None:
        """gpu's SHM file is gone, so no Agent meets its process again: once its file is
        sealed, nothing of it is kept (nor checkpointed), however many processes come and go."""
        self.worker.put("retired", gpu, None)

    @property
    def queued_records(self) -> int:
        return self.worker.queued_records

    def idle(self) -> bool:
        """Nothing queued and nothing being processed (for tests and shutdown)."""
        return self.worker.idle()

    @property
    def running(self) -> bool:
        """The worker thread is alive (it ends only at stop)."""
        return self.worker.running

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the worker: it ends the pass it is in, then places what the ended GPUs still
        hold, checkpoints and closes every GPU's file itself (open Steps are in the
        checkpoint, not in the files). Only the worker writes a checkpoint: one written
        beside a busy worker would pair each engine's state with a summary file of another
        moment, and a restart from it loses or repeats Steps. A worker still busy after
        `timeout_s` is left to finish on its own; until it does, the checkpoint on disk is
        the last one it wrote, which matches the files as far as it names them."""
        self.worker.stop(timeout_s)

    # ---- what health and metrics read ----------------------------------------------------

    @property
    def dropped_records(self) -> int:
        return self.worker.dropped_records

    @property
    def steps_written(self) -> int:
        return self.disk.steps_written

    @property
    def step_durations(self) -> StepDurations:
        """For /metrics, taken by the Agent's loop."""
        return self.disk.step_durations

    @property
    def storage_fault(self) -> StorageFault | None:
        return self.disk.fault

    @property
    def storage_faults_total(self) -> int:
        return self.disk.faults_total

    @property
    def restored(self) -> int:
        """GPUs resumed from a checkpoint."""
        return self.checkpoint.restored

    @property
    def ended_unfinished(self) -> int:
        return self.ended.ended_unfinished

    @property
    def resumed_from_logs(self) -> int:
        return self.ended.resumed_from_logs

    @property
    def unseen_from_logs(self) -> int:
        return self.ended.unseen_from_logs

    def gpu_status(self) -> list[GpuEngineStatus]:
        return engine_status.gpu_status(self._gpus(), self.lags)

    def lag_ns(self) -> int | None:
        """The worst lag of the GPUs whose processes run (None before any op)."""
        return engine_status.worst_lag_ns(self.gpu_status())

    def held(self) -> EngineHeld:
        return engine_status.held(self._gpus(), self.queued_records)

    def pending_summaries(self) -> tuple[int, int]:
        """Summaries waiting in memory for the disk, and those dropped past its bound."""
        return engine_status.pending_summaries(self._gpus())

    def _gpus(self) -> list[LiveGpu]:
        return list(self.engines.gpus.values())

    # ---- the worker's pass ---------------------------------------------------------------

    def _pass(self, items: list) -> None:
        try:
            self._work(items)
        except OSError as e:  # the disk, not a bug: retried, named in health
            self.disk.failed(self.out_dir, e)
        except Exception as e:  # a bug outside any one GPU: the others must go on
            log.exception("semantic engine: a worker pass failed")
            self.counts.count(e, None)

    def _work(self, items: list) -> None:
        if items:
            self.heap_trim.worked()
        if self.disk.retry_due():
            self._retry_storage()
        for kind, gpu, payload in coalesce(items):
            if kind == "present":
                self._seal_ended_before(payload)
            else:
                self._take(gpu, kind, payload)
        if self.live_cut.due(time.monotonic()):
            self.engines.cut()
        self.engines.finish_ended()
        self.restarts.retry_due(time.monotonic())
        self._retry_parked(time.monotonic())
        if time.monotonic() >= self.checkpoint.next_at:
            self._save_checkpoint()
        self.heap_trim.maybe(time.monotonic())

    def _next_due(self) -> float:
        cut = self.live_cut.next_deadline()
        return min(
            self.checkpoint.next_at,
            self.restarts.next_retry(),
            cut or float("inf"),
            self.disk.retry_at,
            self.heap_trim.due_at(),
            self.lapped.next_retry(self.engines.gpus.values()),
        )

    def _final_pass(self) -> None:
        try:
            self.engines.finish_ended(all_ended=True)  # their peers' last ops will not come now
            self._save_checkpoint()
        except Exception:  # the files are closed all the same
            log.exception("semantic engine: its final checkpoint failed")
        self.engines.close_all()

    def _take(self, gpu: GpuStream, kind: str, payload) -> None:
        """Hand one item to its GPU's engine, kept in its replay log for a restart."""
        if kind == "retired":
            self.engines.retire(gpu)
            return
        g = self.engines.state(gpu)
        if g.finished or self._waits_for_logs(g, kind, payload):
            return
        entry = g.replay.add(kind, payload)
        if g.replay.full:  # checkpoint soon, so that a restart still finds all it needs
            self.checkpoint.soon()
        if g.retry_at is not None:  # backing off: the entry waits in the replay log
            return
        try:
            self.engines.handle(g, kind, payload)
        except Exception as e:  # one GPU's failure must not stop the others
            self.restarts.failed(g, e, entry)
        if kind == "ops" and self.live_cut.due(time.monotonic()):
            self.engines.cut()

    def _waits_for_logs(self, g: LiveGpu, kind: str, payload) -> bool:
        """Whether the item waits for g's logs (lapped_rings): behind others that wait, or
        as the first of a ring that lapped; its logs are looked at for the first at once."""
        if self.lapped.waiting(g, kind, payload):
            return True
        if not self.lapped.lapped(g, kind, payload):
            return False
        now = time.monotonic()
        self.lapped.park(g, kind, payload, now)
        self._fill_from_logs(g, now)
        return True

    def _fill_from_logs(self, g: LiveGpu, now: float) -> None:
        for item in self.lapped.fill(g, now):
            self._take(*item)

    def _retry_parked(self, now: float) -> None:
        for g in self.lapped.due(self.engines.gpus.values(), now):
            self._fill_from_logs(g, now)

    def _seal_ended_before(self, shm_files: frozenset[str]) -> None:
        """Seal the summaries of the processes that ended while no Agent ran, or hand them
        their records from their logs (ended_processes); then a checkpoint at once: it names
        what this Agent took on."""
        for item in self.ended.log_items(self.ended.recover(shm_files)):
            self._take(*item)
        self.checkpoint.at_once()

    def _save_checkpoint(self) -> None:
        self.checkpoint.save(self._gpus(), self.restarts.failed)

    def _retry_storage(self) -> None:
        """Write what waits, seal what is due, checkpoint (summary_disk)."""
        self.disk.retry(self.out_dir, self.engines.write_waiting, self._save_checkpoint)
