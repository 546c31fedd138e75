"""The Agent's poll loop: one pass reads every Profiler's new records, folds them into the
metrics, diagnoses the node and keeps the hang reports on disk; FIFO hang events arrive in
between through the event loop and trigger a pass at once rather than at the next tick.

Data flows one way per pass: SHM rings -> ProducerSet batches -> NodeMetrics, the recent-ops
window and the engine hook (per GPU); SHM comm tables -> NodeSnapshot -> diagnose -> HangStore,
and the reports grouped by cause -> IncidentStore.
Archive passes run beside the loop in a thread of their own every
COMMINSIGHT_COMMON_ARCHIVE_INTERVAL_S. The
HTTP API (api.server) only reads the state kept here, between passes on the same loop; its
writes are an operator resolving a hang report or an incident.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from comminsight import __version__
from comminsight.agent.api import views as api_views
from comminsight.agent.archive.archiver import ArchiveConfigError, Archiver
from comminsight.agent.core import agent_settings
from comminsight.agent.core.rate_limited_log import PERSISTENT_PERIOD_S, RateLimitedLog
from comminsight.agent.core.threshold_health import Publication, threshold_health
from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incident_stacks import IncidentStacks
from comminsight.agent.hangs.incident_store import IncidentStore
from comminsight.agent.hangs.incidents import group_reports, pid_namespace_of, with_roles
from comminsight.agent.hangs.left_comm import MembersSeen
from comminsight.agent.hangs.resolution import resolve_cleared
from comminsight.agent.hangs.stack_capture import StackCapture
from comminsight.agent.hangs.step_cycles import StepCycles
from comminsight.agent.hangs.store import HangStore
from comminsight.agent.hangs.unnamed_jobs import jobs_by_communicator
from comminsight.agent.metrics.engine import engine_metrics
from comminsight.agent.metrics.inputs import AgentInputs
from comminsight.agent.metrics.node import NodeMetrics
from comminsight.agent.metrics.stacks import StackCaptureMetrics
from comminsight.agent.node.ingest import NodeIngest
from comminsight.agent.node.tenant_inputs import TenantInputs
from comminsight.agent.receivers.fifo_reader import FifoError, HangEvent, HangEventFifo, keep_recent
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.receivers.input_health import input_reasons
from comminsight.agent.receivers.producers import Producer, ProducerSet
from comminsight.agent.state.node_state import read_process_rows
from comminsight.agent.state.owners import Owners
from comminsight.agent.state.placement import Placement
from comminsight.agent.state.recent_ops import RecentOps
from comminsight.agent.state.snapshot import NodeSnapshot, build_snapshot
from comminsight.agent.steps.engine_hook import EngineHook, PassThroughEngine
from comminsight.agent.steps.files import StepFiles
from comminsight.agent.steps.health import engine_health
from comminsight.agent.steps.semantic_hook import SemanticEngineHook
from comminsight.semantic import native
from comminsight.semantic.templates import load_templates
from comminsight_gen.abi import shm_v1
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.hang_report_v1 import (
    HangReport,
    Incident,
    ReportStatus,
    Resolution,
    Severity,
)

log = logging.getLogger(__name__)

S = 1_000_000_000
HISTORY = 50  # snapshots kept for the straggler verdict
RECENT_EVENTS = 1000  # FIFO hang events kept for the API
# A dead producer is remembered this long after it is drained (process_died names it while
# its peers wait); its region itself is released as soon as its records are safe.
MIN_RETIRE_S = 60.0
PRUNE_STACKS_EVERY = 600  # passes between removals of stack files of ended processes
ENGINE_METRICS_EVERY_NS = 250_000_000  # the live engine's metrics are refreshed this often
# With no process to follow (none, or every one ended and its records safe), a pass can only
# find a region that appeared since, which waits in shms/ with all its records: the Agent
# passes this seldom then (at most), so a node between jobs, or after hundreds of short-lived
# processes, costs next to nothing. Hang events from the FIFO still wake it at once.
IDLE_POLL_INTERVAL_S = 0.25
# The API's reading of this node's rows serves the requests of one pass, and at most this long
# (when passes fail, none ends)
OWN_ROWS_REUSE_NS = 1_000_000_000


@dataclass(frozen=True)
class OwnRead:
    """One reading of this node's rows, and the user of each process read."""

    pass_no: int
    rows: api_views.OwnRows
    uids: tuple[int, ...]


