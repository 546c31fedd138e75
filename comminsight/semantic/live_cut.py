"""Step boundaries job-wide while training runs: the node's GPUs cut together.

Each GPU's engine holds the ops it has put in issue order (GpuEngine with a LiveCutRunner)
until this cut labels them. Now and then (when a GPU has `min_new_ops` new ops, or a
sixteenth of its context if that is more: a cut costs as much as its window; or `interval_s`
after the last cut while ops wait) the ops held, together with the *context* — the ops of
the last Steps already placed (at most `max_context` per GPU, from the same Step on every
GPU), with the Steps they were placed in — are cut as offline (job_cut.cut_job over every
GPU of the node: one answer for the GPUs that share communicators). The cut numbers its
Steps from its window; the context tells what those numbers are in the job's count (the
offset most context ops agree on). A fresh start has no context: the cut's own count holds
(start-up ops are in no Step, Step 0 is the first).

Only *settled* Steps are placed: those before the last Step begun on every GPU of a
component, on which two successive cuts agree (more ops did not change them). On each GPU
the ops placed are the longest such prefix; the rest waits for the next cut. A cut whose
labels contradict the Steps already placed (its offset is not one) places nothing. What
waits is bounded (`max_held` ops per GPU): beyond it the oldest ops are placed in no Step
and counted (`ops_unsettled`), so a job whose ops never repeat cannot grow the Agent.

Nothing is placed before a cut has `first_steps` Steps and every GPU `first_ops` ops (or the
processes end): start-up, warm-up Steps and micro-batches are told apart with evidence close
to what the offline cut has; a few Steps alone can make micro-batches look like Steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.job_cut import STARTUP, TAIL, JobCut, cut_job
from comminsight.semantic.job_ops import CommIds, JobOps, gpu_ops
from comminsight.semantic.op_batch import OpBatch
from comminsight.semantic.step_summary import StepSummary
from comminsight.semantic.templates import CompiledTemplate

MIN_NEW_OPS = 512
INTERVAL_S = 5.0
MAX_HELD = 1 << 16
MAX_CONTEXT_OPS = 1 << 15
CUT_EVERY_CONTEXT = 16  # a cut is due once new ops reach 1/16 of the context
FIRST_STEPS = 8
FIRST_OPS = 2048
END_WAIT_S = 30.0


@dataclass
class _Gpu:
    engine: GpuEngine
    rank: int
    context: list[OpBatch] = field(default_factory=list)  # ops of the last Steps placed
    context_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    component: int = -1  # its component in the last cut (-1: not cut yet)
    ended_at: float | None = None  # when its process ended
    roles_named: bool = False  # a template was tried for its roles
    previous: np.ndarray | None = None  # the last cut's Steps of the ops held
    unconfirmed: bool = False  # ops held that the last cut would settle if a cut agreed
    held_at_cut: int = 0  # ops held right after the last cut
    new_ops: int = 0  # held ops that came since


@dataclass
class LiveCutStats:
    cuts: int = 0
    ops_settled: int = 0
    ops_unsettled: int = 0  # placed in no Step: held past max_held without a settled Step
    offset_disagreements: int = 0  # cuts whose context gave more than one offset
    contexts_trimmed: int = 0
    last_unsettled_s: float | None = None  # time.monotonic() of the latest ops unsettled


class LiveJobCut:
    def __init__(
        self,
        min_new_ops: int = MIN_NEW_OPS,
        interval_s: float = INTERVAL_S,
        max_held: int = MAX_HELD,
        first_steps: int = FIRST_STEPS,
        first_ops: int = FIRST_OPS,
        max_context: int = MAX_CONTEXT_OPS,
        end_wait_s: float = END_WAIT_S,
        role_template: Callable[[list[OpBatch]], CompiledTemplate | None] | None = None,
        markers_of: Callable[[object], np.ndarray | None] | None = None,
    ) -> None:
        """`role_template(batches)`: the template whose roles fit a GPU's first ops best
        (tried once per GPU, on the ops of its first cut)."""
        self.min_new_ops = min_new_ops
        self.interval_s = interval_s
        self.max_held = max_held
        self.first_steps = first_steps
        self.first_ops = first_ops
        self.max_context = max_context
        self.end_wait_s = end_wait_s
        self.role_template = role_template
        # a GPU's optimizer-step markers so far (Inject's, by its key), or None
        self.markers_of = markers_of
        self.comms = CommIds()
        self.stats = LiveCutStats()
        self.reasons: list[str] = []  # the latest cut's, for health
        self.placed_end: dict[object, int] = {}  # per GPU: the latest completion placed
        self._gpus: dict[object, _Gpu] = {}
        self._last_cut: float | None = None

    # ---- membership ----------------------------------------------------------------------

    def track(self, key, engine: GpuEngine, rank: int, resumed_after: int = -1) -> None:
        """Cut `engine`'s held ops with the node's. Again after a restart: the new engine
        goes on after ring record `resumed_after` (its checkpoint), so the context keeps the
        ops up to there (the window then begins where the other GPUs' windows begin; a GPU
        whose window began later would be cut against ops it cannot match)."""
        old = self._gpus.get(key)
        if old is not None and old.engine is engine:
            return
        g = self._gpus[key] = _Gpu(engine, rank)
        if old is not None and old.roles_named:  # a restarted engine keeps its GPU's roles
            self.roles_known(key, old.engine.runner.template)
        if old is not None and old.context and resumed_after >= 0:
            keep = [p["ring_seq"] <= resumed_after for p in old.context]
            kept = [p.take(np.flatnonzero(k)) for p, k in zip(old.context, keep, strict=True)]
            g.context = [p.make_concrete() for p in kept if len(p)]
            g.context_steps = old.context_steps[np.concatenate(keep)]
            g.component = old.component

    def roles_known(self, key, template: CompiledTemplate | None) -> None:
        """`key`'s roles were named before a restart (by `template`, or by none): they stay
        so. Chosen again, from the ops after the checkpoint, they could differ from what an
        Agent that never stopped writes."""
        g = self._gpus.get(key)
        if g is not None:
            g.roles_named = True
            g.engine.runner.template = template

    def restore_context(self, key, ops: OpBatch, steps: np.ndarray) -> None:
        """After the Agent restarted: the ops `key` had placed before its checkpoint and
        their Steps, as written (restored_context), for its cuts to go on from. Ignored once
        the GPU has a context of this Agent's own."""
        g = self._gpus.get(key)
        if g is None or g.context or not len(ops):
            return
        g.context = [ops.make_concrete()]
        g.context_steps = np.asarray(steps, np.int64)

    def tracks(self, key, engine: GpuEngine) -> bool:
        g = self._gpus.get(key)
        return g is not None and g.engine is engine

    def forget(self, key) -> None:
        self._gpus.pop(key, None)
        self.placed_end.pop(key, None)

    def end(self, key, now: float) -> None:
        """`key`'s process has ended: its ops are all in. They are placed once every GPU it
        shared a communicator with has ended too (the others' ops still carry boundaries to
        its last Steps), or `end_wait_s` later."""
        g = self._gpus.get(key)
        if g is not None and g.ended_at is None:
            g.ended_at = now

    def ended(self, now: float, all_ended: bool = False) -> list:
        """The ended GPUs whose last cut is due now (`all_ended`: every ended GPU)."""
        ready = []
        for k, g in self._gpus.items():
            if g.ended_at is None:
                continue
            # a GPU not cut yet may share communicators with it: it is waited for too
            partners = [o for o in self._gpus.values() if o.component in (g.component, -1)]
            if (
                all_ended
                or now - g.ended_at >= self.end_wait_s
                or all(o.ended_at is not None for o in partners)
            ):
                ready.append(k)
        return ready

    def next_deadline(self) -> float | None:
        """When a cut will be due without more ops: the interval after the last cut while
        ops wait (training paused: its last Steps still settle), or an ended GPU's wait."""
        times = [
            g.ended_at + self.end_wait_s for g in self._gpus.values() if g.ended_at is not None
        ]
        if self._last_cut is not None and any(
            g.new_ops or g.unconfirmed for g in self._gpus.values()
        ):
            times.append(self._last_cut + self.interval_s)
        return min(times, default=None)

    def held_ops(self, key) -> None:
        """The engine of `key` took new ops (call after each feed)."""
        g = self._gpus.get(key)
        if g is not None:
            g.new_ops = max(0, _held(g) - g.held_at_cut)

    # ---- cutting -------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        if not any(g.new_ops or g.unconfirmed for g in self._gpus.values()):
            return False
        if self._last_cut is None:  # the interval counts from the first ops
            self._last_cut = now
        elif now - self._last_cut >= self.interval_s:
            return True
        return any(
            g.new_ops >= max(self.min_new_ops, _context_len(g) // CUT_EVERY_CONTEXT)
            for g in self._gpus.values()
        )

    def cut(self, now: float, final: frozenset = frozenset()) -> dict[object, list[StepSummary]]:
        """Cut the node's held ops and place what settles; the ops of the GPUs in `final`
        (ended: see `ended`) are all placed. Summaries of the Steps closed, by GPU."""
        self._last_cut = now
        self._trim_contexts()
        keys = [k for k, g in self._gpus.items() if _held(g) or g.context]
        out: dict[object, list[StepSummary]] = {}
        if not keys:
            return out
        windows = {k: _window(self._gpus[k]) for k in keys}
        streams = [str(i) for i in range(len(keys))]
        gpus = [
            gpu_ops(s, self._gpus[k].rank, windows[k], self.comms)
            for s, k in zip(streams, keys, strict=True)
        ]
        if self.markers_of is not None:
            for g, k in zip(gpus, keys, strict=True):
                g.markers = self.markers_of(k)
        job = JobOps(gpus, self.comms)
        result = cut_job(job)
        self.stats.cuts += 1
        self.reasons = list(result.reasons)
        labels = {}
        for k, rank_cut in zip(keys, result.ranks, strict=True):
            self._gpus[k].component = rank_cut.component
            by_arrival = np.empty(len(rank_cut.label), np.int64)
            by_arrival[rank_cut.gpu.arrival] = rank_cut.label
            labels[k] = by_arrival
        for component in sorted({r.component for r in result.ranks}):
            members = [
                k for k, r in zip(keys, result.ranks, strict=True) if r.component == component
            ]
            out.update(self._settle(members, labels, result, final))
        for k in keys:
            g = self._gpus[k]
            out.setdefault(k, [])
            out[k] += self._bound(k)
            g.held_at_cut, g.new_ops = _held(g), 0
        return out

    def _settle(self, members, labels, result: JobCut, final) -> dict[object, list]:
        offsets, agreeing = [], True
        for k in members:
            g = self._gpus[k]
            n_ctx = _context_len(g)
            new = labels[k][:n_ctx]
            known = g.context_steps
            # the window's first Step is left out: a cut may take a window's head for
            # start-up or a partial Step, which says nothing of the ops that matter
            placed = (known >= 0) & (known != TAIL)
            head = int(known[placed].min(initial=0))
            ok = (new >= 0) & (new != TAIL) & placed & (known > head)
            if ok.any():
                values, counts = np.unique(known[ok] - new[ok], return_counts=True)
                offsets.append((int(counts.max()), int(values[np.argmax(counts)])))
                agreeing &= len(values) == 1
        reasons = list(result.reasons)
        confidence = result.confidence
        ending = any(k in final for k in members)
        if offsets:
            offset = max(offsets)[1]
            offset_of = dict.fromkeys(members, offset)
            if not agreeing or len({o for _, o in offsets}) > 1:
                # this cut contradicts Steps already placed: it settles nothing, unless the
                # ops must go now (a GPU ended, or the held ops near their bound)
                self.stats.offset_disagreements += 1
                crowded = any(_held(self._gpus[k]) >= self.max_held // 2 for k in members)
                if not ending and not crowded:
                    for k in members:
                        g = self._gpus[k]
                        lab = labels[k][_context_len(g) :]
                        g.previous = np.where((lab >= 0) & (lab != TAIL), lab + offset, lab)
                        g.unconfirmed = True
                    return {}
                confidence = min(confidence, 0.5)
                reasons.append("the Steps placed before and this cut disagree on some ops")
        else:
            offset_of = self._fresh_offset(members, labels, ending)
            if offset_of is None:
                for k in members:  # what this cut says, for the next one to confirm
                    g = self._gpus[k]
                    g.previous = labels[k][_context_len(g) :]
                return {}
            for k in members:
                # the first cut sees the run from its start, as the offline cut does: the
                # warm-up Steps it tells are the run's (a GPU restored from a checkpoint is
                # past them)
                if not self._gpus[k].engine.next_step_index:
                    self._gpus[k].engine.runner.warmup_steps = result.warmup_steps
        # the last Step begun on every GPU may still grow: settle the Steps before it
        tops = []
        for k in members:
            lab = labels[k]
            steps = lab[(lab >= 0) & (lab != TAIL)]
            if len(steps):
                tops.append(int(steps.max()))
        out: dict[object, list] = {}
        if not tops:
            return out
        settle_below = min(tops)
        for k in members:
            g = self._gpus[k]
            n_ctx = _context_len(g)
            lab = labels[k][n_ctx:]
            steps = np.where((lab >= 0) & (lab != TAIL), lab + offset_of[k], lab)
            if k in final:
                count = len(lab)
                steps = np.where(lab == TAIL, STARTUP, steps)
            else:
                late = lab >= settle_below
                count = int(np.argmax(late)) if late.any() else len(lab)
                settled = count
                if len(lab) < self.max_held // 2:
                    count = min(count, _agreed(g.previous, steps))
                g.unconfirmed = count < settled
            g.previous = steps[count:]
            if count:
                out[k] = self._place(k, count, steps[:count], confidence, reasons, result.method)
        return out

    def _fresh_offset(self, members, labels, final: bool) -> dict | None:
        """No context: the cut's count holds, once it has enough Steps and ops to tell start-up,
        warm-up and micro-batches from Steps (or the input ends). A GPU restored from a
        checkpoint goes on from its own count: its first op held begins its next Step (a
        checkpoint lies where placing stopped, at a Step's first op). Per GPU, the offset."""
        most = max((_last_step(labels[k]) for k in members), default=-1)
        fewest = min(len(labels[k]) for k in members)
        if (most + 1 < self.first_steps or fewest < self.first_ops) and not final:
            return None
        offsets = {}
        for k in members:
            engine, lab = self._gpus[k].engine, labels[k]
            in_step = lab[(lab >= 0) & (lab != TAIL)]
            if engine.next_step_index and len(in_step):
                offsets[k] = engine.next_step_index - int(in_step[0])
        resumed = sorted(offsets.values())
        for k in members:  # a GPU new beside restored ones takes their count
            offsets.setdefault(k, resumed[len(resumed) // 2] if resumed else 0)
        return offsets

    def _place(self, key, count: int, steps, confidence, reasons, method: str = "job") -> list:
        g = self._gpus[key]
        if not g.roles_named and self.role_template is not None:
            g.roles_named = True
            g.engine.runner.template = self.role_template([g.engine.pending])
        placed = g.engine.pending.take(slice(0, count))
        self._note_placed(key, placed)
        summaries = g.engine.place_cut(count, steps, confidence, reasons, method)
        self.stats.ops_settled += count
        # concrete: the context must not keep the engine's batches alive
        g.context.append(placed.make_concrete())
        g.context_steps = np.concatenate([g.context_steps, steps])
        return summaries

    def _trim_contexts(self) -> None:
        """Keep at most `max_context` ops of context per GPU, from the same Step on every GPU
        of a component: each window then reads like the job's run from that Step on (windows
        that begin at other Steps on other ranks would match ops across the heads badly)."""
        by_component: dict[int, list[_Gpu]] = {}
        for g in self._gpus.values():
            if g.context:
                by_component.setdefault(g.component, []).append(g)
        for gpus in by_component.values():
            first = max(_trim_step(g.context_steps, self.max_context) for g in gpus)
            if first < 0:
                continue
            for g in gpus:
                known = g.context_steps
                later = (known >= first) & (known != TAIL)
                keep_from = int(np.argmax(later)) if later.any() else len(known)
                keep_from = max(keep_from, len(known) - 2 * self.max_context)  # a hard bound
                if keep_from:
                    whole = g.context[0]
                    for part in g.context[1:]:
                        whole = whole.concat(part)
                    g.context = [whole.take(slice(keep_from, None)).make_concrete()]
                    g.context_steps = known[keep_from:]
                    self.stats.contexts_trimmed += 1

    def _note_placed(self, key, placed: OpBatch) -> None:
        self.placed_end[key] = max(self.placed_end.get(key, 0), int(placed["end"].max()))

    def bound_all(self) -> dict[object, list[StepSummary]]:
        """Keep every GPU within `max_held` without a cut (when cutting fails)."""
        return {k: self._bound(k) for k in self._gpus}

    def _bound(self, key) -> list:
        g = self._gpus[key]
        surplus = _held(g) - self.max_held
        if surplus <= 0:
            return []
        self.stats.ops_unsettled += surplus
        self.stats.last_unsettled_s = time.monotonic()
        self._note_placed(key, g.engine.pending.take(slice(0, surplus)))
        if g.previous is not None:
            g.previous = g.previous[surplus:]
        return g.engine.place_cut(surplus, np.full(surplus, STARTUP, np.int64), 0.0, [])


def _agreed(previous: np.ndarray | None, steps: np.ndarray) -> int:
    """How many of the first ops two successive cuts put in the same Steps."""
    if previous is None:
        return 0
    n = min(len(previous), len(steps))
    differ = previous[:n] != steps[:n]
    return int(np.argmax(differ)) if differ.any() else n


def _last_step(label: np.ndarray) -> int:
    return int(label[(label >= 0) & (label != TAIL)].max(initial=-1))


def _trim_step(known: np.ndarray, most: int) -> int:
    """The earliest Step a context of at most `most` ops can begin with."""
    if len(known) <= most:
        return -1
    tail = known[len(known) - most :]
    steps = tail[(tail >= 0) & (tail != TAIL)]
    return (
        int(steps.min()) + 1
        if len(steps)
        else int(known[(known >= 0) & (known != TAIL)].max(initial=-1))
    )


def _context_len(g: _Gpu) -> int:
    return len(g.context_steps)


def _held(g: _Gpu) -> int:
    return len(g.engine.pending) if g.engine.pending is not None else 0


def _window(g: _Gpu) -> list[OpBatch]:
    parts = list(g.context)
    if g.engine.pending is not None:
        parts.append(g.engine.pending)
    return parts
