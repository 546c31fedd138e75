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

import msgspec
import numpy as np

from comminsight.semantic import native
from comminsight.semantic.step_builder import GpuIdentity, OpId, Spans, StepTable
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
    k = len(asked)
    med = np.full(k, np.nan)
    size = np.zeros(k, np.int64)
    learned = values[learns]
    if asked.any():
        prior = list(window)
        series = np.concatenate((np.array(prior, dtype=values.dtype), learned))
        width = window.maxlen
        end = len(prior) + np.cumsum(learns) - learns  # values in the window before Step j
        start = np.maximum(0, end - width)
        size = end - start
        wanted = np.flatnonzero(asked & (size >= MIN_HISTORY))
        if len(wanted):
            med[wanted] = native.window_medians(series, start[wanted], end[wanted])
    window.extend(learned.tolist())
    return med, size


def _bw(weighted, time_ns):
    return weighted / time_ns if time_ns else 0.0


class _Anomalies:
    """The anomalies of the Steps of a table, against the History (which then learns)."""

    def __init__(
        self, t: StepTable, durations: np.ndarray, history: History, max_unexpected: int
    ) -> None:
        steady = ~t.warmup
        k = len(t)
        self.step_med, self.step_n = medians(
            history.step_duration_ns, np.ones(k, bool), steady, durations
        )
        names = t.names
        slow_roles = [s.role for s in t.slowest]
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
            asked = np.array([role == name for role in slow_roles])
            if asked.any() or (present & steady).any():
                med, _ = medians(history.op_times(name), asked, present & steady, t.role_max[:, r])
                self.op_med[asked] = med[asked]
        # which anomalies each Step has, for all Steps at once; `of` words them
        step_med = np.nan_to_num(self.step_med, nan=0.0)
        op_med = np.nan_to_num(self.op_med, nan=0.0)
        bw_med = np.nan_to_num(self.bw_med, nan=0.0)
        slow_durations = np.array([s.duration_ns for s in t.slowest])
        self.step_slow = ((step_med != 0) & (durations > STEP_SLOW_FACTOR * step_med)).tolist()
        self.op_slow = ((op_med != 0) & (slow_durations > OP_SLOW_FACTOR * op_med)).tolist()
        bw_low = (bw_med != 0) & (t.role_time > 0) & (self.bw < BANDWIDTH_LOW_FACTOR * bw_med)
        self.bw_low: dict[int, list[int]] = {}  # Step -> the roles whose bandwidth fell
        for j, r in zip(*(a.tolist() for a in np.nonzero(bw_low)), strict=True):
            self.bw_low.setdefault(j, []).append(r)
        self.lost = t.lost.tolist()
        self.unexpected = t.unexpected.tolist()
        self.durations = durations.tolist()
        # the Steps with any anomaly (most have none: `of` is asked only about these)
        self.flagged = (
            np.array(self.step_slow)
            | np.array(self.op_slow)
            | (t.lost > 0)
            | (t.unexpected > max_unexpected)
        )
        self.flagged[list(self.bw_low)] = True
        self.flagged = self.flagged.tolist()

    def of(self, t: StepTable, j: int, max_unexpected: int) -> list[Anomaly]:
        unexpected = self.unexpected[j]
        lost = self.lost[j]
        found = []
        if self.step_slow[j]:
            duration = self.durations[j]
            median = float(self.step_med[j])
            found.append(
                Anomaly(
                    kind=AnomalyKind.step_slow,
                    description=f"step took {duration / median:.1f}x the median of the "
                    f"last {int(self.step_n[j])} steps",
                    value=float(duration),
                    threshold=float(STEP_SLOW_FACTOR * median),
                    unit=AnomalyUnit.ns,
                )
            )
        if self.op_slow[j]:
            # against the slowest op of the role in recent Steps: an op that waits for a
            # peer at the same place every Step (a pipeline bubble) is the pattern, not an
            # anomaly
            slow = t.slowest[j]
            median = float(self.op_med[j])
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
        if j in self.bw_low:
            for r in self.bw_low[j]:
                median = float(self.bw_med[j, r])
                bw = float(self.bw[j, r])
                role = t.names[r]
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
        if lost:
            found.append(
                Anomaly(
                    kind=AnomalyKind.records_lost,
                    description=f"{lost} op records were lost inside the step; its totals are low",
                    value=float(lost),
                    threshold=0.0,
                    unit=AnomalyUnit.count,
                )
            )
        if unexpected > max_unexpected:
            found.append(
                Anomaly(
                    kind=AnomalyKind.unexpected_ops,
                    description=f"{unexpected} ops the pattern did not expect",
                    value=float(unexpected),
                    threshold=float(max_unexpected),
                    unit=AnomalyUnit.count,
                )
            )
        if len(found) > 1:
            found.sort(key=lambda a: (a.kind.value, a.description))
        return found


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


