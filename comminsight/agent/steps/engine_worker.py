"""The live engine's thread and the queue that feeds it.

Ingest must never wait for step recovery, so `feed` only queues the batch (records the ring
copy already made; nothing is copied again). When more than `max_queued` records wait, new
batches are dropped and counted, and the GPU's next op carries them as lost records (the Step
it falls in reports records_lost). The thread takes everything queued at once and hands it to
one pass; between passes it sleeps until an item comes or the next timed work is due (a
checkpoint, a restart, a cut by the clock, a retry of the disk or of a GPU's logs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.semantic.shm_input import CommInfo

log = logging.getLogger(__name__)

# 256-byte ring records: 64 MiB waiting for an engine that cannot keep up, then dropped
# and counted (an Agent that queued without end would take the node's memory)
MAX_QUEUED_RECORDS = 1 << 18


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


class EngineWorker:
    """work(items): one pass over what was queued (it must not raise: the thread lives until
    stop); next_due(): when timed work is due (CLOCK_MONOTONIC s); final(): run as the thread
    ends at stop."""

    def __init__(
        self,
        max_queued: int,
        work: Callable[[list], None],
        next_due: Callable[[], float],
        final: Callable[[], None],
    ) -> None:
        self.max_queued = max_queued
        self.dropped_records = 0
        self._work = work
        self._next_due = next_due
        self._final = final
        self._items: deque = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._busy = False
        self._stopping = False
        self._final_checkpoint = False  # set by stop(): the worker checkpoints as it ends
        self.thread = threading.Thread(target=self._run, name="semantic-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def feed(self, gpu: GpuStream, records: np.ndarray, comms: dict[int, CommInfo]) -> None:
        with self._cond:
            if self._queued + len(records) > self.max_queued:
                self.dropped_records += len(records)
                self._items.append(("lost", gpu, len(records)))
            else:
                self._queued += len(records)
                self._items.append(("ops", gpu, (records, comms)))
            self._cond.notify()

    def put(self, kind: str, gpu: GpuStream | None, payload) -> None:
        with self._cond:
            self._items.append((kind, gpu, payload))
            self._cond.notify()

    @property
    def queued_records(self) -> int:
        with self._cond:
            return self._queued

    def idle(self) -> bool:
        with self._cond:
            return not self._items and not self._busy

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout_s: float) -> None:
        with self._cond:
            self._stopping = self._final_checkpoint = True
            self._cond.notify()
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            log.warning(
                "semantic engine: its worker is still busy after %.0f s; it checkpoints when "
                "its pass ends (a restart before that resumes from its last checkpoint)",
                timeout_s,
            )

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._busy = False
                    now = time.monotonic()
                    due = self._next_due()
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
            self._work(items)
        if final:  # the items still queued come again from the ring (or the process's logs)
            self._final()
