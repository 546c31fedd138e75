"""Offline step recovery: a directory of inspector_logs in, step summaries per GPU out.

`recover_steps(logs_dir)` runs one GpuEngine per process found in the logs, over its ops in
file order, and returns the summaries and every problem met (bad lines, bad seals, missing
segments, bad template files), each naming its file. With `out_dir`, each GPU's records are
appended to `<out_dir>/<stream>.jsonl` as they are produced, and with `checkpoint_every_ops`
the engines' state is checkpointed to `<out_dir>/engine.checkpoint.json` that often: a run
killed at any moment and started again resumes from the checkpoint (its output truncated to
the checkpointed length) and leaves byte-identical files.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from comminsight.durable_files import fsync_directory, make_private_dirs
from comminsight.line_reader import complete_lines
from comminsight.safe_open import check_fd, open_regular
from comminsight.semantic.checkpoint import (
    CheckpointFile,
    gpu_state,
    restore_engine,
    resume_position,
)
from comminsight.semantic.cut_runner import CutRunner
from comminsight.semantic.engine import GpuEngine, evaluate
from comminsight.semantic.job_cut import JobCut, RankCut, cut_job, shown
from comminsight.semantic.job_ops import CommIds, JobOps, gpu_ops
from comminsight.semantic.log_input import GpuLog, read_gpu_logs
from comminsight.semantic.op_batch import OpBatch
from comminsight.semantic.ops import EngineOp
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.step_markers import ProcessKey, markers_dir, read_markers
from comminsight.semantic.templates import TemplateSet, load_templates
from comminsight.step_file_bounds import STEP_FILE_BYTES_MAX, STEP_LINE_BYTES_MAX
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.models.semantic_engine_v1 import GpuState, ProducerMode
from comminsight_gen.models.step_summary_v1 import StepSummary

CHECKPOINT_NAME = "engine.checkpoint.json"
_ENCODER = msgspec.json.Encoder()


@dataclass
class GpuResult:
    stream: str
    gpu: GpuIdentity
    summaries: list[StepSummary]
    ops: int  # ops read in this run
    method: str | None  # template name, "period", or None when no Step was found
    kept_ops: list[EngineOp] | None = None  # every op, when asked for (trace export)
    # Steps in its step file, when `summaries` was left empty (a distributed run over a big
    # job hands back counts, not every summary); None: `summaries` holds them all
    written: int | None = None

    @property
    def steps(self) -> int:
        return len(self.summaries) if self.written is None else self.written


@dataclass
class OfflineResult:
    gpus: list[GpuResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    resumed: int = 0  # GPUs continued from a checkpoint
    cut: JobCut | None = None  # the job-wide cut, when Steps were cut job-wide
    warnings: list[str] = field(default_factory=list)  # what the Steps say of themselves

    @property
    def ops(self) -> int:
        return sum(g.ops for g in self.gpus)


class SummaryFile:
    """One GPU's step-summary records, appended as they come (or kept in memory).

    Writes that fail (a full disk) leave the file as it was before them: what a failed write
    put in is cut off again, and the records wait in memory (at most MAX_PENDING_BYTES; past
    that the oldest are dropped and counted) for the next add, flush or sync to write them.
    The OSError still reaches the caller, which decides when to try again."""

    MAX_PENDING_BYTES = 16 << 20

    def __init__(self, path: Path | None, truncate_to: int, written: int) -> None:
        self.path = path
        self.written = written
        self.kept: list[StepSummary] = []
        self.dropped = 0  # summaries that never reached the file (their memory bound)
        self._pending: list[tuple[bytes, int]] = []  # (lines, summaries) not yet written
        self._file = None
        self._length = truncate_to  # of the records written whole
        # parked: open only while written (an ended GPU's file while it waits for its peers)
        self._parked = False
        if path is not None:
            self._file = self._open()
            self._file.truncate(truncate_to)  # drop what came after the checkpoint
            self._file.seek(truncate_to)

    def _open(self):
        make_private_dirs(self.path.parent)
        # never through a link planted there (it would truncate the file linked to), never
        # blocked on a FIFO, only into a regular file
        fd = os.open(
            self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600
        )
        try:
            check_fd(fd, self.path, "regular file", owner=None, shared_ok=True)
        except OSError:
            os.close(fd)
            raise
        # unbuffered: after a failed write no buffer may hold a part to be written again
        return os.fdopen(fd, "r+b", buffering=0)

    def _reopen(self) -> None:
        """A parked file, open again after its last whole record."""
        f = self._open()
        try:
            size = os.fstat(f.fileno()).st_size
            if size > self._length:
                f.truncate(self._length)  # a part a failed write left
            else:
                self._length = size  # cut by someone else: go on after what is there
            f.seek(self._length)
        except OSError:
            f.close()
            raise
        self._file = f

    def park(self) -> None:
        """Keep the file closed from now on except while writing to it: a GPU whose process
        ended waits, its file open, until the GPUs it shares communicators with have ended
        too, and a node whose processes come and go would hold a descriptor for each. What
        waits is written first and the file flushed to disk (an OSError leaves it open; the
        next write closes it)."""
        if self.path is None or self._file is None:
            return  # kept in memory, closed, or parked already
        self._parked = True
        self._write_pending()

    def _close_parked(self) -> None:
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None

    @property
    def pending(self) -> int:
        """Summaries waiting in memory for the disk."""
        return sum(n for _, n in self._pending)

    def add(self, summaries: list[StepSummary]) -> None:
        if not summaries:
            return
        self.written += len(summaries)
        if self._file is None and not self._parked:
            self.kept += summaries
            return
        self._pending.append(
            (b"".join(_ENCODER.encode(s) + b"\n" for s in summaries), len(summaries))
        )
        self._bound_pending()
        self._write_pending()

    def _bound_pending(self) -> None:
        size = sum(len(data) for data, _ in self._pending)
        while size > self.MAX_PENDING_BYTES and len(self._pending) > 1:
            data, n = self._pending.pop(0)
            size -= len(data)
            self.dropped += n

    def _write_pending(self) -> None:
        """Write what waits, oldest first, one add's records at a time (a disk with a little
        space takes some of them). A parked file is opened for it and closed again after."""
        if self._file is None:
            if not (self._parked and self._pending):
                return
            self._reopen()
        while self._pending:
            data = memoryview(self._pending[0][0])
            try:
                done = 0
                while done < len(data):
                    done += self._file.write(data[done:])
            except OSError:
                with contextlib.suppress(OSError):  # a shorter file needs no new space
                    self._file.truncate(self._length)
                    self._file.seek(self._length)
                raise
            self._length += len(data)
            self._pending.pop(0)
        if self._parked:
            self._close_parked()

    def flush(self) -> None:
        self._write_pending()

    def sync(self) -> int:
        """Write what waits and flush to disk; the file's length (0 when there is no file)."""
        if self._file is None and not self._parked:
            return 0
        self._write_pending()
        if self._file is not None:  # a parked file was flushed to disk when last closed
            os.fsync(self._file.fileno())
        return self._length

    def seal(self) -> Path | None:
        """Complete: fsync, close, rename `<name>.jsonl.partial` to `<name>.jsonl` (archives
        and readers take sealed files as final) and fsync the directory. An OSError leaves it
        unsealed, to be sealed again."""
        if self._file is None and not self._parked:
            return None
        self.sync()
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parked = True  # closed until sealed: a seal that failed is tried again
        sealed = self.path.with_name(self.path.name.removesuffix(".partial"))
        os.replace(self.path, sealed)
        self.path = sealed
        self._parked = False
        fsync_directory(sealed.parent)
        return sealed

    def close(self) -> None:
        self._parked = False
        if self._file is not None:
            self._file.close()
            self._file = None

    def summaries(self) -> list[StepSummary]:
        """Every summary of the GPU (read back from the file, which holds earlier runs' too)."""
        if self.path is None:
            return self.kept
        return read_summaries(self.path)


