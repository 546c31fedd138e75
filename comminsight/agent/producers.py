"""The Profilers of this node, as the Agent sees them through their SHM files.

`ProducerSet.poll()` is one ingest pass: it discovers new files under <home>/shms/, maps them
(refusing, with one log line and a quarantine, a file with another ABI version or a corrupt
header, while the others go on), reads every producer's new ring records in one batch each,
and retires a producer whose process is gone once its ring is drained. What it read comes back
as a list of `Batch`es for the metrics, the engine hook and the API's recent-ops view.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from comminsight.agent.liveness import process_runs
from comminsight.shm_reader import RingCursor, ShmError, ShmRegion
from comminsight_gen.abi import shm_v1

log = logging.getLogger("comminsight.agent.producers")

QUARANTINE = "quarantine"


@dataclass
class Producer:
    """One Profiler process: its region, the agent's own cursor into its ring."""

    path: Path
    region: ShmRegion
    cursor: RingCursor
    gone_since_mono_ns: int | None = None

    @property
    def pid(self) -> int:
        return self.region.pid

    def alive(self) -> bool:
        if not process_runs(self.pid):
            return False
        return int(self.region.header["state"]) != shm_v1.FileState.CLOSED


@dataclass
class Batch:
    producer: Producer
    records: np.ndarray  # shm v1 op slots, in ring order


@dataclass
class IngestCounters:
    """What the ingest pass did, for metrics: all monotonic counts."""

    records: int = 0
    records_lost: int = 0  # overwritten before the agent read them
    files_refused: int = 0
    producers_retired: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # file name -> reason (last ones)


class ProducerSet:
    def __init__(self, home: Path, batch_max: int = 1 << 16) -> None:
        self.shms = Path(home) / "shms"
        self.batch_max = batch_max
        self.producers: dict[Path, Producer] = {}
        self.counters = IngestCounters()

    # ---- discovery ----

    def discover(self) -> None:
        if not self.shms.is_dir():
            return
        for path in sorted(self.shms.glob("*.shm")):
            if path not in self.producers:
                self._open(path)

    def _open(self, path: Path) -> None:
        try:
            region = ShmRegion(path)
        except ShmError as e:
            self._quarantine(path, str(e))
            return
        state = int(region.header["state"])
        if state == shm_v1.FileState.CREATING:
            region.close()  # not ready yet: look again next pass
            return
        self.producers[path] = Producer(path, region, RingCursor(region))
        log.info("producer pid %d (%s): %s", region.pid, region.hostname, path.name)

    def _quarantine(self, path: Path, reason: str) -> None:
        """Move a file the agent cannot read out of the way (keeping it for inspection)."""
        self.counters.files_refused += 1
        self.counters.refused[path.name] = reason
        log.error("refusing %s: %s", path, reason)
        target_dir = self.shms / QUARANTINE
        try:
            target_dir.mkdir(mode=0o700, exist_ok=True)
            shutil.move(str(path), str(target_dir / path.name))
            (target_dir / f"{path.name}.reason").write_text(reason + "\n")
        except OSError as e:
            log.error("cannot quarantine %s: %s", path, e)

    # ---- ingest ----

    def poll(self, now_mono_ns: int, retire_after_ns: int = 0) -> list[Batch]:
        """One pass: discover, read every producer's new records, retire the finished ones."""
        self.discover()
        batches = []
        for path, producer in list(self.producers.items()):
            lost_before = producer.cursor.lost
            records = producer.cursor.poll(self.batch_max)
            self.counters.records_lost += producer.cursor.lost - lost_before
            if len(records):
                self.counters.records += len(records)
                batches.append(Batch(producer, records))
            self._maybe_retire(
                path, producer, now_mono_ns, retire_after_ns, drained=not len(records)
            )
        return batches

    def _maybe_retire(
        self, path: Path, producer: Producer, now: int, after_ns: int, drained: bool
    ) -> None:
        if producer.alive():
            producer.gone_since_mono_ns = None
            return
        if producer.gone_since_mono_ns is None:
            producer.gone_since_mono_ns = now
        head = int(producer.region.header["ring_head"])
        if (
            not drained
            or producer.cursor.next_ticket < head
            or now - producer.gone_since_mono_ns < after_ns
        ):
            return
        # The process is gone and everything it published has been read: its file can go.
        del self.producers[path]
        self.counters.producers_retired += 1
        target = path.resolve()
        pid = producer.pid
        producer.region.close()
        for p in {path, target}:
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        log.info("retired producer pid %d (%s)", pid, path.name)

    def close(self) -> None:
        for producer in self.producers.values():
            producer.region.close()
        self.producers.clear()
