"""What happens to a GPU whose engine failed: an exception out of one GPU's engine does not
end step recovery for that GPU. The engine is restored from the GPU's last checkpoint and
handed again what it was handed since (steps.replay), which rewrites the same summaries;
failures and restarts are counted by reason for health and metrics. Restarts are rate-limited
per GPU (steps.restarts): past the budget the GPU backs off, its items kept in its replay log.
An ops batch that fails again after a restart is dropped as lost records, and an end that
fails again seals the GPU without its last Step, so one bad item cannot stop a GPU for good.
"""

from __future__ import annotations

import logging
import time

from comminsight.agent.steps.gpu_engines import GpuEngines
from comminsight.agent.steps.live_gpu import LiveGpu
from comminsight.agent.steps.replay import ReplayEntry
from comminsight.agent.steps.restarts import FailureCounts

log = logging.getLogger(__name__)


class _ReplayFailed(Exception):
    def __init__(self, entry: ReplayEntry | None, error: Exception) -> None:
        super().__init__(str(error))
        self.entry = entry
        self.error = error


class EngineRestarts:
    def __init__(self, engines: GpuEngines, counts: FailureCounts) -> None:
        self._engines = engines
        self._counts = counts

    def failed(self, g: LiveGpu, error: Exception, entry: ReplayEntry | None = None) -> None:
        """g's engine failed (on `entry`, None: outside its input): restart it when its
        budget allows."""
        if self._note(g, error, entry):
            self.restart_when_allowed(g)

    def _note(self, g: LiveGpu, error: Exception, entry: ReplayEntry | None) -> bool:
        """Count a failure of g's engine; whether to restart it (False: g was sealed)."""
        self._engines.failed(g, error)
        if entry is not None and entry is g.suspect:  # failed again on the same input
            if entry.kind == "finished":
                log.error("semantic engine: pid %d: its last Step is not written", g.gpu.pid)
                self._engines.seal(g)
                return False
            lost = g.replay.discard(entry)
            log.error("semantic engine: pid %d: %d op records skipped as lost", g.gpu.pid, lost)
        g.suspect = entry
        return True

    def restart_when_allowed(self, g: LiveGpu) -> None:
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
            self._counts.restarts[g.last_failure.reason if g.last_failure else "unknown"] += 1
            try:
                self._restart(g)
                return
            except _ReplayFailed as f:
                if not self._note(g, f.error, f.entry):
                    return

    def _restart(self, g: LiveGpu) -> None:
        """g's engine as its last checkpoint left it (a new one before any checkpoint), its
        summaries truncated to match, handed again what came since."""
        state = g.checkpoint
        g.out.close()
        try:
            self._engines.reopen(g)
        except Exception as e:
            raise _ReplayFailed(None, e) from e
        self._engines.track(g, state.input.last_ring_seq if state is not None else -1)
        g.last_position = None
        for entry in list(g.replay.entries):
            try:
                self._engines.handle(g, entry.kind, entry.payload)
            except Exception as e:
                raise _ReplayFailed(entry, e) from e
        g.suspect = None
        log.warning(
            "semantic engine: pid %d restarted from %s",
            g.gpu.pid,
            "its checkpoint" if state is not None else "its first op",
        )

    def retry_due(self, now: float) -> None:
        """Restart the GPUs whose back-off is over."""
        for g in list(self._engines.gpus.values()):
            if g.retry_at is not None and g.retry_at <= now and not g.finished:
                self.restart_when_allowed(g)

    def next_retry(self) -> float:
        """When the first GPU backing off may restart (CLOCK_MONOTONIC s; inf: none)."""
        return min(
            (g.retry_at for g in self._engines.gpus.values() if g.retry_at is not None),
            default=float("inf"),
        )
