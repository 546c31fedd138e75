"""Step boundaries as a consistent cut of the whole job.

Every rank takes the same optimizer Steps, and an op instance (job_ops) is on the same side
of a Step boundary on every rank that takes part in it. So the boundaries are decided once,
where the evidence is strongest, and carried to every other rank through the ops they share:

1. **Each GPU's own units** (local_cycle): the cycle of its op keys and where each repetition
   begins. A GPU that sees the whole Step repeats once per Step; one that sees only the inner
   loop repeats once per micro-batch.
2. **The pivot**: the GPU whose cycle is the coarsest (fewest repetitions) with good coverage
   sees the whole Step. Its units are Steps, unless its repetitions themselves group by the
   GPU's idle time (tensor parallelism alone: a micro-batch repeats, and the optimizer and
   data loading leave a longer idle gap before each Step's first micro-batch than before the
   others), or a repetition holds several optimizer steps (RL: one rollout, then several PPO
   updates; local_cycle finds where each ends). Ops before its first repetition are the
   start-up (barriers, parameter broadcasts) and warm-up Steps that differ from the steady
   ones (DDP's first buckets; ZeRO-3 gathering every module while it records its trace),
   counted by the optimizers that end them where the steady Steps end with one; ops after
   its last complete repetition are the tail.
3. **Carrying**: each op instance the pivot labelled has that Step on every rank. A rank
   whose ops are labelled that way, in part, gets the rest from its neighbours in its own op
   order: between an op of Step k and one of Step k+1 the boundary falls at the rank's own
   unit start if there is one, else before the op with the longest idle gap. Ranks are fixed
   in order of how much they share with ranks already fixed, so the cut spreads over tensor,
   pipeline and data-parallel communicators alike. A rank that shares nothing with the fixed
   ones starts a component of its own, with its own pivot.

Confidence says how sure the answer is: it falls when the pivot's cycle covers its ops
poorly, when ranks disagree (an op carried to a Step earlier than one before it on that
rank), when a GPU's own cycle disagrees with the carried boundary, when a boundary rests
on idle time alone, when the first repetitions are fragments of the cycle (warm-up Steps it
does not describe) and when Steps are told by the optimizers inside a repetition rather
than by where it begins; each cause is named in `reasons`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from comminsight.semantic.cut_order import (
    CutStep,
    LabelRuns,
    PivotFacts,
    carried_labels,
    label_runs,
    plan_cut,
    rank_instances,
)
from comminsight.semantic.job_ops import P2P, GpuOps, JobOps, instance_keys
from comminsight.semantic.local_cycle import (
    MIN_METRICS,
    SCALAR_BYTES,
    STARTUP_SMALL_BYTES,
    LocalUnits,
    counts,
    holds_optimizer,
    local_units,
    reduces,
    startup_prefix,
)
from comminsight.semantic.op_batch import func_code
from comminsight.semantic.ops import counts_of
from comminsight.semantic.phase_evidence import judge_phase
from comminsight.semantic.step_markers import marker_step_starts, markers_disagree
from comminsight.semantic.step_tags import tag_step_starts

UNKNOWN = -(1 << 40)
STARTUP = -1
TAIL = 1 << 40  # ops after the last Step, ordered after every Step
GROUP_GAP_RATIO = 3.0  # idle gaps before Steps at least this much above those before micro-batches
GROUP_HINT_RATIO = 2.0  # a separation this large already casts doubt on one repetition a Step
GROUP_MIN_STEPS = 3
SUPER_CYCLE_CONFIDENCE = 0.7
GROUP_REGULAR = 0.8  # share of Steps with the most common number of micro-batches
FRAGMENTS_CONFIDENCE = 0.8  # warm-up Steps that the cycle does not describe
OPTIMIZERS_CONFIDENCE = 0.6  # Steps told by their optimizers alone, no cycle
UPDATES_CONFIDENCE = 0.85  # Steps told by several optimizers in a repetition, not by its start
ALIKE_CONFIDENCE = 0.5  # every op one shape, evenly spaced: each taken as a Step
# share of a GPU's ops its one shape must hold for them to be all alike (DDP's first and last
# buckets differ from the others: a few Steps of DDP hold a tenth of other shapes)
ALIKE_SHARE = 0.95
LOST_FIRST_CONFIDENCE = 0.6  # gradients reduced before the first Step
FEW_STARTUP_OPS = 8  # start-up ops the first Step's start may be moved past
MARKER_OVER_CYCLE_CONFIDENCE = 0.85  # markers that disagree with the op cycle's Steps
EXTRA_NORM_CONFIDENCE = 0.85  # Steps of micro-batches told by the norm every k-th one holds
DOUBT_CONFIDENCE = 0.6  # repetitions taken as Steps that may as well be micro-batches


@dataclass
class RankCut:
    """One GPU's ops by Step: label[i] is op i's Step (0, 1, ...), STARTUP before the first
    Step, TAIL after the last."""

    gpu: GpuOps
    label: np.ndarray
    warmup_steps: int = 0
    reasons: set[str] = field(default_factory=set)
    doubtful_steps: set[int] = field(default_factory=set)
    component: int = 0  # GPUs linked by shared ops (one job) have the same component
    by_markers: bool = False  # a pivot whose Steps its optimizer-step markers placed
    by_tags: bool = False  # a pivot whose Steps its calls' user tags named (step_tags)


@dataclass
class JobCut:
    ranks: list[RankCut]
    confidence: float
    reasons: list[str]
    steps: int  # Steps of the job (the most any component has)
    pivots: list[str]  # streams whose cycles decided the boundaries
    warmup_steps: int = 0  # Steps before the pivot's first steady repetition
    # "user_tag" when every pivot's Steps came from its calls' user tags, "marker" when from
    # its optimizer-step markers
    method: str = "job"

    def step_confidence(self, rank: RankCut, step: int) -> float:
        c = self.confidence
        if step in rank.doubtful_steps:
            c = min(c, 0.5)
        return round(c, 4)


def cut_job(job: JobOps) -> JobCut:
    """Label every op of every GPU with its Step (see the module docstring), in the order
    cut_order plans, in this process."""
    gpus = job.gpus
    keys = [instance_keys(g) for g in gpus]
    units = [local_units(g) for g in gpus]
    plan = plan_cut(
        [rank_instances(*k) for k in keys],
        [pivot_facts(g, u) for g, u in zip(gpus, units, strict=True)],
    )
    runs = [LabelRuns.empty()] * len(gpus)
    cuts: list[RankCut | None] = [None] * len(gpus)
    outcomes: list[RankOutcome | None] = [None] * len(gpus)
    for step in plan:
        i = step.gpu
        cut, outcome, runs[i] = cut_rank(
            gpus[i], units[i], keys[i], step, [runs[p] for p in step.providers]
        )
        cuts[i], outcomes[i] = cut, outcome
    return JobCut(cuts, *job_verdict(plan, outcomes))


def shown(stream: str) -> str:
    """A stream's name as text a summary can carry: a file name that is not UTF-8 keeps its
    odd bytes as \\xNN (a reason quoting it must still encode)."""
    return stream.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def gpu_name(g: GpuOps) -> str:
    """How reasons name a GPU: by its global rank, which the live cut and the offline one
    both know (their streams are named differently), else by its stream."""
    return f"rank {g.rank}" if g.rank >= 0 else shown(g.stream)


def pivot_facts(g: GpuOps, u: LocalUnits) -> PivotFacts:
    return PivotFacts(u.found, u.coverage, u.period, len(g), g.rank)


@dataclass
class RankOutcome:
    """What the job's confidence, reasons and Step count need of one rank's cut."""

    stream: str
    who: str  # the GPU as reasons name it (gpu_name)
    pivot_confidence: float  # of its own cycle, when it is a pivot
    pivot_reasons: list[str]
    reasons: list[str]  # the carried cut's doubts, sorted
    step_count: int
    warmup_steps: int
    has_ops: bool
    by_markers: bool = False
    by_tags: bool = False


def cut_rank(
    g: GpuOps,
    u: LocalUnits,
    keys: tuple[np.ndarray, np.ndarray],
    step: CutStep,
    provided: list[LabelRuns],
) -> tuple[RankCut, RankOutcome, LabelRuns]:
    """One rank's cut as the plan's step says (a pivot, or labels carried from the providers'
    runs), what the job's verdict needs of it, and its runs for the ranks after it."""
    if step.pivot:
        cut, confidence, why = _pivot_cut(g, u)
    else:
        cut, confidence, why = _carried_cut(g, carried_labels(*keys, provided, UNKNOWN), u), 1.0, []
        if g.markers is not None and _step_count(cut.label) > 1:
            if not markers_disagree(g, cut.label, g.markers):
                # its own optimizer-step markers confirm what was carried to it
                cut.reasons.clear()
                cut.doubtful_steps.clear()
        tagged, _ = tag_step_starts(g)
        if tagged is not None and np.array_equal(_labels_from(tagged, len(g)), cut.label):
            # its own calls' user tags name the Steps carried to it
            cut.reasons.clear()
            cut.doubtful_steps.clear()
            cut.by_tags = True
    cut.component = step.component
    outcome = RankOutcome(
        g.stream,
        gpu_name(g),
        confidence,
        why,
        sorted(cut.reasons),
        _step_count(cut.label),
        cut.warmup_steps,
        len(g) > 0,
        cut.by_markers,
        cut.by_tags,
    )
    return cut, outcome, label_runs(*keys, cut.label, step.new)


