"""One GPU's own evidence of where repetitions begin: the cycle of its op keys.

A GPU's ops repeat once per training Step, and inside a Step again per micro-batch and per
layer. `local_units` finds the shortest cycle that covers the GPU's ops well (extra ops
rarer than once per cycle do not count against it) and the ops where each repetition of it
begins ("units"). On a GPU that sees the whole Step (a data-parallel rank, a first pipeline
stage) a unit is a Step; on one that sees only the inner loop (a last pipeline stage, a
tensor-parallel rank without data parallelism) a unit is a micro-batch: which one is decided
across ranks (job_cut), not here.

An op's key is (communicator, function, size). Where the sizes of a communicator's function
change from op to op (router-dependent all-to-all of a mixture of experts) the size is left
out of the key, or nothing would ever repeat.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.cycle import Cycle, learn_cycles_codes, rare_key_floors
from comminsight.semantic.job_ops import P2P, GpuOps
from comminsight.semantic.op_batch import func_code

OFF = 1 << 30  # the key code of an op that is on no position of the cycle
MAX_FLOORS = 8
COVERAGE_SLACK = 0.05  # a shorter cycle this close to the best coverage is the Step's
WHOLE_UNITS = 0.9  # share of its repetitions a Step's cycle completes
SUPER_CYCLE_COVERAGE = 0.75  # a per-Step cycle under extra ops still covers this much
SUPER_CYCLE_EXTRAS = 0.25  # extra ops of a cycle of several Steps, at most, per its length
SUPER_CYCLE_IDLE = 0.5  # idle before each Step, at least, against before each super-cycle
FIRST_PROBE = 1024  # elements the first cycle probe holds (x4 while none covers well)
SCALAR_BYTES = 64  # a few scalars: a gradient norm, a found-inf flag, a loss
STARTUP_SMALL_BYTES = 4096  # barriers, object gathers (sizes, then small pickles)
LOCAL_SPAN = 0.3  # sizes whose recurrences span less of the run than this vary (module docstring)
MIN_OPS_VARYING = 8


@dataclass
class LocalUnits:
    period: int  # ops per repetition; 0 when nothing repeats
    starts: np.ndarray  # op positions where a repetition begins, ascending
    on_cycle: np.ndarray  # bool per op: the op has its place in the cycle
    coverage: float  # share of the ops from the first unit on that are on the cycle
    keys: np.ndarray  # each op's key code
    first_key: int  # the key a repetition begins with; -1 when none
    doubt: str | None = None  # why a repetition may be several Steps

    @property
    def found(self) -> bool:
        return self.period > 0


def key_codes(g: GpuOps) -> np.ndarray:
    """Each op's key code, sizes left out where they vary (see the module docstring). Work
    over the ops is done by distinct shape (native.shapes): a run repeats a few hundred."""
    n = len(g)
    if not n:
        return np.zeros(0, np.int64)
    peer = np.where(g.kind == P2P, g.peer & 0xFFFFF, 0)
    first, shape = native.shapes(g.comm, (g.func << 1) | g.kind, peer, g.size)
    # per shape: its (kind, communicator, function, peer) and size
    _, kcf = np.unique(
        (g.comm[first] << 28) | (peer[first] << 8) | (g.func[first] << 1) | g.kind[first],
        return_inverse=True,
    )
    kcf = kcf.reshape(-1)
    varying = _sizes_vary(kcf, shape, first, n)
    size = np.where(varying[kcf], -1, g.size[first])
    _, shape_key = np.unique(_pack(kcf, size), return_inverse=True)
    return shape_key.reshape(-1).astype(np.int64)[shape]


def _pack(code: np.ndarray, size: np.ndarray) -> np.ndarray:
    """(code, size or -1) as one int64 that sorts alike."""
    width = int(size.max(initial=0)) + 2
    return code.astype(np.int64) * width + (size + 1)


def _sizes_vary(kcf: np.ndarray, shape: np.ndarray, first: np.ndarray, n: int) -> np.ndarray:
    """Per (kind, communicator, function, peer) of the shapes (`kcf`, by shape): whether its
    sizes stay local in time. A size a training loop uses again every Step recurs over the
    whole run; a router's size recurs, if at all, within one Step. Measured per op: the span
    between the first and the last op of its shape, over the span of all ops of its kind;
    varying when the median over its ops is short."""
    k = len(kcf)
    shape_first = first.astype(np.int64)
    shape_last = np.zeros(k, np.int64)
    np.maximum.at(shape_last, shape, np.arange(n))
    count = np.bincount(shape, minlength=k)
    groups = int(kcf.max()) + 1
    kcf_first = np.full(groups, n, np.int64)
    kcf_last = np.zeros(groups, np.int64)
    np.minimum.at(kcf_first, kcf, shape_first)
    np.maximum.at(kcf_last, kcf, shape_last)
    ratio = (shape_last - shape_first) / np.maximum(1, kcf_last[kcf] - kcf_first[kcf])
    kcf_count = np.bincount(kcf, weights=count, minlength=groups)
    varying = np.zeros(groups, bool)
    for c in np.flatnonzero(kcf_count >= MIN_OPS_VARYING).tolist():
        mine = np.flatnonzero(kcf == c)
        order = mine[np.argsort(ratio[mine])]
        cumulative = np.cumsum(count[order])
        median = ratio[order[np.searchsorted(cumulative, cumulative[-1] / 2)]]
        varying[c] = median < LOCAL_SPAN
    return varying


def follow(keys: np.ndarray, cycle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each repetition of `cycle` begins in `keys`, and which ops are on it."""
    n = len(keys)
    on = np.isin(keys, cycle)
    ckey = np.where(on, _index_in(keys, cycle), OFF).astype(np.int32)
    # keys repeated inside the cycle share the code of their first place
    first_place: dict[int, int] = {}
    for i, k in enumerate(cycle.tolist()):
        first_place.setdefault(k, i)
    cyc = np.array([first_place[k] for k in cycle.tolist()], np.int32)
    dec, _, _, _ = native.decide(
        np.zeros(n, np.int32), ckey, cyc, None, 1, 0, 0, False, period=True
    )
    starts = np.flatnonzero((dec & native.B_MASK) == native.B_BEGIN)
    on_cycle = (dec & native.IN_STEP).astype(bool) & ~(dec & native.UNEXPECTED).astype(bool)
    return starts, on_cycle


