"""Inject's optimizer-step markers as evidence of where Steps end.

With COMMINSIGHT_INJECT_STEP_MARKERS on, Inject appends a `step` line to
`<home>/metadata/inject/<host>.<pid>.jsonl` each time a torch optimizer's `step()` returns,
stamped with the host's CLOCK_MONOTONIC: the clock the Profiler stamps each op's issue with.
So the ops a process issued before a marker are its Step's or earlier ones', and those issued
after it are the next Step's, but for what the optimizer's wrapper still issues once the
torch optimizer returned: ZeRO-1/2 and Megatron's distributed optimizer all-gather the
updated parameters after their inner optimizer steps (`past_update`). A Step whose update
was skipped (fp16 overflow: the scaler never calls the inner optimizer) has no marker: the
op cycle tells it (job_cut).

Where several optimizer classes step in one process (a GAN's two, an MoE router's own), the
class that stepped most often marks the Steps.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np

from comminsight.semantic.job_ops import P2P, GpuOps
from comminsight.semantic.local_cycle import SCALAR_BYTES, reduces
from comminsight.semantic.op_batch import func_code, is_func
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.inject_metadata_v1 import InjectMetadata, Kind

MIN_MARKERS = 3  # fewer markers than this say nothing of a cycle's phase
MAX_FILE_BYTES = 256 << 20  # a metadata file larger than this is not Inject's
MAX_LINE_BYTES = 1 << 20

ProcessKey = tuple[str, int]  # (host, pid)
_DECODER = msgspec.json.Decoder(InjectMetadata)


def markers_dir(logs_dir: str | Path) -> Path:
    """Where Inject's metadata lies beside a home's inspector_logs."""
    return Path(logs_dir).parent / home_names.METADATA / home_names.INJECT


def process_of_stream(stream: str) -> ProcessKey | None:
    """(host, pid) from the Profiler's file-name stem `ci-<host>-<pid>-<start>`, None for
    other names (NVIDIA Inspector's files)."""
    head, _, rest = stream.partition("ci-")
    parts = rest.rsplit("-", 2)
    if head or len(parts) != 3 or not parts[0] or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def read_markers(directory: str | Path) -> tuple[dict[ProcessKey, np.ndarray], list[str]]:
    """Per process, its Steps' marker times (sorted), from every `*.jsonl` of `directory`
    (Inject's metadata/inject/); and what could not be read, named by file and line. A
    missing directory is no problem: most jobs run without markers."""
    times: dict[ProcessKey, dict[str, list[int]]] = {}
    problems: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return {}, []
    except OSError as e:
        return {}, [f"{directory}: cannot list the step markers: {e.strerror}"]
    for name in names:
        if name.endswith(".jsonl"):
            _read_file(Path(directory) / name, times, problems)
    return {key: _one_optimizer(by_class) for key, by_class in times.items()}, problems


def _read_file(path: Path, times: dict, problems: list[str]) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        problems.append(f"{path}: cannot open: {e.strerror}")
        return
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            problems.append(f"{path}: not a regular file of at most {MAX_FILE_BYTES} bytes")
            return
        for number, line in enumerate(f, 1):
            if len(line) > MAX_LINE_BYTES:
                problems.append(f"{path}: line {number}: longer than {MAX_LINE_BYTES} bytes")
                continue
            if not line.endswith(b"\n"):
                continue  # still being written
            if b'"step"' not in line:
                continue
            try:
                record = _DECODER.decode(line)
            except (msgspec.DecodeError, UnicodeDecodeError) as e:
                problems.append(f"{path}: line {number}: not an inject-metadata v1 line: {e}")
                continue
            if record.kind is Kind.step and record.optimizer is not msgspec.UNSET:
                by_class = times.setdefault((record.host, record.pid), {})
                by_class.setdefault(record.optimizer, []).append(record.mono_ns)


def _one_optimizer(by_class: dict[str, list[int]]) -> np.ndarray:
    counts = Counter({name: len(t) for name, t in by_class.items()})
    name = min(counts, key=lambda n: (-counts[n], n))
    return np.unique(np.array(by_class[name], np.int64))


def marker_step_starts(g: GpuOps, markers: np.ndarray, first: int) -> np.ndarray | None:
    """Where this GPU's Steps begin by its markers: at `first` (the first op after the
    start-up), then after each marker that has ops on both sides, past the update the
    optimizer's wrapper still issued. None when fewer than MIN_MARKERS fall among its ops or
    its ops carry no host issue time (NVIDIA Inspector logs)."""
    n = len(g)
    if n < 2 or first >= n or not g.host_issue[first:].all():
        return None
    inside = markers[(markers > g.issue[first]) & (markers < g.issue[-1])]
    if len(inside) < MIN_MARKERS:
        return None
    after = np.unique(np.searchsorted(g.issue, inside, side="right"))
    after = after[(after > first) & (after < n)]
    if len(after) < MIN_MARKERS:
        return None
    bounds = np.concatenate([[first], after, [n]]).tolist()
    starts = [first]
    for k in range(1, len(bounds) - 1):
        starts.append(past_update(g, starts[-1], bounds[k], bounds[k + 1]))
    starts = np.unique(np.array(starts, np.int64))
    starts = starts[starts < n]  # a last marker followed by its Step's ops alone: the tail
    starts[0] = _first_step_start(g, first, starts)
    return starts


def _first_step_start(g: GpuOps, first: int, starts: np.ndarray) -> int:
    """Where the first Step begins: with the op the later Steps begin with, where it comes
    before the first marker (ops before it are the start-up's: Megatron's embedding
    all-reduce, a barrier), else right after the start-up."""
    if len(starts) < 3:
        return first
    _, shape = np.unique(np.stack([g.kind, g.comm, g.func, g.size]), axis=1, return_inverse=True)
    shape = shape.reshape(-1)
    values, counts = np.unique(shape[starts[1:]], return_counts=True)
    opening = values[np.argmax(counts)]
    if counts.max() * 2 <= len(starts) - 1:
        return first
    at = np.flatnonzero(shape[first : starts[1]] == opening)
    # only past a few ops of the start-up's: a first Step that opens otherwise than the
    # later ones (DDP's first buckets, before it rebuilds them) is no start-up
    if not len(at) or 2 * int(at[0]) > float(np.median(np.diff(starts[1:]))):
        return first
    return first + int(at[0])


def past_update(g: GpuOps, before: int, at: int, until: int) -> int:
    """The first op of the next Step, from op `at` (the first issued after a marker): past
    what the Step still issues once its torch optimizer returned. That is, in turn:

    - the all-gathers (or broadcasts) of the updated parameters that a sharded optimizer
      issues once its inner optimizer returned (ZeRO-1/2, Megatron's distributed optimizer):
      gathers right at the marker, on a communicator that reduced gradients in the Step
      before (ops before..at) and gathers nowhere else in it nor in the rest of the next
      Step (at..until), moving a tenth of those gradients' bytes at least (parameters
      gathered for compute — FSDP, ZeRO-3, an overlapped gather — are gathered all through
      a Step; DDP's rebuilt bucket indices, broadcast as the next forward begins, are a few
      integers per parameter tensor);
    - all-reductions of a few scalars: the training loop's bookkeeping of the Step (its
      loss averaged over the data-parallel ranks, Megatron's update-successful and
      zero-count reductions). A Step's forward begins with no scalar reduction."""
    at = _past_gathers(g, before, at, until)
    scalar = (g.kind != P2P) & (g.func == func_code("AllReduce")) & (g.size <= SCALAR_BYTES)
    while at < until and scalar[at]:
        at += 1
    return at


def _past_gathers(g: GpuOps, before: int, at: int, until: int) -> int:
    collective = g.kind != P2P
    gather = collective & is_func(g.func, "AllGather", "Broadcast")
    reduction = collective & reduces(g.func) & (g.size > SCALAR_BYTES)
    end = at
    while end < until and gather[end] and g.comm[end] == g.comm[at]:
        end += 1
    if end == at:
        return at
    comm = g.comm[at]
    mine = g.comm[before:at] == comm
    reduced_bytes = int(g.size[before:at][reduction[before:at] & mine].sum())
    gathered_before = bool((gather[before:at] & mine).any())
    gathered_after = bool((gather[end:until] & (g.comm[end:until] == comm)).any())
    heavy = int(g.size[at:end].sum()) * 10 >= reduced_bytes
    if reduced_bytes and heavy and not gathered_before and not gathered_after:
        return end
    return at


def markers_disagree(g: GpuOps, label: np.ndarray, markers: np.ndarray) -> str | None:
    """Why Steps labelled so (`label`: each op's Step, negative or huge outside Steps)
    disagree with the GPU's markers, or None when they agree: every Step but the last holds
    at most one marker (none where its update was skipped), issued after its last gradient
    reduction, and no marker falls between Steps' ops where it would end no Step."""
    n = len(g)
    if n < 2 or not g.host_issue.all():
        return None
    steps = np.unique(label[(label >= 0) & (label < 1 << 40)])
    if len(steps) < 2:
        return None
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    gradient = (g.kind != P2P) & reduces(g.func) & ~small
    # an optimizer's first scalar right after the gradients (found-inf, a norm): a Step
    # holding two has passed over the boundary of a Step whose update was skipped
    optimizer = np.zeros(n, bool)
    optimizer[1:] = gradient[:-1] & small[1:] & (g.func[1:] == func_code("AllReduce"))
    # per Step (in one pass over the ops: a long run has many): its first and last op, its
    # last gradient reduction, how many optimizers it holds
    at = np.flatnonzero((label >= 0) & (label < 1 << 40))
    which = np.searchsorted(steps, label[at])
    k = len(steps)
    first = np.full(k, n, np.int64)
    last = np.full(k, -1, np.int64)
    last_grad = np.full(k, -1, np.int64)
    optimizers = np.zeros(k, np.int64)
    np.minimum.at(first, which, at)
    np.maximum.at(last, which, at)
    np.maximum.at(last_grad, which[gradient[at]], at[gradient[at]])
    np.add.at(optimizers, which, optimizer[at].astype(np.int64))
    # where the next Step's ops begin after this one's last (the earliest first op of any
    # later Step, where that comes after it)
    later_first = np.minimum.accumulate(first[::-1])[::-1]
    nxt = np.append(later_first[1:], n)
    nxt = np.where(nxt > last, nxt, last + 1)
    lo = g.issue[first[:-1]]
    hi = g.issue[np.minimum(nxt[:-1], n - 1)]
    left = np.searchsorted(markers, lo, side="right")
    count = np.searchsorted(markers, hi, side="left") - left
    first_marker = markers[np.minimum(left, len(markers) - 1)] if len(markers) else lo
    grads = last_grad[:-1]
    several = int((count > 1).sum())
    early = int(((count > 0) & (grads >= 0) & (first_marker < g.issue[np.maximum(grads, 0)])).sum())
    merged = int(((optimizers[:-1] > 1) & (count <= 1)).sum())
    if not several and not early and not merged:
        return None
    said = []
    if several:
        said.append(f"{several} Steps hold several optimizer steps")
    if early:
        said.append(f"{early} Steps end their optimizer before their last gradient reduction")
    if merged:
        said.append(f"{merged} Steps hold two optimizers and at most one marker")
    return ", ".join(said)
