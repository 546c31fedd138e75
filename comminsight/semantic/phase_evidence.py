"""How sure the place where Steps begin (their phase) is, from evidence named one by one.

The cut puts a boundary somewhere in each repetition of the op cycle; which place is right
the ops show only through what frameworks issue around an iteration's edges:

- **optimizer_end** (for the boundary): the Step ends with its optimizer. After its last
  gradient reduction come only the optimizer's scalar reductions (gradient norm, found-inf)
  and, for a sharded optimizer, the all-gathers of the updated shards on the communicator
  that reduced the gradients (ZeRO-1/2, Megatron's distributed optimizer), then maybe the
  loop's scalar bookkeeping (the loss averaged, timers). The next Step begins with neither.
- **idle** (for): the GPU idles longest before the Step's first op (optimizer, data
  loading, a host sync), far longer than anywhere inside the Step, Step after Step; that op
  is the forward's work, not a few bytes of bookkeeping (after an optimizer run on the host,
  the longest idle comes before the loop's bookkeeping, inside the Step).
- **start signal ends a Step** (against): a broadcast (a batch sent to the tensor-parallel
  ranks, DDP's buffers or rebuilt buckets, weights synced to a rollout engine) begins an
  iteration; a Step that ends with one has taken the next one's first op.
- **forward gather ends a Step** (against): a parameter all-gather on a communicator that
  gathers all through the Steps (FSDP, ZeRO-3) after the optimizer begins the next forward.
- **update begins a Step** (against): all-gathers right after the optimizer's scalars, on
  the communicator that reduced the gradients and gathers nowhere else, are the update's:
  a Step that begins with them has taken the previous one's last ops.
- **Steps without the GPU's scalars** (against): Steps that hold no scalar reduction, far
  more of them than the scalar reductions the GPU issues elsewhere (a norm on a group of
  its own, once a Step): they may be the layers or micro-batches of a longer Step.
- **count begins a Step** (against): a count agreed on before the forward (HF Trainer's
  num_items_in_batch gathered, veRL's micro-batch count reduced) begins an iteration, but
  the same few bytes could be the previous Step's bookkeeping (tokens counted for the log,
  a callback's decision), and idle time before it may be a host optimizer's.

Confidence 0.9 or more needs evidence for the phase and none against it (`PhaseVerdict`);
the reasons name what was weighed and, where the evidence disagrees, both places.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from comminsight.semantic.job_ops import P2P, GpuOps
from comminsight.semantic.local_cycle import SCALAR_BYTES, counts, optimizer_scalars, reduces
from comminsight.semantic.op_batch import FUNCS, func_code, is_func

SHARE = 0.8  # of the boundaries, at least, a piece of evidence must hold at
IDLE_RATIO = 3.0  # the idle time before a Step against the longest inside it
DOUBT_CONFIDENCE = 0.6  # evidence against the phase
UNSUPPORTED_CONFIDENCE = 0.7  # no evidence for it (and none against)
# Steps, at least, for each of the GPU's scalar reductions that none of them holds, that
# cast doubt on their being Steps (a barrier every few Steps is fewer of them)
STEPS_PER_SCALAR = 8


@dataclass
class PhaseVerdict:
    supports: list[str] = field(default_factory=list)  # evidence for the phase, named
    doubts: list[str] = field(default_factory=list)  # evidence against it, with the other place

    def confidence(self) -> float:
        if self.doubts:
            return DOUBT_CONFIDENCE
        return 1.0 if self.supports else UNSUPPORTED_CONFIDENCE

    def reasons(self, who: str) -> list[str]:
        if self.doubts:
            why = "; ".join(self.doubts)
            held = ", ".join(self.supports) if self.supports else "nothing"
            return [f"{who}: where Steps begin is in doubt: {why} (for the place taken: {held})"]
        if not self.supports:
            return [
                f"{who}: nothing shows where in its op cycle a Step begins (no optimizer "
                "after the gradient reductions, no idle time standing out): the place is a guess"
            ]
        return []


class _Ops:
    """Per op flags the judgement reads."""

    def __init__(self, g: GpuOps) -> None:
        coll = g.kind != P2P
        self.g = g
        self.scalar = coll & (g.size <= SCALAR_BYTES)
        self.scalar_reduction = optimizer_scalars(g)
        self.gradient = coll & reduces(g.func) & ~self.scalar
        self.gather = coll & is_func(g.func, "AllGather", "Broadcast")
        self.gather &= ~self.scalar
        self.broadcast = coll & (g.func == func_code("Broadcast"))
        self.count = counts(g)

    def name(self, i: int) -> str:
        return f"{FUNCS[int(self.g.func[i])]} of {int(self.g.size[i])} bytes"


def judge_phase(g: GpuOps, starts: np.ndarray, timed: bool) -> PhaseVerdict:
    """The evidence for and against Steps beginning at `starts` (op positions of the pivot's
    steady Steps, ascending; the last Step ends where the next would begin)."""
    verdict = PhaseVerdict()
    if len(starts) < 3:
        return verdict
    ops = _Ops(g)
    steps = list(zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True))
    ends_opt = starts_update = ends_start = ends_fetch = untold = lone = begins_count = 0
    gaps = g.idle_gaps().astype(np.float64) if timed else None
    # each Step with where the next one ends (the search for an update's gathers stops there)
    ends = starts[2:].tolist() + [len(g)]
    for (a, b), c in zip(steps, ends, strict=True):
        if _gathers_untold(ops, a, b, gaps):
            untold += 1
        tail = _optimizer_tail(ops, a, b)
        continues = _continues_update(ops, a, b, tail, c)
        if tail is not None and not continues:
            ends_opt += 1
            lone += int(int(ops.scalar_reduction[tail].sum()) == 1 and not ops.gather[tail].any())
        starts_update += int(continues)
        begins_count += int(ops.count[a])
        last = _last_training_op(ops, a, b)
        if last is not None and ops.broadcast[last]:
            ends_start += 1
        if last is not None and ops.gather[last] and _gathers_all_through(ops, g.comm[last], a, b):
            ends_fetch += 1
    k = len(steps)
    if ends_opt >= SHARE * k:
        verdict.supports.append("optimizer_end: each Step ends with its optimizer")
    if gaps is not None and _idle_before(gaps, steps, ops) >= SHARE * k:
        verdict.supports.append("idle: the longest idle time comes before each Step")
    idle = any(s.startswith("idle") for s in verdict.supports)
    if lone >= SHARE * k and not idle:
        verdict.doubts.append(
            "a lone scalar reduction ends each Step: an optimizer's (a gradient norm) or the "
            "next iteration's first (a count agreed on before its forward, as veRL's dynamic "
            "batches do), and idle time does not tell: the Step may instead begin with it"
        )
    if begins_count >= SHARE * k:
        verdict.doubts.append(
            f"each Step begins with a count ({ops.name(int(starts[1]))}): the next iteration's, "
            "agreed on before its forward (HF Trainer's num_items_in_batch, veRL's micro-batch "
            "count), or the previous Step's bookkeeping (tokens counted for the log, a "
            "callback's decision): the Step may instead end with it"
        )
    elsewhere = _idle_elsewhere(gaps, steps) if gaps is not None else None
    if elsewhere is not None:
        verdict.doubts.append(
            f"the GPU idles far longer before {ops.name(elsewhere)}, {elsewhere - int(starts[1])} "
            "ops into each Step, than before its first op: the Step may instead begin there"
        )
    first = int(starts[1])
    named = _last_training_op(ops, int(starts[0]), first)
    last_op = first - 1 if named is None else named  # the op the doubts below name
    if starts_update >= SHARE * k:
        verdict.doubts.append(
            f"each Step begins with the all-gathers of the update before it ({ops.name(first)}): "
            "the Step may instead begin after them"
        )
    if ends_start >= SHARE * k:
        verdict.doubts.append(
            f"each Step ends with a broadcast ({ops.name(last_op)}), which begins iterations: "
            "the Step may instead begin with it"
        )
    if untold >= SHARE * k:
        verdict.doubts.append(
            "the all-gathers next to the optimizer may be its update's (ZeRO-1/2, a "
            "distributed optimizer: they end the Step) or the next forward's (FSDP keeping "
            "parameters through the backward: they begin it), and idle time does not tell"
        )
    lone_steps = k - sum(bool(ops.scalar_reduction[a:b].any()) for a, b in steps)
    scalars = int(ops.scalar_reduction.sum())
    if scalars and lone_steps >= SHARE * k and k > STEPS_PER_SCALAR * scalars:
        verdict.doubts.append(
            f"its Steps hold no scalar reduction, yet the GPU reduces {scalars} in all, one "
            f"for every {k // scalars} or more of these Steps (an optimizer's norm, on a group "
            "of its own): each may be a layer or micro-batch of a longer Step"
        )
    if ends_fetch >= SHARE * k:
        verdict.doubts.append(
            f"each Step ends with a parameter gather ({ops.name(last_op)}) of a communicator "
            "that gathers all through the Steps (the next forward's): the Step may instead "
            "begin with it"
        )
    return verdict


def _optimizer_tail(ops: _Ops, a: int, b: int) -> np.ndarray | None:
    """The ops of Step a..b after its last gradient reduction when they are an optimizer's:
    a scalar reduction at least, else only scalars and gathers; None otherwise."""
    grads = np.flatnonzero(ops.gradient[a:b])
    if not len(grads):
        return None
    tail = np.arange(a + int(grads[-1]) + 1, b)
    if not len(tail) or not ops.scalar_reduction[tail].any():
        return None
    if not (ops.scalar[tail] | ops.gather[tail]).all():
        return None
    return tail


def _continues_update(ops: _Ops, a: int, b: int, tail: np.ndarray | None, c: int) -> bool:
    """Whether the Step after a..b (b..c) begins with gathers on the communicator whose
    gradients the Step reduced, right after its optimizer's scalars, that gather nowhere else
    in it."""
    g = ops.g
    if tail is None or b >= len(g) or not ops.gather[b] or ops.broadcast[b]:
        return False  # (a broadcast begins an iteration)
    if ops.gather[tail].any():
        return False
    comm = g.comm[b]
    if not (ops.gradient[a:b] & (g.comm[a:b] == comm)).any():
        return False
    run = b
    while run < len(g) and ops.gather[run] and g.comm[run] == comm:
        run += 1
    c = max(c, run)
    nxt = np.flatnonzero(ops.gradient[run:c] & (g.comm[run:c] == comm))
    until = run + int(nxt[0]) if len(nxt) else c
    return not (ops.gather[run:until] & (g.comm[run:until] == comm)).any()


def _last_training_op(ops: _Ops, a: int, b: int) -> int | None:
    """The Step's last op that is no scalar (bookkeeping after the optimizer aside)."""
    big = np.flatnonzero(~ops.scalar[a:b])
    return a + int(big[-1]) if len(big) else None