def _index_in(keys: np.ndarray, cycle: np.ndarray) -> np.ndarray:
    first_place: dict[int, int] = {}
    for i, k in enumerate(cycle.tolist()):
        first_place.setdefault(k, i)
    lookup = np.full(int(max(keys.max(initial=0), cycle.max(initial=0))) + 1, OFF, np.int64)
    for k, i in first_place.items():
        lookup[k] = i
    return lookup[keys]


def key_floors(counts: np.ndarray, n: int) -> list[float]:
    """Counts below which keys are taken for extra ops (rarer than once per repetition):
    none, then each distinct count in turn (at most MAX_FLOORS of them, spread out)."""
    distinct = np.unique(counts[counts > 0])
    floors = set(rare_key_floors(counts[counts > 0].tolist(), n))
    if len(distinct) > MAX_FLOORS:
        distinct = distinct[np.linspace(0, len(distinct) - 1, MAX_FLOORS).astype(int)]
    floors.update(float(c) + 0.5 for c in distinct[:-1])
    return sorted(floors)


class Elements:
    """The GPU's ops with each NCCL group made one element (the Send and Recv to every
    peer of an all-to-all, a pipeline's send-forward-receive-backward): a group repeats
    as one step of the cycle however its members are ordered. An element's key is the
    set of its members' keys."""

    def __init__(
        self,
        keys: np.ndarray,
        group: np.ndarray,
        small: np.ndarray,
        cf: np.ndarray,
        gather: np.ndarray,
        reduction: np.ndarray,
    ) -> None:
        """Per op: `small`, a collective of a few scalars; `cf`, its (communicator,
        function) code; `gather`, an all-gather or broadcast. Per element key: `small` and
        `gathers` (every member so), `comm_func` (its first member's)."""
        self._init(keys, group)
        n_keys = int(self.keys.max()) + 1 if len(self.keys) else 0
        self.small = np.ones(n_keys, bool)
        np.logical_and.at(self.small, self.keys[self.of_op], small)
        self.gathers = np.ones(n_keys, bool)
        np.logical_and.at(self.gathers, self.keys[self.of_op], gather)
        self.reductions = np.ones(n_keys, bool)
        np.logical_and.at(self.reductions, self.keys[self.of_op], reduction)
        self.comm_func = np.zeros(n_keys, np.int64)
        self.comm_func[self.keys] = cf[self.first]

    def _init(self, keys: np.ndarray, group: np.ndarray) -> None:
        n = len(keys)
        grouped = group > 0
        new = np.ones(n, bool)
        if n > 1:
            new[1:] = ~(grouped[1:] & (group[1:] == group[:-1]))
        self.first = np.flatnonzero(new)  # op index of each element's first op
        self.of_op = np.cumsum(new) - 1  # element of each op
        if new.all():
            self.keys = keys
            return
        member_sets: dict[tuple, int] = {}
        bounds = np.append(self.first, n).tolist()
        codes = [
            member_sets.setdefault(tuple(sorted(set(keys[a:b].tolist()))), len(member_sets))
            if b - a > 1
            else -1 - int(keys[a])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        _, self.keys = np.unique(np.array(codes, np.int64), return_inverse=True)
        self.keys = self.keys.reshape(-1).astype(np.int64)


def startup_prefix(g: GpuOps) -> int:
    """How many ops the start-up takes before training: the longest prefix of broadcasts
    (DDP's and DeepSpeed's per-parameter broadcasts of the model from rank 0) and small
    collectives (barriers, all_gather_object), where the ops after it repeat. A pattern of
    the start-up (one broadcast per parameter of each layer) repeats as well as a Step's,
    but says nothing of the Steps."""
    small = (g.kind != P2P) & (g.size <= STARTUP_SMALL_BYTES)
    startup_like = small | (g.func == func_code("Broadcast"))
    if not len(g) or startup_like.all():
        return 0
    return int(np.argmin(startup_like))


def local_units(g: GpuOps, gaps: np.ndarray | None = None, final: bool = True) -> LocalUnits:
    """The cycle that describes the GPU's ops most briefly: its length plus what the ops off
    it, and the ops missing from repetitions cut short, cost to name one by one (log2 of the
    op count each). Extra ops every few Steps cost little, so the per-Step cycle beats one
    of several Steps; a per-layer cycle leaves a Step's other ops off and costs more."""
    op_keys = key_codes(g)
    n = len(op_keys)
    none = LocalUnits(0, np.zeros(0, np.int64), np.zeros(n, bool), 0.0, op_keys, -1)
    if n < 2:
        return none
    if gaps is None:
        gaps = g.idle_gaps()
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    gather = (g.kind != P2P) & np.isin(g.func, [func_code("AllGather"), func_code("Broadcast")])
    reduction = (
        (g.kind != P2P)
        & np.isin(g.func, [func_code("AllReduce"), func_code("ReduceScatter")])
        & ~small
    )
    el = Elements(op_keys, g.group, small, (g.comm << 8) | g.func, gather, reduction)
    timed = bool(g.host_issue.any())  # else idle gaps are not measured (NVIDIA logs)
    skip = int(np.searchsorted(el.first, startup_prefix(g)))  # elements of the start-up
    keys, el_gaps, m = el.keys[skip:], gaps[el.first[skip:]], len(el.keys) - skip
    ids = np.arange(int(keys.max()) + 1 if m else 0)
    op_cost = np.log2(max(2, m))
    candidates: list[tuple[float, LocalUnits]] = []
    learned: set[tuple] = set()
    # Cycles are learned from a probe of the first ops after the start-up (learning costs
    # probe length x longest period), grown until one covers the GPU's ops well, and then
    # followed over every op.
    probe = min(m, FIRST_PROBE)
    while True:
        for floor in key_floors(np.bincount(keys[:probe], minlength=len(ids)), probe):
            kept = np.bincount(keys[:probe], minlength=len(ids))[keys[:probe]] >= floor
            for cycle in _learn(keys[:probe][kept], el_gaps[:probe][kept], ids, final):
                if cycle.keys in learned:
                    continue
                learned.add(cycle.keys)
                cyc = np.array(cycle.keys, np.int64)
                if not timed:
                    cyc = after_reductions(cyc, el.reductions, keys)
                cyc = after_optimizer(cyc, el.small, el.comm_func, el.gathers)
                found = _follow_cost(keys, cyc, op_cost)
                if found is not None:
                    cost, starts, on_cycle, coverage, whole = found
                    on_all = np.concatenate([np.zeros(skip, bool), on_cycle])
                    units = _in_ops(el, cyc, starts + skip, on_all, coverage)
                    candidates.append((cost, whole, units))
        if probe >= m or max((c[2].coverage for c in candidates), default=0.0) >= 0.9:
            break
        probe = min(m, probe * 4)
    if not candidates:
        return none
    chosen = _shortest_covering(candidates)
    if timed:
        chosen.doubt = _super_cycle_doubt(chosen, candidates, gaps)
    return chosen


def _super_cycle_doubt(
    chosen: LocalUnits, candidates: list[tuple[float, float, LocalUnits]], gaps: np.ndarray
) -> str | None:
    """Why the chosen cycle may hold several Steps, or None: a shorter cycle repeats whole
    inside it a few times, with a few extra ops beside (an evaluation every third Step looks
    so, and so do a pipeline's micro-batches before its optimizer), and the GPU idles as long
    before each of the shorter one's repetitions. Which of the two is the Step the ops do
    not tell: the boundaries stay, their confidence falls."""
    if not len(chosen.starts):
        return None
    idle = float(np.median(gaps[chosen.starts]))
    for _, whole, u in candidates:
        if (
            2 * u.period <= chosen.period
            and whole >= WHOLE_UNITS
            and u.coverage >= SUPER_CYCLE_COVERAGE
            and chosen.period % u.period <= SUPER_CYCLE_EXTRAS * chosen.period
            and float(np.median(gaps[u.starts])) >= SUPER_CYCLE_IDLE * idle
        ):
            return (
                f"its {chosen.period}-op cycle holds a {u.period}-op cycle "
                f"{chosen.period // u.period} times, each after as long an idle time: "
                "each may be a Step"
            )
    return None


def _shortest_covering(candidates: list[tuple[float, float, LocalUnits]]) -> LocalUnits:
    """The Step's cycle among the candidates: the shortest that covers the ops nearly as
    well as the best one does, with repetitions that are whole. Extra ops every few Steps
    (an evaluation, the loss logged every tenth Step) leave a cycle of several Steps only a
    little better covered than the per-Step one, and a cycle of several Steps is the shorter
    description of a long run (which is why description length alone does not decide); a
    per-layer cycle leaves a Step's other ops off and falls short of the coverage."""
    best = max(c[2].coverage for c in candidates)
    eligible = [
        c for c in candidates if c[2].coverage >= best - COVERAGE_SLACK and c[1] >= WHOLE_UNITS
    ]
    if not eligible:
        return min(candidates, key=lambda c: (c[0], c[2].period))[2]
    return min(eligible, key=lambda c: (c[2].period, c[0]))[2]


def _learn(keys: np.ndarray, gaps: np.ndarray, ids: np.ndarray, final: bool) -> list[Cycle]:
    if len(keys) < 2:
        return []
    cycles = learn_cycles_codes(keys, gaps, ids, min_repeats=3)
    if not cycles and final:
        cycles = learn_cycles_codes(keys, gaps, ids, min_repeats=2)
    return cycles


def _follow_cost(keys: np.ndarray, cyc: np.ndarray, op_cost: float):
    """The cycle followed over every op: (its description length, repetition starts, ops on
    it, coverage), or None when it never begins. Repetitions cut short count as much as ops
    off the cycle (the last may be cut by the end of input)."""
    starts, on_cycle = follow(keys, cyc)
    if not len(starts):
        return None
    tail = on_cycle[starts[0] :]
    coverage = float(tail.mean()) if len(tail) else 0.0
    on_counts = np.add.reduceat(on_cycle.astype(np.int64), starts)[:-1]
    missing = int(np.maximum(0, len(cyc) - on_counts).sum())
    cost = len(cyc) + float((~tail).sum() + missing) * op_cost
    whole = float((on_counts >= len(cyc)).mean()) if len(on_counts) else 1.0
    return cost, starts, on_cycle, coverage, whole


def after_optimizer(
    cyc: np.ndarray, small: np.ndarray, comm_func: np.ndarray, gathers: np.ndarray
) -> np.ndarray:
    """The cycle rotated to begin where a Step begins, when its ops show it: a Step ends
    with its optimizer, whose scalar reductions (gradient norm, found-inf, a success flag,
    the loss) come once per Step, together, with nothing between them that repeats within
    the Step, then maybe the parameter all-gathers or broadcasts of a sharded optimizer's
    update (on a communicator and function the cycle uses nowhere else). Where the scalars
    are spread over the Step (an auxiliary loss per layer) the rotation the idle gaps chose
    stays. `gathers`: per element key, an all-gather or broadcast."""
    p = len(cyc)
    is_small = small[cyc]
    if p < 2 or not is_small.any() or is_small.all():
        return cyc
    uses = Counter(cyc.tolist())
    once = np.array([uses[k] == 1 for k in cyc.tolist()])
    last = _last_scalar(is_small, once)
    if last is None:
        return cyc
    cf = comm_func[cyc]
    cf_uses = Counter(cf.tolist())
    k = (last + 1) % p
    update: Counter = Counter()
    while not is_small[k] and gathers[cyc[k]] and k != last:
        update[int(cf[k])] += 1
        k = (k + 1) % p
    # the update's pairs must be its own; else they are the next Step's first gathers
    if any(cf_uses[c] != n for c, n in update.items()):
        k = (last + 1) % p
    return np.roll(cyc, -k)


def after_reductions(cyc: np.ndarray, reductions: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Without measured idle time, the cycle rotated to begin the longest stretch free of
    gradient reductions (all-reduces and reduce-scatters of more than a few scalars): a
    Step's forward pass (parameter gathers, expert all-to-alls), after the previous Step's
    backward reduced its gradients. A cycle of reductions only (DDP's buckets) begins after
    the op the run ended with, when that op has one place in the cycle: a run ends with a
    whole Step."""
    red = reductions[cyc]
    if red.all():
        on = keys[np.isin(keys, cyc)]
        last = np.flatnonzero(cyc == on[-1]) if len(on) else []
        return np.roll(cyc, -(int(last[0]) + 1)) if len(last) == 1 else cyc
    if not red.any():
        return cyc
    best, best_len, run = 0, -1, 0
    p = len(cyc)
    for k in range(2 * p):  # twice round: a stretch may wrap
        if red[k % p]:
            run = 0
            continue
        run += 1
        if best_len < run <= p:
            best_len, best = run, (k - run + 1) % p
    return np.roll(cyc, -best)


def _last_scalar(is_small: np.ndarray, once: np.ndarray) -> int | None:
    """The position of the optimizer's last scalar reduction: the end of a run of scalars
    from which, going back, every other scalar is reached through scalars and ops the
    cycle has once; None when no run is so."""
    p = len(is_small)
    total = int(is_small.sum())
    for end in np.flatnonzero(is_small & ~np.roll(is_small, -1)).tolist():
        seen, k = 0, end
        for _ in range(p):
            if is_small[k]:
                seen += 1
            elif not once[k]:
                break
            k = (k - 1) % p
        if seen == total:
            return end
    return None


def _in_ops(
    el: Elements, cyc: np.ndarray, starts: np.ndarray, on_cycle: np.ndarray, coverage: float
) -> LocalUnits:
    """A cycle found over elements, told in ops (what the job cut works on)."""
    op_starts = el.first[starts]
    op_on = on_cycle[el.of_op]
    per_unit = np.add.reduceat(op_on.astype(np.int64), op_starts)
    period = int(np.median(per_unit[:-1])) if len(per_unit) > 1 else int(per_unit[0])
    op_keys = el.keys[el.of_op]
    return LocalUnits(max(1, period), op_starts, op_on, coverage, op_keys, int(cyc[0]))
