"""Steps as native.place leaves them: the Step still open, and the Steps that closed.

`OpenStep` holds the totals of the Step still open (time, bytes, bus bandwidth per role, the
slowest op, lost records, unexpected ops, the seq span of its ops on each communicator),
which the next batch continues (`open_step_rows`, `merge_spans`) and checkpoints save.
`place_steps` turns a native.place result into a `StepTable` of the Steps that closed
(arrays: step_summary makes their records) and the OpenStep left. All arithmetic is integer
or a fixed sequence of float operations, so the same ops give the same bytes out, whether the
engine ran through or resumed from a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.op_batch import FUNCS, KINDS, OpBatch


@dataclass
class RoleTotals:
    op_count: int = 0
    time_ns: int = 0
    bytes: int = 0
    busbw_time_sum: float = 0.0
    max_op_time_ns: int = 0


class OpId(NamedTuple):  # a tuple: made three times per Step
    """Which op (step-summary OpRef)."""

    kind: str
    comm_id: str
    seq: int
    func: str
    ring_seq: int | None = None


class SlowestOp(NamedTuple):
    op: OpId
    comm_name: str | None
    role: str
    duration_ns: int
    size_bytes: int
    busbw_gbs: float


@dataclass
class OpenStep:
    """The open Step's accumulators (semantic-engine PartialStep)."""

    step_index: int
    warmup: bool
    first_op: OpId
    start_mono_ns: int | None
    start_real_ns: int
    last_op: OpId
    end_mono_ns: int | None = None
    end_real_ns: int = 0
    op_count: int = 0
    micro_step_count: int = 0
    unexpected_op_count: int = 0
    records_lost: int = 0
    total_bytes: int = 0
    total_op_time_ns: int = 0
    busbw_time_sum: float = 0.0
    roles: dict[str, RoleTotals] = field(default_factory=dict)
    slowest: SlowestOp | None = None
    period_ns: int | None = None  # start of the next Step minus this one's, once known
    # (kind, comm_id) -> [first seq, last seq, op count]; None when not known (restored from a
    # checkpoint that predates them)
    comm_seqs: dict[tuple[str, str], list[int]] | None = field(default_factory=dict)


Spans = dict[tuple[str, str], list[int]] | None


def step_spans(placed, batch: OpBatch, k: int) -> list[dict]:
    """Per Step of a native.place result (k of them), the seq span of its ops on each
    communicator: {(kind, comm_id): [lowest seq, highest seq, op count]}. Whole columns at
    once: each op's (Step, kind, communicator) is a cell of a small dense table, filled with
    ufunc.at (no sort: the engine's budget is per op)."""
    spans: list[dict] = [{} for _ in range(k)]
    step_of = placed.step_of
    inside = step_of >= 0
    c = batch.cols
    seq = c["seq"]
    inside &= seq >= 0  # inputs without a seq give no boundary candidate
    if not inside.any():
        return spans
    s, comm, kind, seq = step_of[inside], c["comm"][inside], c["kind"][inside], seq[inside]
    comms = batch.comms.comms
    used = np.unique(comm).tolist()
    ids = sorted({comms[m].comm_id for m in used})
    code = {cid: i for i, cid in enumerate(ids)}
    lut = np.zeros(max(used) + 1, np.int64)
    lut[used] = [code[comms[m].comm_id] for m in used]
    width = len(KINDS) * len(ids)
    cell = s * width + kind * len(ids) + lut[comm]
    size = k * width
    if size <= 4 * len(cell) + 4096:
        cells, slot = None, cell
    else:  # many tiny Steps on many communicators: a dense table would be mostly empty
        cells, slot = np.unique(cell, return_inverse=True)
        size = len(cells)
    low = np.full(size, np.iinfo(np.int64).max, np.int64)
    high = np.full(size, -1, np.int64)
    np.minimum.at(low, slot, seq)
    np.maximum.at(high, slot, seq)
    count = np.bincount(slot, minlength=size)
    filled = np.flatnonzero(count)
    named = filled if cells is None else cells[filled]
    for f, lo, hi, n in zip(
        named.tolist(), low[filled].tolist(), high[filled].tolist(), count[filled].tolist(),
        strict=True,
    ):  # fmt: skip
        j, rest = divmod(f, width)
        kd, i = divmod(rest, len(ids))
        spans[j][(KINDS[kd], ids[i])] = [lo, hi, n]
    return spans


def merge_spans(before: Spans, after: dict) -> Spans:
    """An open Step's spans continued by the next batch's ops of the same Step."""
    if before is None:
        return None
    out = {key: list(v) for key, v in before.items()}
    for key, (lo, hi, n) in after.items():
        have = out.get(key)
        if have is None:
            out[key] = [lo, hi, n]
        else:
            out[key] = [min(have[0], lo), max(have[1], hi), have[2] + n]
    return out