def read_summaries(path: Path) -> list[StepSummary]:
    """The summaries of a step file this engine wrote (its lines written whole; a file that is
    no regular one, or a line that is no summary, is an OSError or ValueError naming it)."""
    decoder = msgspec.json.Decoder(StepSummary)
    out = []
    with open_regular(path, STEP_FILE_BYTES_MAX) as f:
        size = os.fstat(f.fileno()).st_size
        for line in complete_lines(f.fileno(), 0, size, STEP_LINE_BYTES_MAX):
            try:
                if line.data is None:
                    raise ValueError(f"a line of {line.length} bytes")
                if line.data.strip():
                    out.append(decoder.decode(line.data))
            except NOT_JSON as e:
                raise ValueError(f"{path}: byte {line.offset}: not a step summary: {e}") from None
    return out


def identity_of(log: GpuLog, fallback_rank: int) -> GpuIdentity:
    ident = log.identity
    if ident is None:
        return GpuIdentity(host="unknown", global_rank=fallback_rank)
    return GpuIdentity(
        host=ident.host,
        global_rank=ident.global_rank if ident.global_rank is not None else fallback_rank,
        pid=ident.pid,
        local_rank=ident.local_rank,
        cuda_device=ident.cuda_device,
    )


@dataclass
class JobInput:
    """Every GPU's ops read once (pass 1), cut into Steps job-wide; pass 2 places them."""

    cut: JobCut
    comms: CommIds
    rank_cuts: dict[str, RankCut]
    batches: dict[str, list[OpBatch]]
    problems: dict[str, list[str]]