def _gathers_all_through(ops: _Ops, comm: int, a: int, b: int) -> bool:
    """Whether `comm` gathers before its Step's gradient reductions end as well (parameters
    fetched for compute, not an update's)."""
    g = ops.g
    grads = np.flatnonzero(ops.gradient[a:b] & (g.comm[a:b] == comm))
    if not len(grads):
        return False
    before = slice(a, a + int(grads[-1]))
    return bool((ops.gather[before] & (g.comm[before] == comm)).any())


def _idle_before(gaps: np.ndarray, steps: list[tuple[int, int]], ops: _Ops) -> int:
    """How many Steps idle before their first op IDLE_RATIO times longer than anywhere inside
    (`gaps`: the idle time before each op), that op being the forward's work: an optimizer
    run on the host (CPU offload) idles the GPU longest before the loop's bookkeeping of a
    few bytes after it, inside the Step."""
    count = 0
    for a, b in steps:
        if ops.scalar[a]:
            continue
        inside = gaps[a + 1 : b]  # a Step of one op says nothing of where Steps begin
        if len(inside) and gaps[a] >= IDLE_RATIO * (float(inside.max()) + 1.0):
            count += 1
    return count


def _idle_elsewhere(gaps: np.ndarray, steps: list[tuple[int, int]]) -> int | None:
    """The op (of the second Step) before which the GPU idles IDLE_RATIO times longer than
    before the Step's first op, at the same place in nearly every Step; None if none."""
    places = []
    for a, b in steps:
        inside = gaps[a + 1 : b]
        if not len(inside):
            return None
        at = int(np.argmax(inside))
        if inside[at] >= IDLE_RATIO * (gaps[a] + 1.0):
            places.append(at + 1)
    if not places:
        return None
    values, counts = np.unique(places, return_counts=True)
    if counts.max() < SHARE * len(steps):
        return None
    return steps[1][0] + int(values[np.argmax(counts)]) if len(steps) > 1 else None


def _gathers_untold(ops: _Ops, a: int, b: int, gaps: np.ndarray | None) -> bool:
    """Whether Step a..b has a block of gathers next to its optimizer (ending the Step, after
    its scalars; or beginning it, on the communicator that reduces its gradients and
    gathers nowhere else in it) that idle time does not place: an update's gathers come
    right after the optimizer and the next forward's only after the idle time between."""
    g = ops.g
    tail = _optimizer_tail(ops, a, b)
    if tail is not None and ops.gather[tail].any():  # taken as the update's
        block = tail[ops.gather[tail]]
        return gaps is None or b >= len(g) or gaps[block[0]] * IDLE_RATIO > gaps[b]
    if not ops.gather[a]:
        return False
    comm = g.comm[a]
    end = a
    while end < b and ops.gather[end] and g.comm[end] == comm:
        end += 1
    mine = g.comm[end:b] == comm
    if not (ops.gradient[end:b] & mine).any() or (ops.gather[end:b] & mine).any():
        return False
    before = _optimizer_tail(ops, max(0, a - (b - a)), a)
    if before is None:
        return False  # taken as the forward's: no optimizer right before them
    return gaps is None or end >= b or gaps[a] < IDLE_RATIO * gaps[end]