def job_verdict(
    plan: list[CutStep], outcomes: list[RankOutcome]
) -> tuple[float, list[str], int, list[str], int, str]:
    """(confidence, reasons, Steps, pivots, warm-up Steps, method) of the job from its
    ranks' cuts."""
    reasons: list[str] = []
    pivots: list[str] = []
    confidence = 1.0
    steps = 0
    for step in plan:
        if step.pivot:
            o = outcomes[step.gpu]
            pivots.append(o.stream)
            confidence = min(confidence, o.pivot_confidence)
            reasons += o.pivot_reasons
            steps = max(steps, o.step_count)
    for o in outcomes:
        reasons += [f"{o.who}: {why}" for why in o.reasons]
    if any(o.reasons for o in outcomes):
        confidence = min(confidence, 0.6)
    component = {step.gpu: step.component for step in plan}
    # ranks that share no op (two jobs' logs in one directory) need not agree
    for c in range(len(pivots)):
        mine = [o for i, o in enumerate(outcomes) if component[i] == c and o.has_ops]
        if len({o.step_count for o in mine}) > 1:
            confidence = min(confidence, 0.5)
            reasons.append(
                "ranks report different numbers of Steps: "
                + ", ".join(f"{o.who} {o.step_count}" for o in mine)
            )
    warmup = max((o.warmup_steps for o in outcomes), default=0)
    marked = [outcomes[step.gpu].by_markers for step in plan if step.pivot]
    tagged = [outcomes[step.gpu].by_tags for step in plan if step.pivot]
    method = "job"
    if tagged and all(tagged):
        method = "user_tag"
    elif marked and all(marked):
        method = "marker"
    return confidence, reasons, steps, pivots, warmup, method


def _step_count(label: np.ndarray) -> int:
    inside = label[(label >= 0) & (label != TAIL)]
    return int(inside.max()) + 1 if len(inside) else 0


# ---- the pivot ---------------------------------------------------------------------------


def _pivot_cut(g: GpuOps, u: LocalUnits) -> tuple[RankCut, float, list[str]]:
    n = len(g)
    who = gpu_name(g)
    tagged, not_steps = tag_step_starts(g)
    if tagged is not None:  # the framework named its Steps: the strongest evidence there is
        return _tag_cut(g, tagged), 1.0, []
    label = np.full(n, STARTUP, np.int64)
    if not u.found:
        why = [f"{who}: no repeating op pattern: its ops are in no Step"] if n else []
        return RankCut(g, label), 0.0 if n else 1.0, why
    gaps = g.idle_gaps()
    cut, confidence, reasons = _cycle_cut(g, u, gaps, who)
    if not_steps:
        reasons = [*reasons, f"{who}: {not_steps}"]
    if g.markers is None:
        return cut, confidence, reasons
    marked = marker_step_starts(g, g.markers, startup_prefix(g))
    if marked is None:
        return cut, confidence, reasons
    disagreeing = markers_disagree(g, cut.label, g.markers)
    if _step_count(cut.label) < 2:
        disagreeing = "the ops alone place no Steps"
    if not disagreeing:
        # the optimizer-step markers confirm the cut: each Step holds its optimizer's
        # return (or none, where the update was skipped), after its gradient reductions
        cut.by_markers = True
        return cut, 1.0, []
    return (
        _marker_cut(g, u, marked),
        MARKER_OVER_CYCLE_CONFIDENCE,
        [
            f"{who}: the optimizer-step markers disagree with the op cycle's Steps "
            f"({disagreeing}): Steps follow the markers"
        ],
    )


