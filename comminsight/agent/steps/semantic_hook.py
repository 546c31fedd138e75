"""The Semantic Engine inside the Agent: one GpuEngine per GPU of each profiled process, on a
thread of its own, writing step summaries to
`<home>/semantics/step/live-<node>-<pid>-<start><suffix>.jsonl` (the suffix names one GPU of a
process that drives several; `.partial` while the process runs, sealed when it has exited).

Ingest must never wait for step recovery, so `feed` only queues the batch (records the ring
copy already made; nothing is copied again). The worker turns the batches into engine ops and
hands them to the node's Step cut (live_cut.LiveJobCut), which decides the Steps of all the
node's GPUs together and places them as they settle. When more than `max_queued` records
wait, new batches are dropped and counted, and the GPU's next op carries them as lost
records (the Step it falls in reports records_lost). `finished` ends a GPU whose process is
gone: once the GPUs it shares communicators with have ended too (or the cut's wait is
over), its last ops are placed, its last Step written and its file sealed.

Every COMMINSIGHT_SEMANTIC_CHECKPOINT_S the worker checkpoints every engine to
`<home>/semantics/step/engine-live.checkpoint.json` (semantic-engine v1, mode live: the ring
position of the first op not yet placed). An Agent started again for the same home restores
the engines of processes still running, skips the ring records they had placed (those of
their last Steps give the node's cut back the context it had: restored_context), truncates
their summaries to the checkpointed length, and goes on: no Step lost or written twice, as
long as the ring still holds the records that came after the checkpoint (or the process's
inspector logs do: a ring that lapped it, or a process that ended, is read from them).

An Agent also checkpoints as it starts, with the time since when Agents have followed the
home (watching_since_real_ns). The next one recovers the processes that ran since then and no
checkpoint names (an Agent killed before naming them, or none running while they did) from
their logs, from their first record on: the Steps an Agent that never stopped writes.

An exception out of one GPU's engine (a failure) does not end step recovery for that GPU:
the engine is restored from the GPU's last checkpoint and handed again what it was handed
since (steps.replay), which rewrites the same summaries; failures and restarts are counted
by reason for health and metrics. Restarts are rate-limited per GPU (steps.restarts); an ops
batch that fails again after a restart is dropped as lost records, so one bad batch cannot
stop a GPU for good. The worker thread itself never ends on an exception.

A write that fails (a full disk, a read-only home) is not a failure of the engine: the
summaries wait in their SummaryFile, the checkpoint keeps its last good state, a file due to
be sealed stays due, and the worker tries again every STORAGE_RETRY_S until the disk takes
them (StorageFault: health names the file and the error while it lasts).

What the worker's passes free, glibc would keep resident at the highest peak so far; the
worker hands it back to the system after its passes, at most every TRIM_EVERY_S (heap_trim).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec
import numpy as np
from msgspec import UnsetType

from comminsight.agent.core.heap_trim import HeapTrim
from comminsight.agent.core.process_labels import ProcessLabels, index_label
from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.lag import GpuLag, newest_placed_end
from comminsight.agent.steps.log_records import (
    LogReader,
    ProcessSegments,
    covered_through,
    op_slots,
    process_segments,
)
from comminsight.agent.steps.logged_processes import LoggedProcess, logged_since, running_pids
from comminsight.agent.steps.replay import DEFAULT_MAX_RECORDS, ReplayEntry, ReplayLog, newest_end
from comminsight.agent.steps.restarts import (
    EngineFailure,
    FailureCounts,
    RestartBudget,
)
from comminsight.agent.steps.restored_context import (
    PlacedRecords,
    labelled_context,
    newest_within,
    open_span,
    written_spans,
)
from comminsight.agent.steps.step_durations import StepDurations
from comminsight.semantic.checkpoint import (
    CheckpointError,
    CheckpointFile,
    gpu_state,
    restore_engine,
)
from comminsight.semantic.cut_runner import LiveCutRunner
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.live_cut import LiveJobCut
from comminsight.semantic.offline import SummaryFile, role_template
from comminsight.semantic.op_batch import CommTable, SegmentTable
from comminsight.semantic.positions import RingPosition
from comminsight.semantic.process_gpus import split_process
from comminsight.semantic.shm_input import CommInfo, engine_batch
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.templates import TemplateSet
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.semantic_engine_v1 import GpuState, ShmPosition
from comminsight_gen.models.step_summary_v1 import ProducerMode

log = logging.getLogger(__name__)

# 256-byte ring records: 64 MiB waiting for an engine that cannot keep up, then dropped
# and counted (an Agent that queued without end would take the node's memory)
MAX_QUEUED_RECORDS = 1 << 18
CHECKPOINT_NAME = "engine-live.checkpoint.json"
# A replay log nearly full asks for a checkpoint (which trims it) ahead of time, but not more
# often than this: a checkpoint fsyncs every GPU's summaries.
MIN_CHECKPOINT_GAP_S = 1.0
STORAGE_RETRY_S = 5.0
# A restored GPU whose ring lapped its checkpoint waits this long at most for its process's
# log writer to write the records it lost (it drains the ring every
# COMMINSIGHT_PROFILER_LOG_FLUSH_MS, 200 ms by default), looking again every LOG_RETRY_S.
LOG_WAIT_S = 10.0
LOG_RETRY_S = 0.2
# The ended processes no checkpoint named that an Agent recovers from their logs as it starts:
# those of the last day, the latest 1024 (each is read whole, before the live ones go on)
UNSEEN_LOOKBACK_NS = 24 * 3600 * 10**9
MAX_UNSEEN = 1024
# Ended processes' records read back from their logs are handed to the node's cut as the
# Agent's polls (20 ms by default) met them: LOG_WINDOW_NS of the job's time at a time, for
# at most MAX_LOG_READERS processes together (an open segment each)
LOG_WINDOW_NS = 20_000_000
MAX_LOG_READERS = 64


@dataclass
class StorageFault:
    """Writes under semantics/step/ are failing: since when, the latest file and error."""

    path: str
    error: str
    since_mono_s: float
    since_real_ns: int
    failures: int = 1


class _Gpu:
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
        # no Agent ran (logs_fill), and what waits for its logs until they are read
        self.logs_checked = True
        self.parked: list | None = None  # (kind, payload) items, in order
        self.parked_until = 0.0  # CLOCK_MONOTONIC s: the logs are waited for until then
        self.parked_retry_at = 0.0
        self.not_ops = np.empty(0, np.int64)  # ring seqs its logs show were no op records


@dataclass(frozen=True)
class GpuEngineStatus:
    """One GPU's live engine, for health."""

    pid: int
    global_rank: int | None
    state: str  # running | backing_off | finished
    lag_ns: int | None
    steps_written: int
    failures: int
    restarts: int
    last_failure: EngineFailure | None
    retry_in_s: float | None


