"""The Semantic Engine for one GPU: batches of completed ops in, step-summary records out.

Ops arrive in completion order and are put back in issue order (native.reorder, a bounded
window: see ops for the rule). Until the engine knows how to cut this GPU's
stream into Steps it keeps them (selection "pending") and, every PROBE_CHUNK ops, tries every
template on what it kept: a template fits when its FSM recovers at least warm-up +
probe_steps Steps from it, the steady ones alike, with few unexpected ops. The best fit
(confidence, then priority, then name) is chosen and the kept ops are placed through it; from
then on each batch is placed as it arrives. When no template fits by PROBE_MAX ops (or the
input ends), the engine falls back to the repeating period of the op sequence itself.

With a CutRunner the Steps come from a job-wide cut instead: offline it labelled every op
before the engine runs; live (LiveCutRunner) the engine only holds its ops until the node's
cut (live_cut) hands back a settled prefix with its Steps (`place_cut`).

Everything per op runs over whole batches (numpy, and engine_core.c through native); Python
works per op shape, per Step and per batch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.cut_runner import CutRunner, LiveCutRunner
from comminsight.semantic.cycle import Cycle, learn_cycle_codes, rare_key_floors
from comminsight.semantic.dump_times import idle_before
from comminsight.semantic.job_cut import STARTUP
from comminsight.semantic.native import NONE
from comminsight.semantic.op_batch import FUNCS, OpBatch
from comminsight.semantic.ops import WINDOW
from comminsight.semantic.recovery import PeriodRunner, TemplateRunner, cycle_key
from comminsight.semantic.step_builder import (
    GpuIdentity,
    OpenStep,
    StepTable,
    open_step_rows,
    place_steps,
)
from comminsight.semantic.step_summary import History, recovery_of, summarize
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


def idle_gaps(batch: OpBatch) -> np.ndarray:
    """For each op, how long the GPU had no op of this process running before it started
    (beyond what NVIDIA Inspector's dump interval explains, where ends are its dump times)."""
    return idle_before(batch["start"], batch["end"], bool((batch["end_mono"] == NONE).all()))


def template_cycles(template: CompiledTemplate, batch: OpBatch, final: bool = False) -> list[Cycle]:
    """Candidate per-Step cycles of the template's ops (at the end of input, `final`, two
    repetitions are enough: a short run is all there is). Extra ops (an evaluation barrier
    every few Steps) and warm-up Steps that differ break the repetition a cycle is learned
    from, so the cycle is also learned without the keys rarer than once per Step; as which
    keys those are cannot be known before the Steps are, each guess gives a candidate and
    `evaluate` keeps the one that cuts the ops best."""
    first, inverse = batch.shapes()
    key_of: list[tuple] = []
    codes: dict[tuple, int] = {}
    shape_code = []
    for i in first.tolist():
        op = batch.shape(i)
        role = template.role_of(op)
        if role in template.cycle_roles:
            key = cycle_key(role, op.func, op.size_bytes)
            if key not in codes:
                codes[key] = len(key_of)
                key_of.append(key)
            shape_code.append(codes[key])
        else:
            shape_code.append(-1)
    if not key_of:
        return []
    op_code = np.array(shape_code, np.int64)[inverse]
    on_cycle = op_code >= 0
    keys, key_gaps = op_code[on_cycle], idle_gaps(batch)[on_cycle]
    counts = np.bincount(keys, minlength=len(key_of))
    cycles: list[Cycle] = []
    tried = set()
    for floor in rare_key_floors(counts.tolist(), len(keys)):
        kept = counts[keys] >= floor
        n_kept = int(kept.sum())
        if n_kept in tried:  # floors are thresholds: as many kept means the same keys
            continue
        tried.add(n_kept)
        cycle = learn_cycle_codes(keys[kept], key_gaps[kept], key_of, min_repeats=2 if final else 3)
        if cycle is not None and cycle not in cycles:
            cycles.append(cycle)
    return cycles


def dry_run(runner, batch: OpBatch, final: bool = False) -> list[tuple[int, int]]:
    """How a runner would cut the ops, as GpuEngine places them: (ops, unexpected ops) of each
    closed Step (with `final`, the input has ended: the open Step too), and of the ops between
    Steps after the first one as a last entry."""
    labels = runner.labels(batch)
    dec = runner.decide(labels)
    placed = native.place(dec, labels.role, len(runner.names), batch.cols, None, None)
    steps = placed.steps
    keep = steps["closed"] == 1
    if final:
        keep |= steps["op_count"] > 0
    counts, unexpected = steps["op_count"][keep].tolist(), steps["unexpected"][keep].tolist()
    closed = list(zip(counts, unexpected, strict=True))
    in_step = (dec & native.IN_STEP) != 0
    between = (0, 0)
    if in_step.any():
        after = dec[int(np.argmax(in_step)) :]
        outside = (after & native.IN_STEP) == 0
        between = (int(outside.sum()), int((outside & ((after & native.UNEXPECTED) != 0)).sum()))
    return closed + [between]


def evaluate(template: CompiledTemplate, batch: OpBatch, final: bool = False) -> Fit | None:
    """Whether the template cuts the ops into enough steady Steps that look alike: score =
    the share of steady ops that fit, times the share of steady Steps with the most common
    number of fitting ops. Warm-up Steps are allowed to differ and do not count. When the
    input has ended (`final`), one steady Step is enough: a short run is all there is."""
    if not template.cycle_roles:
        return _evaluate(template, None, batch, final)
    fits = [
        f
        for c in template_cycles(template, batch, final)
        if (f := _evaluate(template, c, batch, final))
    ]
    return max(fits, key=lambda f: f.score, default=None)


def _evaluate(
    template: CompiledTemplate, cycle: Cycle | None, batch: OpBatch, final: bool
) -> Fit | None:
    *closed, between = dry_run(TemplateRunner(template, cycle), batch, final)
    steady = closed[template.spec.tolerance.warmup_steps :]
    if len(steady) < (1 if final else template.spec.selection.probe_steps):
        return None
    ops_seen = sum(n for n, _ in steady) + between[0]
    unexpected = sum(u for _, u in steady) + between[1]
    alike = max(Counter(n - u for n, u in steady).values())
    score = (1 - unexpected / ops_seen) * (alike / len(steady))
    if score < template.spec.selection.min_confidence:
        return None
    return Fit(template, cycle, score)


def period_codes(batch: OpBatch) -> tuple[np.ndarray, list[tuple]]:
    """Each op's key (communicator, function, size) as a code, and the keys by code."""
    first, inverse = batch.shapes()
    key_of: list[tuple] = []
    codes: dict[tuple, int] = {}
    shape_code = []
    for i in first.tolist():
        key = (batch.comm(i).comm_id, FUNCS[int(batch["func"][i])], int(batch["size"][i]))
        if key not in codes:
            codes[key] = len(key_of)
            key_of.append(key)
        shape_code.append(codes[key])
    return np.array(shape_code, np.int64)[inverse], key_of


def _issued_after(held: OpBatch | None, issue: np.ndarray) -> bool:
    """Whether a batch's ops (their issue times, in arrival order) were issued in order, none
    before an op still held (on a tie the held op, which arrived first, goes first)."""
    if len(issue) > 1 and not bool((issue[1:] >= issue[:-1]).all()):
        return False
    return held is None or not len(held) or int(held["issue"].max()) <= int(issue[0])


def _no_steps(n: int) -> np.ndarray:
    return np.full(n, STARTUP, np.int64)


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
        self.window = WINDOW
        self.held: OpBatch | None = None  # the reorder window (unordered)
        self.arrivals = 0
        self.pending: OpBatch | None = None  # ops kept while no runner is chosen
        self.runner: TemplateRunner | PeriodRunner | None = None
        self.open: OpenStep | None = None
        self.next_step_index = 0
        self.steps_emitted = 0
        self.matched_op_count = 0
        self.unexpected_op_count = 0
        self.history = History()
        self._placed_max: int | None = None  # the input order of the latest placed op

    # ---- input ---------------------------------------------------------------------------

    def feed(self, batch: OpBatch) -> list[StepSummary]:
        """Ops in arrival order; the summaries of the Steps they close."""
        n = len(batch)
        if not n:
            return []
        batch.cols["arrival"] = np.arange(self.arrivals, self.arrivals + n, dtype=np.int64)
        self.arrivals += n
        held = self.held
        if _issued_after(held, batch["issue"]):
            return self._release_in_order(batch)
        every = held.concat(batch) if held is not None else batch
        released, keep = native.reorder(
            every["issue"], every["arrival"], len(held) if held is not None else 0, self.window
        )
        self.held = every.take(keep)
        return self._take(every.take(released))

    def _release_in_order(self, batch: OpBatch) -> list[StepSummary]:
        """feed when the held ops and the batch come in (issue, arrival) order already (logs
        read in issue order): the window releases the ops as they come, so they are taken as
        slices, with no reordering and no gather."""
        held = self.held
        n_held = len(held) if held is not None else 0
        if n_held:
            held = held.take(np.lexsort((held["arrival"], held["issue"])))
        # what native.reorder releases: each op past a full window releases one
        release = max(0, len(batch) - max(0, self.window - n_held))
        from_held = min(release, n_held)
        kept = batch.take(slice(release - from_held, None))
        if from_held < n_held:
            kept = held.take(slice(from_held, None)).concat(kept)
        self.held = kept
        if not release:
            return []
        released = batch.take(slice(0, release - from_held))
        if from_held:
            released = held.take(slice(0, from_held)).concat(released)
        return self._take(released)

    def finish(self) -> list[StepSummary]:
        """End of input: place every op still held, and close the open Step."""
        out = self._drain(final=True)
        if isinstance(self.runner, LiveCutRunner) and self.pending is not None:
            # ops no cut settled: in no Step
            out += self.place_cut(len(self.pending), _no_steps(len(self.pending)), 0.0, [])
        if self.runner is None and self.pending is not None and len(self.pending):
            out += self._select(final=True)
        if self.open is not None:
            step, self.open = self.open, None
            out += self._close(StepTable.of_open_step(step, self.runner.names, self.runner.code))
        return out

    def drain(self) -> list[StepSummary]:
        """Release every op of the reorder window (the input has ended)."""
        return self._drain(final=False)

    def _drain(self, final: bool) -> list[StepSummary]:
        if self.held is None or not len(self.held):
            return []
        held, self.held = self.held, None
        return self._take(held.take(np.lexsort((held["arrival"], held["issue"]))), final)

    def place_cut(
        self,
        count: int,
        steps: np.ndarray,
        confidence: float,
        reasons: list[str],
        method: str = "job",
    ) -> list[StepSummary]:
        """Place the first `count` ops held for the node's cut (LiveCutRunner), `steps` being
        their Steps as the cut labelled them."""
        pending = self.pending
        part = pending.take(slice(0, count))
        rest = pending.take(slice(count, None))
        self.pending = rest if len(rest) else None
        self.runner.give(steps, confidence, reasons, method)
        try:
            return self._place(part)
        finally:
            self.runner.given = None

    def _take(self, batch: OpBatch, final: bool = False) -> list[StepSummary]:
        """Place the ops (or keep them while no runner is chosen); `final`: they are the last
        of the input, so the Step they leave open closes with them."""
        out: list[StepSummary] = []
        if isinstance(self.runner, LiveCutRunner):  # the node's cut places them
            self.pending = self.pending.concat(batch) if self.pending is not None else batch
            return out
        i, n = 0, len(batch)
        while i < n:
            if self.runner is not None:
                out += self._place(batch.take(slice(i, n)), final)
                break
            have = len(self.pending) if self.pending is not None else 0
            k = max(1, min(PROBE_CHUNK - have % PROBE_CHUNK, self.probe_max - have, n - i))
            part = batch.take(slice(i, i + k))
            self.pending = self.pending.concat(part) if self.pending is not None else part
            i += k
            total = len(self.pending)
            if total % PROBE_CHUNK == 0 or total >= self.probe_max:
                out += self._select(final=total >= self.probe_max)
        return out

    # ---- selection -----------------------------------------------------------------------

    def _select(self, final: bool) -> list[StepSummary]:
        pending = self.pending
        fits = [f for t in self.templates.templates if (f := evaluate(t, pending, final))]
        if fits:
            best = min(fits, key=lambda f: (-f.score, -f.template.spec.priority, f.template.name))
            self.runner = TemplateRunner(best.template, best.cycle)
        elif final:
            codes, key_of = period_codes(pending)
            cycle = learn_cycle_codes(codes, idle_gaps(pending), key_of)
            if cycle is None:
                # Nothing repeats: keep the newer half and look again with more ops.
                self.pending = pending.take(slice(len(pending) // 2, None))
                return []
            self.runner = PeriodRunner(cycle)
        else:
            return []
        self.pending = None
        return self._place(pending)

    # ---- placement -----------------------------------------------------------------------

    @property
    def warmup_steps(self) -> int:
        if isinstance(self.runner, TemplateRunner):
            return self.runner.template.spec.tolerance.warmup_steps
        if isinstance(self.runner, CutRunner):
            return self.runner.warmup_steps
        return 0

    def resume_point(self, last_read):
        """The input position P a checkpoint can resume from (every op before P placed, none
        from P on), or None while ops taken from later lines are placed and earlier ones not
        yet (reordering straddles the point: try again after a few more ops). `last_read` is
        the position of the latest op fed."""
        waiting = [b for b in (self.held, self.pending) if b is not None and len(b)]
        if not waiting:
            return last_read.after() if last_read is not None else None
        orders = np.concatenate([b["order"] for b in waiting])
        i = int(np.argmin(orders))
        if self._placed_max is not None and self._placed_max >= int(orders[i]):
            return None
        for b in waiting:
            if i < len(b):
                return b.position(i).resume_here()
            i -= len(b)
        raise AssertionError("unreachable")

    def _place(self, batch: OpBatch, final: bool = False) -> list[StepSummary]:
        runner = self.runner
        labels = runner.labels(batch)
        dec = runner.decide(labels)
        unexpected = int(np.count_nonzero(dec & native.UNEXPECTED))
        self.unexpected_op_count += unexpected
        self.matched_op_count += len(batch) - unexpected
        top = int(batch["order"].max())
        if self._placed_max is None or top > self._placed_max:
            self._placed_max = top
        open_rows = None
        if self.open is not None:
            open_rows = open_step_rows(self.open, runner.code)
        names = runner.names
        placed = native.place(
            dec,
            labels.role,
            len(names),
            batch.cols,
            open_rows[0] if open_rows else None,
            open_rows[1] if open_rows else None,
        )
        closed, self.open, began = place_steps(
            placed,
            batch,
            labels.role,
            names,
            self.open,
            self.next_step_index,
            self.warmup_steps,
            getattr(runner, "begun", None),
            final,
        )
        self.next_step_index += began
        if getattr(runner, "begun", None):
            self.next_step_index = runner.begun[-1] + 1
        return self._close(closed) if closed is not None else []

    def _close(self, steps: StepTable) -> list[StepSummary]:
        """The summaries of Steps that closed, in order."""
        runner = self.runner
        confidence = (1 - steps.unexpected / steps.op_count).tolist()
        if isinstance(runner, CutRunner):
            recoveries = runner.recoveries(steps.index)
            tolerance, micro = 0, False
        elif isinstance(runner, TemplateRunner):
            name = runner.template.name
            recoveries = [recovery_of("template", name, None, c) for c in confidence]
            tolerance = runner.template.spec.tolerance.max_unexpected_ops_per_step
            micro = any(t.micro_step is True for t in runner.template.transitions)
        else:
            period = len(runner.cycle)
            recoveries = [recovery_of("period", None, period, c) for c in confidence]
            tolerance, micro = 0, False
        self.steps_emitted += len(steps)
        return summarize(
            steps,
            recoveries,
            self.gpu,
            self.history,
            self.mode,
            ENGINE_VERSION,
            tolerance,
            micro,
        )
