"""Offline Step recovery over Dask workers: the same step files as recover_steps in one
process, byte for byte, with no process holding more than one process's ops.

The job's work, in four rounds over the GPUs (job_cut has the method; these are its parts):
1. **Communicators** (a task per process): its logs read, each GPU's communicators in the
   order reading met them. The client numbers them as one process reading the GPUs in turn
   would (job_ops.CommIds): every later step reads those numbers.
2. **Facts** (a task per GPU): its ops in issue order and its own cycle (local_cycle), and
   what the plan needs of it: its op instances as intervals, its cycle's facts (cut_order).
3. **The cut**: the client plans the order in which ranks are fixed and whose labels each
   reads (cut_order.plan_cut); a task per GPU cuts it once those ranks are cut, handed only
   their label runs. The client reduces the ranks' outcomes to the job's confidence,
   reasons and Step count (job_cut.job_verdict).
4. **Placement** (a task per GPU): the GPU's engine places its ops into the Steps its cut
   says and writes its step file (offline.place_gpu).

The logs are read once: a worker keeps what each round made of a GPU (its ops as read, then
its ops in issue order and its cycle, then its cut) in its local directory for the next round,
and a GPU's later tasks are asked to run where its first ran. A task that finds nothing kept
(another worker took it) makes it again from the logs, so any worker can run any task. What
travels is communicator lists, instance intervals, label runs and step summaries; the files
are read where they lie, so every worker must see the logs (and the output directory) at the
same paths.

A worker's memory does not grow with the job: it holds the GPU it works on, and of round 3's
answers only those a cut still to be handed out reads (a GPU's label runs are let go once the
last GPU that reads them is submitted, and live on only until that one has run). Round 4 is
handed no label runs: the cut it places was kept on disk, and the rare task that finds none
asks the client, which has every GPU's answer, for its providers' runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import pickle
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard

from comminsight.durable_files import make_private_dirs
from comminsight.safe_open import open_checked
from comminsight.semantic.cut_order import (
    CutStep,
    Instances,
    LabelRuns,
    PivotFacts,
    plan_cut,
    rank_instances,
)
from comminsight.semantic.job_cut import (
    JobCut,
    RankCut,
    RankOutcome,
    cut_rank,
    job_verdict,
    pivot_facts,
)
from comminsight.semantic.job_ops import CommIds, GpuOps, gpu_ops, instance_keys
from comminsight.semantic.local_cycle import LocalUnits, local_units
from comminsight.semantic.log_input import GpuLog, ProcessFiles, list_job
from comminsight.semantic.offline import (
    GpuResult,
    JobInput,
    OfflineResult,
    identity_of,
    place_gpu,
    step_warnings,
)
from comminsight.semantic.remote_logs import RemoteProcess, is_url, list_url
from comminsight.semantic.step_markers import markers_dir, process_of_stream, read_markers
from comminsight.semantic.templates import TemplateSet, load_templates

KEPT_LEVEL = 1


@dataclass(frozen=True)
class GpuRef:
    """Where a GPU's ops are: its process's files and which of its GPUs it is."""

    index: int  # the GPU's place in the job (read_gpu_logs' order)
    process: ProcessFiles | RemoteProcess
    gpu: int  # among the process's GPUs
    stream: str  # its GpuLog's (what names what is kept of it)
    markers: np.ndarray | None = None  # its process's optimizer-step markers (step_markers)

    def log(self, run: str) -> GpuLog:
        return _local(run, self.process).gpu_logs([])[self.gpu]


@dataclass
class GpuComms:
    """Round 1's answer for one GPU: its communicators as reading met them (id, size, the
    name first seen, a name seen later where the first was none)."""

    stream: str
    comms: list[tuple[str, int, str | None, str | None]]
    worker: str | None  # where its ops are kept


@dataclass
class _Read:
    """A GPU's ops as reading gave them, and what else reading learnt of it."""

    batches: list
    identity: object
    problems: list[str]

    def log(self, ref: GpuRef) -> GpuLog:
        """A GpuLog of the GPU that needs no more reading: its batches are these."""
        return GpuLog(ref.stream, [], list(self.problems), self.identity)


@dataclass
class GpuFacts:
    """Round 2's answer for one GPU."""

    instances: Instances
    pivot: PivotFacts
    worker: str | None  # where its ops and cycle are kept


@dataclass
class GpuCut:
    """Round 3's answer for one GPU."""

    outcome: RankOutcome
    runs: LabelRuns
    worker: str | None


@dataclass
class _Kept:
    """What rounds 2 and 3 made of one GPU, kept on its worker for the next round."""

    ops: GpuOps
    units: LocalUnits
    keys: tuple
    cut: RankCut | None = None


# ---- on a worker --------------------------------------------------------------------------


