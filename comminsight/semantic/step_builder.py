"""A Step's totals while it is open, and its step-summary v1 record once it closes.

`OpenStep` accumulates every op of the Step (time, bytes, bus bandwidth per role, the slowest
op, lost records, unexpected ops). `History` keeps bounded windows of recent steady Steps,
which `summarize` compares a closing Step against to report anomalies. All arithmetic is
integer or a fixed sequence of float operations, so the same ops give the same bytes out,
whether the engine ran through or resumed from a checkpoint.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

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

    @classmethod
    def begin(cls, index: int, warmup: bool, op: EngineOp) -> OpenStep:
        return cls(index, warmup, op, op.start_mono_ns, op.start_real_ns, op)

    def add(self, op: EngineOp, role: str, unexpected: bool) -> None:
        self.op_count += 1
        self.unexpected_op_count += unexpected
        self.records_lost += op.lost_before if self.op_count > 1 else 0
        self.total_bytes += op.size_bytes
        self.total_op_time_ns += op.duration_ns
        weighted = op.busbw_gbs * op.duration_ns
        self.busbw_time_sum += weighted
        r = self.roles.get(role)
        if r is None:
            r = self.roles[role] = RoleTotals()
        r.op_count += 1
        r.time_ns += op.duration_ns
        r.bytes += op.size_bytes
        r.busbw_time_sum += weighted
        r.max_op_time_ns = max(r.max_op_time_ns, op.duration_ns)
        if self.slowest is None or op.duration_ns > self.slowest.duration_ns:
            self.slowest = SlowestOp(
                op, op.comm_name, role, op.duration_ns, op.size_bytes, op.busbw_gbs
            )
        if op.end_mono_ns is not None:
            self.end_mono_ns = max(self.end_mono_ns or 0, op.end_mono_ns)
        self.end_real_ns = max(self.end_real_ns, op.end_real_ns)
        self.last_op = op


@dataclass
class History:
    step_duration_ns: deque = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))
    role_op_time_ns: dict[str, deque] = field(default_factory=dict)
    role_busbw_gbs: dict[str, deque] = field(default_factory=dict)

    def op_times(self, role: str) -> deque:
        return self.role_op_time_ns.setdefault(role, deque(maxlen=ROLE_OP_WINDOW))

    def bandwidths(self, role: str) -> deque:
        return self.role_busbw_gbs.setdefault(role, deque(maxlen=ROLE_BW_WINDOW))


@dataclass(frozen=True)
class GpuIdentity:
    host: str
    global_rank: int
    pid: int | None = None
    local_rank: int | None = None
    cuda_device: int | None = None
    job_id: str | None = None


def op_ref(op: OpId | EngineOp) -> OpRef:
    extra = {"ring_seq": op.ring_seq} if op.ring_seq is not None else {}
    return OpRef(kind=OpClass(op.kind), comm_id=op.comm_id, seq=op.seq, func=op.func, **extra)


def _bw(weighted: float, time_ns: int) -> float:
    return weighted / time_ns if time_ns else 0.0


def anomalies(step: OpenStep, duration: int, history: History, max_unexpected: int) -> list:
    found = []
    if len(history.step_duration_ns) >= MIN_HISTORY:
        median = statistics.median(history.step_duration_ns)
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
        median = statistics.median(times)
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
        median = statistics.median(bws)
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
            kind=OpClass(slow.op.kind),
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
        produced_by=Producer(mode=mode, engine_version=engine_version),
        **optional,
    )
    if not step.warmup:
        history.step_duration_ns.append(duration)
        for role, t in sorted(step.roles.items()):
            if t.time_ns:
                history.bandwidths(role).append(_bw(t.busbw_time_sum, t.time_ns))
            history.op_times(role).append(t.max_op_time_ns)
    return summary


def recovery_of(method: str, confidence: float, template: str | None, period: int | None):
    extra = {}
    if template is not None:
        extra["template_name"] = template
    if period is not None:
        extra["period_ops"] = period
    return Recovery(method=RecoveryMethod(method), confidence=round(confidence, 6), **extra)