def _cycle_cut(g: GpuOps, u: LocalUnits, gaps: np.ndarray, who: str):
    """The pivot's Steps from its op cycle (the module docstring, step 2)."""
    n = len(g)
    label = np.full(n, STARTUP, np.int64)
    reasons: list[str] = []
    confidence = 1.0
    if u.coverage < 0.9:
        confidence = min(confidence, u.coverage)
        reasons.append(f"{who}: its op cycle ({u.period} ops) covers {u.coverage:.0%} of its ops")
    if u.doubt is not None:
        confidence = min(confidence, SUPER_CYCLE_CONFIDENCE)
        reasons.append(f"{who}: {u.doubt}")
    if u.fragments:
        confidence = min(confidence, FRAGMENTS_CONFIDENCE)
        reasons.append(
            f"{who}: {u.fragments} fragments of its {u.period}-op cycle before the first "
            "whole repetition: the Steps there are unlike the later ones"
        )
    starts = u.starts
    if u.step_starts is not None:  # Steps told by the optimizers in each repetition
        step_starts, micro, hinted = _after_idle(u.step_starts, u.on_cycle, gaps), None, False
        cap = OPTIMIZERS_CONFIDENCE if u.optimizers_only else UPDATES_CONFIDENCE
        confidence = min(confidence, cap)
        reasons.append(f"{who}: {u.note}")
    else:
        step_starts, micro, hinted = _group_units(starts, gaps)
    if micro is None and u.step_starts is None:
        by_gaps = _steps_by_idle_time(u, gaps, n)
        if by_gaps is None and not holds_optimizer(g, u) and not _extra_ops_between(u):
            by_gaps = _steps_by_idle_period(u, gaps)
            if by_gaps is None:
                by_gaps = _steps_by_idle_inside(u, gaps)
                if by_gaps is not None:
                    confidence = min(confidence, DOUBT_CONFIDENCE)
                    reasons.append(
                        f"{who}: the GPU idles longest inside every few of its {u.period}-op "
                        "repetitions, at one place: where Steps of micro-batches begin "
                        "(gradient accumulation, the repetition begun at the backward), or a "
                        "pause inside every few Steps (a host sync between forward and "
                        "backward); taken as the former"
                    )
        if by_gaps is not None:
            units_at = np.searchsorted(starts, by_gaps)
            micro = np.append(np.diff(units_at), max(1, len(starts) - int(units_at[-1])))
            step_starts, hinted = by_gaps, False
    if micro is None and u.step_starts is None:
        by_norm = _steps_by_extra_norm(g, u)
        if by_norm is not None and by_norm[2]:
            step_starts, k = by_norm[0], by_norm[1]
            hinted = False
            confidence = min(confidence, EXTRA_NORM_CONFIDENCE)
            reasons.append(
                f"{who}: every {k}th of its {u.period}-op repetitions holds a scalar reduction "
                "more, between its gradient reductions and its own scalars (the clipped norm "
                f"of an optimizer that steps every {k} micro-batches, which reduce their "
                f"gradients and metrics each): Steps of {k} repetitions"
            )
        elif by_norm is not None:
            k = by_norm[1]
            confidence = min(confidence, DOUBT_CONFIDENCE)
            reasons.append(
                f"{who}: every {k}th of its {u.period}-op repetitions ends with one scalar "
                f"reduction more: a barrier after every {k}th Step (an evaluation's), or the "
                f"clipped norm of an optimizer stepping every {k} micro-batches, each of "
                "which reduces its gradients and metrics: each repetition is taken as a Step"
            )
    if micro is None and u.step_starts is None and _one_shape(u) and u.coverage >= ALIKE_SHARE:
        spread = _gap_spread(gaps, starts)
        if hinted or spread >= GROUP_HINT_RATIO:
            why = (
                f"{who}: its ops are all alike ({len(starts)} of one shape) and idle time "
                f"varies between them ({spread:.1f}x) without telling Steps apart: they may "
                "be a tensor-parallel job's layers and micro-batches; no Step is placed"
            )
            return RankCut(g, label), 0.0, [why]
        confidence = min(confidence, ALIKE_CONFIDENCE)
        reasons.append(
            f"{who}: its ops are all alike and come evenly spaced: each is taken as a Step "
            "(one gradient bucket a Step), though each may as well be a layer or micro-batch"
        )
    if micro is not None:
        confidence = min(confidence, 0.85)
        reasons.append(
            f"{who}: Steps of {int(np.median(micro))} repetitions told apart by idle time"
        )
    elif hinted:
        confidence = min(confidence, 0.7)
        reasons.append(
            f"{who}: idle time hints that its {u.period}-op repetitions group into Steps "
            "(micro-batches), without a regular pattern: each repetition is taken as a Step"
        )
    if u.step_starts is None:
        step_starts = _past_extra_work(g, u, step_starts)
    warmup_end = _warmup_by_optimizer(g, u, gaps, step_starts)
    if warmup_end is None:
        warmup_end = _warmup_starts(g, u, gaps, int(step_starts[0]), len(step_starts), n)
    warmup, steady_start = warmup_end
    step_starts = step_starts.copy()
    step_starts[0] = steady_start
    step_starts = _skipped_update_steps(g, step_starts, _last_step_end(g, u))
    all_starts = _after_broadcasts(g, np.concatenate([warmup, step_starts]).astype(np.int64))
    all_starts[0] = _head_before_first(g, u, all_starts)
    step_starts = all_starts[len(warmup) :]
    label[:] = np.searchsorted(all_starts, np.arange(n), side="right") - 1
    end = _last_step_end(g, u)
    label[end:] = TAIL
    lost = _step_before_first(g, label)
    if lost:
        confidence = min(confidence, LOST_FIRST_CONFIDENCE)
        reasons.append(f"{who}: {lost}")
    steady = step_starts[step_starts < end]
    verdict = judge_phase(g, np.append(steady, end), bool(g.host_issue.any()))
    confidence = min(confidence, verdict.confidence())
    reasons += verdict.reasons(who)
    return RankCut(g, label, warmup_steps=len(warmup)), confidence, reasons


def _head_before_first(g: GpuOps, u: LocalUnits, starts: np.ndarray) -> int:
    """The first Step's start moved back over the ops right before it that repeat how the
    second Step opens, from a count on (HF Trainer's num_items_in_batch and the forward's
    first gathers), or from a barrier or broadcast on where the op there is the one that
    follows them in the second Step (Megatron's forward-backward barrier and the batch's
    broadcasts): ops of a few bytes at the very start look like the start-up's small
    collectives, which the first Step's start is placed after."""
    a = int(starts[0])
    if len(starts) < 2 or a == 0:
        return a
    second, third = int(starts[1]), int(starts[2]) if len(starts) > 2 else len(g)
    counted = bool(counts(g)[second])
    opens_small = g.kind[second] != P2P and (
        g.size[second] <= STARTUP_SMALL_BYTES or g.func[second] == func_code("Broadcast")
    )
    if not counted and not opens_small:
        return a
    head = u.keys[second:third]
    for m in range(min(a, len(head) - 1), 0, -1):  # (a whole Step before it is no head)
        if np.array_equal(u.keys[a - m : a], head[:m]) and (counted or u.keys[a] == head[m]):
            return a - m
    return a


def _past_extra_work(g: GpuOps, u: LocalUnits, starts: np.ndarray) -> np.ndarray:
    """Step starts moved past extra work that came before the Step's first gradient
    reduction: an evaluation every few Steps runs forwards of its own (DDP broadcasts its
    buffers for the first, as a training Step begins) and reduces its loss or waits at a
    barrier (ops off the cycle, scalars among them) before training goes on; it belongs to
    the Step it follows."""
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    gradient = (g.kind != P2P) & reduces(g.func) & ~small
    # extra work of the training loop's, on the communicators it trains with (ops of other
    # communicators off the cycle are another engine's: a rollout's generation)
    small &= np.isin(g.comm, np.unique(g.comm[u.on_cycle]))
    out = starts.copy()
    keep = np.ones(len(starts), bool)
    for i, s in enumerate(starts.tolist()):
        end = int(starts[i + 1]) if i + 1 < len(starts) else len(g)
        grads = np.flatnonzero(gradient[s:end])
        lead = slice(s, s + int(grads[0]) if len(grads) else end)
        extra = np.flatnonzero(~u.on_cycle[lead])
        if not len(extra) or not small[lead][extra].any():
            continue
        if len(grads):
            out[i] = s + int(extra[-1]) + 1
        elif i and end == len(g):
            keep[i] = False  # the run ended with extra work after its last Step: that Step's
    return out[keep]


PERIOD_PROBE = 4096  # repetitions the idle time's period is looked for in
IDLE_INSIDE_RATIO = 2.5  # a Step's longest idle time over a micro-batch's, anywhere in them
PERIODS_SEEN = 2 * GROUP_MIN_STEPS  # periods a period of idle time must be seen over


def _steps_by_idle_period(u: LocalUnits, gaps: np.ndarray) -> np.ndarray | None:
    """Step starts where the idle time before the repetitions repeats with a period of its
    own: every L-th repetition, from the o-th, idles GROUP_GAP_RATIO times longer than any
    other place of the period does (medians over the periods: a stall now and then on a
    loaded machine, or a Step that waited, does not count). The smallest such L of at least
    two repetitions, seen PERIODS_SEEN times at least (fewer leave a loaded machine's stalls
    a chance to look periodic), with no extra op just before
    those repetitions (an evaluation every few Steps idles long after it too); None if there
    is none (a varying number of micro-batches per Step has no period)."""
    starts = u.starts
    found = _idle_period(gaps[starts[: PERIOD_PROBE + 1]].astype(np.float64)[1:])
    if found is not None:
        period, first = found
        chosen = starts[first::period] if first else starts[period::period]
        if not len(chosen) or not u.on_cycle[chosen - 1].all():
            return None
        lead = starts[:1] if chosen[0] != starts[0] else starts[:0]
        return np.concatenate([lead, chosen]).astype(np.int64)
    return None