def describe_process(
    run: str, process: ProcessFiles | RemoteProcess
) -> tuple[list[GpuComms], list[str]]:
    """Round 1: each GPU's ops read (and kept), its communicators in the order met."""
    problems: list[str] = []
    out = []
    local = _local(run, process)
    for log in local.gpu_logs(problems):
        # concrete: a lazy batch refers to its source through closures, which do not pickle
        batches = [b.make_concrete() for b in log.batches()]
        _keep(run, log.stream, "read", _Read(batches, log.identity, list(log.problems)))
        seen: dict[str, list] = {}
        for batch in batches:
            if not len(batch):
                continue  # gpu_ops passes over an empty batch without its table
            for c in batch.comms.comms:
                known = seen.get(c.comm_id)
                if known is None:
                    seen[c.comm_id] = [c.comm_id, c.nranks, c.name, None]
                elif known[2] is None and known[3] is None and c.name is not None:
                    known[3] = c.name
        out.append(GpuComms(log.stream, [tuple(v) for v in seen.values()], _address()))
    if local is not process and local.segments:  # fetched: what was read is kept
        shutil.rmtree(local.segments[0].parent, ignore_errors=True)
    return out, problems


def gpu_facts(run: str, ref: GpuRef, comms: CommIds) -> GpuFacts:
    """Round 2."""
    kept = _made(run, ref, comms)
    _keep(run, ref.stream, "facts", kept)
    return GpuFacts(rank_instances(*kept.keys), pivot_facts(kept.ops, kept.units), _address())


def gpu_cut(run: str, ref: GpuRef, comms: CommIds, step: CutStep, *provided: GpuCut) -> GpuCut:
    """Round 3: the GPU cut as its step of the plan says, with its providers' label runs."""
    kept, outcome, runs = _cut(run, ref, comms, step, provided)
    cut = kept.cut
    # the cut without its ops (kept as facts already)
    _keep(
        run,
        ref.stream,
        "cut",
        (cut.label, cut.warmup_steps, cut.reasons, cut.doubtful_steps, cut.component),
    )
    return GpuCut(outcome, runs, _address())


def gpu_steps(
    run: str,
    ref: GpuRef,
    comms: CommIds,
    verdict: tuple,
    out_dir: str | None,
    templates: TemplateSet,
    step: CutStep,
    keep_summaries: bool,
    *provided: GpuCut,
) -> tuple[GpuResult, list[str]] | None:
    """Round 4: the GPU's Steps, written to out_dir, and what reading its logs met (without
    keep_summaries, the result counts the Steps instead of carrying them). None when its cut
    was not kept here and it reads labels it was not handed: ask again with its providers'
    answers."""
    labels = _load(run, ref.stream, "cut")
    kept = _load(run, ref.stream, "facts") if labels is not None else None
    if kept is None:  # cut by another worker: cut again here
        if step.providers and not provided:
            return None
        cut = _cut(run, ref, comms, step, provided)[0].cut
    else:
        cut = RankCut(kept.ops, *labels)
    read = _read(run, ref)
    log = read.log(ref)
    job = JobInput(
        JobCut([], *verdict),
        comms,
        {log.stream: cut},
        {log.stream: read.batches},
        {log.stream: list(read.problems)},
    )
    result = place_gpu(log, ref.index, job, _without_roles_met(templates), _path(out_dir))
    if not keep_summaries:
        result.written, result.summaries = len(result.summaries), []
    for stage in ("read", "facts", "cut"):
        _kept_path(run, ref.stream, stage).unlink(missing_ok=True)
    return result, list(read.problems)


def _without_roles_met(templates: TemplateSet) -> TemplateSet:
    """The templates, their decision tables shared, with empty caches of the roles met: a
    template caches a role per communicator it meets, and a worker placing GPU after GPU
    (most with communicators of their own) would keep them all."""
    return TemplateSet(
        [dataclasses.replace(t, _cache={}) for t in templates.templates], templates.problems
    )


def forget_run(run: str) -> None:
    """What a run kept on this worker, removed."""
    shutil.rmtree(_scratch(run), ignore_errors=True)


def _local(run: str, process: ProcessFiles | RemoteProcess) -> ProcessFiles:
    """The process's files on this worker: fetched into its directory when they lie
    elsewhere."""
    if isinstance(process, RemoteProcess):
        return process.fetched(_scratch(run) / "fetched")
    return process


def _read(run: str, ref: GpuRef) -> _Read:
    read = _load(run, ref.stream, "read")
    if read is None:  # read by another worker: read here
        log = ref.log(run)
        batches = list(log.batches())
        read = _Read(batches, log.identity, list(log.problems))
    return read


