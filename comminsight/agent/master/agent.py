"""A master Agent (COMMINSIGHT_AGENT_MODE=master): a node Agent that also takes slaves'
node state over gRPC (master.grpc_service) and answers the Agent Master API for the whole job.

Each pass reads the master's own node into the same rows a slave sends, diagnoses the
job-wide snapshot (job_view) instead of the node's, and keeps its hang reports as any Agent
does; a slave's hang event triggers a pass at once, as a local FIFO event does. /steps serves
the master's own summaries and every slave's (master.store keeps them), and /job-steps
reconciles their step indices across nodes (job_steps); /ops/recent stays local
(agent-master-slave carries no op records).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import msgspec

from comminsight.agent.api import views
from comminsight.agent.api.server import AgentApi, ApiError, json_response
from comminsight.agent.hangs.incidents import pid_namespace_of
from comminsight.agent.master import job_view
from comminsight.agent.master.grpc_service import MAX_REFUSED_STRANGERS, AgentMasterServer
from comminsight.agent.master.job_metrics import JobMetrics
from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.master.store import MasterStore
from comminsight.agent.metrics.totals import node_metric_totals
from comminsight.agent.node.service import AgentService
from comminsight.agent.receivers.fifo_reader import decode_event
from comminsight.agent.state.node_state import read_node_rows
from comminsight.agent.state.snapshot import NodeSnapshot
from comminsight.agent.steps.engine_hook import EngineHook
from comminsight.agent.steps.files import StepFiles
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models import agent_master_api_v1 as api

log = logging.getLogger(__name__)

MS = 1_000_000
REBUILD_MIN_NS = 200_000_000
REBUILD_MAX_NS = 500_000_000
# A rebuild and its diagnosis may take at most 1/REBUILD_COST_SHARE of the master's time: the
# rest is for the slaves' batches (see take_snapshot)
REBUILD_COST_SHARE = 3
# how often the cursors of batches that carried no event are written: each is a file
# replaced, a third of a core each second at a thousand children, and one lost to a crash
# costs only a full state (master.store)
CURSOR_FLUSH_NS = 10_000_000_000
# refusals of peers without the token keep health degraded this long after the latest
RECENT_REFUSAL_NS = 300 * 1_000_000_000
SLAVE_ANSWER_MARGIN_S = 3.0  # the slave waits its own timeout, then answers over the network


class JobStepFiles(StepFiles):
    """The master's own step summaries and those its slaves sent (master.store)."""

    def __init__(self, home: Path, received: Path) -> None:
        super().__init__(home)
        self.received = received

    def files(self) -> list[Path]:
        return super().files() + sorted(self.received.glob("*.jsonl"))