def read_job(logs: list[GpuLog], markers: dict[ProcessKey, np.ndarray] | None = None) -> JobInput:
    """Every GPU's ops, cut job-wide; `markers`: Inject's optimizer-step markers by process."""
    comms = CommIds()
    gpus, batches, problems = [], {}, {}
    for index, log in enumerate(logs):
        kept = list(log.batches())
        batches[log.stream] = kept
        problems[log.stream] = list(log.problems)
        ident = identity_of(log, index)
        g = gpu_ops(log.stream, ident.global_rank, kept, comms)
        g.markers = (markers or {}).get((ident.host, ident.pid))
        gpus.append(g)
    cut = cut_job(JobOps(gpus, comms))
    return JobInput(cut, comms, {r.gpu.stream: r for r in cut.ranks}, batches, problems)


@dataclass
class _Run:
    templates: TemplateSet
    out_dir: Path | None
    checkpoint: CheckpointFile | None
    every: int
    states: dict[str, GpuState]
    on_ops: Callable[[int], None] | None
    keep_ops: bool
    job: JobInput | None = None
    make_out_dir: Callable[[Path], object] = make_private_dirs
    _out_made: bool = False

    def _batches(self, log: GpuLog, start):
        """The GPU's ops from `start`: those pass 1 kept, or read again when resuming."""
        if self.job is None:
            return log.batches(start)
        if start is None:
            return iter(self.job.batches[log.stream])
        batches = log.batches(start)
        return _then(batches, lambda: setattr(log, "problems", self.job.problems[log.stream]))

    def _runner(self, log: GpuLog, engine: GpuEngine, resumed_from) -> None:
        if self.job is not None:
            engine.runner = CutRunner(
                self.job.rank_cuts[log.stream],
                self.job.cut,
                self.job.comms.lookup,
                last_step=engine.next_step_index - 1,
                template=role_template(self.templates, self.job.batches[log.stream]),
                by_arrival=resumed_from is None,
            )

    def gpu(self, log: GpuLog, index: int) -> GpuResult:
        name = f"{log.stream}.jsonl"
        state = self.states.get(log.stream)
        sealed = self.out_dir / name if self.out_dir is not None else None
        if state is not None and sealed is not None and sealed.exists():
            # complete before the interruption (sealed, maybe just before the checkpoint)
            gpu = restore_engine(state, self.templates).gpu
            return GpuResult(log.stream, gpu, read_summaries(sealed), 0, _method_of(state))
        if state is not None and state.output.file == name:
            state = None  # sealed in the checkpoint but the file is gone: start over
        start = resume_position(state) if state is not None else None
        kept: list[OpBatch] | None = [] if self.keep_ops else None
        batches = self._batches(log, start)
        first = next(batches, None)  # reading the first segment learns the GPU's identity
        partial = self._path(name + ".partial")
        if partial is not None and not self._out_made:
            # made when the first file is, so that a run that has nothing to write makes nothing
            self.make_out_dir(self.out_dir)
            self._out_made = True
        if state is not None:
            engine = restore_engine(state, self.templates)
            sink = SummaryFile(partial, state.output.byte_offset, state.output.summaries_written)
        else:
            engine = GpuEngine(identity_of(log, index), self.templates)
            sink = SummaryFile(partial, 0, 0)
        self._runner(log, engine, start)
        count = 0
        last = None  # the position of the latest op fed
        for batch in itertools.chain([first] if first is not None else [], batches):
            if kept is not None:
                kept.append(batch)
            for part in self._pieces(batch, count):
                sink.add(engine.feed(part))
                count += len(part)
                last = part.position(len(part) - 1)
                if self.checkpoint is not None and count % self.every == 0:
                    self._save(log.stream, engine, engine.resume_point(last), sink)
            if self.on_ops is not None:
                self.on_ops(len(batch))
        sink.add(engine.finish())
        sink.seal()
        if self.checkpoint is not None:
            end = last.after() if last is not None else start
            if end is not None:
                self._save(log.stream, engine, end, sink)
        runner = engine.runner
        method = None
        if runner is not None:
            method = runner.template.name if runner.method == "template" else runner.method
        ops = [op for b in kept for op in b.ops()] if kept is not None else None
        return GpuResult(log.stream, engine.gpu, sink.summaries(), count, method, ops)

    def _pieces(self, batch: OpBatch, count: int) -> list[OpBatch]:
        """The batch, cut where the op count reaches a multiple of the checkpoint interval."""
        if self.checkpoint is None:
            return [batch]
        pieces, i = [], 0
        while i < len(batch):
            k = min(len(batch) - i, self.every - (count + i) % self.every)
            pieces.append(batch.take(slice(i, i + k)))
            i += k
        return pieces

    def _path(self, name: str) -> Path | None:
        return self.out_dir / name if self.out_dir is not None else None

    def _save(self, stream: str, engine: GpuEngine, position, sink: SummaryFile) -> None:
        if position is None:
            return  # not a clean point: the next one will be
        if sink.path.name.endswith(".partial"):
            size = sink.sync()
        else:
            size = sink.path.stat().st_size
        self.states[stream] = gpu_state(engine, position, sink.path.name, size, sink.written)
        self.checkpoint.save(self.states)


