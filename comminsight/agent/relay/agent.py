"""A relay Agent (COMMINSIGHT_AGENT_MODE=relay): a master toward the slaves (or relays) below it,
a slave toward its own master, passing up not their rows but their reduction.

Below, it is a master's gRPC service and store (master.grpc_service, master.store): the same
registration, exactly-once batches and durable cursors, so a slave cannot tell a relay from a
master. Above, it is a slave's outbox and link (slave.outbox, slave.link): every report
interval it sends a full state made of its classes (relay.classes: per communicator, the
ranks in the same state as one class), the nodes below it (SubtreeNode) and their metric
totals summed (relay.summed_totals). Events go up as they come: a child's hang event or step
summary is committed in the relay's store (and only then acknowledged to the child), put in
the outbox with the node it came from, and sent on.

The relay diagnoses nothing beyond its own node: the verdict on a communicator needs all its
ranks, which only the master sees. It answers the master's stack requests for a node below it
by asking that node's slave, as a master would.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from comminsight.agent.master.agent import (
    CURSOR_FLUSH_NS,
    SLAVE_ANSWER_MARGIN_S,
    MasterAgentService,
)
from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.metrics.totals import node_metric_totals
from comminsight.agent.node.service import AgentService
from comminsight.agent.receivers.fifo_reader import HangEvent
from comminsight.agent.relay.classes import rank_classes
from comminsight.agent.relay.summed_totals import summed_totals
from comminsight.agent.slave.agent import (
    BATCH_FILL,
    serve_with_link,
    split_batches,
    with_link_health,
)
from comminsight.agent.slave.link import clock
from comminsight.agent.slave.outbox import SlaveOutbox
from comminsight.agent.slave.uplink import (
    answer_own_stack_request,
    new_step_records,
    node_identity,
    parent_link,
)
from comminsight.agent.state.node_state import read_node_rows
from comminsight.agent.state.snapshot import NodeSnapshot
from comminsight.agent.steps.engine_hook import EngineHook
from comminsight.agent.steps.files import NewStepSummaries
from comminsight_gen.abi import fifo_event_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models import agent_master_api_v1 as api

log = logging.getLogger(__name__)

MS = 1_000_000
# a report (its reduction) may take at most 1/REDUCE_COST_SHARE of the relay's time: at a
# thousand nodes below, reducing every report interval would take half a core
REDUCE_COST_SHARE = 3
# a parent this many batches behind gets no new reduction until it catches up: each one
# supersedes the last, and piling them up would fill the outbox, which then drops its
# oldest batches with the events in them
UNACKED_BATCHES_MAX = 8


class RelayAgentService(MasterAgentService):
    def __init__(self, settings: ConfigV1, engine: EngineHook | None = None) -> None:
        super().__init__(settings, engine)
        self.local.mode = api.AgentMode.relay
        self.server.on_events = self._on_child_events
        self.server.on_steps = self._on_child_steps
        self.outbox = SlaveOutbox(self.home, settings.agent_outbox_max_bytes)
        self.report_ns = settings.agent_report_interval_ms * MS
        self.link = parent_link(
            self,
            self.outbox,
            node_identity(self, relay=True),
            lambda: ([], []),  # its state is its reduction, sent as a full state
            self.answer_stack_request,
        )
        # this node's own Steps, decoded once and kept by no one, as a slave's
        self.new_steps = NewStepSummaries(self.step_files.directory)
        self.events_waiting: list[pb.HangEvent] = []
        self.steps_waiting: list[pb.StepSummaryRecord] = []
        self._next_report_ns = 0
        self.classes_sent = 0  # in the latest report
        self.reduce_cost_ns = 0  # what the latest report's reduction took

    # ---- this node: diagnosed as a node Agent does; the subtree only reduced ----------------

    def take_snapshot(self, now_mono_ns: int) -> NodeSnapshot:
        self.local.rows = read_node_rows(
            self.producers.producers.values(), now_mono_ns, self.stale_ns, self.inject_names
        )
        self.local.last_seen_mono_ns, self.local.last_seen_real_ns = now_mono_ns, time.time_ns()
        self.server.mark_stale(now_mono_ns)
        self._flush_cursors(now_mono_ns)
        return AgentService.take_snapshot(self, now_mono_ns)

    def _flush_cursors(self, now_mono_ns: int) -> None:
        if now_mono_ns - self._cursors_flushed_ns < CURSOR_FLUSH_NS:
            return
        self._cursors_flushed_ns = now_mono_ns
        try:
            self.store.flush_cursors()
        except OSError as e:
            log.error("cannot write child cursors under %s: %s", self.store.dir, e)

    def poll_once(self, now_mono_ns: int | None = None):
        reports = AgentService.poll_once(self, now_mono_ns)
        try:
            self.publish(time.monotonic_ns())
        except OSError as e:  # the outbox's disk: the node's own agent goes on serving
            log.error("cannot queue the relay's reduction for its master: %s", e)
        return reports

    # ---- events from below: on to the parent -------------------------------------------

    def _on_child_events(self, node: str, records: list[bytes]) -> None:
        """A child's hang events, committed in this relay's store: into the outbox now (a
        crash after the child's acknowledgement must not lose them)."""
        self.events_waiting += [
            pb.HangEvent(
                fifo_event_abi_version=fifo_event_v1.PROTOCOL_VERSION,
                record=r,
                read_real_ns=time.time_ns(),
                origin_node=node,
            )
            for r in records
        ]
        self._publish_events()

    def _on_fifo_events(self, events: list[HangEvent]) -> None:
        """This node's own FIFO: diagnosed here as any node's, and passed up."""
        super()._on_fifo_events(events)
        self._on_child_events(self.node_name, [e.raw for e in events if e.raw])

    def _on_child_steps(self, lines: list[tuple[str, bytes]]) -> None:
        self.steps_waiting += [
            pb.StepSummaryRecord(step_summary_version=1, json=raw, origin_node=origin)
            for origin, raw in lines
        ]

    def _publish_events(self) -> None:
        try:
            self.publish(time.monotonic_ns(), events_only=True)
        except OSError as e:
            log.error("cannot queue hang events for the master: %s", e)

    # ---- the report --------------------------------------------------------------------

    def publish(self, now: int, events_only: bool = False) -> None:
        due = now >= self._next_report_ns and not events_only
        if not due and not self.events_waiting:
            return
        events, self.events_waiting = self.events_waiting, []
        steps, steps_sent, reduction, totals = [], {}, None, None
        if due:
            steps, steps_sent = new_step_records(self.outbox, self.new_steps)
            steps += self.steps_waiting
            self.steps_waiting = []
            began = time.perf_counter_ns()
            behind = len(self.outbox.sizes) > UNACKED_BATCHES_MAX
            if (self.link.connected or self.link.full_state_wanted) and not behind:
                self.link.full_state_wanted = False
                reduction = self.reduction(now)
                totals = self.subtree_totals()
                self.classes_sent = len(reduction[0])
            # the reduction grows with the rows below: at most 1/REDUCE_COST_SHARE of the
            # relay's time, the rest for its children's batches
            self.reduce_cost_ns = time.perf_counter_ns() - began
            # from when it was due, not from now: passes and cursor writes would make every
            # report later than the last; but never sooner than the cost allows
            self._next_report_ns = max(
                self._next_report_ns + self.report_ns,
                now + REDUCE_COST_SHARE * self.reduce_cost_ns,
            )
        if not (events or steps or reduction):
            return
        counters = pb.AgentCounters(
            ingest_lag_ms=self.metrics.lag_s * 1000,
            outbox_batches=len(self.outbox.sizes),
            outbox_bytes=self.outbox.pending_bytes,
            outbox_events_dropped_total=self.outbox.events_dropped_total,
        )
        budget = int(self.link.max_batch_bytes * BATCH_FILL)
        full = reduction is not None
        batches = split_batches(None, events, steps, full, budget, totals, reduction)
        try:
            for i, batch in enumerate(batches):
                batch.clock.CopyFrom(clock())
                batch.agent_counters.CopyFrom(counters)
                self.outbox.append(batch, steps_sent if i == len(batches) - 1 else None)
        except OSError:
            # the children have these acknowledged already: kept for the next try, never
            # dropped (a batch that did reach the outbox repeats them; the master drops
            # repeats by key)
            self.events_waiting[:0] = events
            self.steps_waiting[:0] = [s for s in steps if s.origin_node]
            raise
        self.link.notify()

    def reduction(self, now: int) -> tuple[list[pb.RankClass], list[pb.SubtreeNode]]:
        """The classes of this node and of the children that report (a child whose stream
        ended may be reporting elsewhere already: its ranks would count twice), and every
        child in the node list, with its state."""
        children = [n for n in self.nodes.values() if not n.local and n.identity is not None]
        reporting = [
            n for n in children if n.state in (api.NodeState.connected, api.NodeState.stale)
        ]
        sources = [self.local, *reporting]
        return rank_classes(sources, now, self.stale_ns), self.subtree_nodes(children, now)

    def subtree_nodes(self, children: list[NodeRecord], now: int) -> list[pb.SubtreeNode]:
        out = []
        for n in sorted(children, key=lambda n: n.name):
            seen = n.last_seen_mono_ns
            out.append(
                pb.SubtreeNode(
                    node_name=n.name,
                    host=n.host,
                    state=n.state.value,
                    last_seen_age_ms=max(0, now - seen) // MS if seen is not None else None,
                    # a relay child's own: the processes of the nodes below it are theirs
                    processes=len(n.rows.processes),
                    mode=n.mode.value,
                )
            )
            for below in n.subtree.values():  # further down, through that relay
                moved = pb.SubtreeNode()
                moved.CopyFrom(below)
                moved.via.insert(0, n.name)
                out.append(moved)
        return out

    def subtree_totals(self) -> pb.NodeMetricTotals:
        own = node_metric_totals(self.metrics)
        return summed_totals(
            [own, *(n.metric_totals for n in self.nodes.values() if n.metric_totals is not None)]
        )

    # ---- the parent's stack requests, passed down ------------------------------------------

    async def answer_stack_request(self, request: pb.StackRequest) -> bytes:
        if request.node_name and request.node_name != self.node_name:
            rank = request.global_rank if request.HasField("global_rank") else None
            timeout_s = self.settings.agent_stack_timeout_s + SLAVE_ANSWER_MARGIN_S
            stack = await self.server.request_stacks(
                request.node_name, request.pid, rank, timeout_s, request.pid_namespace
            )
            return msgspec.json.encode(stack)
        return await answer_own_stack_request(self, request)

    def health(self):
        return with_link_health(super().health(), self.link)

    async def run(self, stop: asyncio.Event) -> None:
        await serve_with_link(self.link, self.outbox, super().run(stop), stop)
