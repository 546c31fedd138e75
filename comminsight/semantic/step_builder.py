"""A Step's totals while it is open, and its step-summary v1 record once it closes.

`OpenStep` holds a Step's totals (time, bytes, bus bandwidth per role, the slowest op, lost
records, unexpected ops): native.place computes them over a batch of ops, continuing the Step
left open by the batch before (`open_step_rows`, `steps_of_placement`). `History` keeps
bounded windows of recent steady Steps, which `summarize` compares a closing Step against to
report anomalies. All arithmetic is integer or a fixed sequence of float operations, so the
same ops give the same bytes out, whether the engine ran through or resumed from a checkpoint.
"""

from __future__ import annotations

import bisect
import functools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.op_batch import FUNCS, KINDS, OpBatch
from comminsight.semantic.ops import EngineOp
from comminsight_gen.models.step_summary_v1 import (
    Anomaly,
    AnomalyKind,
    AnomalyUnit,
    OpClass,
    OpRef,
    Producer,
    ProducerMode,
    Recovery,
    RecoveryMethod,
    RoleStats,
    StepSummary,
)
from comminsight_gen.models.step_summary_v1 import SlowestOp as SummarySlowestOp

STEP_WINDOW = 50  # steady Steps the step-duration median is taken over
ROLE_OP_WINDOW = 50  # per role, its slowest op time in each recent steady Step
ROLE_BW_WINDOW = 50  # recent per-Step bandwidths per role
STEP_SLOW_FACTOR = 2.0
OP_SLOW_FACTOR = 5.0
BANDWIDTH_LOW_FACTOR = 0.5
MIN_HISTORY = 5  # no anomaly is claimed against fewer samples


@dataclass
class RoleTotals:
    op_count: int = 0
    time_ns: int = 0
    bytes: int = 0
    busbw_time_sum: float = 0.0
    max_op_time_ns: int = 0


@dataclass(frozen=True)
class OpId:
    """Which op (step-summary OpRef)."""

    kind: str
    comm_id: str
    seq: int
    func: str
    ring_seq: int | None = None


@dataclass(frozen=True)
class SlowestOp:
    op: OpId | EngineOp
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
    first_op: OpId | EngineOp  # an op id once restored from a checkpoint; the op itself else
    start_mono_ns: int | None
    start_real_ns: int
    last_op: OpId | EngineOp
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


F = {name: i for i, name in enumerate(native.STEP_DTYPE.names)}  # STEP_DTYPE field -> column


class _Ops:
    """The few ops of a batch that Steps name (first, last, slowest), gathered from the
    columns at once: Python values by op index."""

    def __init__(self, batch: OpBatch, role: np.ndarray, idx: np.ndarray) -> None:
        c = batch.cols
        idx = np.unique(idx[idx >= 0])
        self.at = {i: k for k, i in enumerate(idx.tolist())}
        take = {
            name: c[name][idx].tolist()
            for name in (
                "kind", "comm", "seq", "func", "ring_seq", "start", "start_real", "end_mono",
                "duration", "size", "busbw",
            )
        }  # fmt: skip
        self.role = role[idx].tolist()
        self.cols = take
        comms = batch.comms.comms
        none = native.NONE
        self.ids = [
            OpId(KINDS[k], comms[m].comm_id, q, FUNCS[f], None if r == none else r)
            for k, m, q, f, r in zip(
                take["kind"], take["comm"], take["seq"], take["func"], take["ring_seq"],
                strict=True,
            )
        ]  # fmt: skip
        self.comm_names = [comms[m].name for m in take["comm"]]


def steps_of_placement(
    placed, batch: OpBatch, role: np.ndarray, names: list[str], open_step, new_index
):
    """(OpenStep, closed, the op index that began the next Step or None) for each Step of a
    native.place result (`role`: each op's role code). The first continues `open_step` when
    there is one; `new_index()` numbers a Step that begins."""
    steps = placed.steps
    rows = steps.tolist()
    k = len(rows)
    ops = _Ops(batch, role, np.concatenate((steps["first"], steps["last"], steps["slowest"])))
    at, ids, oc = ops.at, ops.ids, ops.cols
    role_rows = zip(
        placed.role_count[:k].tolist(),
        placed.role_time[:k].tolist(),
        placed.role_bytes[:k].tolist(),
        placed.role_max[:k].tolist(),
        placed.role_bw[:k].tolist(),
        strict=True,
    )
    none = native.NONE
    (first_f, last_f, next_f, count_f, micro_f, unexp_f, lost_f, bytes_f, time_f, end_real_f,
     end_mono_f, slowest_f, _, bw_f, closed_f, _) = range(len(F))  # fmt: skip
    for j, (row, roles) in enumerate(zip(rows, role_rows, strict=True)):
        if j == 0 and open_step is not None:
            step = open_step
        else:
            index, warmup = new_index()
            f = at[row[first_f]]
            mono = oc["end_mono"][f] != none
            step = OpenStep(
                index,
                warmup,
                ids[f],
                oc["start"][f] if mono else None,
                oc["start_real"][f],
                ids[f],
            )
        last = row[last_f]
        if last >= 0:
            step.last_op = ids[at[last]]
        end_mono = row[end_mono_f]
        step.end_mono_ns = None if end_mono == none else end_mono
        step.end_real_ns = row[end_real_f]
        step.op_count = row[count_f]
        step.micro_step_count = row[micro_f]
        step.unexpected_op_count = row[unexp_f]
        step.records_lost = row[lost_f]
        step.total_bytes = row[bytes_f]
        step.total_op_time_ns = row[time_f]
        step.busbw_time_sum = row[bw_f]
        step.roles = {
            names[r]: RoleTotals(n, t, b, bw, top)
            for r, (n, t, b, top, bw) in enumerate(zip(*roles, strict=True))
            if n
        }
        slowest = row[slowest_f]
        if slowest >= 0:
            w = at[slowest]
            step.slowest = SlowestOp(
                ids[w],
                ops.comm_names[w],
                names[ops.role[w]],
                oc["duration"][w],
                oc["size"][w],
                oc["busbw"][w],
            )
        next_start = row[next_f]
        yield step, row[closed_f] != 0, next_start if next_start >= 0 else None


