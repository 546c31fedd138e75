"""The processes that ended while no Agent ran, met as an Agent starts (its first pass shows
which SHM files are gone).

A process the checkpoint names took the ring records after the checkpoint with its SHM
region; its inspector logs hold them, so its Steps go on from its logs, and a process whose
logs are not found is sealed at the checkpoint's length (the Steps after it named as not
recovered live). Then the processes that ran since Agents began to follow the home and no
checkpoint names (an Agent killed before naming them, or none running while they did) are
recovered from their logs, from their first record on: the Steps an Agent that never stopped
writes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.gpu_engines import GpuEngines
from comminsight.agent.steps.live_checkpoint import LiveCheckpoint
from comminsight.agent.steps.live_gpu import LiveGpu, labelled_stream, stream_of, summary_name
from comminsight.agent.steps.log_records import (
    LogReader,
    ProcessSegments,
    op_slots,
    process_segments,
)
from comminsight.agent.steps.logged_processes import LoggedProcess, logged_since, running_pids
from comminsight.agent.steps.summary_disk import SummaryDisk
from comminsight.semantic.offline import SummaryFile
from comminsight.semantic.process_gpus import split_process
from comminsight_gen.models.semantic_engine_v1 import GpuState, ShmPosition

log = logging.getLogger(__name__)

# The ended processes no checkpoint named that an Agent recovers from their logs as it starts:
# those of the last day, the latest 1024 (each is read whole, before the live ones go on)
UNSEEN_LOOKBACK_NS = 24 * 3600 * 10**9
MAX_UNSEEN = 1024
# Ended processes' records read back from their logs are handed to the node's cut as the
# Agent's polls (20 ms by default) met them: LOG_WINDOW_NS of the job's time at a time, for
# at most MAX_LOG_READERS processes together (an open segment each)
LOG_WINDOW_NS = 20_000_000
MAX_LOG_READERS = 64


@dataclass(frozen=True)
class FromLogs:
    """An ended process's GPU to hand its records from its logs, from ring record `start`."""

    g: LiveGpu
    segments: ProcessSegments
    start: int
    why: str  # for the log line


