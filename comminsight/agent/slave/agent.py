"""A slave Agent (COMMINSIGHT_AGENT_MODE=slave): a node Agent that also streams its node's
state to the master (agent-master-slave v1).

After each pass it decides what to put in the outbox: hang events at once (the master
diagnoses on them); every COMMINSIGHT_AGENT_REPORT_INTERVAL_MS the state rows that changed
(node_state.RowDiff), the node's metric totals when they changed (metric_totals), the step
summaries not forwarded yet and the agent's counters. While the
link is down only events are queued; the state rows that changed meanwhile go in the first
batch after it comes back, and a full state whenever the master asks for one. Batches are
split below the master's max_batch_bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

import msgspec

from comminsight.agent.metrics.totals import node_metric_totals
from comminsight.agent.node.service import AgentService
from comminsight.agent.receivers.fifo_reader import HangEvent
from comminsight.agent.slave.link import SlaveLink, clock
from comminsight.agent.slave.outbox import SlaveOutbox
from comminsight.agent.slave.uplink import (
    answer_own_stack_request,
    new_step_records,
    node_identity,
    parent_link,
)
from comminsight.agent.state.node_state import NodeRows, RowChanges, RowDiff, read_node_rows
from comminsight.agent.steps.engine_hook import EngineHook
from comminsight.agent.steps.files import NewStepSummaries
from comminsight_gen.abi import fifo_event_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models import agent_master_api_v1 as api

log = logging.getLogger(__name__)

MS = 1_000_000
BATCH_FILL = 0.8  # of max_batch_bytes: room for framing the size estimate leaves out
ROW_OVERHEAD = 6  # bytes of tag and length around each repeated element


class SlaveAgentService(AgentService):
    def __init__(self, settings: ConfigV1, engine: EngineHook | None = None) -> None:
        super().__init__(settings, engine)
        self.outbox = SlaveOutbox(self.home, settings.agent_outbox_max_bytes)
        # each Step decoded once and kept by no one: a slave forwards new Steps every report
        # for as long as training runs
        self.new_steps = NewStepSummaries(self.step_files.directory)
        self.diff = RowDiff()
        self.stale_ns = settings.agent_heartbeat_stale_ms * MS
        self.report_ns = settings.agent_report_interval_ms * MS
        self.link = parent_link(
            self, self.outbox, node_identity(self), self.inventory, self.answer_stack_request
        )
        self.events_waiting: list[HangEvent] = []
        self.totals_sent = b""  # the NodeMetricTotals last put in the outbox, serialized
        self._next_report_ns = 0
        self._full_state_due = False

    async def answer_stack_request(self, request: pb.StackRequest) -> bytes:
        return await answer_own_stack_request(self, request)

    def health(self):
        return with_link_health(super().health(), self.link)

    def inventory(self) -> tuple[list, list]:
        rows = read_node_rows(
            self.producers.producers.values(), time.monotonic_ns(), self.stale_ns, self.inject_names
        )
        return list(rows.processes.values()), list(rows.members.values())

    def _on_fifo_events(self, events: list[HangEvent]) -> None:
        super()._on_fifo_events(events)
        self.events_waiting.extend(events)
        # into the outbox (fsynced) now, not at the next pass: once read from the FIFO an
        # event exists nowhere else, so the window in which a crash loses it stays small
        try:
            self.publish(time.monotonic_ns(), events_only=True)
        except OSError as e:
            log.error("cannot queue hang events for the master: %s", e)

    def poll_once(self, now_mono_ns: int | None = None):
        reports = super().poll_once(now_mono_ns)
        try:
            self.publish(time.monotonic_ns())
        except OSError as e:  # the outbox's disk: the node's own agent goes on serving
            log.error("cannot queue node state for the master: %s", e)
        return reports

    # ---- building batches ----------------------------------------------------------------

    def publish(self, now: int, events_only: bool = False) -> None:
        due = now >= self._next_report_ns and not events_only
        if self.link.full_state_wanted:
            self._full_state_due = True
            self.link.full_state_wanted = False
        if not due and not self.events_waiting:
            return
        events = [
            pb.HangEvent(
                fifo_event_abi_version=fifo_event_v1.PROTOCOL_VERSION,
                record=e.raw,
                read_real_ns=time.time_ns(),
            )
            for e in self.events_waiting
            if e.raw
        ]
        self.events_waiting = []
        steps, steps_sent = ([], {})
        changes, full, totals = None, False, None
        if due:
            self._next_report_ns = now + self.report_ns
            steps, steps_sent = new_step_records(self.outbox, self.new_steps)
            if self.link.connected or self._full_state_due:
                rows = read_node_rows(
                    self.producers.producers.values(), now, self.stale_ns, self.inject_names
                )
                full = self._full_state_due
                if full:
                    self.diff.reset()
                changes = self.diff.changes(rows)
                if changes.vanished and not full:
                    full = True
                    self.diff.reset()
                    changes = self.diff.changes(rows)
                self._full_state_due = False
                if full:
                    changes = _everything(rows)
                totals = node_metric_totals(self.metrics)
                data = totals.SerializeToString(deterministic=True)
                if full or data != self.totals_sent:
                    self.totals_sent = data
                else:
                    totals = None
        if not (events or steps or changes or full or totals is not None):
            return
        counters = pb.AgentCounters(
            ingest_lag_ms=self.metrics.lag_s * 1000,
            shm_files_quarantined_total=self.producers.counters.files_refused,
            fifo_events_read_total=self.fifo.decoder.stats.events,
            outbox_batches=len(self.outbox.sizes),
            outbox_bytes=self.outbox.pending_bytes,
            outbox_events_dropped_total=self.outbox.events_dropped_total,
        )
        batches = split_batches(
            changes, events, steps, full, int(self.link.max_batch_bytes * BATCH_FILL), totals
        )
        for i, batch in enumerate(batches):
            batch.clock.CopyFrom(clock())
            batch.agent_counters.CopyFrom(counters)
            self.outbox.append(batch, steps_sent if i == len(batches) - 1 else None)
        self.link.notify()

    async def run(self, stop: asyncio.Event) -> None:
        await serve_with_link(self.link, self.outbox, super().run(stop), stop)


def with_link_health(base: api.Health, link: SlaveLink) -> api.Health:
    """Degraded, with the reason, while the link to the master is down: a refusal or a TLS
    mismatch is a configuration error the node's own API should name."""
    if link.connected or link.last_error is None:
        return base
    return msgspec.structs.replace(
        base,
        status=api.HealthStatus.degraded,
        reasons=[*base.reasons, f"not connected to the master: {link.last_error}"],
    )