def open_step_rows(step: OpenStep, code_of) -> tuple[np.ndarray, tuple]:
    """The Step left open, as native.place continues it: a STEP_DTYPE row and its role rows
    (`code_of(role)` gives a role's column)."""
    row = np.zeros(1, native.STEP_DTYPE)[0]
    row["first"] = row["last"] = row["next_start"] = row["slowest"] = -1
    row["op_count"] = step.op_count
    row["micro"] = step.micro_step_count
    row["unexpected"] = step.unexpected_op_count
    row["lost"] = step.records_lost
    row["bytes"] = step.total_bytes
    row["time_ns"] = step.total_op_time_ns
    row["end_real"] = step.end_real_ns
    row["end_mono"] = native.NONE if step.end_mono_ns is None else step.end_mono_ns
    row["slowest_dur"] = step.slowest.duration_ns if step.slowest is not None else -1
    row["busbw_sum"] = step.busbw_time_sum
    codes = {name: code_of(name) for name in step.roles}
    width = max(codes.values(), default=-1) + 1
    count, time_ns, nbytes, top = (np.zeros(width, np.int64) for _ in range(4))
    bw = np.zeros(width, np.float64)
    for name, t in step.roles.items():
        c = codes[name]
        count[c], time_ns[c], nbytes[c], top[c], bw[c] = (
            t.op_count,
            t.time_ns,
            t.bytes,
            t.max_op_time_ns,
            t.busbw_time_sum,
        )
    return row, (count, time_ns, nbytes, top, bw)


class _Ops:
    """The few ops of a batch that Steps name (first, last, slowest), gathered from the
    columns at once: Python values by op index."""

    def __init__(self, batch: OpBatch, role: np.ndarray, idx: np.ndarray) -> None:
        c = batch.cols
        idx = np.unique(idx[idx >= 0])
        self.at = {i: k for k, i in enumerate(idx.tolist())}
        take = {
            name: c[name][idx].tolist()
            for name in ("kind", "comm", "seq", "func", "ring_seq", "duration", "size", "busbw")
        }
        comms = batch.comms.comms
        none = native.NONE
        self.ids = [
            OpId(KINDS[k], comms[m].comm_id, q, FUNCS[f], None if r == none else r)
            for k, m, q, f, r in zip(
                take["kind"], take["comm"], take["seq"], take["func"], take["ring_seq"],
                strict=True,
            )
        ]  # fmt: skip
        self.take = take
        self.role = role[idx].tolist()
        self.comm_names = [comms[m].name for m in take["comm"]]

    def id(self, i: int) -> OpId:
        return self.ids[self.at[i]]

    def slowest(self, i: int, names: list[str]) -> SlowestOp:
        w, t = self.at[i], self.take
        return SlowestOp(
            self.ids[w],
            self.comm_names[w],
            names[self.role[w]],
            t["duration"][w],
            t["size"][w],
            t["busbw"][w],
        )


@dataclass
class StepTable:
    """Steps that closed together, in order: their totals as arrays (one entry per Step; role
    matrices are [step, role] with roles named by `names`) and the ops they name."""

    names: list[str]
    index: list[int]
    warmup: np.ndarray
    first_op: list[OpId]
    last_op: list[OpId]
    slowest: list[SlowestOp]
    start_mono: np.ndarray  # native.NONE where absent
    start_real: np.ndarray
    end_mono: np.ndarray  # native.NONE where absent
    end_real: np.ndarray
    op_count: np.ndarray
    micro: np.ndarray
    unexpected: np.ndarray
    lost: np.ndarray
    total_bytes: np.ndarray
    time_ns: np.ndarray
    busbw_sum: np.ndarray
    period: np.ndarray  # native.NONE where unknown
    role_count: np.ndarray
    role_time: np.ndarray
    role_bytes: np.ndarray
    role_max: np.ndarray
    role_bw: np.ndarray
    comm_seqs: list[Spans]

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def of_open_step(cls, step: OpenStep, names: list[str], code_of) -> StepTable:
        """The table of one Step held open until the input ended."""
        row, (count, time_ns, nbytes, top, bw) = open_step_rows(step, code_of)
        width = len(names)

        def wide(a):
            out = np.zeros((1, width), a.dtype)
            out[0, : len(a)] = a
            return out

        none = native.NONE
        return cls(
            names,
            [step.step_index],
            np.array([step.warmup]),
            [step.first_op],
            [step.last_op],
            [step.slowest],
            np.array([none if step.start_mono_ns is None else step.start_mono_ns]),
            np.array([step.start_real_ns]),
            np.array([row["end_mono"]]),
            np.array([step.end_real_ns]),
            np.array([step.op_count]),
            np.array([step.micro_step_count]),
            np.array([step.unexpected_op_count]),
            np.array([step.records_lost]),
            np.array([step.total_bytes]),
            np.array([step.total_op_time_ns]),
            np.array([step.busbw_time_sum]),
            np.array([none if step.period_ns is None else step.period_ns]),
            wide(count),
            wide(time_ns),
            wide(nbytes),
            wide(top),
            wide(bw),
            [step.comm_seqs],
        )