class EndedProcesses:
    def __init__(
        self,
        node_name: str,
        out_dir: Path,
        logs_dir: Path,
        engines: GpuEngines,
        checkpoint: LiveCheckpoint,
        disk: SummaryDisk,
    ) -> None:
        self._node_name = node_name
        self._out_dir = out_dir
        self._logs_dir = logs_dir
        self._engines = engines
        self._checkpoint = checkpoint
        self._disk = disk
        self.ended_unfinished = 0  # resumed GPUs whose process had ended: sealed as they were
        self.resumed_from_logs = 0  # resumed GPUs whose process had ended: from their logs
        self.unseen_from_logs = 0  # ended processes no checkpoint named: from their logs

    def recover(self, shm_files: frozenset[str]) -> list[FromLogs]:
        """Seal the checkpointed processes whose SHM file is not among `shm_files` and whose
        logs are not found; the GPUs to go on from their logs (log_items)."""
        from_logs = self._seal_checkpointed(shm_files)
        return from_logs + self._recover_unseen(shm_files)

    def _seal_checkpointed(self, shm_files: frozenset[str]) -> list[FromLogs]:
        """The ended processes the checkpoint names: those whose logs are found go on from
        them (returned, to be handed their records), the others are sealed as they were."""
        from_logs = []
        saved = self._checkpoint.saved
        for name, state in list(saved.items()):
            shm_file = state.input.shm_file if isinstance(state.input, ShmPosition) else None
            if not isinstance(shm_file, str) or shm_file in shm_files:
                continue
            if not state.output.file.endswith(".partial"):
                continue  # sealed already, by the Agent before
            if not (self._out_dir / state.output.file).exists():  # sealed since: nothing to do
                del saved[name]
                continue
            if self._resume_from_logs(name, state, from_logs):
                continue
            out = SummaryFile(
                self._out_dir / state.output.file,
                state.output.byte_offset,
                state.output.summaries_written,
            )
            try:
                sealed = out.seal()
            except OSError as e:  # tried again at the next start
                out.close()
                self._disk.failed(out.path, e)
                continue
            del saved[name]
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

    def _resume_from_logs(self, name: str, state: GpuState, from_logs: list[FromLogs]) -> bool:
        """Go on with a process that ended while no Agent ran from its inspector_logs, which
        hold the records after the checkpoint that went with its SHM region: restored, handed
        them and ended as the ring would have had it (log_records), its Steps are the ones an
        Agent that never stopped writes: added to `from_logs`, to be handed its records.
        False where its logs are not found (or it drove several GPUs, whose records its
        ring's communicator table alone tells apart)."""
        gpu = stream_of(state)
        if gpu is None or name != summary_name(gpu):
            return False
        segments = process_segments(self._logs_dir, gpu.pid, gpu.start_real_ns)
        if segments is None:
            return False
        gpu = replace(gpu, start_mono_ns=segments.start_mono_ns)
        g = self._engines.state(gpu)
        if g.finished or g.skip_through < 0:
            return True  # not restored from the checkpoint: started over or sealed
        # from its last Steps' first records: they give the node's cut its context again
        start = g.context_start()
        self.resumed_from_logs += 1
        why = (
            f"ended while no Agent ran: its Steps go on from its inspector logs (read back from "
            f"ring record {start} on; its checkpoint lay after {state.input.last_ring_seq})"
        )
        from_logs.append(FromLogs(g, segments, start, why))
        return True

    def _recover_unseen(self, shm_files: frozenset[str]) -> list[FromLogs]:
        """The processes that ran since Agents began to follow this home and ended with no
        checkpoint naming them (an earlier Agent stopped before its first checkpoint that did,
        or none ran while they did), to be handed their records from their logs from the first
        on: an Agent that never stopped would have written their Steps."""
        watching_since = self._checkpoint.watching_since
        if watching_since is None:
            return []  # no Agent followed this home before: its earlier processes are not ours
        since = max(watching_since, time.time_ns() - UNSEEN_LOOKBACK_NS)
        found, skipped = logged_since(self._logs_dir, since, MAX_UNSEEN)
        if skipped:
            log.warning(
                "semantic engine: %d more processes ran while no Agent followed them than are "
                "recovered at a start (%d, the latest); `comminsight steps` on %s recovers "
                "the Steps of the others",
                skipped,
                MAX_UNSEEN,
                self._logs_dir,
            )
        running = running_pids(shm_files)
        known = {(g.gpu.pid, g.gpu.start_real_ns) for g in self._engines.gpus.values()}
        known |= {
            (s.gpu.pid, s.input.producer_start_real_ns) for s in self._checkpoint.saved.values()
        }
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
            g = self._engines.state(gpu)
            if g.finished:
                continue
            self.unseen_from_logs += 1
            why = (
                "ran while no Agent checkpointed it and has ended: its Steps come from its "
                "inspector logs"
            )
            from_logs.append(FromLogs(g, p.segments, 0, why))
        return from_logs

    def _sealed_processes(self) -> set[tuple[int, int]]:
        """(pid, start_real_ns) of the processes of this node with a sealed summary file (one
        per GPU: `live-<node>-<pid>-<start><suffix>.jsonl`)."""
        prefix = f"live-{self._node_name}-"
        found = set()
        try:
            names = os.listdir(self._out_dir)
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
        return labelled_stream(
            GpuStream(
                self._node_name,
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

    def log_items(self, items: list[FromLogs]) -> Iterator[tuple]:
        """The (gpu, kind, payload) items to hand the GPUs of ended processes: their op
        records from their logs, then their ends, as an Agent polling their rings met them:
        together, every GPU the records it completed in the next LOG_WINDOW_NS of the job's
        time. The node's cut decides every GPU's Steps from what all of them hold when it
        runs (after so many new ops, or so many seconds): one GPU's whole run handed before
        the next one's, or GPUs far apart in time, had their Steps cut in other places. At
        most MAX_LOG_READERS processes at a time (a file each)."""
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
                        yield item.g.gpu, "ops", (slots, comms)
            for item, reader in zip(group, readers, strict=True):
                yield item.g.gpu, "finished", None
                log.warning(
                    "semantic engine: pid %d %s: %d records", item.g.gpu.pid, item.why, reader.read
                )