class MasterAgentService(AgentService):
    def __init__(self, settings: ConfigV1, engine: EngineHook | None = None) -> None:
        super().__init__(settings, engine)
        self.local = NodeRecord(
            self.node_name,
            api.AgentMode.master,
            local=True,
            offset_ns=0,
            state=api.NodeState.local,
            has_state=True,
        )
        self.nodes: dict[str, NodeRecord] = {self.node_name: self.local}
        self.store = MasterStore(self.home)
        self.server = AgentMasterServer(
            nodes=self.nodes,
            store=self.store,
            token=settings.agent_token,
            max_batch_bytes=settings.agent_master_max_batch_bytes,
            stale_ms=settings.agent_master_stale_ms,
            on_events=self._on_slave_events,
            max_concurrent_rpcs=settings.agent_master_max_concurrent_rpcs,
        )
        self.metrics.registry.register(self.server)  # comminsight_master_unauthenticated_total
        self.step_files = JobStepFiles(self.home, self.store.steps_dir)
        self.grpc_port: int | None = None
        self._snapshot: NodeSnapshot | None = None
        self._snapshot_version = -1
        self._rebuild_now = False
        self._rebuild_cost_ns = 0  # wall time of the last pass that rebuilt and diagnosed
        self._cursors_flushed_ns = 0
        self.stale_ns = settings.agent_heartbeat_stale_ms * MS
        self.metrics.registry.register(
            JobMetrics(
                self.nodes,
                self._local_metric_totals,
                lambda node: len(self.store.hang_keys.get(node, ())),
                time.monotonic_ns,
            )
        )

    def poll_interval_s(self) -> float:
        """The configured interval, always: the job's other nodes are followed too."""
        return self.settings.agent_poll_interval_ms / 1000

    def _local_metric_totals(self) -> pb.NodeMetricTotals:
        totals = node_metric_totals(self.metrics)
        # this agent's open hangs are the job's diagnosis (comminsight_hangs_open), not a
        # diagnosis of its own node's ranks
        totals.hangs_open.clear()
        return totals

    # ---- the pass ------------------------------------------------------------------------

    def take_snapshot(self, now_mono_ns: int) -> NodeSnapshot:
        """The job-wide snapshot, rebuilt (and so diagnosed, see AgentService.poll_once) when
        rows changed and REBUILD_MIN_NS passed, at once when a hang event arrived, and at
        least every REBUILD_MAX_NS. Passes run every poll interval for the local rings, while
        slaves' rows arrive per report interval from every node: rebuilding and diagnosing
        thousands of ranks every pass would cost the master more than a core at scale.
        Ages do not need a rebuild (diagnosis measures them against `now`); heartbeat
        freshness does, hence REBUILD_MAX_NS, which also bounds how late a verdict comes
        past the hang threshold.

        Both grow with the job's ranks: at 8192 ranks a rebuild and its diagnosis took about
        0.4 s, so rebuilding every 200 ms left no time for the slaves' batches, and a
        verdict came 15-24 s after a fault. The spacing between rebuilds is therefore also
        at least REBUILD_COST_SHARE times what the last one cost. Hang events still rebuild
        at once, and so does a wait in flight on any node crossing the hang threshold since
        the last rebuild (_wait_crossed): the verdict comes when it is due, not a spacing
        later (at 100,000 ranks through relays a rebuild costs most of a second)."""
        self.local.rows = read_node_rows(
            self.producers.producers.values(), now_mono_ns, self.stale_ns, self.inject_names
        )
        self.local.last_seen_mono_ns, self.local.last_seen_real_ns = now_mono_ns, time.time_ns()
        self.server.mark_stale(now_mono_ns)
        if now_mono_ns - self._cursors_flushed_ns >= CURSOR_FLUSH_NS:
            self._cursors_flushed_ns = now_mono_ns
            try:
                self.store.flush_cursors()
            except OSError as e:  # only a later restart's resend is at stake: go on serving
                log.error("cannot write slave cursors under %s: %s", self.store.dir, e)
        self.local.note_waits()
        cached = self._snapshot
        crossing = cached is not None and self._wait_crossed(cached, now_mono_ns)
        if cached is not None and not self._rebuild_now and not crossing:
            age = now_mono_ns - cached.taken_mono_ns
            changed = self._snapshot_version != self.server.version or self.local.rows.processes
            spacing = max(REBUILD_MIN_NS, REBUILD_COST_SHARE * self._rebuild_cost_ns)
            if age < spacing or (age < REBUILD_MAX_NS and not changed):
                return cached
        self._rebuild_now = False
        self._snapshot_version = self.server.version
        self._snapshot = job_view.job_snapshot(
            self.nodes.values(), self.node_name, now_mono_ns, time.time_ns(), self.stale_ns
        )
        return self._snapshot

    def _wait_crossed(self, cached: NodeSnapshot, now_mono_ns: int) -> bool:
        """Some wait in flight crossed the hang threshold since the cached snapshot was
        taken: its verdict should not wait for the rebuilds' spacing."""
        if not self.threshold_ns:
            return False
        return any(
            n.wait_crosses(cached.taken_mono_ns, now_mono_ns, self.threshold_ns)
            for n in self.nodes.values()
            if n.wait_starts
        )

    def ask_stack(self, culprit):
        """A culprit on another node: asked of that node's slave over gRPC (bounded: a bit
        more than the slave's own wait)."""
        if culprit.node_name == self.node_name:
            return super().ask_stack(culprit)
        rank = culprit.global_rank if isinstance(culprit.global_rank, int) else None
        timeout_s = self.settings.agent_stack_timeout_s + SLAVE_ANSWER_MARGIN_S
        return self.server.request_stacks(
            culprit.node_name, culprit.pid, rank, timeout_s, pid_namespace_of(culprit)
        )

    def poll_once(self, now_mono_ns: int | None = None):
        began = time.perf_counter_ns()
        before = self._snapshot
        reports = super().poll_once(now_mono_ns)
        if self._snapshot is not before:  # this pass rebuilt the job snapshot and diagnosed it
            self._rebuild_cost_ns = time.perf_counter_ns() - began
        return reports

    def _on_fifo_events(self, events) -> None:
        self._rebuild_now = True  # a hang event: diagnose the job at the coming pass
        super()._on_fifo_events(events)

    def _on_slave_events(self, node: str, records: list[bytes]) -> None:
        events = [decode_event(r) for r in records]
        for e in events:
            log.warning(
                "hang event from %s: pid %d rank %d %s %s #%d on %016x",
                node,
                e.pid,
                e.rank,
                e.event_type,
                e.func,
                e.op_index,
                e.comm_id,
            )
        self._on_fifo_events(events)

    async def run(self, stop: asyncio.Event) -> None:
        self.store.load()
        for name, cursor in self.store.cursors.items():
            if name not in self.nodes:  # known from before a restart, not back yet
                self.nodes[name] = NodeRecord(
                    name, api.AgentMode.slave, epoch=cursor.epoch, last_applied=cursor.last_applied
                )
        server, self.grpc_port = await self.server.start(
            self.settings.agent_master_listen,
            self.settings.agent_tls_cert,
            self.settings.agent_tls_key,
            self.settings.agent_tls_client_ca,
        )
        log.info(
            "master: slaves' gRPC on %s (port %d, TLS %s)",
            self.settings.agent_master_listen,
            self.grpc_port,
            ("on, client certificates required" if self.settings.agent_tls_client_ca else "on")
            if self.settings.agent_tls_cert
            else "off",
        )
        try:
            await super().run(stop)
        finally:
            self.server.shutting_down = True
            await server.stop(grace=1.0)
            self.store.flush_cursors()

    # ---- what the API reads --------------------------------------------------------------

    def job_rows(self) -> list[views.MemberRow]:
        return job_view.job_rows(self.nodes.values(), time.monotonic_ns())

    def health(self) -> api.Health:
        base = super().health()
        now = time.monotonic_ns()
        reasons = list(base.reasons)
        for node in sorted(self.nodes.values(), key=lambda n: n.name):
            if node.state is api.NodeState.stale:
                age = (now - node.last_seen_mono_ns) / 1e9 if node.last_seen_mono_ns else 0
                reasons.append(f"node {node.name} is stale: nothing from its slave for {age:.1f} s")
            elif node.state is api.NodeState.disconnected:
                reasons.append(f"node {node.name} disconnected")
            elif node.state is api.NodeState.rejected and node.last_reject is not None:
                reasons.append(
                    f"node {node.name} refused: {node.last_reject.reason}: "
                    f"{node.last_reject.message}"
                )
        last = self.server.last_unauthenticated
        recent = now - self.server.last_unauthenticated_mono_ns < RECENT_REFUSAL_NS
        if last is not None and recent:
            reasons.append(
                f"{self.server.unauthenticated_rejects} registrations or streams without the "
                f"token refused, the latest from {last.peer}: {last.message}"
            )
        if self.server.strangers_unrecorded:
            reasons.append(
                f"{self.server.strangers_unrecorded} refusals of unknown node names were not "
                f"recorded (more than {MAX_REFUSED_STRANGERS} such names)"
            )
        procs = [p for n in self.nodes.values() for p in n.rows.processes.values()]
        comms = {m.comm_id for n in self.nodes.values() for m in n.rows.members.values()}
        comms |= {c.member.comm_id for n in self.nodes.values() for c in n.classes}
        # below the relays that report: the processes they count for each node
        below = job_view.below_relays(self.nodes.values(), time.time_ns())
        return msgspec.structs.replace(
            base,
            status=api.HealthStatus.degraded if reasons else api.HealthStatus.ok,
            reasons=reasons,
            processes_alive=sum(1 for p in procs if p.alive),
            processes_total=len(procs) + sum(n.processes_total for n in below),
            communicators_total=len(comms),
            nodes_connected=sum(
                1
                for n in self.nodes.values()
                if n.state in (api.NodeState.local, api.NodeState.connected)
            )
            + sum(1 for n in below if n.state is api.NodeState.connected),
            nodes_total=len(self.nodes) + len(below),
        )