def place_steps(
    placed,
    batch: OpBatch,
    role: np.ndarray,
    names: list[str],
    open_step: OpenStep | None,
    next_index: int,
    warmup_steps: int,
    indices: list[int] | None = None,
) -> tuple[StepTable | None, OpenStep | None, int]:
    """A native.place result as (the Steps it closed, the Step it leaves open, the number of
    Steps that began). The first Step continues `open_step` when there is one; Steps that
    begin are numbered from next_index (or as `indices` says: a job cut's Step indices,
    which skip a Step whose ops this GPU lost), the first warmup_steps of a run being
    warm-up."""
    steps = placed.steps
    k = len(steps)
    ops = _Ops(batch, role, np.concatenate((steps["first"], steps["last"], steps["slowest"])))
    cont = 1 if open_step is not None else 0
    began = k - cont
    numbers = indices if indices is not None else range(next_index, next_index + began)
    index = ([open_step.step_index] if cont else []) + list(numbers)
    first = steps["first"].tolist()
    last = steps["last"].tolist()
    slowest = steps["slowest"].tolist()
    first_ops = [ops.id(i) if i >= 0 else open_step.first_op for i in first]
    last_ops = [
        ops.id(i) if i >= 0 else (open_step.last_op if open_step is not None else None)
        for i in last
    ]
    slow_ops = [
        ops.slowest(i, names) if i >= 0 else (open_step.slowest if open_step else None)
        for i in slowest
    ]
    c = batch.cols
    none = native.NONE
    begin = np.maximum(steps["first"], 0)
    start_mono = np.where(c["end_mono"][begin] != none, c["start"][begin], none)
    start_real = c["start_real"][begin].copy()
    if cont:
        start_mono[0] = none if open_step.start_mono_ns is None else open_step.start_mono_ns
        start_real[0] = open_step.start_real_ns
    nxt = steps["next_start"]
    period = np.where(
        nxt >= 0, np.maximum(0, c["start_real"][np.maximum(nxt, 0)] - start_real), none
    )
    warmup = np.array(index) < warmup_steps
    if cont:
        warmup[0] = open_step.warmup
    spans: list[Spans] = step_spans(placed, batch, k)
    if cont:
        spans[0] = merge_spans(open_step.comm_seqs, spans[0])
    table = StepTable(
        names,
        index,
        warmup,
        first_ops,
        last_ops,
        slow_ops,
        start_mono,
        start_real,
        steps["end_mono"],
        steps["end_real"],
        steps["op_count"],
        steps["micro"],
        steps["unexpected"],
        steps["lost"],
        steps["bytes"],
        steps["time_ns"],
        steps["busbw_sum"],
        period,
        placed.role_count[:k],
        placed.role_time[:k],
        placed.role_bytes[:k],
        placed.role_max[:k],
        placed.role_bw[:k],
        spans,
    )
    closed = int(np.count_nonzero(steps["closed"]))
    left_open = None
    if closed < k:  # the last Step is still open
        left_open = _open_step(table, k - 1)
    return (_rows(table, slice(0, closed)) if closed else None), left_open, began


def _rows(t: StepTable, rows: slice) -> StepTable:
    return StepTable(
        t.names,
        t.index[rows],
        *(
            getattr(t, f)[rows]
            for f in (
                "warmup", "first_op", "last_op", "slowest", "start_mono", "start_real",
                "end_mono", "end_real", "op_count", "micro", "unexpected", "lost",
                "total_bytes", "time_ns", "busbw_sum", "period", "role_count", "role_time",
                "role_bytes", "role_max", "role_bw", "comm_seqs",
            )
        ),
    )  # fmt: skip


def _open_step(t: StepTable, j: int) -> OpenStep:
    none = native.NONE
    start_mono, end_mono = int(t.start_mono[j]), int(t.end_mono[j])
    step = OpenStep(
        t.index[j],
        bool(t.warmup[j]),
        t.first_op[j],
        None if start_mono == none else start_mono,
        int(t.start_real[j]),
        t.last_op[j],
        None if end_mono == none else end_mono,
        int(t.end_real[j]),
        int(t.op_count[j]),
        int(t.micro[j]),
        int(t.unexpected[j]),
        int(t.lost[j]),
        int(t.total_bytes[j]),
        int(t.time_ns[j]),
        float(t.busbw_sum[j]),
    )
    rows = zip(
        t.role_count[j].tolist(),
        t.role_time[j].tolist(),
        t.role_bytes[j].tolist(),
        t.role_bw[j].tolist(),
        t.role_max[j].tolist(),
        strict=True,
    )
    step.roles = {
        t.names[r]: RoleTotals(n, time_ns, b, bw, top)
        for r, (n, time_ns, b, bw, top) in enumerate(rows)
        if n
    }
    step.slowest = t.slowest[j]
    step.comm_seqs = t.comm_seqs[j]
    return step


@dataclass(frozen=True)
class GpuIdentity:
    host: str
    global_rank: int
    pid: int | None = None
    local_rank: int | None = None
    cuda_device: int | None = None
    job_id: str | None = None
