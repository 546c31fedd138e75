"""The live engine's Step summaries on a disk that may refuse them.

A write that fails (a full disk, a read-only home) is not a failure of the engine: the
summaries wait in their SummaryFile, the checkpoint keeps its last good state, a file due to
be sealed stays due, and the worker tries again every STORAGE_RETRY_S until the disk takes
them (StorageFault: health names the file and the error while it lasts).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from comminsight.agent.steps.live_gpu import LiveGpu
from comminsight.agent.steps.step_durations import StepDurations

log = logging.getLogger(__name__)

STORAGE_RETRY_S = 5.0


@dataclass
class StorageFault:
    """Writes under semantics/step/ are failing: since when, the latest file and error."""

    path: str
    error: str
    since_mono_s: float
    since_real_ns: int
    failures: int = 1


class SummaryDisk:
    """Writes each GPU's summaries to its file and counts the Steps written; notes the writes
    that fail and says when to try them again."""

    def __init__(self) -> None:
        self.steps_written = 0
        self.step_durations = StepDurations()  # for /metrics, taken by the Agent's loop
        self.fault: StorageFault | None = None  # while writes fail
        self.faults_total = 0  # writes that failed, ever
        self.retry_at = float("inf")

    def write(self, g: LiveGpu, summaries: list) -> None:
        if summaries:
            try:
                g.out.add(summaries)
            except OSError as e:  # the summaries wait in g.out for the disk
                self.failed(g.out.path, e)
            # a restarted engine writes again the summaries after its checkpoint: count once
            if g.out.written > g.reported:
                new = g.out.written - g.reported
                self.steps_written += new
                g.reported = g.out.written
                self.step_durations.add(
                    g.gpu.labels, [s.duration_ns / 1e9 for s in summaries[-new:]]
                )

    def flush(self, g: LiveGpu) -> None:
        try:
            g.out.flush()
        except OSError as e:
            self.failed(g.out.path, e)

    def park(self, g: LiveGpu) -> None:
        """An ended GPU waiting for its peers keeps no descriptor open (SummaryFile.park)."""
        try:
            g.out.park()
        except OSError as e:  # it stays open; what waits is written with the next write
            self.failed(g.out.path, e)

    def seal(self, g: LiveGpu) -> None:
        """Seal g's file, or leave it due for the next retry."""
        try:
            g.out.seal()
            g.seal_due = False
        except OSError as e:  # sealed again once the disk takes it
            g.seal_due = True
            self.failed(g.out.path, e)

    def failed(self, path, error: OSError) -> None:
        """Note a failed write; the first of a run of them is logged (the rest are counted)."""
        self.faults_total += 1
        now = time.monotonic()
        self.retry_at = now + STORAGE_RETRY_S
        message = f"{type(error).__name__}: {error.strerror or error}"[:300]
        fault = self.fault
        if fault is None:
            self.fault = StorageFault(str(path), message, now, time.time_ns())
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

    def retry_due(self) -> bool:
        return self.fault is not None and time.monotonic() >= self.retry_at

    def retry(
        self, out_dir: Path, write_waiting: Callable[[], None], checkpoint: Callable[[], None]
    ) -> None:
        """Write what waits, then checkpoint; the fault ends when all succeed."""
        self.retry_at = float("inf")
        before = self.faults_total
        write_waiting()
        if self.faults_total == before:
            checkpoint()
        if self.faults_total == before and self.fault is not None:
            log.warning(
                "semantic engine: writes under %s succeed again (after %d failures)",
                out_dir,
                self.fault.failures,
            )
            self.fault = None
