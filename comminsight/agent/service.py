"""The Agent's poll loop: one pass reads every Profiler's new records, folds them into the
metrics, diagnoses the node and keeps the hang reports on disk; FIFO hang events arrive in
between through the event loop and trigger a pass at once rather than at the next tick.

Data flows one way per pass: SHM rings -> ProducerSet batches -> NodeMetrics; SHM comm tables
-> NodeSnapshot -> diagnose -> HangStore. The HTTP API (still to come, issue 4) only reads the
state kept here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from pathlib import Path

from comminsight.agent.diagnosis import diagnose
from comminsight.agent.fifo_reader import HangEvent, HangEventFifo
from comminsight.agent.hang_resolution import resolve_cleared
from comminsight.agent.hang_store import HangStore
from comminsight.agent.metrics import NodeMetrics, update_from_producers
from comminsight.agent.producers import ProducerSet
from comminsight.agent.snapshot import NodeSnapshot, build_snapshot
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models.hang_report_v1 import HangReport

log = logging.getLogger(__name__)

S = 1_000_000_000
HISTORY = 50  # snapshots kept for the straggler verdict
RECENT_EVENTS = 1000  # FIFO hang events kept for the API
# A dead producer's region is kept this long after it is drained: process_died needs it.
MIN_RETIRE_S = 60.0


class AgentService:
    def __init__(self, settings: ConfigV1) -> None:
        self.settings = settings
        self.home = Path(settings.home)
        self.producers = ProducerSet(self.home, batch_max=settings.agent_batch_max)
        self.metrics = NodeMetrics()
        self.fifo = HangEventFifo(self.home)
        self.hangs = HangStore(self.home)
        self.history: deque[NodeSnapshot] = deque(maxlen=HISTORY)
        self.hang_events: deque[HangEvent] = deque(maxlen=RECENT_EVENTS)
        self.threshold_ns = int(settings.profiler_hang_timeout_s * S)
        self.retire_after_ns = int(max(MIN_RETIRE_S, 2 * settings.profiler_hang_timeout_s) * S)
        self.passes = 0
        self._wake = asyncio.Event()

    def poll_once(self, now_mono_ns: int | None = None) -> list[HangReport]:
        """One pass; the reports of this pass (also saved under metadata/hangs/)."""
        now = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
        batches = self.producers.poll(now, retire_after_ns=self.retire_after_ns)
        update_from_producers(self.metrics, self.producers, batches, now)
        snapshot = build_snapshot(
            [p.region for p in self.producers.producers.values()],
            node_name=self.settings.agent_node_name or None,
            heartbeat_stale_ms=self.settings.agent_heartbeat_stale_ms,
            now_mono_ns=now,
        )
        reports = []
        if self.threshold_ns:  # 0 disables hang detection, as in the Profiler
            reports = diagnose(
                snapshot,
                now,
                self.threshold_ns,
                history=list(self.history),
                straggler_factor=self.settings.agent_straggler_factor,
            )
        self.history.append(snapshot)
        for report in reports:
            if self.hangs.save(report):
                log.warning("hang report %s: %s", report.report_id, report.summary)
        for report in resolve_cleared(list(self.hangs.reports.values()), reports, snapshot):
            self.hangs.save(report)
            log.warning("hang report %s resolved: %s", report.report_id, report.resolution.value)
        self.passes += 1
        return reports

    def _on_fifo_events(self, events: list[HangEvent]) -> None:
        self.hang_events.extend(events)
        self._wake.set()  # diagnose now, not at the next tick

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until stop is set; the FIFO is held open for the whole run."""
        self.hangs.load()
        for name, reason in self.hangs.errors.items():
            log.error("hang report %s set aside: %s", name, reason)
        self.fifo.open()
        self.fifo.attach(asyncio.get_running_loop(), self._on_fifo_events)
        interval_s = self.settings.agent_poll_interval_ms / 1000
        try:
            while not stop.is_set():
                self.poll_once()
                self._wake.clear()
                stopping = asyncio.ensure_future(stop.wait())
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait(
                    {stopping, woken}, timeout=interval_s, return_when=asyncio.FIRST_COMPLETED
                )
                for task in (stopping, woken):
                    task.cancel()
        finally:
            self.fifo.close()
            self.producers.close()