async def serve_with_link(
    link: SlaveLink, outbox: SlaveOutbox, serve: Awaitable[None], stop: asyncio.Event
) -> None:
    """The Agent's own service with its link upward beside it; at stop the link has a few
    seconds for its last acknowledgements and its goodbye."""
    outbox.load()
    running = asyncio.ensure_future(link.run(stop))
    try:
        await serve
    finally:
        try:
            await asyncio.wait_for(running, timeout=15)
        except (TimeoutError, asyncio.CancelledError):
            running.cancel()


def _everything(rows: NodeRows) -> RowChanges:
    return RowChanges(
        list(rows.processes.values()),
        list(rows.members.values()),
        list(rows.progress.values()),
        vanished=False,
    )


def split_batches(
    changes,
    events,
    steps,
    full: bool,
    budget: int,
    totals: pb.NodeMetricTotals | None = None,
    reduction: tuple[list[pb.RankClass], list[pb.SubtreeNode]] | None = None,
) -> list[pb.NodeStateBatch]:
    """Rows and events packed into batches of at most about `budget` bytes each. A full state
    that spans batches marks them all full_state and the last one full_state_last. The
    metric totals (bounded to a few KiB) go whole into the first batch. A relay's reduction
    (its rank classes and subtree nodes) is state like rows."""
    items: list[tuple[str, object]] = [("hang_events", e) for e in events]
    items += [("step_summaries", s) for s in steps]
    if changes is not None:
        items += [("processes", p) for p in changes.processes]
        items += [("communicators", m) for m in changes.members]
        items += [("progress", g) for g in changes.progress]
    if reduction is not None:
        items += [("rank_classes", c) for c in reduction[0]]
        items += [("subtree_nodes", n) for n in reduction[1]]
    batches = [pb.NodeStateBatch()]
    size = 0
    if totals is not None:
        batches[0].metric_totals.CopyFrom(totals)
        size = totals.ByteSize() + ROW_OVERHEAD
    for field, msg in items:
        n = msg.ByteSize() + ROW_OVERHEAD
        if size and size + n > budget:
            batches.append(pb.NodeStateBatch())
            size = 0
        getattr(batches[-1], field).append(msg)
        size += n
    if full:
        for batch in batches:
            batch.full_state = True
        batches[-1].full_state_last = True
    return batches
