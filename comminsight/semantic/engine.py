"""The Semantic Engine for one GPU: completed ops in, step-summary records out.

Ops arrive in completion order and are put back in issue order (ops.ReorderBuffer). Until
the engine knows how to cut this GPU's stream into Steps it keeps them (selection "pending")
and, every PROBE_CHUNK ops, tries every template on what it kept: a template fits when its
FSM recovers at least warm-up + probe_steps Steps from it, the steady ones alike, with few
unexpected ops. The best fit (confidence, then priority, then name) is chosen and the kept
ops are replayed through it; from then on each op is placed as it arrives. When no template
fits by PROBE_MAX ops (or the input ends), the engine falls back to the repeating period of
the op sequence itself.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from comminsight.semantic.cycle import Cycle, learn_cycle
from comminsight.semantic.ops import EngineOp, ReorderBuffer
from comminsight.semantic.recovery import (
    Decision,
    PeriodRunner,
    TemplateRunner,
    cycle_key,
)
from comminsight.semantic.step_builder import (
    GpuIdentity,
    History,
    OpenStep,
    recovery_of,
    summarize,
)
from comminsight.semantic.templates import CompiledTemplate, TemplateSet
from comminsight_gen.models.step_summary_v1 import ProducerMode, StepSummary

ENGINE_VERSION = "1.0.0"
PROBE_CHUNK = 512
PROBE_MAX = 50_000


@dataclass
class Fit:
    template: CompiledTemplate
    cycle: Cycle | None
    score: float


def idle_gaps(ops: list[EngineOp]) -> list[int]:
    """For each op, how long the GPU had no op of this process running before it started."""
    gaps, busy_until = [], None
    for op in ops:
        gaps.append(0 if busy_until is None else max(0, op.start_ns - busy_until))
        busy_until = op.end_ns if busy_until is None else max(busy_until, op.end_ns)
    return gaps


def template_cycles(
    template: CompiledTemplate, ops: list[EngineOp], final: bool = False
) -> list[Cycle]:
    """Candidate per-Step cycles of the template's ops (at the end of input, `final`, two
    repetitions are enough: a short run is all there is). Extra ops (an evaluation barrier
    every few Steps) and warm-up Steps that differ break the repetition a cycle is learned
    from, so the cycle is also learned without the keys rarer than once per Step; as which
    keys those are cannot be known before the Steps are, each guess gives a candidate and
    `evaluate` keeps the one that cuts the ops best."""
    gaps = idle_gaps(ops)
    keys, key_gaps = [], []
    for op, gap in zip(ops, gaps, strict=True):
        role = template.role_of(op)
        if role in template.cycle_roles:
            keys.append(cycle_key(role, op))
            key_gaps.append(gap)
    cycles: list[Cycle] = []
    counts = Counter(keys)
    tried = set()
    for floor in rare_key_floors(counts, len(keys)):
        kept = [(k, g) for k, g in zip(keys, key_gaps, strict=True) if counts[k] >= floor]
        if len(kept) in tried:  # floors are thresholds: as many kept means the same keys
            continue
        tried.add(len(kept))
        cycle = learn_cycle(
            [k for k, _ in kept], [g for _, g in kept], min_repeats=2 if final else 3
        )
        if cycle is not None and cycle not in cycles:
            cycles.append(cycle)
    return cycles


def rare_key_floors(counts: Counter, total: int) -> list[float]:
    """Guesses of the count below which a key is rarer than once per Step: none (0); three
    quarters of the median count over distinct keys; three quarters of the count of the
    least frequent of the keys that together make three quarters of the ops."""
    floors = [0.0]
    if len(counts) >= 2:
        floors.append(0.75 * statistics.median(counts.values()))
        covered = 0
        for count in sorted(counts.values(), reverse=True):
            covered += count
            if covered >= 0.75 * total:
                floors.append(0.75 * count)
                break
    return floors


def dry_run(runner, ops: list[EngineOp], final: bool = False) -> list[tuple[int, int]]:
    """How a runner would cut `ops`, as GpuEngine._place does: (ops, unexpected ops) of each
    closed Step (with `final`, the input has ended: the open Step too), and of the ops between
    Steps after the first one as a last entry."""
    closed: list[tuple[int, int]] = []
    count = unexpected = 0
    between = [0, 0]
    started = False
    for op in ops:
        d = runner.decide(op)
        if d.boundary == "begin" and count:
            closed.append((count, unexpected))
            count = unexpected = 0
        if not d.in_step:
            if started:
                between[0] += 1
                between[1] += d.unexpected
            continue
        started = True
        count += 1
        unexpected += d.unexpected
        if d.boundary == "end":
            closed.append((count, unexpected))
            count = unexpected = 0
    if final and count:
        closed.append((count, unexpected))
    return closed + [tuple(between)]


def evaluate(template: CompiledTemplate, ops: list[EngineOp], final: bool = False) -> Fit | None:
    """Whether the template cuts `ops` into enough steady Steps that look alike: score =
    the share of steady ops that fit, times the share of steady Steps with the most common
    number of fitting ops. Warm-up Steps are allowed to differ and do not count. When the
    input has ended (`final`), one steady Step is enough: a short run is all there is."""
    if not template.cycle_roles:
        return _evaluate(template, None, ops, final)
    fits = [
        f
        for c in template_cycles(template, ops, final)
        if (f := _evaluate(template, c, ops, final))
    ]
    return max(fits, key=lambda f: f.score, default=None)


def _evaluate(
    template: CompiledTemplate, cycle: Cycle | None, ops: list[EngineOp], final: bool
) -> Fit | None:
    *closed, between = dry_run(TemplateRunner(template, cycle), ops, final)
    steady = closed[template.spec.tolerance.warmup_steps :]
    if len(steady) < (1 if final else template.spec.selection.probe_steps):
        return None
    ops_seen = sum(n for n, _ in steady) + between[0]
    unexpected = sum(u for _, u in steady) + between[1]
    _, alike = Counter(n - u for n, u in steady).most_common(1)[0]
    score = (1 - unexpected / ops_seen) * (alike / len(steady))
    if score < template.spec.selection.min_confidence:
        return None
    return Fit(template, cycle, score)


class GpuEngine:
    def __init__(
        self,
        gpu: GpuIdentity,
        templates: TemplateSet,
        mode: ProducerMode = ProducerMode.offline,
        probe_max: int = PROBE_MAX,
    ) -> None:
        self.gpu = gpu
        self.templates = templates
        self.mode = mode
        self.probe_max = probe_max
        self.reorder = ReorderBuffer()
        self.pending: list[EngineOp] = []
        self.runner: TemplateRunner | PeriodRunner | None = None
        self.open: OpenStep | None = None
        self.next_step_index = 0
        self.steps_emitted = 0
        self.matched_op_count = 0
        self.unexpected_op_count = 0
        self.history = History()
        self._placed_max: tuple | None = None  # the input position of the latest placed op

    # ---- input ---------------------------------------------------------------------------

    def feed(self, op: EngineOp) -> list[StepSummary]:
        out: list[StepSummary] = []
        for released in self.reorder.push(op):
            out += self._take(released)
        return out

    def finish(self) -> list[StepSummary]:
        """End of input: place every op still held, and close the open Step."""
        out: list[StepSummary] = []
        for op in self.reorder.drain():
            out += self._take(op)
        if self.runner is None and self.pending:
            out += self._select(final=True)
        if self.open is not None:
            out.append(self._close())
        return out

    def _take(self, op: EngineOp) -> list[StepSummary]:
        if self.runner is not None:
            return self._place(op)
        self.pending.append(op)
        if len(self.pending) % PROBE_CHUNK == 0 or len(self.pending) >= self.probe_max:
            return self._select(final=len(self.pending) >= self.probe_max)
        return []

    # ---- selection -----------------------------------------------------------------------

    def _select(self, final: bool) -> list[StepSummary]:
        fits = [f for t in self.templates.templates if (f := evaluate(t, self.pending, final))]
        if fits:
            best = min(fits, key=lambda f: (-f.score, -f.template.spec.priority, f.template.name))
            self.runner = TemplateRunner(best.template, best.cycle)
        elif final:
            gaps = idle_gaps(self.pending)
            cycle = learn_cycle([op.key() for op in self.pending], gaps)
            if cycle is None:
                # Nothing repeats: keep the newer half and look again with more ops.
                del self.pending[: len(self.pending) // 2]
                return []
            self.runner = PeriodRunner(cycle)
        else:
            return []
        kept, self.pending = self.pending, []
        out = []
        for op in kept:
            out += self._place(op)
        return out

    # ---- placement -----------------------------------------------------------------------

    @property
    def warmup_steps(self) -> int:
        if isinstance(self.runner, TemplateRunner):
            return self.runner.template.spec.tolerance.warmup_steps
        return 0

    def resume_point(self, last_read: EngineOp | None):
        """The input position P a checkpoint can resume from (every op before P placed, none
        from P on), or None while ops taken from later lines are placed and earlier ones not
        yet (reordering straddles the point: try again after a few more ops)."""
        unreflected = self.reorder.held() + self.pending
        if not unreflected:
            return last_read.position.after() if last_read is not None else None
        first = min(unreflected, key=lambda op: op.position.order())
        if self._placed_max is not None and self._placed_max >= first.position.order():
            return None
        return first.position.resume_here()

    def _place(self, op: EngineOp) -> list[StepSummary]:
        if op.position is not None:
            order = op.position.order()
            if self._placed_max is None or order > self._placed_max:
                self._placed_max = order
        d: Decision = self.runner.decide(op)
        self.unexpected_op_count += d.unexpected
        self.matched_op_count += not d.unexpected
        out = []
        if d.boundary == "begin" and self.open is not None:
            out.append(self._close(next_start=op))
        if not d.in_step:
            return out
        if self.open is None:
            self.open = OpenStep.begin(
                self.next_step_index, self.next_step_index < self.warmup_steps, op
            )
            self.next_step_index += 1
        self.open.add(op, d.role, d.unexpected)
        self.open.micro_step_count += d.micro_step
        if d.boundary == "end":
            out.append(self._close())
        return out

    def _close(self, next_start: EngineOp | None = None) -> StepSummary:
        """Emit the open Step; `next_start` is the op beginning the next one, if known."""
        step, self.open = self.open, None
        if next_start is not None:
            step.period_ns = max(0, next_start.start_real_ns - step.start_real_ns)
        runner = self.runner
        confidence = 1 - step.unexpected_op_count / step.op_count
        if isinstance(runner, TemplateRunner):
            recovery = recovery_of("template", confidence, runner.template.name, None)
            tolerance = runner.template.spec.tolerance.max_unexpected_ops_per_step
            micro = any(t.micro_step is True for t in runner.template.transitions)
        else:
            recovery = recovery_of("period", confidence, None, len(runner.tracker.cycle))
            tolerance, micro = 0, False
        self.steps_emitted += 1
        return summarize(
            step,
            self.gpu,
            self.history,
            recovery,
            self.mode,
            ENGINE_VERSION,
            tolerance,
            micro,
        )