def _made(run: str, ref: GpuRef, comms: CommIds) -> _Kept:
    read = _read(run, ref)
    log = read.log(ref)
    g = gpu_ops(log.stream, identity_of(log, ref.index).global_rank, read.batches, comms)
    g.markers = ref.markers
    return _Kept(g, local_units(g), instance_keys(g))


def _cut(run: str, ref: GpuRef, comms: CommIds, step: CutStep, provided) -> tuple:
    kept = _load(run, ref.stream, "facts") or _made(run, ref, comms)
    kept.cut, outcome, runs = cut_rank(
        kept.ops, kept.units, kept.keys, step, [p.runs for p in provided]
    )
    return kept, outcome, runs


def _path(text: str | None) -> Path | None:
    return Path(text) if text is not None else None


def _scratch(run: str) -> Path:
    try:
        from distributed import get_worker

        base = Path(get_worker().local_directory)
    except ValueError:  # not on a worker (the client's own clean-up)
        base = Path(os.environ.get("TMPDIR", "/tmp"))
    return base / f"comminsight-steps-{run}"


def stream_key(stream: str) -> str:
    """A file name for a stream (a file name's stem, maybe not UTF-8): hashed, so no name
    can leave the directory it is put in."""
    return hashlib.sha256(os.fsencode(stream)).hexdigest()[:32]


def _kept_path(run: str, stream: str, stage: str) -> Path:
    return _scratch(run) / f"{stream_key(stream)}.{stage}.pickle"


def _private_dir(path: Path) -> Path:
    """`path`, made if need be, refused unless it is a directory of this user's that nobody
    else may write: what is unpickled from it is trusted."""
    make_private_dirs(path)
    fd, _ = open_checked(path, "directory", os.O_RDONLY | os.O_DIRECTORY, shared_ok=False)
    os.close(fd)
    return path


def _load(run: str, stream: str, stage: str):
    path = _kept_path(run, stream, stage)
    try:
        _private_dir(path.parent)
        fd, _ = open_checked(path, "regular file", shared_ok=False)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    # this run's own file, in a directory only this user may write
    return pickle.loads(zstandard.ZstdDecompressor().decompress(data))  # noqa: S301


def _keep(run: str, stream: str, stage: str, value) -> None:
    """Kept compressed: a worker keeps every GPU it read until its Steps are placed, and a
    GPU's ops pickle to ~180 bytes each, ~40 once compressed (zstd level 1, ~0.4 µs an op)."""
    path = _kept_path(run, stream, stage)
    _private_dir(path.parent)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=KEPT_LEVEL).compress(data))
    os.replace(tmp, path)


def _address() -> str | None:
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:
        return None


# ---- on the client ------------------------------------------------------------------------


def numbered_comms(gpus: list[GpuComms]) -> CommIds:
    """The job's communicator numbers, as one process reading the GPUs in turn gives them."""
    comms = CommIds()
    for gpu in gpus:
        for comm_id, nranks, name, later in gpu.comms:
            comms.code(comm_id, nranks, name)
            if later is not None:
                comms.code(comm_id, nranks, later)
    return comms


def recover_steps_distributed(
    logs_dir: str | Path,
    client,
    template_dirs: str = "",
    out_dir: str | Path | None = None,
    make_out_dir: Callable[[Path], object] = make_private_dirs,
    on_ops: Callable[[int], None] | None = None,
    received: dict[str, int] | None = None,
    keep_summaries: bool = True,
    markers: bool = True,
) -> OfflineResult:
    """recover_steps' answer (Steps cut job-wide, no checkpoint), worked out by the workers
    of `client` (a distributed.Client); see the module docstring. Without keep_summaries
    (with out_dir) each GPU's result counts its Steps (GpuResult.written) and the summaries
    stay in the files: this process then holds no more than a few numbers per GPU.
    `received`, when given, is added the pickled bytes of what each round sent here."""
    run = uuid.uuid4().hex
    gather = functools.partial(_gather, client, received)
    keep = keep_summaries or out_dir is None
    try:
        return _recover(
            client,
            gather,
            run,
            logs_dir,
            template_dirs,
            out_dir,
            make_out_dir,
            on_ops,
            keep,
            markers,
        )
    finally:
        with contextlib.suppress(Exception):  # a worker gone: its directory went with it
            client.run(forget_run, run)


def _gather(client, received: dict[str, int] | None, round_name: str, futures) -> list:
    """The values of `futures`, or of the tasks `futures` makes when it is a list of
    callables: a few at a time, so that a worker is handed no more than it can run soon (a
    task handed over waits in its memory with its arguments, however long the round)."""
    if futures and callable(futures[0]):
        values = _a_few_at_a_time(client, futures)
    else:
        values = client.gather(futures)
    if received is not None:
        size = len(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))
        received[round_name] = received.get(round_name, 0) + size
    return values