def place_gpu(
    log: GpuLog, index: int, job: JobInput, templates: TemplateSet, out_dir: Path | None
) -> GpuResult:
    """One GPU's Steps placed as the job's cut says and written to out_dir, as recover_steps
    places each GPU's (no checkpoint): what a worker of distributed_steps runs."""
    run = _Run(templates, out_dir, None, 0, {}, None, False, job)
    with _collector_paused():
        return run.gpu(log, index)


def role_template(templates: TemplateSet, batches: list[OpBatch]):
    """The template whose roles fit the GPU's ops best (templates name roles; where Steps
    begin is the job cut's), or None when none fits."""
    ops = None
    for b in batches:  # a probe of the first ops is enough to tell roles
        ops = b if ops is None else ops.concat(b)
        if len(ops) >= ROLE_PROBE:
            break
    if ops is None or not len(ops):
        return None
    ops = ops.take(slice(0, ROLE_PROBE))
    fits = [f for t in templates.templates if (f := evaluate(t, ops, final=True))]
    if not fits:
        return None
    return min(fits, key=lambda f: (-f.score, -f.template.spec.priority, f.template.name)).template


def _method_of(state: GpuState) -> str | None:
    if state.selection.value == "template":
        return state.template_name
    return state.selection.value if state.selection.value in ("period", "job") else None