class AgentService:
    def __init__(self, settings: ConfigV1, engine: EngineHook | None = None) -> None:
        self.settings = settings
        self.home = Path(settings.home)
        self.node_name = settings.agent_node_name or socket.gethostname()
        self.started_real_ns = time.time_ns()
        self.started_mono_ns = time.monotonic_ns()
        self.recent_ops = RecentOps(settings.agent_recent_ops)
        self.step_files = StepFiles(self.home)
        # the engine's Step cycles, read from its summaries only when a diagnosis needs them
        self.step_cycles = StepCycles(self.home, self.node_name)
        self.engine_error: str | None = None
        self.engine: EngineHook = engine or self._engine_hook(settings)
        self.archiver: Archiver | None = None
        self.archive_error: str | None = None
        try:
            self.archiver = Archiver.from_settings(settings)
        except ArchiveConfigError as e:
            self.archive_error = str(e)
            log.error("archiving is off: %s", e)
        self._archive_thread: threading.Thread | None = None
        self._archive_due_mono_ns = 0
        self.stopping = False
        self.producers = ProducerSet(
            self.home,
            batch_max=settings.agent_batch_max,
            shm_dir=settings.profiler_shm_dir,
            compact_logs=settings.profiler_log_format == "compact",
        )
        self.metrics = NodeMetrics(
            expire_after_s=settings.agent_metrics_expire_s, level=settings.agent_metrics_level
        )
        self.metrics.placement = Placement.of_node(self.node_name, settings.agent_kubernetes_node)
        if self.archiver is not None:
            self.metrics.registry.register(self.archiver)
        self.ingest = NodeIngest(
            self.producers, self.metrics, self.recent_ops, self.engine, self.node_name
        )
        self.fifo = HangEventFifo(self.home)
        self.hangs = HangStore(self.home)
        self.incidents = IncidentStore(self.home, self.node_name)
        self.inject_names = InjectNames(self.home)
        self.stacks = StackCapture.from_settings(settings, inject_names=self.inject_names)
        self.metrics.registry.register(StackCaptureMetrics(self.stacks))
        self.incident_stacks = IncidentStacks(self.incidents, self.ask_stack)
        self.fifo_error: str | None = None  # why hang events are not received
        self.metrics.inputs = AgentInputs(self.fifo, self.producers, self.inject_names)
        # a shared home: every user's directory under users/ is read too, as that user's
        self.tenant_inputs: TenantInputs | None = None
        if settings.agent_shared_home:
            self.tenant_inputs = TenantInputs(
                self.home, self.producers, self.inject_names, self.stacks, self._on_user_events
            )
        self.history: deque[NodeSnapshot] = deque(maxlen=HISTORY)
        # every rank's last row, beyond the history: a rank whose region was retired while its
        # peers wait is a rank that left, not one on another node
        self.members_seen = MembersSeen()
        # whose each process, communicator and job is: the API shows a user only theirs
        self.owners = Owners()
        self._diagnosed: NodeSnapshot | None = None
        self._own_read: OwnRead | None = None  # the API's latest reading of this node's rows
        self.hang_events: deque[HangEvent] = deque(maxlen=RECENT_EVENTS)
        self.threshold_ns = int(settings.profiler_hang_timeout_s * S)
        # the threshold as published for the Profilers' watchdogs (agent_settings)
        self.threshold_published = Publication()
        self.retire_after_ns = int(max(MIN_RETIRE_S, 2 * settings.profiler_hang_timeout_s) * S)
        self.passes = 0
        self._engine_metrics_due_ns = 0
        self._wake = asyncio.Event()
        self.http_guard = None  # the API server's ConnectionGuard, once it serves
        self.socket_path: Path | None = None  # the Unix socket it serves on, once it does
        self.socket_error: str | None = None  # why it does not
        self.listen_error: str | None = None  # why a shared Agent serves no TCP
        self.pass_errors = 0  # passes that failed (out of descriptors, an unreadable file)
        self._pass_error_log = RateLimitedLog(
            log, "a poll pass failed", PERSISTENT_PERIOD_S, logging.ERROR
        )

    def _engine_hook(self, settings: ConfigV1) -> EngineHook:
        if not settings.semantic_enable:
            return PassThroughEngine()
        try:
            native.lib()
        except native.NativeEngineMissing as e:  # the Agent serves on without step recovery
            self.engine_error = str(e)
            log.error("semantic engine off: %s", e)
            return PassThroughEngine()
        templates = load_templates(settings.semantic_template_dirs)
        for problem in templates.problems:
            log.error("semantic engine template: %s", problem)
        return SemanticEngineHook(
            self.home,
            templates,
            checkpoint_s=settings.semantic_checkpoint_s,
            node_name=self.node_name,
            markers_of=self._step_markers,
        )

    def poll_once(self, now_mono_ns: int | None = None) -> list[HangReport]:
        """One pass; the reports of this pass (also saved under metadata/hangs/)."""
        now = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
        if self.tenant_inputs is not None:
            self.tenant_inputs.refresh()
        # Inject's lines first: the step markers of the ops this pass hands the engine
        self.inject_names.refresh()
        self.ingest.run_pass(now, retire_after_ns=self.retire_after_ns)
        self.threshold_published.note(self.producers.producers)
        self.hangs.retry_unwritten(now)
        snapshot = self.take_snapshot(now)
        self.owners.note(self.producers.producers.values(), snapshot)
        reports = []
        # A master hands back the same job snapshot until it rebuilds it (master.agent): there
        # is nothing new to diagnose then, and diagnosing thousands of ranks every pass is
        # what would make it fall behind.
        if snapshot is not self._diagnosed:
            self._diagnosed = snapshot
            self.members_seen.note(snapshot)
            if self.threshold_ns:  # 0 disables hang detection, as in the Profiler
                reports = diagnose(
                    snapshot,
                    now,
                    self.threshold_ns,
                    history=list(self.history),
                    straggler_factor=self.settings.agent_straggler_factor,
                    completed_ops=self._completed_ops,
                    step_cycles=self.step_cycles,
                    members_seen=self.members_seen,
                )
            self.history.append(snapshot)
            # reports an operator closed stay closed: they join no incident either
            reports = [r for r in reports if not self._closed_by_operator(r.report_id)]
            groups = group_reports(reports, lambda: jobs_by_communicator(snapshot))
            ended = [g for g in groups if self.incidents.ended_rest(g)]
            groups = [g for g in groups if not self.incidents.ended_rest(g)]
            reports = with_roles(reports, groups, ended)
            for report in reports:
                if self.hangs.save(report):
                    log.warning("hang report %s: %s", report.report_id, report.summary)
            for report in resolve_cleared(list(self.hangs.reports.values()), reports, snapshot):
                self.hangs.save(report)
                log.warning(
                    "hang report %s resolved: %s", report.report_id, report.resolution.value
                )
            changed = self.incidents.update(groups, self.hangs.reports, now, snapshot.taken_real_ns)
            self._quiet_consequences(changed)
        if isinstance(self.engine, SemanticEngineHook):
            self.metrics.add_steps(self.engine.step_durations.take(), now)
            self.metrics.engine_steps = self.engine.steps_written
            self.metrics.engine_records_dropped = self.engine.dropped_records
            self.metrics.engine_records_queued = self.engine.queued_records
            # every GPU's status: what a scrape reads, not worth every 20 ms pass
            if time.monotonic_ns() >= self._engine_metrics_due_ns:
                self.metrics.semantic = engine_metrics(self.engine)
                self._engine_metrics_due_ns = time.monotonic_ns() + ENGINE_METRICS_EVERY_NS
        self.metrics.open_hangs = Counter(
            r.verdict.value for r in self.hangs.reports.values() if r.status is ReportStatus.open
        )
        self.metrics.open_incidents = self.incidents.open_by_verdict()
        self.metrics.open_incident_roots = self.incidents.open_incidents()
        self.metrics.incidents_opened = self.incidents.opened_total
        self.passes += 1
        if self.passes % PRUNE_STACKS_EVERY == 0:
            self.stacks.prune()
        self._maybe_archive(now)
        return reports

    def _step_markers(self, gpu) -> np.ndarray | None:
        """Inject's optimizer-step markers of a GPU's process (the engine's thread asks)."""
        return self.inject_names.step_markers(gpu.host, gpu.pid, gpu.uid)

    def _completed_ops(self, member) -> dict:
        """A member's recent completed collectives (this node's processes only)."""
        p = member.process
        if p.node_name not in (None, self.node_name):
            return {}
        return self.recent_ops.collectives(p.pid, p.start_real_ns, member.comm_id)

    def take_snapshot(self, now_mono_ns: int) -> NodeSnapshot:
        """What this pass diagnoses: this node (a master joins every node of the job)."""
        return build_snapshot(
            [p.region for p in self.producers.producers.values()],
            node_name=self.node_name,
            heartbeat_stale_ms=self.settings.agent_heartbeat_stale_ms,
            now_mono_ns=now_mono_ns,
        )

    # ---- archive -------------------------------------------------------------------------

    def _maybe_archive(self, now_mono_ns: int) -> None:
        """Start an archive pass in its own thread when one is due and none runs. A daemon
        thread: stopping the agent mid-upload is what the archive's exactly-once design is for,
        so shutdown never waits on a slow object store."""
        if self.archiver is None or now_mono_ns < self._archive_due_mono_ns:
            return
        if self._archive_thread is not None and self._archive_thread.is_alive():
            return
        self._archive_due_mono_ns = now_mono_ns + int(self.settings.common_archive_interval_s * S)
        self._archive_thread = threading.Thread(
            target=self._archive_pass, name="archive", daemon=True
        )
        self._archive_thread.start()

    def _archive_pass(self) -> None:
        try:
            report = self.archiver.run_once()
        except Exception:  # a bug or an unexpected provider error must not end the agent
            log.exception("archive pass failed")
            return
        if report.uploaded_files or report.deleted_files or report.failed_files:
            log.info(
                "archive: %d uploaded (%d bytes), %d adopted, %d failed, %d deleted locally",
                report.uploaded_files,
                report.uploaded_bytes,
                report.adopted_files,
                len(report.failed_files),
                report.deleted_files,
            )

    # ---- what the API reads --------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Serving: the first pass is done and the agent is not stopping."""
        return self.passes > 0 and not self.stopping

    def _producers(self, keep: Callable[[int], bool] | None) -> list:
        """The node's producers of the users `keep` admits, by uid (None: everyone's)."""
        producers = self.producers.producers.values()
        return [p for p in producers if keep is None or keep(p.uid)]

    def own_rows(self, keep: Callable[[int], bool] | None = None) -> api_views.OwnRows:
        """This node's processes as agent-master-slave rows, each process's read from its
        own region: what the API answers from (a master's, for its own node). Only the
        processes of the users `keep` admits, by uid.

        Read at the first request since this pass, and kept for the pass's other requests: a
        node's API is polled, by any number of clients, on the loop that runs the passes,
        and reading every row of a busy node costs milliseconds."""
        now_mono = time.monotonic_ns()
        read = self._own_read
        if (
            read is None
            or read.pass_no != self.passes
            or not 0 <= now_mono - read.rows.now_mono_ns < OWN_ROWS_REUSE_NS
        ):
            read = self._own_read = self._read_own_rows(now_mono)
        if keep is None:
            return read.rows
        mine = [r for r, uid in zip(read.rows.processes, read.uids, strict=True) if keep(uid)]
        return dataclasses.replace(read.rows, processes=tuple(mine))

    def _read_own_rows(self, now_mono: int) -> OwnRead:
        stale_ns = self.settings.agent_heartbeat_stale_ms * 1_000_000
        rows, uids = [], []
        for producer in self.producers.producers.values():
            read = read_process_rows(producer, now_mono, stale_ns, self.inject_names)
            if read is not None:
                rows.append(read)
                uids.append(producer.uid)
        own = api_views.OwnRows(
            api_views.OwnNode(self.node_name), tuple(rows), now_mono, time.time_ns()
        )
        return OwnRead(self.passes, own, tuple(uids))

    def open_report_ids(self) -> dict[str, list[str]]:
        by_comm: dict[str, list[str]] = {}
        for r in self.hangs.reports.values():
            if r.status is ReportStatus.open:
                by_comm.setdefault(r.comm.comm_id, []).append(r.report_id)
        return by_comm

    def ask_stack(self, culprit):
        """The capture of a culprit's Python stack, when it runs on this node (None: not)."""
        if culprit.node_name != self.node_name:
            return None
        rank = culprit.global_rank if isinstance(culprit.global_rank, int) else None
        host = culprit.host if isinstance(culprit.host, str) else socket.gethostname()
        producer = self.producer_of(culprit.pid, pid_namespace_of(culprit))
        uid = producer.uid if producer is not None else None
        return self.stacks.request(host, culprit.pid, rank, uid)

    def producer_of(self, pid: int, pid_namespace: int = 0) -> Producer | None:
        """The region of a process of this node: its pid in its PID namespace (0: any). A
        process whose region ended gives way to a running one of its pid (the pid was
        reused); two running ones (pods that share a pid, the namespace unknown) name none,
        rather than one tenant's process for another's."""
        found = [
            p
            for p in self.producers.producers.values()
            if p.pid == pid and (not pid_namespace or p.pid_namespace == pid_namespace)
        ]
        running = [p for p in found if p.gone_since_mono_ns is None] or found
        return running[0] if len(running) == 1 else None

    def _quiet_consequences(self, incidents) -> None:
        """A report that was a root and became a consequence (a better root arrived) is not
        diagnosed again in that role when its communicator is no longer reported: its stored
        severity follows its incident, so that only roots page."""
        for incident in incidents:
            for c in incident.consequences:
                report = self.hangs.reports.get(c.report_id)
                if report is not None and report.severity is not Severity.info:
                    self.hangs.save(msgspec.structs.replace(report, severity=Severity.info))

    def _closed_by_operator(self, report_id: str) -> bool:
        stored = self.hangs.reports.get(report_id)
        return stored is not None and stored.resolution is Resolution.operator

    def resolve_incident_by_operator(self, incident_id: str, note: str | None) -> Incident:
        """POST incidents/{id}/resolve: the incident and its open reports, with the note;
        idempotent. UnknownIncident when there is no such incident."""
        incident = self.incidents.resolve_by_operator(
            incident_id, note, time.monotonic_ns(), time.time_ns()
        )
        for report_id in self.incidents.report_ids(incident):
            report = self.hangs.reports.get(report_id)
            if report is not None and report.status is ReportStatus.open:
                self.resolve_by_operator(report_id, note or f"resolved with incident {incident_id}")
        return incident

    def resolve_by_operator(self, report_id: str, note: str | None) -> HangReport:
        """POST hangs/{id}/resolve: idempotent; the operator's decision sticks while the
        diagnosis keeps finding the same hang."""
        report = self.hangs.reports[report_id]
        if report.status is ReportStatus.resolved:
            return report
        resolved = msgspec.structs.replace(
            report,
            status=ReportStatus.resolved,
            resolution=Resolution.operator,
            resolved_mono_ns=max(time.monotonic_ns(), report.detected_mono_ns),
            resolved_real_ns=max(time.time_ns(), report.detected_real_ns),
            **({"resolution_note": note} if note else {}),
        )
        self.hangs.save(resolved)
        log.warning("hang report %s resolved by an operator: %s", report_id, note or "")
        return resolved

    def health(self) -> api.Health:
        reasons = []
        for name, why in sorted(self.producers.counters.refused.items()):
            reasons.append(f"SHM file {name} refused: {why}")
        draining = [p for p in self.producers.producers.values() if p.gone_since_mono_ns]
        if draining:
            reasons.append(
                "profiled process(es) exited: pid " + ", ".join(str(p.pid) for p in draining)
            )
        if self.producers.counters.records_lost:
            reasons.append(
                f"{self.producers.counters.records_lost} op records were overwritten before "
                "the agent read them"
            )
        for name, why in sorted(self.hangs.errors.items()):
            reasons.append(f"hang report file {name} set aside: {why}")
        for report_id, why in sorted(self.hangs.write_errors.items())[:16]:
            reasons.append(f"hang report {report_id} is not on disk yet: {why}")
        for name, why in sorted(self.incidents.errors.items()):
            reasons.append(f"incident file {name} set aside: {why}")
        reasons += input_reasons(self.fifo, self.fifo_error, self.producers, self.inject_names)
        if self.tenant_inputs is not None:
            reasons += self.tenant_inputs.problems(time.monotonic())
        if self.socket_error:
            reasons.append(f"the Agent's Unix socket is off: {self.socket_error}")
        if self.listen_error:
            reasons.append(f"the Agent's TCP listener is off: {self.listen_error}")
        threshold, threshold_reasons = threshold_health(
            self.producers.producers,
            int(self.settings.profiler_hang_timeout_s * 1000),
            self.threshold_published,
        )
        reasons += threshold_reasons
        if self.engine_error:
            reasons.append(f"the Semantic Engine is off: {self.engine_error}")
        semantic = None
        if isinstance(self.engine, SemanticEngineHook):
            semantic, engine_reasons = engine_health(self.engine)
            reasons += engine_reasons
        if self.http_guard is not None:
            reasons += self.http_guard.health_reasons(time.monotonic())
        if self.pass_errors and time.monotonic() - self._last_pass_error_mono_s < 300:
            reasons.append(
                f"{self.pass_errors} poll passes failed, the latest: {self._last_pass_error}"
            )
        if self.archive_error:
            reasons.append(f"archiving is off: {self.archive_error}")
        elif self.archiver is not None and self.archiver.last_error is not None:
            reasons.append(f"archive upload failing: {self.archiver.last_error.message}")
        if self.archiver is not None:
            for source, why in sorted(self.archiver.refused().items())[:16]:
                reasons.append(f"archive refuses {self.home / source}: {why}")
        alive = sum(1 for p in self.producers.producers.values() if p.gone_since_mono_ns is None)
        comm_ids = {
            int(row["comm_id"])
            for p in self.producers.producers.values()
            for row in p.region.comm_entries()
            if int(row["state"]) != shm_v1.CommState.FREE
        }
        lag = self.metrics.lag_s * 1000 if self.producers.counters.records else None
        return api.Health(
            status=api.HealthStatus.degraded if reasons else api.HealthStatus.ok,
            reasons=reasons,
            mode=api.AgentMode(self.settings.agent_mode),
            node_name=self.node_name,
            agent_version=__version__,
            started_real_ns=self.started_real_ns,
            uptime_s=(time.monotonic_ns() - self.started_mono_ns) / S,
            processes_alive=alive,
            processes_total=len(self.producers.producers),
            communicators_total=len(comm_ids),
            open_hangs=sum(1 for r in self.hangs.reports.values() if r.status is ReportStatus.open),
            nodes_connected=1,
            nodes_total=1,
            ingest_lag_ms=lag,
            hang_threshold=threshold,
            **({"semantic_engine": semantic} if semantic is not None else {}),
        )

    def node_model(self, own: api_views.OwnRows) -> api.Node:
        return api.Node(
            node_name=self.node_name,
            host=socket.gethostname(),
            boot_id=_boot_id(),
            mode=api.AgentMode(self.settings.agent_mode),
            agent_version=__version__,
            agent_pid=os.getpid(),
            comminsight_home=str(self.home),
            started_real_ns=self.started_real_ns,
            now_mono_ns=own.now_mono_ns,
            now_real_ns=own.now_real_ns,
            processes=api_views.own_processes(own),
        )

    def node_summary(self, own: api_views.OwnRows) -> api.NodeSummary:
        """This node as /nodes lists it (a standalone agent knows no other)."""
        procs = api_views.own_processes(own)
        return api.NodeSummary(
            node_name=self.node_name,
            host=socket.gethostname(),
            mode=api.AgentMode(self.settings.agent_mode),
            state=api.NodeState.local,
            agent_version=__version__,
            processes_alive=sum(1 for p in procs if p.alive),
            processes_total=len(procs),
            global_ranks=sorted({p.global_rank for p in procs if p.global_rank is not None}),
            last_seen_real_ns=own.now_real_ns,
            last_seen_age_ms=0,
            last_applied_batch_seq=None,
            rejects_total=0,
            last_reject=None,
        )

    def publish_threshold(self) -> None:
        """The Agent's hang threshold into metadata/agent-settings, for the Profilers'
        watchdogs (agent_settings); a failure is said in health, the Agent serves on."""
        try:
            agent_settings.publish(
                self.home,
                self.settings.profiler_hang_timeout_s,
                shared=self.settings.agent_shared_home,
            )
        except OSError as e:
            why = f"cannot write {agent_settings.settings_path(self.home)}: {e.strerror or e}"
            log.error("the hang threshold is not published to the Profilers: %s", why)
            self.threshold_published = Publication(ok=False, error=why)
            return
        self.threshold_published = Publication(ok=True)
        self.threshold_published.note(self.producers.producers)

    def _on_fifo_events(self, events: list[HangEvent]) -> None:
        self.fifo.stats.evicted += keep_recent(self.hang_events, events)
        self._wake.set()  # diagnose now, not at the next tick

    def _on_user_events(self, fifo: HangEventFifo, events: list[HangEvent]) -> None:
        """Hang events from a user's FIFO in a shared home."""
        fifo.stats.evicted += keep_recent(self.hang_events, events)
        self._wake.set()

    def poll_interval_s(self) -> float:
        """Until the next pass: the configured interval while a process is followed, else
        the idle one."""
        interval_s = self.settings.agent_poll_interval_ms / 1000
        if self.producers.following():
            return interval_s
        return max(interval_s, IDLE_POLL_INTERVAL_S)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until stop is set; the FIFO is held open for the whole run."""
        self.hangs.load()
        for name, reason in self.hangs.errors.items():
            log.error("hang report %s set aside: %s", name, reason)
        self.incidents.load()
        try:
            self.fifo.open()
            self.fifo.attach(asyncio.get_running_loop(), self._on_fifo_events)
        except FifoError as e:  # serve on: SHM still shows hangs, health names the FIFO
            self.fifo_error = str(e)
            log.error("hang events are not received: %s", e)
        if self.tenant_inputs is not None:
            self.tenant_inputs.attach(asyncio.get_running_loop())
        self.publish_threshold()
        try:
            while not stop.is_set():
                try:
                    self.poll_once()
                except Exception as e:  # noqa: BLE001 - an Agent beside training fails open
                    # EMFILE, an unreadable directory, or a bug some input reached: counted,
                    # said in health and the log, and the next pass retries
                    said = f"{type(e).__name__}: {e}"[:300]
                    if not isinstance(e, OSError) and said != self._last_pass_error:
                        log.exception("a pass failed")  # its trace once, not every pass
                    self.pass_errors += 1
                    self._last_pass_error = said
                    self._last_pass_error_mono_s = time.monotonic()
                    self._pass_error_log.note(str(e))
                self._wake.clear()
                stopping = asyncio.ensure_future(stop.wait())
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait(
                    {stopping, woken},
                    timeout=self.poll_interval_s(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for task in (stopping, woken):
                    task.cancel()
        finally:
            self.stopping = True
            if self.threshold_published.ok:
                with contextlib.suppress(OSError):  # stopping goes on; the next Agent replaces it
                    agent_settings.withdraw(self.home)
            self.fifo.close()
            if self.tenant_inputs is not None:
                self.tenant_inputs.close()
            self.producers.close()
            if isinstance(self.engine, SemanticEngineHook):
                self.engine.stop()


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64] or None
    except OSError:
        return None