def _a_few_at_a_time(client, makers: list) -> list:
    """Each maker's task run, no more than a few at once, in the makers' order. A task's value
    stays on its worker while a future of it is held: here only until the value is fetched,
    so a maker that hands it to later tasks keeps its own reference as long as they need it."""
    from distributed import as_completed

    window = max(4, 2 * sum(client.nthreads().values()))
    values: list = [None] * len(makers)
    index: dict[str, int] = {}
    running = as_completed()
    upcoming = iter(range(len(makers)))

    def submit_next() -> None:
        i = next(upcoming, None)
        if i is not None:
            future = makers[i]()
            index[future.key] = i
            running.add(future)

    for _ in range(window):
        submit_next()
    for future in running:
        values[index.pop(future.key)] = future.result()
        del future  # dropped, not released: the maker's reference, if any, still holds it
        submit_next()
    return values


def _recover(
    client, gather, run, logs_dir, template_dirs, out_dir, make_out_dir, on_ops, keep, markers
):
    processes, problems = list_url(logs_dir) if is_url(logs_dir) else list_job(logs_dir)
    # loaded here and sent: the workers need not see the template directories, and a
    # long-lived worker never places Steps with templates an earlier run loaded
    templates = load_templates(template_dirs)
    shared_templates = client.scatter(templates, broadcast=True)
    described = gather(
        "communicators",
        [functools.partial(client.submit, describe_process, run, p, pure=False) for p in processes],
    )
    marked: dict = {}
    if markers and not is_url(logs_dir):
        marked, marker_problems = read_markers(markers_dir(logs_dir))
        problems += marker_problems
    refs: list[GpuRef] = []
    gpus: list[GpuComms] = []
    for process, (process_gpus, split_problems) in zip(processes, described, strict=True):
        problems += split_problems
        first = len(refs)
        mine = marked.get(process_of_stream(process.stream))
        refs += [GpuRef(first + k, process, k, g.stream, mine) for k, g in enumerate(process_gpus)]
        gpus += process_gpus
    comms = numbered_comms(gpus)
    shared = client.scatter(comms, broadcast=True)
    facts = gather(
        "facts",
        [
            functools.partial(
                client.submit, gpu_facts, run, r, shared, **_near(gpus[r.index].worker)
            )
            for r in refs
        ],
    )
    plan = plan_cut([f.instances for f in facts], [f.pivot for f in facts])
    last_reader = {p: k for k, step in enumerate(plan) for p in step.providers}
    read_later: dict = {}  # futures, by GPU, of the cuts that steps not yet submitted read

    def cut(k: int):
        step = plan[k]
        i = step.gpu
        provided = [read_later[p] for p in step.providers]  # earlier in the plan
        future = client.submit(
            gpu_cut, run, refs[i], shared, step, *provided, **_near(facts[i].worker)
        )
        for p in step.providers:
            # let go: the scheduler keeps the value for the tasks handed it until they have run
            if last_reader[p] == k:
                del read_later[p]
        if i in last_reader:
            read_later[i] = future
        return future

    by_step = gather("cut", [functools.partial(cut, k) for k in range(len(plan))])
    done: list = [None] * len(refs)
    for step, value in zip(plan, by_step, strict=True):
        done[step.gpu] = value
    verdict = job_verdict(plan, [d.outcome for d in done])
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and refs:
        make_out_dir(out)
    steps = {s.gpu: s for s in plan}
    out_text = str(out) if out is not None else None

    def place(ref: GpuRef, *provided: GpuCut):
        step = steps[ref.index]
        return client.submit(
            gpu_steps,
            run,
            ref,
            shared,
            verdict,
            out_text,
            shared_templates,
            step,
            keep,
            *provided,
            **_near(done[ref.index].worker),
        )

    placed = gather("steps", [functools.partial(place, ref) for ref in refs])
    again = [ref for ref, value in zip(refs, placed, strict=True) if value is None]
    if again:  # cut on another worker than the one placing it: cut again there
        retried = gather(
            "steps",
            [
                functools.partial(place, ref, *[done[p] for p in steps[ref.index].providers])
                for ref in again
            ],
        )
        for ref, value in zip(again, retried, strict=True):
            placed[ref.index] = value
    result = OfflineResult(problems=problems + templates.problems)
    result.cut = JobCut([], *verdict)
    for gpu, gpu_problems in placed:
        result.gpus.append(gpu)
        result.problems += gpu_problems
        if on_ops is not None:
            on_ops(gpu.ops)
    result.gpus.sort(key=lambda g: (g.gpu.host, g.gpu.global_rank, g.stream))
    result.warnings = step_warnings(result)
    return result


def _near(worker: str | None) -> dict:
    """Submit options: run where the GPU's earlier round ran, else anywhere."""
    if worker is None:
        return {"pure": False}
    return {"pure": False, "workers": [worker], "allow_other_workers": True}