class RollingWindow:
    """The latest `maxlen` values in arrival order (a deque), kept sorted too: the median of
    recent Steps is asked for several times per Step."""

    def __init__(self, values=(), maxlen: int = 50) -> None:
        self._recent: deque = deque(maxlen=maxlen)
        self._sorted: list = []
        for v in values:
            self.append(v)

    def append(self, value) -> None:
        recent = self._recent
        if len(recent) == recent.maxlen:
            del self._sorted[bisect.bisect_left(self._sorted, recent[0])]
        recent.append(value)
        bisect.insort(self._sorted, value)

    def median(self) -> float:
        """statistics.median of the values (the same float)."""
        s = self._sorted
        n = len(s)
        mid = n // 2
        return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2

    def __len__(self) -> int:
        return len(self._recent)

    def __iter__(self):
        return iter(self._recent)


@dataclass
class History:
    step_duration_ns: RollingWindow = field(
        default_factory=lambda: RollingWindow(maxlen=STEP_WINDOW)
    )
    role_op_time_ns: dict[str, RollingWindow] = field(default_factory=dict)
    role_busbw_gbs: dict[str, RollingWindow] = field(default_factory=dict)

    def op_times(self, role: str) -> RollingWindow:
        w = self.role_op_time_ns.get(role)
        if w is None:
            w = self.role_op_time_ns[role] = RollingWindow(maxlen=ROLE_OP_WINDOW)
        return w

    def bandwidths(self, role: str) -> RollingWindow:
        w = self.role_busbw_gbs.get(role)
        if w is None:
            w = self.role_busbw_gbs[role] = RollingWindow(maxlen=ROLE_BW_WINDOW)
        return w


@dataclass(frozen=True)
class GpuIdentity:
    host: str
    global_rank: int
    pid: int | None = None
    local_rank: int | None = None
    cuda_device: int | None = None
    job_id: str | None = None


_OP_CLASS = {c.value: c for c in OpClass}  # enum calls cost more than a dict lookup


def op_ref(op: OpId | EngineOp) -> OpRef:
    kind = _OP_CLASS[op.kind]
    if op.ring_seq is None:
        return OpRef(kind=kind, comm_id=op.comm_id, seq=op.seq, func=op.func)
    return OpRef(kind=kind, comm_id=op.comm_id, seq=op.seq, func=op.func, ring_seq=op.ring_seq)


def _bw(weighted: float, time_ns: int) -> float:
    return weighted / time_ns if time_ns else 0.0


