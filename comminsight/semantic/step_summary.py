"""step-summary v1 records of the Steps that closed together, with their anomalies.

A Step is compared with the steady Steps before it (`History`: bounded windows of their
durations, and per role its bus bandwidth and its slowest op time): a Step far slower than
the median, an op far slower than its role's usual slowest, a role's bandwidth far below its
median, records lost inside the Step, more unexpected ops than the template allows. The
medians of a whole StepTable are computed at once (numpy over sliding windows), the same
values statistics.median gives Step by Step; then the windows learn the steady Steps.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat

import msgspec
import numpy as np

from comminsight.semantic import native
from comminsight.semantic.op_batch import KINDS
from comminsight.semantic.step_builder import (
    GpuIdentity,
    OpId,
    SlowestOps,
    Spans,
    StepOps,
    StepTable,
)
from comminsight_gen.models.step_summary_v1 import (
    Anomaly,
    AnomalyKind,
    AnomalyUnit,
    CommSeqSpan,
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
MAX_COMM_SEQS = 64  # step-summary v1 comm_seqs maxItems


def _window(maxlen: int) -> deque:
    return deque(maxlen=maxlen)


@dataclass
class History:
    step_duration_ns: deque = field(default_factory=lambda: _window(STEP_WINDOW))
    role_op_time_ns: dict[str, deque] = field(default_factory=dict)
    role_busbw_gbs: dict[str, deque] = field(default_factory=dict)

    def op_times(self, role: str) -> deque:
        w = self.role_op_time_ns.get(role)
        if w is None:
            w = self.role_op_time_ns[role] = _window(ROLE_OP_WINDOW)
        return w

    def bandwidths(self, role: str) -> deque:
        w = self.role_busbw_gbs.get(role)
        if w is None:
            w = self.role_busbw_gbs[role] = _window(ROLE_BW_WINDOW)
        return w


def medians(
    window: deque, asked: np.ndarray, learns: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For Steps in order: the median of `window` as it stands just before each Step where
    `asked` (NaN where not asked or fewer than MIN_HISTORY values), and the window's length
    then; the window learns values[j] at each Step where `learns`."""
    med, size = native.history_medians(
        np.array(window, np.float64), window.maxlen, asked, learns, values, MIN_HISTORY
    )
    window.extend(values[learns].tolist())
    return med, size


def _bw(weighted, time_ns):
    return weighted / time_ns if time_ns else 0.0