def _idle_period(before: np.ndarray, ratio: float = GROUP_GAP_RATIO) -> tuple[int, int] | None:
    """(L, o) where `before` (the idle time of each repetition from the second) repeats with
    period L, `ratio` times longest at the o-th repetition of each period
    (_steps_by_idle_period)."""
    m = len(before)
    for period in range(2, m // PERIODS_SEEN + 1):
        k = m // period
        med = np.median(before[: k * period].reshape(k, period), axis=0)
        at = int(np.argmax(med))
        rest = np.delete(med, at)
        if med[at] + 1.0 >= ratio * (float(rest.max()) + 1.0):
            return period, (at + 1) % period  # before[i]: the idle time before repetition i + 1
    return None


def _steps_by_idle_inside(u: LocalUnits, gaps: np.ndarray) -> np.ndarray | None:
    """Step starts where the idle time repeats with a period of repetitions, as in
    _steps_by_idle_period, but the longest idle time of those repetitions comes inside them,
    at one place (tensor parallelism alone: the cycle may begin at the backward's
    all-reduces, while the GPU idles longest before the forward's first of a Step's first
    micro-batch): the Steps begin there. A pause inside every few Steps looks the same
    (a host sync between forward and backward): _cycle_cut says so."""
    starts = u.starts[: PERIOD_PROBE + 2]
    if len(starts) < 2:
        return None
    bounds = starts.astype(np.int64)
    # each whole repetition's longest idle time, anywhere in it: against the others' longest
    # (their own micro-batch's start among them), not their starts alone, a lower ratio
    inside = gaps[bounds[0] : bounds[-1]].astype(np.float64)
    peak = np.maximum.reduceat(inside, bounds[:-1] - bounds[0])
    found = _idle_period(peak[1:], IDLE_INSIDE_RATIO)
    if found is None:
        return None
    period, first = found
    chosen = np.arange(first if first else period, len(bounds) - 1, period)
    if not len(chosen):
        return None
    offsets = [
        int(np.argmax(gaps[bounds[i] : bounds[i + 1]])) for i in chosen[:PERIOD_PROBE].tolist()
    ]
    offset, times = Counter(offsets).most_common(1)[0]
    if not offset or times < GROUP_REGULAR * len(offsets):
        return None  # (at the repetitions' own starts: _steps_by_idle_period's)
    every = u.starts[first::period] if first else u.starts[period::period]
    steps = every + offset
    steps = steps[steps < len(gaps)]
    if not len(steps) or not u.on_cycle[steps - 1].all():
        return None
    lead = u.starts[:1] if steps[0] != u.starts[0] else u.starts[:0]
    return np.concatenate([lead, steps]).astype(np.int64)


def _extra_ops_between(u: LocalUnits) -> bool:
    """Whether ops off the cycle come in some of its repetitions, not in most (an
    evaluation or a barrier every few Steps, whose idle time would pass for a period of
    Steps)."""
    off = np.add.reduceat((~u.on_cycle).astype(np.int64), u.starts)
    with_extra = float((off > 0).mean())
    return 0.0 < with_extra <= 0.5


def _skipped_update_steps(g: GpuOps, starts: np.ndarray, end: int) -> np.ndarray:
    """Step starts with a Step added after each optimizer but the last in a Step that holds
    several and is far longer than the median Step: an fp16 Step whose update was skipped
    (its found-inf flag right after its gradients, and nothing after) is a shorter
    repetition than the cycle's, which the cycle took into the next one. An optimizer here
    is a gradient reduction followed at once by a scalar all-reduce, with the scalars right
    after it (norms)."""
    if len(starts) < 3:
        return starts
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    gradient = (g.kind != P2P) & reduces(g.func) & ~small
    scalar = small & (g.func == func_code("AllReduce"))
    bounds = np.append(starts, max(end, int(starts[-1]) + 1))
    sizes = np.diff(bounds)
    typical = float(np.median(sizes))
    extra = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if b - a < 1.5 * typical:
            continue
        ends = [i for i in range(a + 1, b) if scalar[i] and gradient[i - 1]]
        for i in ends[:-1]:
            while i + 1 < b and scalar[i + 1]:
                i += 1
            extra.append(i + 1)
    if not extra:
        return starts
    return np.unique(np.concatenate([starts, np.array(extra, np.int64)]))


def _one_shape(u: LocalUnits) -> bool:
    """Whether the cycle is one op shape repeated (every repetition a single op)."""
    return u.period == 1 and len(u.starts) > 1


def _gap_spread(gaps: np.ndarray, starts: np.ndarray) -> float:
    """How unevenly the GPU idles before the repetitions: the 95th percentile of the idle
    times over their median."""
    before = gaps[starts[1:]].astype(np.float64)
    if not len(before):
        return 1.0
    return float((np.percentile(before, 95) + 1.0) / (np.median(before) + 1.0))


def _after_broadcasts(g: GpuOps, starts: np.ndarray, first: bool = True) -> np.ndarray:
    """Each Step start moved back over the broadcasts right before it: a broadcast begins
    an iteration (DDP's rebuilt bucket indices and its buffers at the forward), never ends
    the one before; and over a pipeline's transfers between the previous Step's optimizer
    and it (the first micro-batch's activations received)."""
    broadcast = (g.kind != P2P) & (g.func == func_code("Broadcast"))
    leading = broadcast | (g.kind == P2P)
    after_optimizer = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    out = starts.copy()
    for i in range(1, len(out)):
        a = int(out[i])
        while a - 1 > out[i - 1] and leading[a - 1]:
            a -= 1
        if not after_optimizer[a - 1]:
            # a pipeline's receives and sends are the Step's only where they come right
            # after the previous Step's optimizer (its last scalars); broadcasts always are
            a = int(out[i])
            while a - 1 > out[i - 1] and broadcast[a - 1]:
                a -= 1
        if leading[a] and a - 1 > out[i - 1] and _phase_barrier(g, a - 1, int(out[i - 1])):
            a -= 1
        out[i] = a
    a = int(out[0]) if len(out) else 0
    if not first and a > 1 and leading[a] and _phase_barrier(g, a - 1, 0):
        out[0] = a - 1  # (a GPU's own first repetition: the barrier opens it too)
    if first and len(out) > 1:
        # the first Step's only as later Steps begin, alike: the start-up's broadcasts
        # before it (the model and its buffers sent from rank 0) begin no Step. Its run
        # counts the few bytes gathered as an iteration begins too (a rollout's rewards and
        # completions), by kind: objects pickled vary in size
        opening = leading | ((g.kind != P2P) & (g.size <= STARTUP_SMALL_BYTES))

        def shape(j: int) -> tuple[int, int, int]:
            small = g.kind[j] != P2P and g.size[j] <= STARTUP_SMALL_BYTES
            return int(g.comm[j]), int(g.func[j]), -1 if small else int(g.size[j])

        runs: Counter = Counter()
        for j in out[1:].tolist():
            run = []
            while j < len(g) and opening[j]:
                run.append(shape(j))
                j += 1
            runs[tuple(run)] += 1
        run, _ = runs.most_common(1)[0]
        a = out[0] = _to_opening(g, out, shape)
        # the first Step begins where the run later Steps begin with does: it may begin
        # before the place taken (all of the run right before it, or the part of it that
        # comes before the op there)
        for k in range(len(run), 0, -1):
            if a < k or not all(shape(a - k + t) == run[t] for t in range(k)):
                continue
            if k == len(run) or (a < len(g) and shape(a) == run[k]):
                out[0] = a - k
                break
    return out


PHASE_BARRIERS = 3  # a barrier before three phases at least besides the first


def _phase_barrier(g: GpuOps, at: int, step: int) -> bool:
    """Whether the scalar reduction at `at`, right before the broadcasts or transfers that
    begin a Step, is a barrier that opens the Step's first phase, not the previous Step's
    last scalar: one op, not the last of a run of its kind; the Step from `step` issues the
    same (communicator, size) at the start of other phases too, each followed by another
    kind of op, work at least once (Megatron's level-1 timers: a world barrier before the
    gradients' reduction, the embedding's, the norm, the update's); and its communicator
    reduces no gradients. A loop's metrics come in runs after each micro-batch, followed by
    the next one's gradients alone (OpenRLHF's status on the world group, where DeepSpeed
    reduces gradients on a clone of it); an optimizer's norm or a loss averaged on a group
    of its own comes fewer times."""
    if g.kind[at] == P2P or g.size[at] > SCALAR_BYTES or not reduces(g.func[at : at + 1])[0]:
        return False
    # (a reduction's count is told by its type alone: counts(g) over every op, once a Step,
    # would cost the whole stream each time)
    if counts_of(g.datatype[at : at + 1])[0] or _same_op(g, at - 1, at):
        return False
    inside = slice(step, at)
    same = np.flatnonzero(_same_op(g, inside, at)) + step
    gradient = (g.kind[inside] != P2P) & (g.size[inside] > SCALAR_BYTES) & reduces(g.func[inside])
    if len(same) < PHASE_BARRIERS or (gradient & (g.comm[inside] == g.comm[at])).any():
        return False
    after = same + 1
    after = after[~_same_op(g, after, at)]
    kinds = {(int(g.comm[j]), int(g.func[j]), int(g.size[j])) for j in after.tolist()}
    work = (g.kind[after] == P2P) | (g.size[after] > SCALAR_BYTES)
    return len(kinds) >= 2 and bool(work.any())


def _same_op(g: GpuOps, i, at: int):
    """Whether op(s) i (an index, indices or a slice) are of op at's (communicator,
    function, size)."""
    return (g.comm[i] == g.comm[at]) & (g.func[i] == g.func[at]) & (g.size[i] == g.size[at])


def _labels_from(starts: np.ndarray, n: int) -> np.ndarray:
    """Each op's Step where Steps begin at `starts`: STARTUP before the first; the ops after
    the last start are the tail, unless they hold as many ops as a Step has at least half of
    (the run stopped inside a Step)."""
    label = np.searchsorted(starts, np.arange(n), side="right") - 1
    label = np.where(label < 0, STARTUP, label).astype(np.int64)
    sizes = np.diff(starts)
    if len(sizes) and n - int(starts[-1]) < 0.5 * float(np.median(sizes)):
        label[int(starts[-1]) :] = TAIL
    return label


def _tag_cut(g: GpuOps, starts: np.ndarray) -> RankCut:
    """The pivot's Steps as its calls' user tags name them (step_tags)."""
    return RankCut(g, _labels_from(starts, len(g)), by_tags=True)


def _marker_cut(g: GpuOps, u: LocalUnits, starts: np.ndarray) -> RankCut:
    """The pivot's Steps from its optimizer-step markers (step_markers): each begins after
    a marker, past its update's gathers. A Step whose update was skipped has no marker: where
    the op cycle repeats more often between two markers than it does between the others,
    each of its repetitions there is a Step too, begun at the place in the cycle the markers
    show. Ops after the last Step's are the tail, unless they hold as many ops as a Step
    has at least half of (the run stopped inside a Step)."""
    if u.found and len(u.starts) >= 2:
        starts = _skipped_updates(u, starts)
    return RankCut(g, _labels_from(starts, len(g)), by_markers=True)


def _skipped_updates(u: LocalUnits, starts: np.ndarray) -> np.ndarray:
    """Marker starts, with a Step added at each repetition of the cycle that passed without
    a marker (see _marker_cut)."""
    unit_of = np.searchsorted(u.starts, starts, side="right") - 1
    placed = unit_of >= 0
    if placed.sum() < 2:
        return starts
    offsets = (starts - u.starts[np.maximum(unit_of, 0)])[placed]
    values, counts = np.unique(offsets, return_counts=True)
    offset = int(values[np.argmax(counts)])
    key = int(np.bincount(u.keys[starts[placed]]).argmax())
    units_between = np.diff(unit_of)
    typical = int(np.median(units_between)) if len(units_between) else 1
    if typical != 1:
        return starts
    extra = []
    # the repetitions after each marker's up to the next one's, and after the last marker's
    bounds = np.append(unit_of, len(u.starts)).tolist()
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        for j in range(a + 1, b):
            at = int(u.starts[j]) + offset
            if at < len(u.keys) and int(u.keys[at]) == key:
                extra.append(at)
    return np.unique(np.concatenate([starts, np.array(extra, np.int64)]))


def _steps_by_idle_time(u: LocalUnits, gaps: np.ndarray, n: int) -> np.ndarray | None:
    """Step starts shown by idle time where the cycle's units are micro-batches whose own
    starts are not where the GPU idles longest (tensor parallelism alone: a repetition may
    begin at the backward's all-reduces, while the optimizer and the next batch leave the
    GPU idle before the forward's first): the few longest gaps, clearly apart from all the
    others, at the same place of the cycle every time, every same number of repetitions (at
    least two), at least GROUP_MIN_STEPS of them (two long gaps are one interval: no
    "every"), with no extra op just before them (an evaluation every few Steps). Gaps at the
    units' own starts are the ones _group_units judged and found no clear groups in: from
    those, twice as many long gaps are asked (a long run of micro-batches with one checkpoint
    pause among its Steps is still told; a loaded machine's few late Steps, spaced evenly by
    chance, make no larger Steps)."""
    lo = int(u.starts[0])
    if n - lo < 8 or len(u.starts) < 2 * GROUP_MIN_STEPS:
        return None
    positions = np.arange(lo + 1, n)
    ranked = np.argsort(-gaps[positions], kind="stable")[: len(u.starts)]
    top = gaps[positions[ranked]].astype(np.float64)
    ratios = (top[:-1] + 1.0) / (top[1:] + 1.0)
    if len(ratios) < GROUP_MIN_STEPS:
        return None
    # the split after the j+1 longest gaps, at least GROUP_MIN_STEPS of them
    j = int(np.argmax(ratios[GROUP_MIN_STEPS - 1 :])) + GROUP_MIN_STEPS - 1
    if ratios[j] < GROUP_GAP_RATIO:
        return None
    big = np.sort(positions[ranked[: j + 1]])
    if np.isin(big, u.starts).all() and len(big) < 2 * GROUP_MIN_STEPS:
        return None
    keys = u.keys[big]
    units_between = np.diff(np.searchsorted(u.starts, big, side="right"))
    if (
        len(set(keys.tolist())) != 1
        or units_between.min() < 2
        or np.bincount(units_between).max() < GROUP_REGULAR * len(units_between)
        or not u.on_cycle[big - 1].all()
    ):
        return None
    first = lo + int(np.argmax(u.keys[lo:] == keys[0]))
    starts = big if first >= big[0] else np.concatenate([[first], big])
    return starts.astype(np.int64)


def _steps_by_extra_norm(g: GpuOps, u: LocalUnits) -> tuple[np.ndarray, int, bool] | None:
    """(Step starts, repetitions a Step, whether that is sure) where every k-th (k >= 2)
    repetition holds one scalar reduction more after its last gradient reduction, the
    repetitions each ending with scalars of their own; None when they show no such pattern.

    Micro-batches that reduce their gradients and then their metrics each (ZeRO-2 and FSDP
    reduce every micro-batch; OpenRLHF all-reduces its status after each) look like Steps
    ending with their optimizers; the gradient norm, clipped once a Step, is the one more,
    every k-th, before the metrics. Off the cycle and before the repetition's own scalars,
    it is the norm: Steps of k repetitions (sure). Of the key of those scalars, it may as
    well be a barrier after every k-th Step's (an evaluation's): the repetitions stay Steps,
    in doubt (not sure)."""
    starts = u.starts
    if len(starts) < 4:
        return None
    coll = g.kind != P2P
    small = coll & (g.size <= SCALAR_BYTES) & reduces(g.func)
    gradient = coll & reduces(g.func) & ~small
    bounds = np.append(starts, len(g))
    before_own, scalars = [], []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        grads = np.flatnonzero(gradient[a:b] & u.on_cycle[a:b])
        if not len(grads):
            return None
        tail = np.arange(a + int(grads[-1]) + 1, b)
        own = tail[small[tail] & u.on_cycle[tail]]
        extra = tail[small[tail] & ~u.on_cycle[tail]]
        if not len(own):
            return None  # a repetition that ends with no scalar of its own
        before_own.append(bool(len(extra)) and int(extra[0]) < int(own[-1]))
        scalars.append(int(small[tail].sum()))
    sure = True
    at = np.flatnonzero(before_own)
    if len(at) < GROUP_MIN_STEPS:
        sure = False
        whole = np.array(scalars[:-1])  # (the last may be cut by the end of input)
        at = np.flatnonzero(whole == whole.min() + 1) if len(whole) else whole
        if len(at) < GROUP_MIN_STEPS or (whole > whole.min() + 1).any():
            return None
    steps = np.diff(at)
    k = int(steps[0])
    if k < 2 or not (steps == k).all() or int(at[0]) >= k:
        return None
    # a Step ends with each marked repetition; the first begins with the first repetition
    ends = at[:-1] if at[-1] == len(starts) - 1 else at
    return starts[np.concatenate([[0], ends + 1])], k, sure


def _group_units(
    starts: np.ndarray, gaps: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, bool]:
    """Unit starts that begin Steps: all of them, unless the idle gaps before them fall into
    two clearly separated sizes with the same number of small ones between the large ones
    every time (micro-batches of one Step), at least GROUP_MIN_STEPS times. The third value
    says whether the gaps hinted at such groups without showing them clearly (then which
    units are Steps is in doubt)."""
    if len(starts) < 4:
        return starts, None, False
    before = gaps[starts[1:]].astype(np.float64)  # the first unit's gap is the start-up's
    order = np.sort(before)
    ratios = (order[1:] + 1.0) / (order[:-1] + 1.0)
    j = int(np.argmax(ratios))
    if ratios[j] < GROUP_HINT_RATIO:
        return starts, None, False
    large = np.concatenate([[True], before >= order[j + 1]])
    first = np.flatnonzero(large)
    sizes = np.diff(np.concatenate([first, [len(starts)]]))
    whole = sizes[:-1]  # the last group may be cut by the end of input
    clear = (
        ratios[j] >= GROUP_GAP_RATIO
        and len(whole) >= GROUP_MIN_STEPS
        and whole.min() == whole.max() >= 2
        and sizes[-1] <= whole[0]
    )
    if not clear:
        return starts, None, True
    return starts[first], sizes, False


def _after_idle(starts: np.ndarray, on_cycle: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """Each Step start moved back to the longest idle gap after the cycle's op before it (a
    Step's first op may be one the cycle leaves off: a key once per Step, below the floor
    the cycle was learned over)."""
    on = np.flatnonzero(on_cycle)
    out = starts.copy()
    for i, s in enumerate(starts.tolist()):
        k = int(np.searchsorted(on, s)) - 1
        if k < 0:
            continue
        span = np.arange(int(on[k]) + 1, s + 1)
        out[i] = int(span[len(span) - 1 - int(np.argmax(gaps[span][::-1]))])
    return out


def _warmup_by_optimizer(
    g: GpuOps, u: LocalUnits, gaps: np.ndarray, step_starts: np.ndarray
) -> tuple[np.ndarray, int] | None:
    """(the starts of Steps before the first steady one, where the first steady Step
    begins) told by the optimizer, where every steady Step ends with it: gradient
    reductions, then scalar reductions (the found-inf flag first, then maybe gradient
    norms and the update's gathers). Warm-up Steps may be nothing like the steady ones
    (ZeRO-3 gathers every module, forward and backward, while it records its trace, and
    checks that trace against rank 0's in the next Step), yet each ends with its optimizer:
    as many warm-up Steps as the stretch before the steady ones holds gradient reductions
    followed by the scalar the steady Steps' optimizers begin with (not a run of several
    of it shorter than theirs: a micro-batch's metrics). A Step begins after the
    optimizer before it, past the ops that follow that scalar in the steady Steps (norms, an
    update's gathers); the first one after the longest idle gap from the end of the
    start-up's broadcasts and small collectives up to its first reduction, with ops like
    those the next Step begins with (a small broadcast of a trace check) when they come just
    before. None when the steady Steps do not all end so, or nothing before them does."""
    first = int(step_starts[0])
    if first == 0 or len(step_starts) < 3:
        return None
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    reduction = (g.kind != P2P) & reduces(g.func) & ~small
    cf = (g.comm << 8) | g.func
    end_keys, tail_keys, last_reductions = set(), set(), set()
    steady_run = len(g)

    def scalar_run(i: int) -> int:
        """How many scalars of op i's key follow one another from it."""
        j = i
        while j < len(g) and small[j] and u.keys[j] == u.keys[i]:
            j += 1
        return j - i

    for a, b in zip(step_starts[:-1].tolist(), step_starts[1:].tolist(), strict=True):
        red = np.flatnonzero(reduction[a:b])
        scalars = np.flatnonzero(small[a:b])
        after = scalars[scalars > red[-1]] if len(red) else scalars[:0]
        if not len(after):
            return None
        end_keys.add(int(u.keys[a + int(after[0])]))
        steady_run = min(steady_run, scalar_run(a + int(after[0])))
        tail_keys.update(u.keys[a + int(after[0]) : b].tolist())
        last_reductions.add(int(cf[a + int(red[-1])]))
    # the gradients' reductions: on the communicator and function the steady ones end with
    other_reduction = reduction & ~np.isin(cf, list(last_reductions))
    reduction &= ~other_reduction
    lo = startup_prefix(g)
    ends, reductions_at, pending = [], [], -1
    for i in range(lo, first):
        if reduction[i]:
            if pending < 0:
                pending = i
        elif other_reduction[i]:
            # reductions of a kind no steady Step ends with, after it: it ended no Step (the
            # start-up's embedding weights, all-reduced where each Step's embedding gradients
            # are, before the first Step's forward and backward)
            pending = -1
        elif (
            pending >= 0
            and small[i]
            and int(u.keys[i]) in end_keys
            # (fewer scalars than a steady Step ends with, several: a micro-batch's metrics,
            # reduced after each one's gradients as an optimizer's would be; a found-inf
            # flag alone ends a Step whose update was skipped)
            and not (small[i - 1] and u.keys[i - 1] == u.keys[i])  # (from a run's first)
            and not MIN_METRICS <= scalar_run(i) < steady_run
        ):
            ends.append(i)
            reductions_at.append(pending)
            pending = -1
    if not ends:
        return None
    # each boundary right after an optimizer and what follows it in the steady Steps (the
    # norms and gathers of an update that was not skipped)
    bounds = []
    for j, end in enumerate(ends):
        stop = reductions_at[j + 1] if j + 1 < len(ends) else first
        t = end + 1
        while t < stop and int(u.keys[t]) in tail_keys:
            t += 1
        bounds.append(t)
    span = np.arange(lo, reductions_at[0] + 1)
    start = int(span[int(np.argmax(gaps[span]))])
    next_first = u.keys[bounds[0]]
    while start - 1 >= lo and u.keys[start - 1] == next_first:
        start -= 1
    # the op the next Step begins with, met earlier in the stretch, begins this one too: the
    # longest idle time may come inside it (a rollout's experience pass, then training);
    # not past a few bytes between (an evaluation before training ends with its loss)
    opening = span[u.keys[span] == next_first]
    if len(opening) and int(opening[0]) < start:
        between = slice(int(opening[0]), start)
        if not (g.size[between] <= STARTUP_SMALL_BYTES).any():
            start = int(opening[0])
    starts = np.array([start] + bounds[:-1], np.int64)
    return starts, bounds[-1]


def _warmup_starts(
    g: GpuOps, u: LocalUnits, gaps: np.ndarray, first: int, steady: int, n: int
) -> tuple[np.ndarray, int]:
    """(the starts of Steps before the first repetition of the cycle, where the first steady
    Step begins). Warm-up Steps differ from the steady ones (DDP's first iteration reduces
    its gradients in the buckets built at construction): they are made of the cycle's
    (communicator, function) pairs, beyond a few scalars, after the start-up's broadcasts
    and barriers; as many Steps as the stretch holds cycles' worth of ops, the later ones
    begun after the longest idle gaps. The first steady Step may begin with ops of no cycle
    pair before its first repetition (DDP broadcasting its rebuilt buckets at the second
    forward): it begins after the longest gap past the last warm-up op."""
    none = np.zeros(0, np.int64)
    if first == 0:
        return none, first
    cf = (g.comm << 8) | g.func
    steady_ops = slice(first, n)
    cycle_pairs = np.unique(cf[steady_ops][u.on_cycle[steady_ops]])
    small = (g.kind[:first] != P2P) & (g.size[:first] <= SCALAR_BYTES)
    material = np.flatnonzero(np.isin(cf[:first], cycle_pairs) & ~small)
    # a warm-up Step begins with the pair steady Steps begin with: ops of other cycle pairs
    # before the first such op are the start-up's (Megatron's embedding all-reduce)
    # (a repetition that opens with a few scalars gathered, as HF Trainer's token counts do:
    # its first op that moves more stands for it)
    big = np.flatnonzero(~((g.kind[first:n] != P2P) & (g.size[first:n] <= SCALAR_BYTES)))
    ref = first + int(big[0]) if len(big) else first
    opening = material[u.keys[material] == u.keys[ref]]  # same size too, where it recurs
    if not len(opening):
        opening = material[cf[material] == cf[ref]]
    if not len(opening):
        return none, first
    material = material[material >= opening[0]]
    w0 = int(material[0])
    # as many Steps as the stretch moves a steady Step's bytes: a few tiny ops (shapes a
    # pipeline exchanges in its first Step) are no Step of their own, one bucket holding a
    # whole model's gradients (DDP's first iteration) is
    step_bytes = max(1.0, float(g.size[first:n].sum()) / max(1, steady))
    count = min(len(material), int(round(float(g.size[w0:first].sum()) / step_bytes)))
    if count == 0:
        return none, w0
    # the first warm-up Step begins at its first op; the others after the longest gaps
    # before an op of the pair steady Steps begin with (else any of its ops)
    rest = material[1:]
    begins = rest[cf[rest] == cf[ref]]
    pool = begins if len(begins) >= count - 1 else rest
    chosen = pool[np.argsort(-gaps[pool], kind="stable")[: count - 1]] if count > 1 else pool[:0]
    starts = np.sort(np.concatenate([[w0], chosen])).astype(np.int64)
    span = np.arange(int(material[-1]) + 1, first + 1)
    steady_start = int(span[len(span) - 1 - int(np.argmax(gaps[span][::-1]))])
    return starts, steady_start


def _last_step_end(g: GpuOps, u: LocalUnits) -> int:
    """Where the last Step ends: after its last repetition's final on-cycle op when that
    repetition is whole (ops after it are the tail: a final barrier, a checkpoint, unless
    earlier Steps held ops like them after their cycle or after their last gradient
    reduction), else at the end of input (the job stopped inside
    it); but a last repetition cut short, of the cycle's ops alone, that reduces no
    gradients where every earlier one does, trained nothing: it is the tail (a weight sync
    to a rollout engine after the last update; an evaluation after the last Step, off the
    cycle, is that Step's)."""
    n = len(g)
    last = int(u.starts[-1])
    on = np.flatnonzero(u.on_cycle[last:])
    if not len(on) or not _complete(u):
        synced = bool(u.on_cycle[last:].all()) and _trains_before_not_after(g, u.starts)
        return last if synced else n
    end = last + int(on[-1]) + 1
    # ops of a kind earlier Steps held besides their cycle after it (an evaluation barrier
    # at the end of every few Steps), or gathers of parameters they held after their last
    # gradient reduction (the update's, of a sharded optimizer, off the cycle where fp16
    # overflow skipped updates: Steps cut by their optimizers), still belong to the last one;
    # scalars after the gradients are no such evidence (a final barrier is one)
    big = (g.kind != P2P) & (g.size > SCALAR_BYTES)
    gradient = big & reduces(g.func)
    update = big & (g.func == func_code("AllGather"))
    trailing = _after_last(u.starts, u.on_cycle) | (_after_last(u.starts, gradient) & update[:last])
    inside = np.unique(u.keys[:last][trailing])
    more = np.isin(u.keys[end:], inside)
    return end + (int(np.argmin(more)) if not more.all() else len(more))


def _after_last(starts: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per op before the last repetition: whether it comes after the last marked op of its
    repetition (False throughout a repetition with none marked). Repetitions are
    starts[i]:starts[i + 1]; ops before the first belong to none."""
    last = int(starts[-1])
    out = np.zeros(last, bool)
    if len(starts) < 2:
        return out
    lo = int(starts[0])
    pos = np.arange(lo, last)
    rep = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    # the last marked position of each repetition, -1 where it has none
    last_marked = np.full(len(starts) - 1, -1, np.int64)
    hit = np.flatnonzero(marked[lo:last])
    of = rep[hit]
    final = np.ones(len(hit), bool)
    final[:-1] = of[1:] != of[:-1]
    last_marked[of[final]] = pos[hit[final]]
    out[lo:] = (last_marked[rep] >= 0) & (pos > last_marked[rep])
    return out


def _trains_before_not_after(g: GpuOps, starts: np.ndarray) -> bool:
    """Whether every repetition but the last reduces gradients, and the last none."""
    gradient = (g.kind != P2P) & reduces(g.func) & (g.size > SCALAR_BYTES)
    if len(starts) < 2:
        return False
    per = np.add.reduceat(gradient.astype(np.int64), starts)
    return bool((per[:-1] > 0).all() and per[-1] == 0)


def _complete(u: LocalUnits) -> bool:
    """The last repetition holds as many on-cycle ops as the earlier ones do."""
    if len(u.starts) < 2:
        return True
    on_counts = np.add.reduceat(u.on_cycle.astype(np.int64), u.starts)
    return on_counts[-1] >= np.median(on_counts[:-1])


# ---- carried cuts ------------------------------------------------------------------------


def _carried_cut(g: GpuOps, carried: np.ndarray, u: LocalUnits) -> RankCut:
    """A GPU's labels from the instances already labelled, the rest filled in (module
    docstring, step 3)."""
    n = len(g)
    label = carried.copy()
    cut = RankCut(g, label)
    known = np.flatnonzero(label != UNKNOWN)
    # ops carried to a Step before one already seen on this rank: the ranks disagree
    if len(known):
        running = np.maximum.accumulate(label[known])
        bad = known[label[known] < running]
        if len(bad):
            steps = sorted({int(s) for s in label[bad] if 0 <= s < TAIL})
            cut.reasons.add(
                f"{len(bad)} ops matched to other ranks' earlier Steps (Steps {steps[:5]})"
            )
            cut.doubtful_steps.update(steps)
            label[bad] = UNKNOWN
            known = np.flatnonzero(label != UNKNOWN)
    gaps = g.idle_gaps()
    unit_start = np.zeros(n + 1, bool)
    if u.found:
        # where its own repetitions begin, moved back as a pivot's Steps are (over the
        # broadcasts, transfers and the barrier that open an iteration)
        unit_start[_after_broadcasts(g, u.starts, first=False)] = True
    if not len(known):
        label[:] = STARTUP
        return cut
    _fill_runs(cut, known, gaps, unit_start)
    _lead_filled(g, label, known)
    if u.found:
        _tail_filled(label, known, _last_step_end(g, u))
    if u.found:
        _check_local(cut, u)
    return cut


def _step_before_first(g: GpuOps, label: np.ndarray) -> str | None:
    """Why the ops before the first Step may hold one (every index after it then one too
    low), or None: past the start-up's broadcasts and small collectives, they reduce at
    least half the gradient bytes a Step does."""
    steps = label[(label >= 0) & (label != TAIL)]
    if not len(steps):
        return None
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    gradient = (g.kind != P2P) & reduces(g.func) & ~small
    first = int(np.argmax((label >= 0) & (label != TAIL)))
    lo = startup_prefix(g)
    before = int(g.size[lo:first][gradient[lo:first]].sum())
    inside = (label >= 0) & (label != TAIL) & gradient
    per_step = float(g.size[inside].sum()) / (int(steps.max()) + 1)
    if not per_step or before < 0.5 * per_step:
        return None
    return (
        f"the ops before its first Step reduce {before / per_step:.1f} Steps' worth of "
        "gradients: a first Step may be missing, and every index after it one too low"
    )


def _to_opening(g: GpuOps, out: np.ndarray, shape) -> int:
    """The first Step's start moved on to the first op like the one later Steps open with,
    when it comes within a few ops of other groups (Megatron's start-up ends with an
    embedding all-reduce and a world barrier before the first batch is broadcast)."""
    a = int(out[0])
    opening = Counter(shape(int(j)) for j in out[1:].tolist()).most_common(1)[0][0]
    if shape(a) == opening:
        return a
    near = min(FEW_STARTUP_OPS, int(np.median(np.diff(out))) // 4)
    for j in range(a + 1, min(a + near + 1, int(out[1]))):
        if shape(j) == opening:
            # only past ops of other groups than the one Steps open on (a world barrier,
            # the embedding's): on that one they are the first Step's (ZeRO-3's trace check)
            return j if not (g.comm[a:j] == opening[0]).any() else a
    return a


def _tail_filled(label: np.ndarray, known: np.ndarray, end: int) -> None:
    """Ops after the last one carried from other ranks that the fill gave the last Step,
    past where the GPU's own last whole repetition ends: the tail (Megatron gathers every
    bucket once more after its loop), as a pivot's are."""
    after = max(end, int(known[-1]) + 1)
    if after < len(label):
        label[after:] = np.where(label[after:] >= 0, TAIL, label[after:])


def _lead_filled(g: GpuOps, label: np.ndarray, known: np.ndarray) -> None:
    """Boundaries the fill placed, moved back as _after_broadcasts moves a pivot's: over the
    broadcasts and the pipeline transfers that begin the Step, where no op carried from
    other ranks says otherwise."""
    inside = (label >= 0) & (label != TAIL)
    into = inside[1:] & (label[1:] != label[:-1]) & ((label[:-1] == STARTUP) | inside[:-1])
    begins = np.flatnonzero(into) + 1
    if len(begins) < 2:
        return
    carried = np.zeros(len(g), bool)
    carried[known] = True
    first = label[begins[0] - 1] == STARTUP  # the first Step begins there
    moved = _after_broadcasts(g, begins, first=bool(first))
    for b, a in zip(begins.tolist(), moved.tolist(), strict=True):
        if a < b and not carried[a:b].any():
            label[a:b] = label[b]


def _fill_runs(cut: RankCut, known: np.ndarray, gaps: np.ndarray, unit_start: np.ndarray) -> None:
    """Every run of unknown ops between known ones filled (as _fill does one run), the runs
    with no boundary or one at once over arrays: a long run has a run per Step per rank."""
    label = cut.label
    n = len(label)
    edges = np.concatenate([[-1], known, [n]])
    lo, hi = edges[:-1] + 1, edges[1:]  # unknown ops lo..hi-1
    runs = lo < hi
    lo, hi, a, b = lo[runs], hi[runs], edges[:-1][runs], edges[1:][runs]
    left = np.where(a >= 0, label[np.maximum(a, 0)], STARTUP)
    right = np.where(b < n, label[np.minimum(b, n - 1)], UNKNOWN)
    no_right = b >= n
    left = np.where(no_right & (a < 0), STARTUP, left)
    one = ~no_right & (left != right) & ((right == TAIL) | (left == STARTUP) | (right - left == 1))
    none = no_right | (left == right)
    _fill_constant(label, lo[none], hi[none], left[none])
    if one.any():
        _fill_one_boundary(cut, lo[one], hi[one], left[one], right[one], gaps, unit_start)
    for i in np.flatnonzero(~none & ~one).tolist():  # Steps passed with no op shared
        _fill(cut, int(lo[i]), int(hi[i]), int(left[i]), int(right[i]), gaps, unit_start)


def _spans(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions lo[i]..hi[i]-1 of every span, and each position's span number."""
    lengths = hi - lo
    span = np.repeat(np.arange(len(lo)), lengths)
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(lo, lengths) + offsets, span


def _fill_constant(label: np.ndarray, lo, hi, value) -> None:
    positions, span = _spans(lo, hi)
    label[positions] = value[span]


def _fill_one_boundary(cut: RankCut, lo, hi, left, right, gaps, unit_start) -> None:
    """One boundary in each run, before op t for t in lo..hi (op hi is the known op of the
    right label): at the GPU's own unit start if there is one, else before the longest
    idle gap; a gap not clearly the longest makes the Step doubtful."""
    positions, span = _spans(lo, hi + 1)
    score = np.log1p(gaps[positions].astype(np.float64)) + np.where(unit_start[positions], 1e3, 0.0)
    # per run (its positions are contiguous, runs in order): the first position of the
    # highest score, and the highest score of the others
    starts = np.concatenate([[0], np.cumsum(hi + 1 - lo)[:-1]])
    top = np.maximum.reduceat(score, starts)
    at_top = np.flatnonzero(score == top[span])
    best = at_top[np.concatenate([[True], span[at_top][1:] != span[at_top][:-1]])]
    t = positions[best]
    rest = score.copy()
    rest[best] = -np.inf
    has_second = (hi - lo) > 0
    close = has_second & (top - np.maximum.reduceat(rest, starts) < np.log(GROUP_HINT_RATIO))
    doubtful = close & ~unit_start[t] & (right >= 0) & (right < TAIL)
    cut.doubtful_steps.update(int(s) for s in right[doubtful].tolist())
    _fill_constant(cut.label, lo, t, left)
    _fill_constant(cut.label, t, hi, right)


def _fill(
    cut: RankCut,
    lo: int,
    hi: int,
    left: int | None,
    right: int | None,
    gaps: np.ndarray,
    unit_start: np.ndarray,
) -> None:
    label = cut.label
    if left is None and right is None:
        label[lo:hi] = STARTUP
        return
    if right is None:
        label[lo:hi] = left  # the last Step goes on (or the tail does)
        return
    if left is None:
        if right == STARTUP:
            label[lo:hi] = STARTUP
            return
        left = STARTUP
    if left == right:
        label[lo:hi] = left
        return
    # one boundary (or more, when Steps passed with no shared op) inside lo..hi: before op t
    # for t in lo..hi, where op hi is the known op of the right label
    bounds = _steps_between(left, right)
    positions = np.arange(lo, hi + 1)
    if len(bounds) > len(positions):
        # more Steps passed than ops lie between: the middle ones have no op on this GPU
        bounds = bounds[: len(positions) - 1] + [bounds[-1]]
    score = np.log1p(gaps[positions].astype(np.float64))
    score = score + np.where(unit_start[positions], 1e3, 0.0)
    chosen = np.sort(positions[np.argsort(-score, kind="stable")[: len(bounds)]])
    if len(bounds) == 1 and not unit_start[chosen[0]]:
        ranked = np.sort(score)[::-1]
        if len(ranked) > 1 and ranked[0] - ranked[1] < np.log(GROUP_HINT_RATIO):
            if 0 <= right < TAIL:
                cut.doubtful_steps.add(right)
    prev = lo
    value = left
    for t, nxt in zip(chosen.tolist(), bounds, strict=True):
        label[prev:t] = value
        prev, value = t, nxt
    label[prev:hi] = value


def _steps_between(left: int, right: int) -> list[int]:
    """The labels that begin between an op of `left` and one of `right`."""
    if right == TAIL or left == STARTUP:
        if right == TAIL and left == STARTUP:
            return [TAIL]
        return [right]
    return list(range(left + 1, right + 1))


def _check_local(cut: RankCut, u: LocalUnits) -> None:
    """A GPU's own cycle should begin a repetition where a Step begins; where it does not, on
    a GPU whose cycle covers its ops well, its own evidence disagrees with the job's."""
    if u.coverage < 0.9:
        return
    label = cut.label
    begins = np.flatnonzero((label[1:] != label[:-1]) & (label[1:] >= 0) & (label[1:] != TAIL)) + 1
    steady = begins[begins > u.starts[0]] if len(u.starts) else begins
    own = u.starts if u.step_starts is None else u.step_starts
    on_unit = np.isin(steady, own)
    if len(steady) >= 3 and on_unit.mean() < 0.5:
        cut.reasons.add(
            f"its own op cycle ({u.period} ops) begins at {on_unit.mean():.0%} of the "
            "Step boundaries carried to it"
        )