def _then(items, done):
    """The items, then done() once they are exhausted."""
    yield from items
    done()


@contextmanager
def _collector_paused():
    """Recovery allocates a summary's objects per Step and keeps them all; none form cycles,
    but Python's cyclic collector would scan the growing result again and again (15 % of a
    run, measured). It is paused for the run and left as it was. What the run made goes to
    the oldest generation as it resumes: scanned as young objects they would only be found
    alive (an eighth of the Steps' placement, measured). gc.freeze() then unfreeze() is that
    move, skipped when objects are frozen already (someone else's freeze is left alone)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def recover_steps(
    logs_dir: str | Path,
    template_dirs: str = "",
    on_ops: Callable[[int], None] | None = None,
    templates: TemplateSet | None = None,
    keep_ops: bool = False,
    out_dir: str | Path | None = None,
    checkpoint_every_ops: int = 0,
    per_gpu: bool = False,
    make_out_dir: Callable[[Path], object] = make_private_dirs,
    markers: bool = True,
) -> OfflineResult:
    """Steps of every GPU in `logs_dir`, with the built-in templates plus `template_dirs`
    (or exactly `templates` when given); see the module docstring for out_dir and
    checkpoints. Boundaries are cut job-wide (job_cut) unless `per_gpu` asks for each GPU
    decided alone by the templates and its own period. `make_out_dir(out_dir)` makes the
    output directory before the first file is written there (the CLI passes the home's trust
    walk: run as root over another user's logs, it must not write where their links point).
    With `markers`, Inject's optimizer-step markers beside the logs (metadata/inject/) place
    the Steps where they are; without, the ops alone do."""
    if templates is None:
        templates = load_templates(template_dirs)
    logs, problems = read_gpu_logs(logs_dir)
    out = Path(out_dir) if out_dir is not None else None
    checkpoint = None
    states: dict[str, GpuState] = {}
    if out is not None and checkpoint_every_ops > 0:
        checkpoint = CheckpointFile(out / CHECKPOINT_NAME, templates.digest(), ProducerMode.offline)
        states = checkpoint.load()
    job = None
    if not per_gpu:
        marked, marker_problems = read_markers(markers_dir(logs_dir)) if markers else ({}, [])
        problems += marker_problems
        job = read_job(logs, marked)
    run = _Run(
        templates,
        out,
        checkpoint,
        checkpoint_every_ops,
        states,
        on_ops,
        keep_ops,
        job,
        make_out_dir,
    )
    result = OfflineResult(problems=problems + templates.problems, resumed=len(states))
    if job is not None:
        result.cut = job.cut
    with _collector_paused():
        for index, log in enumerate(logs):
            result.gpus.append(run.gpu(log, index))
            result.problems += log.problems
    result.gpus.sort(key=lambda g: (g.gpu.host, g.gpu.global_rank, g.stream))
    result.warnings = step_warnings(result)
    return result


ROLE_PROBE = 1024  # ops a template's roles are tried on
MANY_OPS = 64  # a GPU with this many ops and no Step is worth a warning


def step_warnings(result: OfflineResult) -> list[str]:
    """Steps that cannot be trusted as they are, said once: GPUs with many ops and no Step,
    and the reasons the job cut's confidence fell."""
    warnings = [
        f"{shown(g.stream)} (rank {g.gpu.global_rank}): {g.ops:,} ops and no Step recognized"
        for g in result.gpus
        if not g.steps and g.ops >= MANY_OPS
    ]
    cut = result.cut
    if cut is not None and cut.confidence < 1.0:
        warnings.append(
            f"Step boundaries have confidence {cut.confidence:.2f} across the job's "
            f"{len(result.gpus)} GPUs: " + "; ".join(cut.reasons[:8])
        )
    return warnings