class _Anomalies:
    """The anomalies of the Steps of a table, against the History (which then learns)."""

    def __init__(self, t: StepTable, durations: np.ndarray, history: History) -> None:
        steady = ~t.warmup
        k = len(t)
        self.step_med, self.step_n = medians(
            history.step_duration_ns, np.ones(k, bool), steady, durations
        )
        names = t.names
        code = {name: r for r, name in enumerate(names)}
        slow_role = np.array([code.get(role, -1) for role in t.slowest.role], np.int64)
        self.op_med = np.full(k, np.nan)
        self.bw_med = np.full(t.role_time.shape, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.bw = np.where(t.role_time > 0, t.role_bw / t.role_time, 0.0)
        for r, name in enumerate(names):
            timed = t.role_time[:, r] > 0
            if timed.any():
                self.bw_med[:, r], _ = medians(
                    history.bandwidths(name), timed, timed & steady, self.bw[:, r]
                )
            present = t.role_count[:, r] > 0
            asked = slow_role == r
            if asked.any() or (present & steady).any():
                med, _ = medians(history.op_times(name), asked, present & steady, t.role_max[:, r])
                self.op_med[asked] = med[asked]
        # which anomalies each Step has, for all Steps at once; `lists` words them
        step_med = np.nan_to_num(self.step_med, nan=0.0)
        op_med = np.nan_to_num(self.op_med, nan=0.0)
        bw_med = np.nan_to_num(self.bw_med, nan=0.0)
        slow_durations = np.array(t.slowest.duration_ns, np.int64)
        self.step_slow = (step_med != 0) & (durations > STEP_SLOW_FACTOR * step_med)
        self.op_slow = (op_med != 0) & (slow_durations > OP_SLOW_FACTOR * op_med)
        self.bw_low = (bw_med != 0) & (t.role_time > 0) & (self.bw < BANDWIDTH_LOW_FACTOR * bw_med)
        self.durations = durations

    def lists(self, t: StepTable, max_unexpected: int) -> list[list[Anomaly]]:
        """Each Step's anomalies, sorted by kind, then description. They are made kind by
        kind (in the order of their values), each kind for all its Steps at once."""
        found: list[list[Anomaly]] = [[] for _ in range(len(t))]
        made = {
            AnomalyKind.step_slow: self._step_slow(),
            AnomalyKind.op_slow: self._op_slow(t),
            AnomalyKind.bandwidth_low: self._bandwidth_low(t),
            AnomalyKind.records_lost: _records_lost(t),
            AnomalyKind.unexpected_ops: _unexpected_ops(t, max_unexpected),
        }
        for kind in sorted(made, key=lambda kind: kind.value):
            steps, anomalies = made[kind]
            for j, anomaly in zip(steps, anomalies, strict=True):
                found[j].append(anomaly)
        return found

    def _step_slow(self) -> tuple[list[int], list[Anomaly]]:
        steps = np.flatnonzero(self.step_slow)
        durations = self.durations[steps].tolist()
        med = self.step_med[steps].tolist()
        count = self.step_n[steps].tolist()
        return steps.tolist(), records(
            Anomaly,
            kind=repeat(AnomalyKind.step_slow),
            description=[
                f"step took {d / m:.1f}x the median of the last {int(n)} steps"
                for d, m, n in zip(durations, med, count, strict=True)
            ],
            value=[float(d) for d in durations],
            threshold=[float(STEP_SLOW_FACTOR * m) for m in med],
            unit=repeat(AnomalyUnit.ns),
        )

    def _op_slow(self, t: StepTable) -> tuple[list[int], list[Anomaly]]:
        # against the slowest op of the role in recent Steps: an op that waits for a peer at
        # the same place every Step (a pipeline bubble) is the pattern, not an anomaly
        steps = np.flatnonzero(self.op_slow).tolist()
        slow = t.slowest
        med = self.op_med[steps].tolist()
        durations = [slow.duration_ns[j] for j in steps]
        roles = [slow.role[j] for j in steps]
        return steps, records(
            Anomaly,
            kind=repeat(AnomalyKind.op_slow),
            description=[
                f"{slow.op.func[j]} #{slow.op.seq[j]} took {d / m:.1f}x the median slowest "
                f"{role} op of recent steps"
                for j, d, m, role in zip(steps, durations, med, roles, strict=True)
            ],
            value=[float(d) for d in durations],
            threshold=[float(OP_SLOW_FACTOR * m) for m in med],
            unit=repeat(AnomalyUnit.ns),
            role=roles,
        )

    def _bandwidth_low(self, t: StepTable) -> tuple[list[int], list[Anomaly]]:
        steps, roles = np.nonzero(self.bw_low)
        # a Step's roles in the order of their descriptions, which begin with the role's
        # name and a space: role names have no space, so that is the order of name + " "
        by_name = sorted(range(len(t.names)), key=lambda r: t.names[r] + " ")
        rank = np.empty(len(t.names), np.int64)
        rank[by_name] = np.arange(len(t.names))
        order = np.lexsort((rank[roles], steps))
        steps, roles = steps[order], roles[order]
        med = self.bw_med[steps, roles].tolist()
        bws = self.bw[steps, roles].tolist()
        names = [t.names[r] for r in roles.tolist()]
        return steps.tolist(), records(
            Anomaly,
            kind=repeat(AnomalyKind.bandwidth_low),
            description=[
                f"{role} bus bandwidth {bw:.1f} GB/s is below {BANDWIDTH_LOW_FACTOR:g}x its "
                f"median {m:.1f} GB/s"
                for role, bw, m in zip(names, bws, med, strict=True)
            ],
            value=bws,
            threshold=[BANDWIDTH_LOW_FACTOR * m for m in med],
            unit=repeat(AnomalyUnit.gbs),
            role=names,
        )


def _records_lost(t: StepTable) -> tuple[list[int], list[Anomaly]]:
    steps = np.flatnonzero(t.lost)
    lost = t.lost[steps].tolist()
    return steps.tolist(), records(
        Anomaly,
        kind=repeat(AnomalyKind.records_lost),
        description=[f"{n} op records were lost inside the step; its totals are low" for n in lost],
        value=[float(n) for n in lost],
        threshold=repeat(0.0),
        unit=repeat(AnomalyUnit.count),
    )


def _unexpected_ops(t: StepTable, max_unexpected: int) -> tuple[list[int], list[Anomaly]]:
    steps = np.flatnonzero(t.unexpected > max_unexpected)
    unexpected = t.unexpected[steps].tolist()
    return steps.tolist(), records(
        Anomaly,
        kind=repeat(AnomalyKind.unexpected_ops),
        description=[f"{n} ops the pattern did not expect" for n in unexpected],
        value=[float(n) for n in unexpected],
        threshold=repeat(float(max_unexpected)),
        unit=repeat(AnomalyUnit.count),
    )


_OP_CLASS = {c.value: c for c in OpClass}  # enum calls cost more than a dict lookup


def op_ref(op: OpId) -> OpRef:
    kind = _OP_CLASS[op.kind]
    if op.ring_seq is None:
        return OpRef(kind=kind, comm_id=op.comm_id, seq=op.seq, func=op.func)
    return OpRef(kind=kind, comm_id=op.comm_id, seq=op.seq, func=op.func, ring_seq=op.ring_seq)


def comm_seq_spans(spans: Spans) -> list[CommSeqSpan] | None:
    """A Step's comm_seqs in the record's order (kind, then comm_id), or None when the engine
    does not know them."""
    if not spans:
        return None
    keys = sorted(spans)[:MAX_COMM_SEQS]
    return [CommSeqSpan(_OP_CLASS[kind], cid, *spans[(kind, cid)]) for kind, cid in keys]


def records(cls, **columns) -> list:
    """cls(...) for each row of `columns` (a field's list of values, or an iterator such as
    repeat(value)), made by map over the columns: no Python frame per record. Fields not
    given keep their default (UNSET for the optional ones); at least one column is a list."""
    fields = cls.__struct_fields__
    defaults = cls.__struct_defaults__
    last = max(fields.index(name) for name in columns)
    args = []
    for i, name in enumerate(fields[: last + 1]):
        if name in columns:
            args.append(columns[name])
            continue
        d = i - (len(fields) - len(defaults))
        if d < 0 or not _plain(defaults[d]):
            raise TypeError(f"{cls.__name__}.{name} has no value and no plain default")
        args.append(repeat(defaults[d]))
    return list(map(cls, *args))


def _plain(default) -> bool:
    return default is msgspec.UNSET or isinstance(default, (int, float, str, type(None)))


def _unset_none(values: list) -> list:
    return [msgspec.UNSET if v is None else v for v in values]


def op_refs(ops: StepOps) -> list[OpRef]:
    return records(
        OpRef,
        kind=list(map(_OP_CLASS.__getitem__, ops.kind)),
        comm_id=ops.comm_id,
        seq=ops.seq,
        func=ops.func,
        ring_seq=_unset_none(ops.ring_seq),
    )


def slowest_records(slow: SlowestOps) -> list[SummarySlowestOp]:
    op = slow.op
    return records(
        SummarySlowestOp,
        kind=list(map(_OP_CLASS.__getitem__, op.kind)),
        func=op.func,
        seq=op.seq,
        comm_id=op.comm_id,
        role=slow.role,
        duration_ns=slow.duration_ns,
        size_bytes=slow.size_bytes,
        busbw_gbs=slow.busbw_gbs,
        comm_name=[name or msgspec.UNSET for name in slow.comm_name],
    )


_KIND_CLASS = [_OP_CLASS[k] for k in KINDS]


def comm_seq_records(t: StepTable) -> list:
    """Each Step's comm_seqs (at most MAX_COMM_SEQS spans), UNSET where none is known."""
    k = len(t)
    out: list = [msgspec.UNSET] * k
    spans = t.spans
    if spans is not None and k:
        b = spans.bounds[: k + 1]
        r, m = spans.rows, int(b[-1])
        width = len(spans.ids)
        flat = records(
            CommSeqSpan,
            kind=list(map(_KIND_CLASS.__getitem__, (r.cell[:m] // width).tolist())),
            comm_id=list(map(spans.ids.__getitem__, (r.cell[:m] % width).tolist())),
            first_seq=r.lo[:m].tolist(),
            last_seq=r.hi[:m].tolist(),
            op_count=r.count[:m].tolist(),
        )
        ends = np.minimum(b[1:], b[:-1] + MAX_COMM_SEQS).tolist()
        starts = b[:-1].tolist()
        out = [flat[a:e] if e > a else msgspec.UNSET for a, e in zip(starts, ends, strict=True)]
    for j, known in t.spans_of.items():
        made = comm_seq_spans(known)
        out[j] = msgspec.UNSET if made is None else made
    return out


def role_records(t: StepTable) -> list[list[RoleStats]]:
    """Each Step's RoleStats, the roles with ops in name order. Steps with the same roles
    present are made together, a role's records at once."""
    k = len(t)
    order = sorted(range(len(t.names)), key=lambda r: t.names[r])
    counts = t.role_count[:, order]
    times = t.role_time[:, order]
    with np.errstate(divide="ignore", invalid="ignore"):
        bws = np.where(times > 0, t.role_bw[:, order] / times, 0.0)
    nbytes = t.role_bytes[:, order]
    present = counts > 0
    if k and (present == present[0]).all():  # most often every Step has the same roles
        patterns, which = present[:1], np.zeros(k, np.int64)
    else:
        patterns, which = np.unique(present, axis=0, return_inverse=True)
        which = which.reshape(-1)
    out: list = [None] * k
    for p, pattern in enumerate(patterns):
        steps = np.flatnonzero(which == p)
        columns = [
            records(
                RoleStats,
                role=repeat(t.names[order[r]]),
                op_count=counts[steps, r].tolist(),
                time_ns=times[steps, r].tolist(),
                bytes=nbytes[steps, r].tolist(),
                busbw_gbs=bws[steps, r].tolist(),
            )
            for r in np.flatnonzero(pattern).tolist()
        ]
        lists = list(map(list, zip(*columns, strict=True))) if columns else [[] for _ in steps]
        if len(patterns) == 1:
            return lists
        for j, roles in zip(steps.tolist(), lists, strict=True):
            out[j] = roles
    return out


def durations_of(t: StepTable) -> np.ndarray:
    none = native.NONE
    mono = (t.start_mono != none) & (t.end_mono != none)
    return np.maximum(0, np.where(mono, t.end_mono - t.start_mono, t.end_real - t.start_real))


def _optional(values: np.ndarray) -> list:
    """A column's values, UNSET where native.NONE."""
    none = native.NONE
    return [msgspec.UNSET if v == none else v for v in values.tolist()]


def summarize(
    t: StepTable,
    recoveries: list[Recovery],
    gpu: GpuIdentity,
    history: History,
    mode: ProducerMode,
    engine_version: str,
    max_unexpected: int,
    micro_steps: bool,
) -> list[StepSummary]:
    """The records of the table's Steps, in order; then the history learns from them
    (steady Steps only)."""
    durations = durations_of(t)
    anomalies = _Anomalies(t, durations, history)
    found = anomalies.lists(t, max_unexpected)
    with np.errstate(divide="ignore", invalid="ignore"):
        step_bw = np.where(t.time_ns > 0, t.busbw_sum / t.time_ns, 0.0).tolist()
    optional = {
        name: repeat(value)
        for name, value in (
            ("job_id", gpu.job_id),
            ("pid", gpu.pid),
            ("local_rank", gpu.local_rank),
            ("cuda_device", gpu.cuda_device),
        )
        if value is not None
    }
    if micro_steps:
        optional["micro_step_count"] = t.micro.tolist()
    return records(
        StepSummary,
        schema_version=repeat(1),
        host=repeat(gpu.host),
        global_rank=repeat(gpu.global_rank),
        step_index=list(t.index),
        start_real_ns=t.start_real.tolist(),
        end_real_ns=np.maximum(t.end_real, t.start_real).tolist(),
        duration_ns=durations.tolist(),
        op_count=t.op_count.tolist(),
        warmup=t.warmup.tolist(),
        total_bytes=t.total_bytes.tolist(),
        total_op_time_ns=t.time_ns.tolist(),
        busbw_gbs=step_bw,
        roles=role_records(t),
        slowest_op=slowest_records(t.slowest),
        first_op=op_refs(t.first_op),
        last_op=op_refs(t.last_op),
        anomalies=found,
        recovery=recoveries,
        produced_by=repeat(_producer(mode, engine_version)),
        start_mono_ns=_optional(t.start_mono),
        end_mono_ns=_optional(t.end_mono),
        period_ns=_optional(t.period),
        comm_seqs=comm_seq_records(t),
        **optional,
    )


@functools.lru_cache(maxsize=16)
def _producer(mode: ProducerMode, engine_version: str) -> Producer:
    return Producer(mode=mode, engine_version=engine_version)


def recovery_of(
    method: str, template: str | None, period: int | None, confidence: float, **extra
) -> Recovery:
    """A Step's recovery; `extra` holds the job method's reasons, job_steps and the template
    that named its roles."""
    if "template_name" in extra:
        template = extra.pop("template_name")
    if "reasons" in extra:
        extra["reasons"] = tuple(extra["reasons"])  # hashable: the records are cached
    return _recovery(method, template, period, confidence, tuple(sorted(extra.items())))


@functools.lru_cache(maxsize=1024)
def _recovery(method, template, period, confidence, extra: tuple) -> Recovery:
    fields = {k: list(v) if k == "reasons" else v for k, v in extra}
    if template is not None:
        fields["template_name"] = template
    if period is not None:
        fields["period_ops"] = period
    return Recovery(method=RecoveryMethod(method), confidence=round(confidence, 6), **fields)