def durations_of(t: StepTable) -> np.ndarray:
    none = native.NONE
    mono = (t.start_mono != none) & (t.end_mono != none)
    return np.maximum(0, np.where(mono, t.end_mono - t.start_mono, t.end_real - t.start_real))


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
    anomalies = _Anomalies(t, durations, history, max_unexpected)
    flagged = anomalies.flagged
    producer = _producer(mode, engine_version)
    fixed = {
        k: v
        for k, v in (
            ("job_id", gpu.job_id),
            ("pid", gpu.pid),
            ("local_rank", gpu.local_rank),
            ("cuda_device", gpu.cuda_device),
        )
        if v is not None
    }
    none = native.NONE
    order = sorted(range(len(t.names)), key=lambda r: t.names[r])
    names = [t.names[r] for r in order]
    counts = t.role_count[:, order]
    times = t.role_time[:, order]
    with np.errstate(divide="ignore", invalid="ignore"):
        bws = np.where(times > 0, t.role_bw[:, order] / times, 0.0)
    counts, times, nbytes, bws = (
        counts.tolist(),
        times.tolist(),
        t.role_bytes[:, order].tolist(),
        bws.tolist(),
    )
    # each Step's roles, in name order (only those with ops)
    present = [[r for r, n in enumerate(row) if n] for row in counts]
    with np.errstate(divide="ignore", invalid="ignore"):
        step_bw = np.where(t.time_ns > 0, t.busbw_sum / t.time_ns, 0.0).tolist()
    end_real = np.maximum(t.end_real, t.start_real).tolist()
    start_mono, end_mono, period = t.start_mono.tolist(), t.end_mono.tolist(), t.period.tolist()
    micro = t.micro.tolist() if micro_steps else None
    columns = zip(
        t.index,
        t.warmup.tolist(),
        t.start_real.tolist(),
        end_real,
        durations.tolist(),
        t.op_count.tolist(),
        t.total_bytes.tolist(),
        t.time_ns.tolist(),
        step_bw,
        t.first_op,
        t.last_op,
        t.slowest,
        recoveries,
        strict=True,
    )
    host, rank = gpu.host, gpu.global_rank
    out = []
    append = out.append
    for j, row in enumerate(columns):
        (index, warmup, start_real, end_real_j, duration, op_count, total_bytes, time_ns,
         busbw, first, last, slow, recovery) = row  # fmt: skip
        optional = fixed.copy()
        if start_mono[j] != none:
            optional["start_mono_ns"] = start_mono[j]
        if end_mono[j] != none:
            optional["end_mono_ns"] = end_mono[j]
        if micro is not None:
            optional["micro_step_count"] = micro[j]
        if period[j] != none:
            optional["period_ns"] = period[j]
        spans = comm_seq_spans(t.comm_seqs[j])
        if spans is not None:
            optional["comm_seqs"] = spans
        c, tn, b, w = counts[j], times[j], nbytes[j], bws[j]
        op = slow.op
        append(
            StepSummary(
                1,
                host,
                rank,
                index,
                start_real,
                end_real_j,
                duration,
                op_count,
                warmup,
                total_bytes,
                time_ns,
                busbw,
                [RoleStats(names[r], c[r], tn[r], b[r], w[r]) for r in present[j]],
                SummarySlowestOp(
                    _OP_CLASS[op.kind],
                    op.func,
                    op.seq,
                    op.comm_id,
                    slow.role,
                    slow.duration_ns,
                    slow.size_bytes,
                    slow.busbw_gbs,
                    slow.comm_name or msgspec.UNSET,
                ),
                op_ref(first),
                op_ref(last),
                anomalies.of(t, j, max_unexpected) if flagged[j] else [],
                recovery,
                producer,
                **optional,
            )
        )
    return out


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