def anomalies(step: OpenStep, duration: int, history: History, max_unexpected: int) -> list:
    found = []
    if len(history.step_duration_ns) >= MIN_HISTORY:
        median = history.step_duration_ns.median()
        if median and duration > STEP_SLOW_FACTOR * median:
            found.append(
                Anomaly(
                    kind=AnomalyKind.step_slow,
                    description=f"step took {duration / median:.1f}x the median of the last "
                    f"{len(history.step_duration_ns)} steps",
                    value=float(duration),
                    threshold=float(STEP_SLOW_FACTOR * median),
                    unit=AnomalyUnit.ns,
                )
            )
    slow = step.slowest
    times = history.role_op_time_ns.get(slow.role) if slow is not None else None
    if slow is not None and times is not None and len(times) >= MIN_HISTORY:
        # against the slowest op of the role in recent Steps: an op that waits for a peer at
        # the same place every Step (a pipeline bubble) is the pattern, not an anomaly
        median = times.median()
        if median and slow.duration_ns > OP_SLOW_FACTOR * median:
            found.append(
                Anomaly(
                    kind=AnomalyKind.op_slow,
                    description=f"{slow.op.func} #{slow.op.seq} took "
                    f"{slow.duration_ns / median:.1f}x the median slowest {slow.role} op of "
                    "recent steps",
                    value=float(slow.duration_ns),
                    threshold=float(OP_SLOW_FACTOR * median),
                    unit=AnomalyUnit.ns,
                    role=slow.role,
                )
            )
    for role, totals in sorted(step.roles.items()):
        bws = history.role_busbw_gbs.get(role)
        bw = _bw(totals.busbw_time_sum, totals.time_ns)
        if bws is None or len(bws) < MIN_HISTORY or not totals.time_ns:
            continue
        median = bws.median()
        if median and bw < BANDWIDTH_LOW_FACTOR * median:
            found.append(
                Anomaly(
                    kind=AnomalyKind.bandwidth_low,
                    description=f"{role} bus bandwidth {bw:.1f} GB/s is below "
                    f"{BANDWIDTH_LOW_FACTOR:g}x its median {median:.1f} GB/s",
                    value=bw,
                    threshold=BANDWIDTH_LOW_FACTOR * median,
                    unit=AnomalyUnit.gbs,
                    role=role,
                )
            )
    if step.records_lost:
        found.append(
            Anomaly(
                kind=AnomalyKind.records_lost,
                description=f"{step.records_lost} op records were lost inside the step; "
                "its totals are low",
                value=float(step.records_lost),
                threshold=0.0,
                unit=AnomalyUnit.count,
            )
        )
    if step.unexpected_op_count > max_unexpected:
        found.append(
            Anomaly(
                kind=AnomalyKind.unexpected_ops,
                description=f"{step.unexpected_op_count} ops the pattern did not expect",
                value=float(step.unexpected_op_count),
                threshold=float(max_unexpected),
                unit=AnomalyUnit.count,
            )
        )
    return sorted(found, key=lambda a: (a.kind.value, a.description))


def summarize(
    step: OpenStep,
    gpu: GpuIdentity,
    history: History,
    recovery: Recovery,
    mode: ProducerMode,
    engine_version: str,
    max_unexpected: int,
    micro_steps: bool,
) -> StepSummary:
    """The Step's record; then the history learns from it (steady Steps only)."""
    if step.start_mono_ns is not None and step.end_mono_ns is not None:
        duration = max(0, step.end_mono_ns - step.start_mono_ns)
    else:
        duration = max(0, step.end_real_ns - step.start_real_ns)
    found = anomalies(step, duration, history, max_unexpected)
    slow = step.slowest
    optional = {
        k: v
        for k, v in (
            ("job_id", gpu.job_id),
            ("pid", gpu.pid),
            ("local_rank", gpu.local_rank),
            ("cuda_device", gpu.cuda_device),
            ("start_mono_ns", step.start_mono_ns),
            ("end_mono_ns", step.end_mono_ns),
            ("micro_step_count", step.micro_step_count if micro_steps else None),
            ("period_ns", step.period_ns),
        )
        if v is not None
    }
    summary = StepSummary(
        schema_version=1,
        host=gpu.host,
        global_rank=gpu.global_rank,
        step_index=step.step_index,
        start_real_ns=step.start_real_ns,
        end_real_ns=max(step.end_real_ns, step.start_real_ns),
        duration_ns=duration,
        op_count=step.op_count,
        warmup=step.warmup,
        total_bytes=step.total_bytes,
        total_op_time_ns=step.total_op_time_ns,
        busbw_gbs=_bw(step.busbw_time_sum, step.total_op_time_ns),
        roles=[
            RoleStats(
                role=name,
                op_count=t.op_count,
                time_ns=t.time_ns,
                bytes=t.bytes,
                busbw_gbs=_bw(t.busbw_time_sum, t.time_ns),
            )
            for name, t in sorted(step.roles.items())
        ],
        slowest_op=SummarySlowestOp(
            kind=_OP_CLASS[slow.op.kind],
            func=slow.op.func,
            seq=slow.op.seq,
            comm_id=slow.op.comm_id,
            role=slow.role,
            duration_ns=slow.duration_ns,
            size_bytes=slow.size_bytes,
            busbw_gbs=slow.busbw_gbs,
            **({"comm_name": slow.comm_name} if slow.comm_name else {}),
        ),
        first_op=op_ref(step.first_op),
        last_op=op_ref(step.last_op),
        anomalies=found,
        recovery=recovery,
        produced_by=_producer(mode, engine_version),
        **optional,
    )
    if not step.warmup:
        history.step_duration_ns.append(duration)
        for role, t in sorted(step.roles.items()):
            if t.time_ns:
                history.bandwidths(role).append(_bw(t.busbw_time_sum, t.time_ns))
            history.op_times(role).append(t.max_op_time_ns)
    return summary


@functools.lru_cache(maxsize=16)
def _producer(mode: ProducerMode, engine_version: str) -> Producer:
    return Producer(mode=mode, engine_version=engine_version)


@functools.lru_cache(maxsize=1024)
def recovery_of(method: str, confidence: float, template: str | None, period: int | None):
    extra = {}
    if template is not None:
        extra["template_name"] = template
    if period is not None:
        extra["period_ops"] = period
    return Recovery(method=RecoveryMethod(method), confidence=round(confidence, 6), **extra)