class MasterApi(AgentApi):
    """The endpoints whose answer is the job's rather than the node's. A job's rows carry no
    owner a master could judge a local user by: on its Unix socket they answer root and the
    Agent's own user only (others are refused, not shown a part)."""

    agent_kind = "master"

    def _job_wide(self, request) -> None:
        self._ready()
        if not self._reader(request).sees_all:
            raise ApiError(
                api.ErrorCode.forbidden,
                "a master answers for whole jobs: ask it over TCP, or as root or its own user",
            )

    def _member_rows(self, request) -> tuple[list[views.MemberRow], int, int]:
        """The job's rows, every node's (communicators, in-flight ops)."""
        self._job_wide(request)
        return self.service.job_rows(), time.monotonic_ns(), time.time_ns()

    def step_directories(self) -> list:
        """Its own engine's step summaries and every slave's (master.store)."""
        return [self.service.step_files.directory, self.service.store.steps_dir]

    def job_nodes(self) -> dict[str | None, frozenset[str]]:
        """From the nodes' process rows: which nodes run each job's processes."""
        nodes: dict[str | None, set[str]] = {}
        for node in self.service.nodes.values():
            for p in node.rows.processes.values():
                nodes.setdefault(p.job_id or None, set()).add(node.name)
            for rc in node.classes:  # below a relay: the nodes of its classes' representatives
                nodes.setdefault(rc.process.job_id or None, set()).add(rc.node_name)
        return {job: frozenset(names) for job, names in nodes.items()}

    async def nodes(self, request, values):
        self._job_wide(request)
        now, real = time.monotonic_ns(), time.time_ns()
        records = list(self.service.nodes.values())
        every = [job_view.node_summary(n, now, real) for n in records]
        items = [
            n
            for n in sorted(
                [*every, *job_view.below_relays(records, real)], key=lambda n: n.node_name
            )
            if values["state"] in ("all", n.state.value)
        ]
        total = len(items)
        if values["cursor"] is not None:
            items = [n for n in items if n.node_name > values["cursor"]]
        page = items[: values["limit"]]
        next_cursor = page[-1].node_name if len(items) > len(page) else None
        return json_response(api.NodeList(items=page, total=total, next_cursor=next_cursor))


MasterAgentService.api_class = MasterApi
