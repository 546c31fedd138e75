"""The recent Steps of every GPU, read incrementally from step-summary files, as job_steps
wants them.

A long run writes step summaries for days; answering /job-steps must not decode all of them
per request. Each file is followed by byte offset: a refresh reads only what was appended
since (complete lines), a file seen for the first time is read from its last
TAIL_START_BYTES only, and each GPU keeps its latest `steps_per_gpu` Steps. An engine's open
file (`<stream>.jsonl.partial`) that is sealed (renamed to `<stream>.jsonl`) is followed on
from the same offset; a file that shrank (a resumed engine truncated it) is read again, which
is harmless: records are keyed by GPU and step index. Lines that are not step-summary v1 are
counted and skipped.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from comminsight.agent.steps.job_steps import GpuKey, StepRecord, gpu_order
from comminsight.refusals import Refusals
from comminsight.safe_open import UntrustedFile, open_regular
from comminsight.step_file_bounds import STEP_FILE_BYTES_MAX
from comminsight.untrusted_json import NOT_JSON

log = logging.getLogger(__name__)

STEPS_PER_GPU = 128
MAX_GPUS = 16_384
# A node's file as a master keeps it holds 8 or so GPUs' Steps of a few KiB each: its last
# 4 MiB hold far more than STEPS_PER_GPU of each
TAIL_START_BYTES = 4 << 20
READ_CHUNK = 8 << 20  # bytes read per file per refresh at most: a refresh stays short

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Span(msgspec.Struct):
    kind: Literal["coll", "p2p"]
    comm_id: str
    first_seq: _Count
    last_seq: _Count


class _Summary(msgspec.Struct):
    """The fields of a step-summary v1 record reconciliation reads (the others are skipped:
    decoding whole records cost 8 times as much, and /steps validates them)."""

    schema_version: Literal[1]
    host: str
    global_rank: _Count
    step_index: _Count
    start_real_ns: _Count
    end_real_ns: _Count
    job_id: str | None = None
    pid: int | None = None
    comm_seqs: list[_Span] | None = None


@dataclass
class _Followed:
    path: Path
    inode: int
    offset: int


@dataclass
class JobWindow:
    """One job's GPUs: local step index -> record, and the latest end seen per GPU."""

    gpus: dict[GpuKey, dict[int, StepRecord]] = field(default_factory=dict)
    latest_end: dict[GpuKey, int] = field(default_factory=dict)


def record_of(s: _Summary) -> StepRecord:
    spans = None
    if s.comm_seqs is not None:
        # p2p counters are each rank's own: only collectives line up across ranks
        spans = {c.comm_id: (c.first_seq, c.last_seq) for c in s.comm_seqs if c.kind == "coll"}
    return StepRecord(s.step_index, s.start_real_ns, s.end_real_ns, spans)


class StepWindow:
    def __init__(
        self,
        directories: list[Path],
        steps_per_gpu: int = STEPS_PER_GPU,
        max_gpus: int = MAX_GPUS,
        tail_start_bytes: int = TAIL_START_BYTES,
    ) -> None:
        self.directories = [Path(d) for d in directories]
        self.steps_per_gpu = steps_per_gpu
        self.max_gpus = max_gpus
        self.tail_start_bytes = tail_start_bytes
        self.jobs: dict[str | None, JobWindow] = {}
        self.version = 0  # moves whenever a record is added
        self.invalid_lines = 0
        self._files: dict[str, _Followed] = {}  # by stream (the name without .partial)
        self._refused = Refusals("step summaries", log)
        self._decoder = msgspec.json.Decoder(_Summary)

    def refresh(self) -> None:
        seen, paths = set(), []
        for directory in self.directories:
            try:
                entries = list(os.scandir(directory))
            except OSError:  # not created yet, or gone: nothing to read there
                continue
            for entry in sorted(entries, key=lambda e: e.name):
                name = entry.name
                if not (name.endswith(".jsonl") or name.endswith(".jsonl.partial")):
                    continue
                stream = f"{directory}/{name.removesuffix('.partial')}"
                seen.add(stream)
                paths.append(Path(entry.path))
                try:
                    st = entry.stat()
                except OSError:
                    continue
                self._follow(stream, Path(entry.path), st.st_ino, st.st_size)
        for gone in set(self._files) - seen:
            del self._files[gone]
        self._refused.keep_only(paths)

    def _follow(self, stream: str, path: Path, inode: int, size: int) -> None:
        f = self._files.get(stream)
        if f is None or (f.inode != inode and f.path == path) or size < f.offset:
            start = 0
            if f is None and size > self.tail_start_bytes:
                start = size - self.tail_start_bytes  # an old file: its latest Steps only
            f = self._files[stream] = _Followed(path, inode, start)
            skip_first = start > 0
        else:
            skip_first = False
            f.path, f.inode = path, inode  # sealed: the same file renamed
        if size <= f.offset:
            return
        try:
            with open_regular(path, STEP_FILE_BYTES_MAX) as fh:
                fh.seek(f.offset)
                data = fh.read(min(size - f.offset, READ_CHUNK))
        except UntrustedFile as e:
            self._refused.refused(path, e)
            return
        except OSError as e:
            log.error("cannot read step summaries %s: %s", path, e)
            return
        self._refused.read(path)
        end = data.rfind(b"\n") + 1  # only complete lines: the writer may be mid-line
        if end == 0:
            if len(data) == READ_CHUNK:  # a line longer than a chunk is no step summary
                self.invalid_lines += 1
                f.offset += len(data)
            return
        lines = data[:end].split(b"\n")
        if skip_first:
            lines = lines[1:]  # started mid-file: the first line is cut
        f.offset += end
        for line in lines:
            if line.strip():
                self._add(line)

    def _add(self, line: bytes) -> None:
        try:
            s = self._decoder.decode(line)
        except NOT_JSON:
            self.invalid_lines += 1
            return
        job = self.jobs.get(s.job_id)
        if job is None:
            job = self.jobs[s.job_id] = JobWindow()
        key = GpuKey(s.host, s.global_rank, s.pid)
        steps = job.gpus.get(key)
        if steps is None:
            steps = job.gpus[key] = {}
            if len(job.gpus) > self.max_gpus:
                self._forget_oldest_gpu(job)
        steps[s.step_index] = record_of(s)
        job.latest_end[key] = max(job.latest_end.get(key, 0), s.end_real_ns)
        if len(steps) > self.steps_per_gpu + self.steps_per_gpu // 4:
            for index in sorted(steps)[: len(steps) - self.steps_per_gpu]:
                del steps[index]
        self.version += 1

    def _forget_oldest_gpu(self, job: JobWindow) -> None:
        """Processes come and go in a long run (restarts): the one that ended longest ago
        goes."""
        oldest = min(job.latest_end, key=lambda g: (job.latest_end[g], gpu_order(g)))
        del job.gpus[oldest], job.latest_end[oldest]

    def window(self, job: JobWindow) -> dict[GpuKey, dict[int, StepRecord]]:
        """The job's GPUs, each with its latest steps_per_gpu Steps."""
        out = {}
        for gpu, steps in job.gpus.items():
            if len(steps) > self.steps_per_gpu:
                keep = sorted(steps)[-self.steps_per_gpu :]
                steps = {i: steps[i] for i in keep}
            out[gpu] = steps
        return out
