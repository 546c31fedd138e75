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


class CommSpans:
    """Each Step's seq span on each communicator (native.spans), in the order a record's
    comm_seqs take: by Step, then kind, then comm_id. Step j's spans are the rows
    bounds[j]:bounds[j + 1] of `rows`; `ids` names the communicator codes."""

    def __init__(self, rows: native.Spans, ids: list[str], bounds: np.ndarray) -> None:
        self.rows = rows
        self.ids = ids
        self.bounds = bounds

    def of(self, j: int) -> dict:
        """Step j's spans: {(kind, comm_id): [lowest seq, highest seq, op count]}."""
        a, b = int(self.bounds[j]), int(self.bounds[j + 1])
        r, width = self.rows, len(self.ids)
        return {
            (KINDS[cell // width], self.ids[cell % width]): [lo, hi, n]
            for cell, lo, hi, n in zip(
                r.cell[a:b].tolist(), r.lo[a:b].tolist(), r.hi[a:b].tolist(),
                r.count[a:b].tolist(), strict=True,
            )
        }  # fmt: skip


def comm_spans(step_of: np.ndarray, batch: OpBatch, k: int) -> CommSpans:
    """The seq spans of the ops of k Steps (`step_of`: each op's Step, or -1) on each
    communicator; ops without a seq give no boundary candidate."""
    comms = batch.comms.comms
    ids = sorted({c.comm_id for c in comms})
    code = {cid: i for i, cid in enumerate(ids)}
    comm_code = np.array([code[c.comm_id] for c in comms] or [0], np.int64)
    c = batch.cols
    rows = native.spans(step_of, c["kind"], c["comm"], comm_code, len(ids), c["seq"])
    bounds = np.searchsorted(rows.step, np.arange(k + 1))
    return CommSpans(rows, ids, bounds)


def step_spans(placed, batch: OpBatch, k: int) -> list[dict]:
    """Per Step of a native.place result (k of them), the seq span of its ops on each
    communicator: {(kind, comm_id): [lowest seq, highest seq, op count]}."""
    spans = comm_spans(placed.step_of, batch, k)
    return [spans.of(j) for j in range(k)]


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


class StepOps(NamedTuple):
    """One op of each Step (its first, its last or its slowest) as columns, by Step: records
    are made from columns at once, and an OpId only for the Step left open."""

    kind: list[str]
    comm_id: list[str]
    seq: list[int]
    func: list[str]
    ring_seq: list[int | None]

    def id(self, j: int) -> OpId:
        return OpId(self.kind[j], self.comm_id[j], self.seq[j], self.func[j], self.ring_seq[j])

    def put(self, j: int, op: OpId) -> None:
        """Step j's op is `op` (one from before the batch)."""
        for column, value in zip(self, op, strict=True):
            column[j] = value


class SlowestOps(NamedTuple):
    """The slowest op of each Step, as columns by Step."""

    op: StepOps
    comm_name: list[str | None]
    role: list[str]
    duration_ns: list[int]
    size_bytes: list[int]
    busbw_gbs: list[float]

    def of(self, j: int) -> SlowestOp:
        return SlowestOp(self.op.id(j), *(column[j] for column in self[1:]))

    def put(self, j: int, slowest: SlowestOp) -> None:
        self.op.put(j, slowest.op)
        for column, value in zip(self[1:], slowest[1:], strict=True):
            column[j] = value


def _step_ops(batch: OpBatch, idx: np.ndarray) -> StepOps:
    """The ops at idx (an index >= 0 of each Step; others are put in afterwards)."""
    c = batch.cols
    idx = np.maximum(idx, 0)
    ids = [m.comm_id for m in batch.comms.comms]
    none = native.NONE
    return StepOps(
        list(map(KINDS.__getitem__, c["kind"][idx].tolist())),
        list(map(ids.__getitem__, c["comm"][idx].tolist())),
        c["seq"][idx].tolist(),
        list(map(FUNCS.__getitem__, c["func"][idx].tolist())),
        [None if r == none else r for r in c["ring_seq"][idx].tolist()],
    )


def _slowest_ops(batch: OpBatch, idx: np.ndarray, role: np.ndarray, names: list[str]):
    c = batch.cols
    idx = np.maximum(idx, 0)
    comm_names = [m.name for m in batch.comms.comms]
    return SlowestOps(
        _step_ops(batch, idx),
        list(map(comm_names.__getitem__, c["comm"][idx].tolist())),
        list(map(names.__getitem__, role[idx].tolist())),
        c["duration"][idx].tolist(),
        c["size"][idx].tolist(),
        c["busbw"][idx].tolist(),
    )


@dataclass
class StepTable:
    """Steps that closed together, in order: their totals as arrays (one entry per Step; role
    matrices are [step, role] with roles named by `names`), the ops they name as columns, and
    their seq spans (`spans` rows, or `spans_of[j]` for a Step whose spans began before)."""

    names: list[str]
    index: list[int]
    warmup: np.ndarray
    first_op: StepOps
    last_op: StepOps
    slowest: SlowestOps
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
    spans: CommSpans | None
    spans_of: dict[int, Spans]

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

        def ops(op: OpId) -> StepOps:
            return StepOps(*([v] for v in op))

        slow = step.slowest
        none = native.NONE
        return cls(
            names,
            [step.step_index],
            np.array([step.warmup]),
            ops(step.first_op),
            ops(step.last_op),
            SlowestOps(ops(slow.op), *([v] for v in slow[1:])),
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
            None,
            {0: step.comm_seqs},
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
    final: bool = False,
) -> tuple[StepTable | None, OpenStep | None, int]:
    """A native.place result as (the Steps it closed, the Step it leaves open, the number of
    Steps that began). The first Step continues `open_step` when there is one; Steps that
    begin are numbered from next_index (or as `indices` says: a job cut's Step indices,
    which skip a Step whose ops this GPU lost), the first warmup_steps of a run being
    warm-up. With `final` (the input has ended) the last Step closes too."""
    steps = placed.steps
    k = len(steps)
    cont = 1 if open_step is not None else 0
    began = k - cont
    if not k:
        return None, None, began
    numbers = indices if indices is not None else range(next_index, next_index + began)
    index = ([open_step.step_index] if cont else []) + list(numbers)
    first_ops = _step_ops(batch, steps["first"])
    last_ops = _step_ops(batch, steps["last"])
    slow_ops = _slowest_ops(batch, steps["slowest"], role, names)
    if cont:  # the ops of the open Step's that came before
        first_ops.put(0, open_step.first_op)
        if steps["last"][0] < 0:
            last_ops.put(0, open_step.last_op)
        if steps["slowest"][0] < 0:
            slow_ops.put(0, open_step.slowest)
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
    spans = comm_spans(placed.step_of, batch, k)
    spans_of: dict[int, Spans] = {}
    if cont:
        spans_of[0] = merge_spans(open_step.comm_seqs, spans.of(0))
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
        spans_of,
    )
    closed = k if final else int(np.count_nonzero(steps["closed"]))
    left_open = None
    if closed < k:  # the last Step is still open
        left_open = _open_step(table, k - 1)
    return (_rows(table, closed) if closed else None), left_open, began


def _rows(t: StepTable, closed: int) -> StepTable:
    """The table's first `closed` Steps."""
    rows = slice(0, closed)

    def ops(o: StepOps) -> StepOps:
        return StepOps(*(column[rows] for column in o))

    return StepTable(
        t.names,
        t.index[rows],
        t.warmup[rows],
        ops(t.first_op),
        ops(t.last_op),
        SlowestOps(ops(t.slowest.op), *(column[rows] for column in t.slowest[1:])),
        *(
            getattr(t, f)[rows]
            for f in (
                "start_mono", "start_real", "end_mono", "end_real", "op_count", "micro",
                "unexpected", "lost", "total_bytes", "time_ns", "busbw_sum", "period",
                "role_count", "role_time", "role_bytes", "role_max", "role_bw",
            )
        ),
        t.spans,
        {j: s for j, s in t.spans_of.items() if j < closed},
    )  # fmt: skip


def _open_step(t: StepTable, j: int) -> OpenStep:
    none = native.NONE
    start_mono, end_mono = int(t.start_mono[j]), int(t.end_mono[j])
    step = OpenStep(
        t.index[j],
        bool(t.warmup[j]),
        t.first_op.id(j),
        None if start_mono == none else start_mono,
        int(t.start_real[j]),
        t.last_op.id(j),
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
    step.slowest = t.slowest.of(j)
    step.comm_seqs = t.spans_of[j] if j in t.spans_of else t.spans.of(j)
    return step


@dataclass(frozen=True)
class GpuIdentity:
    host: str
    global_rank: int
    pid: int | None = None
    local_rank: int | None = None
    cuda_device: int | None = None
    job_id: str | None = None