@dataclass(frozen=True)
class EngineHeld:
    """What the hook holds, in ops and records (its memory is bounded by these)."""

    queued_records: int  # waiting for the worker
    replay_records: int  # kept for restarts
    engine_ops: int  # in the engines' reorder windows and selection probes
    gpus: int


class _ReplayFailed(Exception):
    def __init__(self, entry: ReplayEntry | None, error: Exception) -> None:
        super().__init__(str(error))
        self.entry = entry
        self.error = error


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
        replay_max: int = DEFAULT_MAX_RECORDS,
        heap_trim: HeapTrim | None = None,
        node_name: str | None = None,
        markers_of: Callable[[GpuStream], np.ndarray | None] | None = None,
    ) -> None:
        """markers_of(gpu): its process's optimizer-step markers so far (Inject's), or None;
        called from the engine's thread at each cut."""
        self.out_dir = Path(home) / home_names.SEMANTICS / home_names.STEP
        self.node_name = node_name or socket.gethostname()  # the Agent's: in summary names
        self.templates = templates
        self.max_queued = max_queued
        self.checkpoint_s = checkpoint_s
        self.replay_max = replay_max
        self.dropped_records = 0
        self.steps_written = 0
        self.step_durations = StepDurations()  # for /metrics, taken by the Agent's loop
        self.counts = FailureCounts()
        self.restored = 0  # GPUs resumed from a checkpoint
        self.ended_unfinished = 0  # resumed GPUs whose process had ended: sealed as they were
        self.resumed_from_logs = 0  # resumed GPUs whose process had ended: from their logs
        self.unseen_from_logs = 0  # ended processes no checkpoint named: from their logs
        self.logs_dir = Path(home) / home_names.INSPECTOR_LOGS
        self.storage_fault: StorageFault | None = None  # while writes fail
        self.storage_faults_total = 0  # writes that failed, ever
        self._storage_retry_at = float("inf")
        self._items: deque = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._busy = False
        self._gpus: dict[GpuStream, _Gpu] = {}
        self._lags: dict[GpuStream, GpuLag] = {}  # written by feed (ingest), read by health
        self._stopping = False
        self._final_checkpoint = False  # set by stop(): the worker checkpoints as it ends
        self._checkpoint = CheckpointFile(
            self.out_dir / CHECKPOINT_NAME, templates.digest(), ProducerMode.live
        )
        # its summary file's name (live-<node>-<pid>-<start><suffix>.jsonl: one GPU of one
        # process) -> the state an earlier Agent left for that GPU
        self._saved: dict[str, GpuState] = {}
        loaded = self._checkpoint.load()
        self._checkpoint_held = bool(loaded)  # the file on disk names GPUs
        # since when Agents have followed this home (None: no Agent has before this one), and
        # since when this one does: the processes that ran in between and no checkpoint names
        # are recovered from their logs (_recover_unseen, _state)
        self._watching_since = self._checkpoint.watching_since_real_ns
        self._started_real_ns = time.time_ns()
        self._watch_marked = False  # a checkpoint says this Agent follows the home
        for state in loaded.values():
            if isinstance(state.input, ShmPosition) and not isinstance(state.gpu.pid, UnsetType):
                self._saved[state.output.file.removesuffix(".partial")] = state
        self._last_checkpoint = time.monotonic()
        self._next_checkpoint = self._last_checkpoint + checkpoint_s
        # Steps are cut over every GPU of the node at once (one answer for a job's ranks)
        self.live_cut = LiveJobCut(
            role_template=lambda batches: role_template(templates, batches), markers_of=markers_of
        )
        # what the worker frees goes back to the system (see heap_trim)
        self.heap_trim = heap_trim if heap_trim is not None else HeapTrim()
        self._thread = threading.Thread(target=self._run, name="semantic-engine", daemon=True)
        self._thread.start()

    # ---- ingest side (the Agent's loop) --------------------------------------------------

    def feed(self, gpu: GpuStream, records: np.ndarray, comms: dict[int, CommInfo]) -> None:
        with self._cond:
            if len(records):
                lag = self._lags.get(gpu)
                if lag is None:
                    lag = self._lags[gpu] = GpuLag()
                lag.ingested(newest_end(records), int(records["complete_mono_ns"].min()))
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

    def present(self, shm_files: set[str]) -> None:
        """The node's SHM files after the Agent's first pass: a process resumed from the
        checkpoint whose file is not among them ended while no Agent ran."""
        with self._cond:
            self._items.append(("present", None, frozenset(shm_files)))
            self._cond.notify()

    def retired(self, gpu: GpuStream) -> None:
        """gpu's SHM file is gone, so no Agent meets its process again: once its file is
        sealed, nothing of it is kept (nor checkpointed), however many processes come and go."""
        with self._cond:
            self._items.append(("retired", gpu, None))
            self._cond.notify()

    @property
    def queued_records(self) -> int:
        with self._cond:
            return self._queued

    def idle(self) -> bool:
        """Nothing queued and nothing being processed (for tests and shutdown)."""
        with self._cond:
            return not self._items and not self._busy

    @property
    def running(self) -> bool:
        """The worker thread is alive (it ends only at stop)."""
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the worker: it ends the pass it is in, then places what the ended GPUs still
        hold, checkpoints and closes every GPU's file itself (open Steps are in the
        checkpoint, not in the files). Only the worker writes a checkpoint: one written
        beside a busy worker would pair each engine's state with a summary file of another
        moment, and a restart from it loses or repeats Steps. A worker still busy after
        `timeout_s` is left to finish on its own; until it does, the checkpoint on disk is
        the last one it wrote, which matches the files as far as it names them."""
        with self._cond:
            self._stopping = self._final_checkpoint = True
            self._cond.notify()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning(
                "semantic engine: its worker is still busy after %.0f s; it checkpoints when "
                "its pass ends (a restart before that resumes from its last checkpoint)",
                timeout_s,
            )

    def _final_pass(self) -> None:
        try:
            self._finish_ended(all_ended=True)  # their peers' last ops will not come now
            self._save_checkpoint()
        except Exception:  # the files are closed all the same
            log.exception("semantic engine: its final checkpoint failed")
        for g in list(self._gpus.values()):
            g.out.close()

    # ---- what health and metrics read ----------------------------------------------------

    def gpu_status(self) -> list[GpuEngineStatus]:
        now = time.monotonic()
        out = []
        for g in list(self._gpus.values()):
            lag = self._lags.get(g.gpu)
            if g.finished:
                state = "finished"
            elif g.retry_at is not None:
                state = "backing_off"
            else:
                state = "running"
            out.append(
                GpuEngineStatus(
                    pid=g.gpu.pid,
                    global_rank=g.gpu.global_rank,
                    state=state,
                    lag_ns=lag.lag_ns() if lag is not None and not g.finished else None,
                    steps_written=g.reported,
                    failures=g.failures,
                    restarts=g.restarts,
                    last_failure=g.last_failure,
                    retry_in_s=max(0.0, g.retry_at - now) if g.retry_at is not None else None,
                )
            )
        return sorted(out, key=lambda s: (s.global_rank is None, s.global_rank or 0, s.pid))

    def lag_ns(self) -> int | None:
        """The worst lag of the GPUs whose processes run (None before any op)."""
        lags = [s.lag_ns for s in self.gpu_status() if s.lag_ns is not None]
        return max(lags, default=None)

    def held(self) -> EngineHeld:
        gpus = list(self._gpus.values())
        engine_ops = sum(
            len(b) for g in gpus for b in (g.engine.held, g.engine.pending) if b is not None
        )
        return EngineHeld(
            queued_records=self.queued_records,
            replay_records=sum(g.replay.records for g in gpus),
            engine_ops=engine_ops,
            gpus=len(gpus),
        )

    # ---- the worker ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._busy = False
                    now = time.monotonic()
                    cut = self.live_cut.next_deadline()
                    due = min(
                        self._next_checkpoint,
                        self._next_retry(),
                        cut or float("inf"),
                        self._storage_retry_at,
                        self.heap_trim.due_at(),
                        self._next_log_retry(),
                    )
                    if now >= due:
                        break
                    self._cond.wait(timeout=due - now)
                if self._stopping:
                    final = self._final_checkpoint
                    break
                items = list(self._items)
                self._items.clear()
                self._busy = bool(items)
                self._queued -= sum(len(p[0]) for kind, _, p in items if kind == "ops")
            try:
                self._work(items)
            except OSError as e:  # the disk, not a bug: retried, named in health
                self._storage_failed(self.out_dir, e)
            except Exception as e:  # a bug outside any one GPU: the others must go on
                log.exception("semantic engine: a worker pass failed")
                failure = EngineFailure.of(e)
                self.counts.failures[failure.reason] += 1
                self.counts.last, self.counts.last_pid = failure, None
        if final:  # the items still queued come again from the ring (or the process's logs)
            self._final_pass()

    def _work(self, items: list) -> None:
        if items:
            self.heap_trim.worked()
        if self.storage_fault is not None and time.monotonic() >= self._storage_retry_at:
            self._retry_storage()
        for kind, gpu, payload in coalesce(items):
            if kind == "present":
                self._seal_ended_before(payload)
            else:
                self._take(gpu, kind, payload)
        if self.live_cut.due(time.monotonic()):
            self._cut()
        self._finish_ended()
        self._retry_due(time.monotonic())
        self._retry_parked(time.monotonic())
        if time.monotonic() >= self._next_checkpoint:
            self._save_checkpoint()
        self.heap_trim.maybe(time.monotonic())

    def _next_retry(self) -> float:
        return min(
            (g.retry_at for g in self._gpus.values() if g.retry_at is not None),
            default=float("inf"),
        )

    def _take(self, gpu: GpuStream, kind: str, payload) -> None:
        if kind == "retired":
            self._retire(gpu)
            return
        g = self._state(gpu)
        if g.finished or self._waits_for_logs(g, kind, payload):
            return
        entry = g.replay.add(kind, payload)
        if g.replay.full:  # checkpoint soon, so that a restart still finds all it needs
            self._next_checkpoint = min(
                self._next_checkpoint, self._last_checkpoint + MIN_CHECKPOINT_GAP_S
            )
        if g.retry_at is not None:  # backing off: the entry waits in the replay log
            return
        try:
            self._handle(g, kind, payload)
        except Exception as e:  # one GPU's failure must not stop the others
            if self._note_failure(g, e, entry):
                self._restart_when_allowed(g)
        if kind == "ops" and self.live_cut.due(time.monotonic()):
            self._cut()

    def _state(self, gpu: GpuStream) -> _Gpu:
        g = self._gpus.get(gpu)
        if g is not None:
            return g
        name = _summary_name(gpu)
        saved = self._saved.pop(name, None)
        if saved is not None:
            g = self._restore(gpu, saved, name)
            if g is not None:
                self._gpus[gpu] = g
                self._track(g)
                return g
        if (self.out_dir / name).exists():
            # sealed by an Agent before this one, which let go of it once its SHM file was
            # retired: a file that outlived its removal must not start it over
            return self._sealed_before(gpu, name)
        # open while the process runs, sealed (renamed) when it finishes: the archive takes
        # only sealed files
        out = SummaryFile(self.out_dir / f"{name}.partial", 0, 0)
        g = self._gpus[gpu] = _Gpu(gpu, name, self._new_engine(gpu), out, self.replay_max)
        # a process that began before this Agent, while an earlier one followed the home
        # that never checkpointed it: its ring may have overwritten its first records, which
        # its logs still hold (_waits_for_logs reads them from its first record on)
        if self._watching_since is not None and gpu.start_real_ns < self._started_real_ns:
            g.logs_checked = bool(gpu.suffix)  # a split GPU's ring seqs interleave
        self._track(g)
        return g

    def _seal_ended_before(self, shm_files: frozenset[str]) -> None:
        """Seal the summaries of the processes that ended while no Agent ran (their SHM file
        is gone, and with it the ops after the checkpoint): at the checkpoint's length, the
        Steps after it named as not recovered live. Then those no checkpoint named, and a
        checkpoint at once: it names what this Agent took on."""
        from_logs = self._seal_checkpointed(shm_files)
        from_logs += self._recover_unseen(shm_files)
        self._hand_logs(from_logs)
        self._next_checkpoint = time.monotonic()

    def _seal_checkpointed(self, shm_files: frozenset[str]) -> list[_FromLogs]:
        """The ended processes the checkpoint names: those whose logs are found go on from
        them (returned, to be handed their records), the others are sealed as they were."""
        from_logs = []
        for name, state in list(self._saved.items()):
            shm_file = state.input.shm_file if isinstance(state.input, ShmPosition) else None
            if not isinstance(shm_file, str) or shm_file in shm_files:
                continue
            if not state.output.file.endswith(".partial"):
                continue  # sealed already, by the Agent before
            if not (self.out_dir / state.output.file).exists():  # sealed since: nothing to do
                del self._saved[name]
                continue
            if self._resume_from_logs(name, state, from_logs):
                continue
            out = SummaryFile(
                self.out_dir / state.output.file,
                state.output.byte_offset,
                state.output.summaries_written,
            )
            try:
                sealed = out.seal()
            except OSError as e:  # tried again at the next start
                out.close()
                self._storage_failed(out.path, e)
                continue
            del self._saved[name]
            self.ended_unfinished += 1
            log.warning(
                "semantic engine: pid %s ended while no Agent ran: %s holds its %d Steps up to "
                "the checkpoint; the Steps after it are not recovered live (`comminsight steps` "
                "on its inspector logs recovers them)",
                state.gpu.pid,
                sealed,
                state.output.summaries_written,
            )
        return from_logs

    def _resume_from_logs(self, name: str, state: GpuState, from_logs: list[_FromLogs]) -> bool:
        """Go on with a process that ended while no Agent ran from its inspector_logs, which
        hold the records after the checkpoint that went with its SHM region: restored, handed
        them and ended as the ring would have had it (log_records), its Steps are the ones an
        Agent that never stopped writes: added to `from_logs`, to be handed its records.
        False where its logs are not found (or it drove several GPUs, whose records its
        ring's communicator table alone tells apart)."""
        gpu = _stream_of(state)
        if gpu is None or name != _summary_name(gpu):
            return False
        segments = process_segments(self.logs_dir, gpu.pid, gpu.start_real_ns)
        if segments is None:
            return False
        gpu = replace(gpu, start_mono_ns=segments.start_mono_ns)
        g = self._state(gpu)
        if g.finished or g.skip_through < 0:
            return True  # not restored from the checkpoint: started over or sealed
        # from its last Steps' first records: they give the node's cut its context again
        start = self._context_start(g)
        self.resumed_from_logs += 1
        why = (
            f"ended while no Agent ran: its Steps go on from its inspector logs (read back from "
            f"ring record {start} on; its checkpoint lay after {state.input.last_ring_seq})"
        )
        from_logs.append(_FromLogs(g, segments, start, why))
        return True

    def _hand_logs(self, items: list[_FromLogs]) -> None:
        """Hand the GPUs of ended processes their op records from their logs, then their ends,
        as an Agent polling their rings met them: together, every GPU the records it completed
        in the next LOG_WINDOW_NS of the job's time. The node's cut decides every GPU's Steps
        from what all of them hold when it runs (after so many new ops, or so many seconds):
        one GPU's whole run handed before the next one's, or GPUs far apart in time, had their
        Steps cut in other places. At most MAX_LOG_READERS processes at a time (a file each)."""
        for k in range(0, len(items), MAX_LOG_READERS):
            group = items[k : k + MAX_LOG_READERS]
            readers = [LogReader(op_slots(item.segments, item.start)) for item in group]
            for item in group:
                item.g.logs_checked = True  # its records all come from its logs
            while True:
                heads = [t for r in readers if (t := r.next_complete()) is not None]
                if not heads:
                    break
                until = min(heads) + LOG_WINDOW_NS
                for item, reader in zip(group, readers, strict=True):
                    for slots, comms in reader.until(until):
                        self._take(item.g.gpu, "ops", (slots, comms))
            for item, reader in zip(group, readers, strict=True):
                self._take(item.g.gpu, "finished", None)
                log.warning(
                    "semantic engine: pid %d %s: %d records", item.g.gpu.pid, item.why, reader.read
                )

    def _recover_unseen(self, shm_files: frozenset[str]) -> list[_FromLogs]:
        """The processes that ran since Agents began to follow this home and ended with no
        checkpoint naming them (an earlier Agent stopped before its first checkpoint that did,
        or none ran while they did), to be handed their records from their logs from the first
        on: an Agent that never stopped would have written their Steps."""
        if self._watching_since is None:
            return []  # no Agent followed this home before: its earlier processes are not ours
        since = max(self._watching_since, time.time_ns() - UNSEEN_LOOKBACK_NS)
        found, skipped = logged_since(self.logs_dir, since, MAX_UNSEEN)
        if skipped:
            log.warning(
                "semantic engine: %d more processes ran while no Agent followed them than are "
                "recovered at a start (%d, the latest); `comminsight steps` on %s recovers "
                "the Steps of the others",
                skipped,
                MAX_UNSEEN,
                self.logs_dir,
            )
        running = running_pids(shm_files)
        known = {(g.gpu.pid, g.gpu.start_real_ns) for g in self._gpus.values()}
        known |= {(s.gpu.pid, s.input.producer_start_real_ns) for s in self._saved.values()}
        known |= self._sealed_processes()
        from_logs = []
        for p in found:
            if p.pid in running or (p.pid, p.start_real_ns) in known:
                continue  # read from its ring, resumed from its checkpoint, or sealed
            split = split_process(p.segments.paths)
            gpu = self._logged_stream(p, split.gpus[0].device)
            if split.split:
                log.warning(
                    "semantic engine: pid %d drove several GPUs and ended with no checkpoint "
                    "naming it: its Steps are not recovered live (`comminsight steps` on its "
                    "inspector logs recovers them)",
                    p.pid,
                )
                continue
            g = self._state(gpu)
            if g.finished:
                continue
            self.unseen_from_logs += 1
            why = (
                "ran while no Agent checkpointed it and has ended: its Steps come from its "
                "inspector logs"
            )
            from_logs.append(_FromLogs(g, p.segments, 0, why))
        return from_logs

    def _sealed_processes(self) -> set[tuple[int, int]]:
        """(pid, start_real_ns) of the processes of this node with a sealed summary file (one
        per GPU: `live-<node>-<pid>-<start><suffix>.jsonl`)."""
        prefix = f"live-{self.node_name}-"
        found = set()
        try:
            names = os.listdir(self.out_dir)
        except OSError:
            return found
        for name in names:
            if not (name.startswith(prefix) and name.endswith(".jsonl")):
                continue
            pid, _, rest = name[len(prefix) :].partition("-")
            start = rest.split(".", 1)[0]
            if pid.isdigit() and start.isdigit():
                found.add((int(pid), int(start)))
        return found

    def _logged_stream(self, p: LoggedProcess, device: int | None) -> GpuStream:
        """The stream of a process known from its logs alone, as its SHM header names it."""
        return _labelled_stream(
            GpuStream(
                self.node_name,
                p.pid,
                p.start_real_ns,
                p.global_rank,
                device,
                start_mono_ns=p.segments.start_mono_ns,
                local_rank=p.local_rank,
                job_id=p.job_id,
                host=p.first.process.host,  # Inject's lines name the process by it
            ),
            host=p.first.process.host,
        )

    # ---- a ring that lapped its checkpoint while no Agent ran ------------------------------

    def _waits_for_logs(self, g: _Gpu, kind: str, payload) -> bool:
        """Whether the item waits for g's logs. A restored GPU's first ring records must
        reach back to where its cut's context begins (its last Steps' first records, or the
        checkpoint): a ring that overwrote them while no Agent ran holds them no more, but
        its process's logs do, and they are handed on first (`_fill_from_logs`). Until the
        log writer has written them, what comes for g waits, in order."""
        if g.parked is not None:
            g.parked.append((kind, payload))
            return True
        if g.logs_checked or kind != "ops" or not len(payload[0]):
            return False
        g.logs_checked = True
        if int(payload[0]["seq"][0]) <= self._context_start(g):
            return False
        now = time.monotonic()
        g.parked, g.parked_until = [(kind, payload)], now + LOG_WAIT_S
        self._fill_from_logs(g, now)
        return True

    def _context_start(self, g: _Gpu) -> int:
        """The first ring record a restored GPU's cut needs again: that of its last Steps
        written (restored_context), else the first after its checkpoint."""
        start = g.skip_through + 1
        placed = g.placed_before
        if placed is not None:
            # never further back than the records it keeps (a damaged file may name record
            # 0), with room for the ring records between them that are no ops
            start = min(start, max(placed.lowest_ring, start - 2 * placed.most_records))
        return max(start, 0)

    def _fill_from_logs(self, g: _Gpu, now: float) -> None:
        """Hand g its records from its logs, from its context's start to its ring's first
        record, then what waited; once the logs reach that far, or their wait is over (what
        they lack then is lost, as are the records the writer itself missed: its gap lines)."""
        ring_first = int(g.parked[0][1][0]["seq"][0])
        segments = process_segments(self.logs_dir, g.gpu.pid, g.gpu.start_real_ns)
        through = covered_through(segments) if segments is not None else 0
        if through < ring_first - 1 and segments is not None and now < g.parked_until:
            g.parked_retry_at = now + LOG_RETRY_S
            return
        parked, g.parked = g.parked, None
        start, records, not_ops = self._context_start(g), 0, []
        if segments is not None:
            for slots, comms in op_slots(segments, start, ring_first, not_ops):
                self._take(g.gpu, "ops", (slots, comms))
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
            self._take(g.gpu, kind, payload)

    def _next_log_retry(self) -> float:
        return min(
            (g.parked_retry_at for g in self._gpus.values() if g.parked is not None),
            default=float("inf"),
        )

    def _retry_parked(self, now: float) -> None:
        for g in list(self._gpus.values()):
            if g.parked is not None and g.parked_retry_at <= now:
                self._fill_from_logs(g, now)

    def _sealed_before(self, gpu: GpuStream, name: str) -> _Gpu:
        engine = GpuEngine(GpuIdentity(gpu.node_name, 0), self.templates)
        g = self._gpus[gpu] = _Gpu(gpu, name, engine, SummaryFile(None, 0, 0), 0)
        g.finished = True
        log.warning("semantic engine: %s is sealed: pid %d is not read again", name, gpu.pid)
        return g

    def _retire(self, gpu: GpuStream) -> None:
        g = self._gpus.get(gpu)
        if g is not None:
            g.retired = True
            self._drop_if_done(g)

    def _drop_if_done(self, g: _Gpu) -> None:
        """Forget a retired GPU whose file is sealed: its last checkpoint entry goes too."""
        if g.retired and g.finished and not g.seal_due and self._gpus.get(g.gpu) is g:
            del self._gpus[g.gpu]
            self.live_cut.forget(g.gpu)

    def _new_engine(self, gpu: GpuStream) -> GpuEngine:
        identity = GpuIdentity(
            host=gpu.node_name,
            global_rank=gpu.global_rank if gpu.global_rank is not None else gpu.pid,
            pid=gpu.pid,
            local_rank=gpu.local_rank,
            cuda_device=gpu.cuda_device,
            job_id=gpu.job_id,
        )
        engine = GpuEngine(identity, self.templates, mode=ProducerMode.live)
        engine.runner = LiveCutRunner()
        return engine

    def _track(self, g: _Gpu, resumed_after: int = -1) -> None:
        """Let the node's cut place g's ops (an engine restored with a runner of its own,
        from an Agent that cut each GPU alone, goes on with it). A restarted engine goes on
        after ring record `resumed_after` (-1: from its first op)."""
        engine = g.engine
        if engine.runner is None and engine.pending is None:
            engine.runner = LiveCutRunner(last_step=engine.next_step_index - 1)
        if isinstance(engine.runner, LiveCutRunner) and not g.finished:
            rank = g.gpu.global_rank if g.gpu.global_rank is not None else g.gpu.pid
            self.live_cut.track(g.gpu, engine, rank, resumed_after)
            if g.checkpoint is not None:
                self._restore_roles(g, g.checkpoint)

    def _restore_roles(self, g: _Gpu, state: GpuState) -> None:
        """The template that named a restored GPU's roles, chosen once from its first ops
        (live_cut): the checkpoint names it, and a GPU that placed Steps without one had none."""
        named = None if isinstance(state.template_name, UnsetType) else state.template_name
        if named is None and not (state.next_step_index or state.steps_emitted):
            return  # nothing placed yet: its roles are named at its first placement
        template = next((t for t in self.templates.templates if t.name == named), None)
        if named is not None and template is None:
            log.warning(
                "semantic engine: pid %d: template %r named its roles and is not loaded now",
                g.gpu.pid,
                named,
            )
        self.live_cut.roles_known(g.gpu, template)

    def _finish_ended(self, all_ended: bool = False) -> None:
        """Place the last ops of the GPUs whose processes ended (when the node's cut says
        their turn has come, or `all_ended`), write their last Steps and seal them."""
        now = time.monotonic()
        ready = self.live_cut.ended(now, all_ended)
        if not ready:
            return
        self._cut(final=frozenset(ready))
        for gpu in ready:
            self.live_cut.forget(gpu)
            g = self._gpus.get(gpu)
            if g is None or g.finished:
                continue
            try:
                self._write(g, g.engine.finish())
            except Exception as e:  # its last Step is lost, not the others'
                self._note_failure(g, e, None)
            self._seal(g)

    def _cut(self, final: frozenset = frozenset()) -> None:
        """Cut the node's held ops and write the Steps that settle; a failure of the cut
        is counted and the ops wait for the next one (within the cut's bound)."""
        self.heap_trim.worked()  # a cut frees the most: its job-wide columns
        try:
            placed = self.live_cut.cut(time.monotonic(), final)
        except Exception as e:
            log.exception("semantic engine: the node's Step cut failed")
            failure = EngineFailure.of(e)
            self.counts.failures[failure.reason] += 1
            self.counts.last, self.counts.last_pid = failure, None
            placed = self.live_cut.bound_all()
        for gpu, summaries in placed.items():
            g = self._gpus.get(gpu)
            if g is not None:
                self._write(g, summaries)
                self._flush(g)
            lag = self._lags.get(gpu)
            if lag is not None and gpu in self.live_cut.placed_end:
                lag.placed(self.live_cut.placed_end[gpu])

    def _restore(self, gpu: GpuStream, state: GpuState, name: str) -> _Gpu | None:
        if state.output.file == name:  # sealed: the process had finished
            engine = GpuEngine(GpuIdentity(gpu.node_name, 0), self.templates)
            g = _Gpu(gpu, name, engine, SummaryFile(None, 0, 0), self.replay_max)
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
        g = _Gpu(gpu, name, engine, out, self.replay_max)
        g.skip_through = state.input.last_ring_seq
        g.logs_checked = bool(gpu.suffix)  # a split GPU's ring seqs interleave with others'
        g.checkpoint = state
        g.placed_before = self._placed_before(out, state, engine)
        self.restored += 1
        log.info("semantic engine: pid %d resumed after ring record %d", gpu.pid, g.skip_through)
        return g

    def _placed_before(
        self, out: SummaryFile, state: GpuState, engine: GpuEngine
    ) -> PlacedRecords | None:
        """Where to gather a restored GPU's context from: its last Steps written (and the one
        left open), within what the node's cut keeps as context."""
        most = self.live_cut.max_context
        try:
            spans = written_spans(out.path, state.output.byte_offset, most)
        except (OSError, ValueError) as e:  # the file is checked again by every write
            log.warning("semantic engine: %s: its last Steps cannot be read (%s)", out.path, e)
            spans = []
        last = open_span(engine.open)
        if last is not None:
            spans = newest_within([*spans, last], most)
        # a Step is taken back whole or not at all: records beyond twice the context are
        # of no use to it (ops are placed by issue order, so a few more than the Steps hold)
        return PlacedRecords(spans, most_records=2 * most) if spans else None

    def _hand_context(self, g: _Gpu) -> None:
        """Give the node's cut what g had placed before the restart (see restored_context)."""
        placed, g.placed_before = g.placed_before, None
        if placed is None or not placed.records:
            return
        ops = engine_batch(
            np.concatenate(placed.records),
            placed.comms,
            g.gpu.start_real_ns,
            g.gpu.start_mono_ns,
            g.comms,
            g.segments,
        )
        context = labelled_context(ops, placed.spans)
        if context is not None:
            self.live_cut.restore_context(g.gpu, *context)

    def _handle(self, g: _Gpu, kind: str, payload) -> None:
        if kind == "lost":
            g.lost += payload
            return
        if kind == "finished":
            self._hand_context(g)
            self._write(g, g.engine.drain())
            if self.live_cut.tracks(g.gpu, g.engine):
                # sealed once the GPUs it shares communicators with have ended too
                self.live_cut.end(g.gpu, time.monotonic())
                self._finish_ended()
                if not g.finished:
                    self._park(g)
                return
            self._write(g, g.engine.finish())
            self._seal(g)
            return
        records, comms = payload
        if g.skip_through >= 0:
            # a restarted Agent reads the ring from its oldest record, a restarted engine is
            # handed again what came after its checkpoint: skip what it had placed; records
            # gone since (overwritten, or let go by the replay log) are lost
            if g.placed_before is not None:
                g.placed_before.add(records[records["seq"] <= g.skip_through], comms)
            records = records[records["seq"] > g.skip_through]
            if len(records) and not g.gpu.suffix:  # a split GPU's ring seqs interleave
                g.lost += _lost_after(g.skip_through, int(records["seq"][0]), g.not_ops)
            if len(records):
                g.skip_through = -1
                self._hand_context(g)
        gpu = g.gpu
        batch = engine_batch(
            records, comms, gpu.start_real_ns, gpu.start_mono_ns, g.comms, g.segments
        )
        if len(batch):
            batch.cols["lost_before"][0] += g.lost
            g.lost = 0
            held = g.engine.held
            self._write(g, g.engine.feed(batch))
            self.live_cut.held_ops(g.gpu)
            g.last_position = batch.position(len(batch) - 1)
            lag = self._lags.get(gpu)
            if lag is not None:
                lag.placed(newest_placed_end(g.engine, held, batch))
        self._flush(g)  # visible to readers (the API); fsync at checkpoints

    def _seal(self, g: _Gpu) -> None:
        try:
            g.out.seal()
            g.seal_due = False
        except OSError as e:  # sealed again once the disk takes it
            g.seal_due = True
            self._storage_failed(g.out.path, e)
        g.finished = True
        g.replay = ReplayLog(0)  # a sealed file is never restarted
        g.retry_at = None
        with self._cond:
            self._lags.pop(g.gpu, None)
        self._drop_if_done(g)

    def _park(self, g: _Gpu) -> None:
        """An ended GPU waiting for its peers keeps no descriptor open (SummaryFile.park)."""
        try:
            g.out.park()
        except OSError as e:  # it stays open; what waits is written with the next write
            self._storage_failed(g.out.path, e)

    def _write(self, g: _Gpu, summaries: list) -> None:
        if summaries:
            try:
                g.out.add(summaries)
            except OSError as e:  # the summaries wait in g.out for the disk
                self._storage_failed(g.out.path, e)
            # a restarted engine writes again the summaries after its checkpoint: count once
            if g.out.written > g.reported:
                new = g.out.written - g.reported
                self.steps_written += new
                g.reported = g.out.written
                self.step_durations.add(
                    g.gpu.labels, [s.duration_ns / 1e9 for s in summaries[-new:]]
                )

    def _flush(self, g: _Gpu) -> None:
        try:
            g.out.flush()
        except OSError as e:
            self._storage_failed(g.out.path, e)

    # ---- a disk that refuses writes ------------------------------------------------------

    def _storage_failed(self, path, error: OSError) -> None:
        """Note a failed write; the first of a run of them is logged (the rest are counted)."""
        self.storage_faults_total += 1
        now = time.monotonic()
        self._storage_retry_at = now + STORAGE_RETRY_S
        message = f"{type(error).__name__}: {error.strerror or error}"[:300]
        fault = self.storage_fault
        if fault is None:
            self.storage_fault = StorageFault(str(path), message, now, time.time_ns())
            log.error(
                "semantic engine: cannot write %s (%s); Step summaries wait in memory and "
                "writes are retried every %.0f s",
                path,
                message,
                STORAGE_RETRY_S,
            )
        else:
            fault.path, fault.error = str(path), message
            fault.failures += 1

    def _retry_storage(self) -> None:
        """Write what waits, seal what is due, checkpoint; the fault ends when all succeed."""
        self._storage_retry_at = float("inf")
        before = self.storage_faults_total
        for g in list(self._gpus.values()):
            if g.out.path is None:
                continue
            if g.seal_due:
                self._seal(g)
            elif g.out.pending:
                self._flush(g)
        if self.storage_faults_total == before:
            self._save_checkpoint()
        if self.storage_faults_total == before and self.storage_fault is not None:
            log.warning(
                "semantic engine: writes under %s succeed again (after %d failures)",
                self.out_dir,
                self.storage_fault.failures,
            )
            self.storage_fault = None

    def pending_summaries(self) -> tuple[int, int]:
        """Summaries waiting in memory for the disk, and those dropped past its bound."""
        gpus = list(self._gpus.values())
        return sum(g.out.pending for g in gpus), sum(g.out.dropped for g in gpus)

    # ---- failures and restarts -----------------------------------------------------------

    def _note_failure(self, g: _Gpu, error: Exception, entry: ReplayEntry | None) -> bool:
        """Count a failure of g's engine; whether to restart it (False: g was sealed)."""
        failure = EngineFailure.of(error)
        g.failures += 1
        g.last_failure = failure
        self.counts.failures[failure.reason] += 1
        self.counts.last, self.counts.last_pid = failure, g.gpu.pid
        log.error(
            "semantic engine: GPU pid %d failed (%s); restarting it from its checkpoint",
            g.gpu.pid,
            failure.message,
            exc_info=error if g.failures == 1 else None,  # the traceback once per GPU
        )
        if entry is not None and entry is g.suspect:  # failed again on the same input
            if entry.kind == "finished":
                log.error("semantic engine: pid %d: its last Step is not written", g.gpu.pid)
                self._seal(g)
                return False
            lost = g.replay.discard(entry)
            log.error("semantic engine: pid %d: %d op records skipped as lost", g.gpu.pid, lost)
        g.suspect = entry
        return True

    def _restart_when_allowed(self, g: _Gpu) -> None:
        while True:
            now = time.monotonic()
            if not g.budget.take(now):
                g.retry_at = g.budget.next_at(now)
                log.warning(
                    "semantic engine: pid %d restarted %d times in %.0f s; next try in %.0f s",
                    g.gpu.pid,
                    g.budget.max_restarts,
                    g.budget.window_s,
                    g.retry_at - now,
                )
                return
            g.retry_at = None
            g.restarts += 1
            self.counts.restarts[g.last_failure.reason if g.last_failure else "unknown"] += 1
            try:
                self._restart(g)
                return
            except _ReplayFailed as f:
                if not self._note_failure(g, f.error, f.entry):
                    return

    def _restart(self, g: _Gpu) -> None:
        """g's engine as its last checkpoint left it (a new one before any checkpoint), its
        summaries truncated to match, handed again what came since."""
        state = g.checkpoint
        g.out.close()
        try:
            if state is None:
                g.engine = self._new_engine(g.gpu)
                g.out = SummaryFile(self.out_dir / f"{g.name}.partial", 0, 0)
                g.skip_through, g.lost = -1, g.replay.dropped
            else:
                g.engine = restore_engine(state, self.templates, mode=ProducerMode.live)
                g.out = SummaryFile(
                    self.out_dir / state.output.file,
                    state.output.byte_offset,
                    state.output.summaries_written,
                )
                g.skip_through, g.lost = state.input.last_ring_seq, 0
        except Exception as e:
            raise _ReplayFailed(None, e) from e
        self._track(g, state.input.last_ring_seq if state is not None else -1)
        g.last_position = None
        for entry in list(g.replay.entries):
            try:
                self._handle(g, entry.kind, entry.payload)
            except Exception as e:
                raise _ReplayFailed(entry, e) from e
        g.suspect = None
        log.warning(
            "semantic engine: pid %d restarted from %s",
            g.gpu.pid,
            "its checkpoint" if state is not None else "its first op",
        )

    def _retry_due(self, now: float) -> None:
        for g in list(self._gpus.values()):
            if g.retry_at is not None and g.retry_at <= now and not g.finished:
                self._restart_when_allowed(g)

    # ---- checkpoints ---------------------------------------------------------------------

    def _current_state(self, g: _Gpu) -> GpuState | None:
        """g's state now, or None where it cannot be saved at this moment."""
        if g.finished:
            position = g.last_position.after() if g.last_position is not None else None
        else:
            position = g.engine.resume_point(g.last_position)
        if position is None:
            return None
        try:
            size = g.out.sync() if g.out.path.name.endswith(".partial") else 0
        except OSError as e:  # keep the last good checkpoint of g until the disk takes it
            self._storage_failed(g.out.path, e)
            return None
        state = gpu_state(
            g.engine,
            position,
            g.out.path.name,
            size,
            g.out.written,
            shm_file=g.gpu.shm_file,
            producer_start_real_ns=g.gpu.start_real_ns,
        )
        if isinstance(position, RingPosition):
            g.replay.trim(position.ring_seq)
        return state

    def _save_checkpoint(self) -> None:
        self._last_checkpoint = time.monotonic()
        self._next_checkpoint = self._last_checkpoint + self.checkpoint_s
        states = {}
        for g in list(self._gpus.values()):
            if g.out.path is None:
                if g.saved is not None:
                    states[g.saved.output.file] = g.saved
                continue
            if g.retry_at is None:  # a failed engine's state is not to be trusted
                try:
                    state = self._current_state(g)
                except Exception as e:
                    if self._note_failure(g, e, None):
                        self._restart_when_allowed(g)
                    state = None
                if state is not None:
                    g.checkpoint = state
                elif g.finished and not g.seal_due:  # sealed before it placed an op
                    g.checkpoint = None
            # else the last good state: restarting from it, no Step is lost or written twice
            if g.checkpoint is not None:
                states[g.checkpoint.output.file] = g.checkpoint
        for state in self._saved.values():  # processes not seen since the restart: kept
            if (self.out_dir / state.output.file).exists():  # unless their file is gone
                states[state.output.file] = state
        # an empty one too once the last GPU is forgotten (the next Agent must not resume
        # it), and at the start: it tells the next Agent since when Agents follow the home
        if states or self._checkpoint_held or not self._watch_marked:
            try:
                self._checkpoint.save(states)
                self._checkpoint_held = bool(states)
                self._watch_marked = True
            except OSError as e:
                self._storage_failed(self._checkpoint.path, e)
            except msgspec.EncodeError as e:
                log.error("semantic engine: cannot write its checkpoint: %s", e)


def _lost_after(skip_through: int, first: int, not_ops: np.ndarray) -> int:
    """The ring records lost between a restored GPU's checkpoint and the first op after it:
    those skipped, less those its logs show were no op."""
    skipped = first - (skip_through + 1)
    if skipped > 0 and len(not_ops):
        skipped -= int(np.count_nonzero((not_ops > skip_through) & (not_ops < first)))
    return max(0, skipped)


@dataclass(frozen=True)
class _FromLogs:
    """An ended process's GPU to hand its records from its logs, from ring record `start`."""

    g: _Gpu
    segments: ProcessSegments
    start: int
    why: str  # for the log line


def _labelled_stream(gpu: GpuStream, host: str) -> GpuStream:
    """gpu with the /metrics labels its producer's header would have given it."""
    labels = ProcessLabels(
        job_id=gpu.job_id or "",
        host=host,
        rank=index_label(gpu.global_rank),
        local_rank=index_label(gpu.local_rank),
        cuda_device=index_label(gpu.cuda_device),
    )
    return replace(gpu, labels=labels)


def _summary_name(gpu: GpuStream) -> str:
    return f"live-{gpu.node_name}-{gpu.pid}-{gpu.start_real_ns}{gpu.suffix}.jsonl"


def _stream_of(state: GpuState) -> GpuStream | None:
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
    return _labelled_stream(gpu, key.host)
