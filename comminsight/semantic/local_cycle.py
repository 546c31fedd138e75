"""One GPU's own evidence of where repetitions begin: the cycle of its op keys.

A GPU's ops repeat once per training Step, and inside a Step again per micro-batch and per
layer. `local_units` finds the shortest cycle that covers the GPU's ops well (extra ops
rarer than once per cycle do not count against it) and the ops where each repetition of it
begins ("units"). On a GPU that sees the whole Step (a data-parallel rank, a first pipeline
stage) a unit is a Step; on one that sees only the inner loop (a last pipeline stage, a
tensor-parallel rank without data parallelism) a unit is a micro-batch: which one is decided
across ranks (job_cut), not here.

Where the GPU's ops repeat on one communicator only (RL training: the rollout engine's
generation issues a data-dependent number of ops on its own communicators) the cycle is
that communicator's, and each optimizer in it ends a Step (_units_on_one_comm).

An op's key is (communicator, function, size). Where the sizes of a communicator's function
change from op to op (router-dependent all-to-all of a mixture of experts) the size is left
out of the key, or nothing would ever repeat.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.cycle import MIN_REPEATS, Cycle, learn_cycles_codes, rare_key_floors
from comminsight.semantic.job_ops import P2P, GpuOps
from comminsight.semantic.op_batch import func_code, is_func
from comminsight.semantic.ops import counts_of

OFF = 1 << 30  # the key code of an op that is on no position of the cycle
MAX_FLOORS = 8
COVERAGE_SLACK = 0.05  # a shorter cycle this close to the best coverage is the Step's
WHOLE_UNITS = 0.9  # share of its repetitions a Step's cycle completes
SUPER_CYCLE_COVERAGE = 0.75  # a per-Step cycle under extra ops still covers this much
SUPER_CYCLE_EXTRAS = 0.25  # extra ops of a cycle of several Steps, at most, per its length
SUPER_CYCLE_IDLE = 0.5  # idle before each Step, at least, against before each super-cycle
FIRST_PROBE = 1024  # elements the first cycle probe holds (x4 while none covers well)
SCALAR_BYTES = 64  # a few scalars: a gradient norm, a found-inf flag, a loss
COUNT_GATHER_BYTES = 8  # one 64-bit integer a rank
STARTUP_SMALL_BYTES = 4096  # barriers, object gathers (sizes, then small pickles)
LOCAL_SPAN = 0.3  # sizes whose recurrences span less of the run than this vary (module docstring)
MIN_OPS_VARYING = 8
ONE_COMM_BELOW = 0.9  # a GPU's best cycle covering less than this: try one communicator
ONE_COMM_COVERAGE = 0.9  # a communicator's own cycle covers this much of its ops
ONE_COMM_MIN_OPS = 32
OPTIMIZERS_BELOW = 0.5  # no cycle covers even this much: Steps by their optimizer alone
# the collectives that reduce gradients: all-reduce, reduce-scatter, and reduce to each
# partition's owner (DeepSpeed ZeRO-1/2 without its multi-rank bucket all-reduce)
GRADIENT_FUNCS = ("AllReduce", "ReduceScatter", "Reduce")


def reduces(func: np.ndarray) -> np.ndarray:
    """Per op (function codes): a collective of a kind that reduces gradients."""
    return is_func(func, *GRADIENT_FUNCS)


def optimizer_scalars(g: GpuOps) -> np.ndarray:
    """Per op, a scalar all-reduce of no count: what an optimizer reduces (a gradient norm,
    a found-inf flag), not what the next iteration agrees on before its forward."""
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    return small & (g.func == func_code("AllReduce")) & ~counts_of(g.datatype)


def counts(g: GpuOps) -> np.ndarray:
    """Per op, whether it is a count an iteration agrees on before its forward: a scalar
    reduction of integers (veRL's micro-batch count, torchtitan's tokens), or an all-gather
    of one 64-bit integer per rank (HF Trainer's num_items_in_batch and tokens seen; the
    loss it gathers to log is one float) that no object gather follows."""
    coll = g.kind != P2P
    small_reduction = coll & (g.size <= SCALAR_BYTES) & reduces(g.func)
    gather = coll & (g.func == func_code("AllGather"))
    gathered = gather & (g.size == COUNT_GATHER_BYTES)
    # all_gather_object gathers each rank's size so, then at once the pickled objects
    objects = np.zeros(len(g), bool)
    if len(g) > 1:
        objects[:-1] = gather[1:] & (g.comm[1:] == g.comm[:-1]) & (g.size[1:] != COUNT_GATHER_BYTES)
        objects[:-1] &= g.size[1:] <= STARTUP_SMALL_BYTES
    return (small_reduction & counts_of(g.datatype)) | (gathered & ~objects)


@dataclass
class LocalUnits:
    period: int  # ops per repetition; 0 when nothing repeats
    starts: np.ndarray  # op positions where a repetition begins, ascending
    on_cycle: np.ndarray  # bool per op: the op has its place in the cycle
    coverage: float  # share of the ops from the first unit on that are on the cycle
    keys: np.ndarray  # each op's key code
    first_key: int  # the key a repetition begins with; -1 when none
    doubt: str | None = None  # why a repetition may be several Steps
    # where each Step begins when a repetition holds several optimizer steps (PPO updates
    # after a rollout: after_last_update), and why those Steps are less sure
    step_starts: np.ndarray | None = None
    note: str | None = None
    optimizers_only: bool = False  # no cycle: Steps end where the optimizers do
    fragments: int = 0  # repetitions before the first whole one, left as fragments

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
    # a count (see `counts`) keeps a key of its own where the other sizes of its function
    # vary: the count HF Trainer gathers is not the loss it gathers to log
    func = (g.func << 2) | (counts(g).astype(np.int64) << 1) | g.kind
    first, shape = native.shapes(g.comm, func, peer, g.size)
    # per shape: its (kind, communicator, function, count or not, peer) and size
    _, kcf = np.unique(
        (g.comm[first] << 40) | (peer[first] << 16) | func[first], return_inverse=True
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
    # keys repeated inside the cycle share the code of their first place
    first_place: dict[int, int] = {}
    for i, k in enumerate(cycle.tolist()):
        first_place.setdefault(k, i)
    ckey = _index_in(keys, first_place).astype(np.int32)
    cyc = np.array([first_place[k] for k in cycle.tolist()], np.int32)
    dec, _, _, _ = native.decide(_zeros32(n), ckey, cyc, None, 1, 0, 0, False, period=True)
    starts = np.flatnonzero((dec & native.B_MASK) == native.B_BEGIN)
    on_cycle = (dec & native.IN_STEP).astype(bool) & ~(dec & native.UNEXPECTED).astype(bool)
    return starts, on_cycle


def _index_in(keys: np.ndarray, first_place: dict[int, int]) -> np.ndarray:
    """Each key's first place in the cycle, OFF for keys off it."""
    top = max(int(keys.max(initial=0)), max(first_place, default=0))
    lookup = np.full(top + 1, OFF, np.int64)
    lookup[list(first_place)] = list(first_place.values())
    return lookup[keys]


def _zeros32(n: int) -> np.ndarray:
    """n zero roles: a cycle followed alone has one role. Read only, so shared."""
    global _ZEROS
    if len(_ZEROS) < n:
        _ZEROS = np.zeros(max(n, 2 * len(_ZEROS)), np.int32)
        _ZEROS.flags.writeable = False
    return _ZEROS[:n]


_ZEROS = np.zeros(0, np.int32)


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
        broadcast: np.ndarray | None = None,
        count: np.ndarray | None = None,
        few_bytes: np.ndarray | None = None,
    ) -> None:
        """Per op: `small`, a scalar reduction; `cf`, its (communicator, function) code;
        `gather`, an all-gather or broadcast; `count`, a count (see `counts`); `few_bytes`, a
        collective of a few scalars, of any function. Per element key: `small`, `gathers`,
        `counts`, `few_bytes` (every member so), `comm_func` (its first member's)."""
        self._init(keys, group)
        n_keys = int(self.keys.max()) + 1 if len(self.keys) else 0
        self.key_of_op = self.keys[self.of_op]  # each op's element key

        def every_member(flag: np.ndarray) -> np.ndarray:
            return np.bincount(self.key_of_op, weights=~flag, minlength=n_keys) == 0

        self.small = every_member(small)
        self.gathers = every_member(gather)
        self.reductions = every_member(reduction)
        self.broadcasts = every_member(broadcast if broadcast is not None else np.zeros_like(small))
        self.counts = every_member(count if count is not None else np.zeros_like(small))
        self.few_bytes = every_member(few_bytes if few_bytes is not None else small)
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


def _units_on_one_comm(g: GpuOps, gaps: np.ndarray, final: bool) -> LocalUnits | None:
    """Steps that repeat on one communicator while the GPU's other ops do not: RL training
    generates with its inference engine's own communicators, a data-dependent number of
    per-token all-reduces between the trainer's ops, which repeat once per iteration on the
    trainer's data-parallel communicator (weights synced to the engine, the experience's
    forward passes, the PPO updates). The cycle of each communicator's ops alone, beginning
    after an optimizer (gradient reductions, then a scalar reduction: the clipped gradient
    norm): of those covering their communicator's ops well, the coarsest. Each optimizer in
    it ends a Step, so an iteration of several PPO updates is as many Steps (`step_starts`);
    the other communicators' ops lie inside them."""
    best: tuple[int, np.ndarray, LocalUnits] | None = None
    for comm in np.unique(g.comm).tolist():
        mine = g.comm == comm
        if mine.sum() < ONE_COMM_MIN_OPS:
            continue
        u = _local_units(_subset(g, mine), gaps[mine], final, one_comm=True)
        if not u.found or u.coverage < ONE_COMM_COVERAGE:
            continue
        if best is None or u.period > best[2].period:
            best = (comm, mine, u)
    if best is None:
        return None
    comm, mine, u = best
    at = np.flatnonzero(mine)
    on_cycle = np.zeros(len(g), bool)
    on_cycle[at] = u.on_cycle
    keys = key_codes(g)
    return LocalUnits(
        u.period,
        at[u.starts],
        on_cycle,
        u.coverage,
        keys,
        int(keys[at[u.starts[0]]]),
        step_starts=at[u.step_starts],
        fragments=u.fragments,
        note=(
            f"Steps repeat on one communicator only ({int(mine.sum())} of its "
            f"{len(g)} ops; the others' vary in number from Step to Step); {u.note}"
        ),
    )


def _units_by_optimizers(g: GpuOps, across: bool = False) -> LocalUnits | None:
    """Steps where nothing repeats whole, not even on one communicator (RL training whose
    PPO updates accumulate a data-dependent number of micro-batches, as veRL's dynamic
    batch sizes make them): each ends with its optimizer, a gradient reduction followed by
    the scalar reduction of the gradient norm (one per parameter group), and the next begins
    after it. Of the GPU's communicators, the one with the most such optimizers, all alike
    and at least MIN_REPEATS + 1 of them; the first Step begins after its start-up. With
    `across`, the GPU's ops of every communicator together are tried too (Megatron's
    tensor-parallel ranks reduce their gradients' statistics on groups of their own)."""
    best = None
    comms: list = np.unique(g.comm).tolist() + ([None] if across else [])
    for comm in comms:
        mine = np.ones(len(g), bool) if comm is None else g.comm == comm
        at = np.flatnonzero(mine)
        if len(at) < ONE_COMM_MIN_OPS:
            continue
        sub = _subset(g, mine)
        keys = key_codes(sub)
        small = (sub.kind != P2P) & (sub.size <= SCALAR_BYTES)
        red = (sub.kind != P2P) & reduces(sub.func) & ~small
        scalar_reduction = optimizer_scalars(sub)
        first = startup_prefix(sub)
        after = _only_after(keys[first:])  # a barrier of the start-up is no gradient norm
        ends, opening = [], set()
        for i in np.flatnonzero(scalar_reduction[1:] & red[:-1]).tolist():
            if i + 1 < first:
                continue
            opening.add(int(keys[i + 1]))
            e = i + 1
            # the norms of every parameter group, and scalars that come only after them
            # (the norms after a found-inf flag) end the Step too
            while (
                e + 1 < len(keys)
                and scalar_reduction[e + 1]
                and (keys[e + 1] == keys[e] or after.get(int(keys[e + 1])) == int(keys[e]))
            ):
                e += 1
            ends.append(_past_update_gathers(g, at, sub, e, red))
        if len(ends) <= MIN_REPEATS or len(opening) != 1:
            continue
        if best is None or len(ends) > len(best[1]):
            best = (at, ends, first)
    if best is None:
        return None
    at, ends, first = best
    starts = np.array([first] + [e + 1 for e in ends[:-1]], np.int64)
    on_cycle = np.zeros(len(g), bool)
    on_cycle[at[first : ends[-1] + 1]] = True
    keys = key_codes(g)
    period = int(np.median(np.diff(np.append(starts, ends[-1] + 1))))
    return LocalUnits(
        period,
        at[starts],
        on_cycle,
        1.0,
        keys,
        int(keys[at[first]]),
        step_starts=at[starts],
        optimizers_only=True,
        note=(
            f"no op cycle covers its ops: Steps end at its {len(ends)} optimizers (a "
            "gradient reduction, then a scalar reduction) on one communicator"
        ),
    )


def _past_update_gathers(g: GpuOps, at: np.ndarray, sub: GpuOps, e: int, red: np.ndarray) -> int:
    """Where an optimizer ends on one communicator's ops (`sub`, at positions `at` of the
    GPU's), from its last scalar `e`: past the gathers right after it when the GPU's very
    next op is that communicator's next gradient reduction (a sharded update's gathers,
    ZeRO-1/2: the forward between issues no collective). Gathers followed by other work
    (the weights synced to a rollout engine, then its generation) begin the next Step."""
    gather = (sub.kind != P2P) & is_func(sub.func, "AllGather", "Broadcast")
    if (red[:-1] & gather[1:]).any():
        return e  # it gathers right after reducing too: parameters fetched all through (FSDP)
    end = e
    while end + 1 < len(sub) and gather[end + 1]:
        end += 1
    if end == e or end + 1 >= len(sub) or not red[end + 1]:
        return e
    return end if at[end + 1] == at[end] + 1 else e


def _only_after(keys: np.ndarray) -> dict[int, int]:
    """For each key that follows one other key only (itself aside), that key."""
    if len(keys) < 2:
        return {}
    pairs = np.unique(np.stack([keys[1:], keys[:-1]]), axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    key, count = np.unique(pairs[0], return_counts=True)
    single = set(key[count == 1].tolist())
    return {int(k): int(b) for k, b in zip(pairs[0], pairs[1], strict=True) if int(k) in single}


def _subset(g: GpuOps, mask: np.ndarray) -> GpuOps:
    """The GPU's ops where `mask` holds, as GpuOps of their own."""
    return dataclasses.replace(
        g,
        **{
            f.name: getattr(g, f.name)[mask]
            for f in dataclasses.fields(g)
            if isinstance(getattr(g, f.name), np.ndarray) and len(getattr(g, f.name)) == len(g)
        },
    )


def after_last_update(
    cyc: np.ndarray, small: np.ndarray, reductions: np.ndarray
) -> tuple[np.ndarray, list[int]]:
    """A cycle of several optimizer steps (PPO updates after a rollout), rotated to begin
    after the last of them, and where each of them ends in the rotated cycle. An optimizer
    step is a gradient reduction followed by scalar reductions of the gradient norm
    (elements of one key, one per parameter group); the last is the one followed by the
    longest stretch free of gradient reductions (the rollout and the experience's forward
    passes that make the next iteration's first Step). No ends when the cycle shows no
    optimizer."""
    p = len(cyc)
    is_small, red = small[cyc], reductions[cyc]
    if p < 2 or red.all():
        return cyc, []
    ends, runs = [], []
    for k in range(p):
        if is_small[k] and red[(k - 1) % p]:
            e = k
            while cyc[(e + 1) % p] == cyc[k] and (e + 1) % p != k:
                e = (e + 1) % p  # the norms of the other parameter groups
            ends.append(e)
            runs.append((e - k) % p + 1)
    if not ends:
        return cyc, []
    ends = [e for e, run in zip(ends, runs, strict=True) if run >= optimizer_run(runs)]

    def free_after(e: int) -> int:
        run = 0
        while run < p and not red[(e + 1 + run) % p]:
            run += 1
        return run

    last = max(ends, key=lambda e: (free_after(e), -e))
    start = (last + 1) % p
    return np.roll(cyc, -start), sorted((e - start) % p for e in ends)


MAX_NORMS = 4  # gradient norms of an optimizer's parameter groups, at most, told apart so
# metrics a loop reduces after each micro-batch, at least, to be told from an optimizer's
# norm (a lone scalar after some updates only is a barrier, which lengthens those runs)
MIN_METRICS = 2


def optimizer_run(runs: list[int]) -> int:
    """Of the runs of one scalar key that follow gradient reductions (their lengths), how
    long an optimizer's is. With accumulation, a loop that reduces its metrics after every
    micro-batch (OpenRLHF's `strategy.all_reduce(status)`, a key at a time) follows each
    micro-batch's gradient reduction (FSDP and ZeRO reduce every micro-batch) with a run as
    an optimizer's; the micro-batch that ends accumulation adds the clipped gradient norm,
    of the same key (and now and then a barrier): where some runs are longer than the
    shortest (of MIN_METRICS or more) by a few, two or more of them and no more than the
    shortest ones, only those end Steps (0: every run does)."""
    if not runs:
        return 0
    shortest = min(runs)
    longer = sum(run > shortest for run in runs)
    if shortest < MIN_METRICS or max(runs) - shortest > MAX_NORMS:
        return 0
    return shortest + 1 if 2 <= longer <= len(runs) - longer else 0


def _update_starts(el: Elements, cyc: np.ndarray, ends: list[int], units: LocalUnits) -> np.ndarray:
    """Op positions where Steps begin: each repetition's start, and inside it after each
    optimizer, found as the cycle's optimizers are: a scalar reduction of the key they
    begin with right after a gradient reduction, with the scalars of its key that follow
    (a repetition lacking an op the others have, an evaluation barrier, still shows them)."""
    p = len(cyc)
    is_small, red = el.small[cyc], el.reductions[cyc]
    opening = {int(cyc[k]) for k in range(p) if is_small[k] and red[(k - 1) % p]}
    if len(ends) < 2 or not opening:
        return units.starts.copy()
    keys = el.keys
    small_el, red_el = el.small[keys], el.reductions[keys]
    found = np.flatnonzero(small_el[1:] & red_el[:-1] & np.isin(keys[1:], list(opening))) + 1
    first_el = el.of_op[units.starts]
    found = found[found >= first_el[0]]
    last_of = []
    for j in found.tolist():
        e = j
        while e + 1 < len(keys) and keys[e + 1] == keys[j]:
            e += 1  # the norms of the other parameter groups
        last_of.append(e)
    runs = [e - j + 1 for j, e in zip(found.tolist(), last_of, strict=True)]
    longest = optimizer_run(runs)
    kept = [e for e, run in zip(last_of, runs, strict=True) if run >= longest]
    out = [units.starts]
    for i, e in enumerate(kept):
        # a Step begins after every optimizer but the run's last (what follows that one is
        # the tail: a final barrier, a checkpoint)
        if i + 1 < len(kept) or (first_el > e).any():
            out.append(np.array([el.first[e + 1]], np.int64))
    return np.unique(np.concatenate(out)).astype(np.int64)


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
    of several Steps; a per-layer cycle leaves a Step's other ops off and costs more. Where
    no cycle covers the ops well, the Steps may still repeat on one communicator
    (_units_on_one_comm), or at least end with their optimizers (_units_by_optimizers)."""
    if gaps is None:
        gaps = g.idle_gaps()
    units = _local_units(g, gaps, final, one_comm=False)
    if units.coverage < ONE_COMM_BELOW and len(np.unique(g.comm)) > 1:
        alone = _units_on_one_comm(g, gaps, final)
        if alone is not None:
            return alone
    if units.coverage < OPTIMIZERS_BELOW or (
        units.coverage < ONE_COMM_BELOW and not holds_optimizer(g, units)
    ):
        ended = _units_by_optimizers(g)
        if ended is not None:
            return ended
    if units.found and _tensor_parallel_alone(g, units) and not holds_optimizer(g, units):
        # micro-batches of tensor parallelism alone, whose Step ends with the optimizer's
        # scalars on groups of their own: the optimizers tell Steps where idle time may not
        ended = _units_by_optimizers(g, across=True)
        if ended is not None and len(ended.starts) * 2 <= len(units.starts):
            return ended
    return units


def _tensor_parallel_alone(g: GpuOps, u: LocalUnits) -> bool:
    """Whether the cycle's ops are one communicator's all-reduces (and broadcasts of the
    batch), the GPU sends and receives nothing (no pipeline), and its scalar reductions
    come on other communicators (the optimizer's grad-stats groups: a barrier on the
    cycle's communicator every few Steps is no optimizer)."""
    on = u.on_cycle
    comms = np.unique(g.comm[on])
    if (g.kind == P2P).any() or len(comms) != 1:
        return False
    if not is_func(g.func[on], "AllReduce", "Broadcast").all():
        return False
    scalar = (g.size <= SCALAR_BYTES) & reduces(g.func)
    return bool(scalar.any()) and not (scalar & (g.comm == comms[0])).any()


def _optimizers_in(g: GpuOps, reduction: np.ndarray) -> int:
    """How many times a gradient reduction is followed at once by an optimizer's scalar."""
    scalar = optimizer_scalars(g)
    return int((reduction[:-1] & scalar[1:]).sum()) if len(g) > 1 else 0


def _any_optimizer(g: GpuOps, candidates: list) -> bool:
    return any(holds_optimizer(g, c[2]) for c in candidates)


def _holds_scalar(g: GpuOps, u: LocalUnits) -> bool:
    """Whether any op on the cycle is a collective of a few scalars."""
    on = u.on_cycle
    return bool(((g.kind[on] != P2P) & (g.size[on] <= SCALAR_BYTES)).any())


def holds_optimizer(g: GpuOps, u: LocalUnits) -> bool:
    """Whether the cycle's ops hold a gradient reduction followed by a scalar reduction
    (a per-token cycle of generation does not)."""
    return _optimizers(g, u) > 0


def _optimizers(g: GpuOps, u: LocalUnits) -> int:
    """How many times, over the ops on the cycle, a gradient reduction is followed by a
    scalar reduction (of no count)."""
    on = np.flatnonzero(u.on_cycle)
    if len(on) < 2:
        return 0
    small = (g.kind[on] != P2P) & (g.size[on] <= SCALAR_BYTES)
    red = (g.kind[on] != P2P) & reduces(g.func[on]) & ~small
    # (a loss of a few bytes gathered to log is no optimizer's)
    small &= ~counts_of(g.datatype[on]) & reduces(g.func[on])
    return int((small[1:] & red[:-1]).sum())


def _one_count_each(g: GpuOps, u: LocalUnits) -> bool:
    """Whether the cycle holds one count (see `counts`) a repetition."""
    return len(u.starts) > 0 and int(counts(g)[u.on_cycle].sum()) == len(u.starts)


def _one_optimizer_each(g: GpuOps, u: LocalUnits) -> bool:
    """Whether the cycle holds one optimizer a repetition (a cycle of several Steps holds
    several)."""
    return len(u.starts) > 0 and _optimizers(g, u) == len(u.starts)


def _local_units(g: GpuOps, gaps: np.ndarray, final: bool, one_comm: bool) -> LocalUnits:
    op_keys = key_codes(g)
    n = len(op_keys)
    none = LocalUnits(0, np.zeros(0, np.int64), np.zeros(n, bool), 0.0, op_keys, -1)
    if n < 2:
        return none
    small = (g.kind != P2P) & (g.size <= SCALAR_BYTES)
    # (an update's or a forward's parameters: never a few bytes)
    gather = (g.kind != P2P) & is_func(g.func, "AllGather", "Broadcast")
    gather &= ~small
    reduction = (g.kind != P2P) & reduces(g.func) & ~small
    broadcast = (g.kind != P2P) & (g.func == func_code("Broadcast"))
    # an optimizer's scalars are reductions (a norm, a found-inf flag); a few bytes gathered
    # are objects and metrics (all_gather_object's sizes, a rollout's rewards)
    scalar = small & reduces(g.func)
    count = counts(g)
    el = Elements(
        op_keys, g.group, scalar, (g.comm << 8) | g.func, gather, reduction, broadcast, count, small
    )
    timed = bool(g.host_issue.any())  # else idle gaps are not measured (NVIDIA logs)
    skip = int(np.searchsorted(el.first, startup_prefix(g)))  # elements of the start-up
    keys, el_gaps, m = el.keys[skip:], gaps[el.first[skip:]], len(el.keys) - skip
    ids = np.arange(int(keys.max()) + 1 if m else 0)
    op_cost = np.log2(max(2, m))
    candidates: list[tuple[float, LocalUnits]] = []
    learned: set[tuple] = set()
    # Cycles are learned from a probe of the first ops after the start-up (learning costs
    # probe length x longest period), grown until one covers the GPU's ops well (and, where
    # the ops show optimizers, one holds an optimizer: a Step of tensor-parallel
    # micro-batches is longer than the first probe, and a micro-batch's cycle covers nearly
    # every op), and then followed over every op.
    optimized = _optimizers_in(g, reduction) > MIN_REPEATS
    probe = min(m, FIRST_PROBE)
    while True:
        for floor in key_floors(np.bincount(keys[:probe], minlength=len(ids)), probe):
            kept = np.bincount(keys[:probe], minlength=len(ids))[keys[:probe]] >= floor
            learnt = _learn(keys[:probe][kept], el_gaps[:probe][kept], ids, final, one_comm)
            halves = [h for c in learnt for h in cycle_halves(c, el)]
            for cycle in learnt + halves:
                if cycle.keys in learned:
                    continue
                learned.add(cycle.keys)
                cyc = np.array(cycle.keys, np.int64)
                if not timed:
                    cyc = after_reductions(cyc, el.reductions | el.few_bytes, keys)
                updates: list[int] = []
                if one_comm:
                    cyc, updates = after_last_update(cyc, el.small, el.reductions)
                    if not updates:
                        continue  # a communicator that shows no optimizer shows no Step
                else:
                    cyc = after_optimizer(
                        cyc,
                        el.small,
                        el.comm_func,
                        el.gathers,
                        keys,
                        el.reductions,
                        el_gaps if timed else None,
                        el.counts,
                    )
                    cyc = counts_first(cyc, el)
                    cyc = broadcasts_first(cyc, el.broadcasts)
                found = _follow_cost(keys, cyc, op_cost)
                if found is not None:
                    cost, starts, on_cycle, coverage, whole, fragments = found
                    on_all = np.concatenate([np.zeros(skip, bool), on_cycle])
                    units = _in_ops(el, cyc, starts + skip, on_all, coverage)
                    units.fragments = fragments
                    if updates:
                        units.step_starts = _update_starts(el, cyc, updates, units)
                        units.note = (
                            f"its {len(cyc)}-element cycle holds {len(updates)} optimizer "
                            "steps (gradient reductions, then a scalar reduction): a Step each"
                        )
                    candidates.append((cost, whole, units))
        covered = max((c[2].coverage for c in candidates), default=0.0) >= 0.9
        if probe >= m or (covered and (not optimized or _any_optimizer(g, candidates))):
            break
        probe = min(m, probe * 4)
    if not candidates:
        return none
    if one_comm:  # a communicator's Steps repeat whole: every op of theirs on the cycle
        chosen = max(candidates, key=lambda c: (c[2].coverage, -c[2].period))[2]
    else:
        chosen = _shortest_covering(candidates, g)
    if timed and not one_comm:
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


def _shortest_covering(
    candidates: list[tuple[float, float, LocalUnits]], g: GpuOps | None = None
) -> LocalUnits:
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
    shortest = min(eligible, key=lambda c: (c[2].period, c[0]))
    if g is None:
        return shortest[2]
    # a Step ends with its optimizer: a cycle with no scalar reduction at all, where a
    # cycle that holds one optimizer a repetition (gradient reductions, then a scalar
    # reduction) covers the ops better still, is a part of the Step (the layers'
    # tensor-parallel all-reduces alone cover nearly every op of a TP-only job); so is one
    # without the count an iteration agrees on before its forward
    holds_scalar = _holds_scalar(g, shortest[2])
    if holds_scalar and _one_count_each(g, shortest[2]):
        return shortest[2]

    def whole_step(u: LocalUnits) -> bool:
        return _one_count_each(g, u) or (not holds_scalar and _one_optimizer_each(g, u))

    better = [c for c in eligible if c[2].coverage > shortest[2].coverage and whole_step(c[2])]
    if better:
        return min(better, key=lambda c: (c[2].period, c[0]))[2]
    return shortest[2]


def _learn(
    keys: np.ndarray, gaps: np.ndarray, ids: np.ndarray, final: bool, one_comm: bool = False
) -> list[Cycle]:
    """Cycles seen whole three times in a row, else (on the final pass) twice. On one
    communicator of RL training the per-layer pattern of the weights synced to the rollout
    engine repeats more often than an iteration does in a short run: its iterations are
    looked for twice in a row as well."""
    if len(keys) < 2:
        return []
    cycles = learn_cycles_codes(keys, gaps, ids, min_repeats=3)
    if final and (not cycles or one_comm):
        cycles += learn_cycles_codes(keys, gaps, ids, min_repeats=2)
    return cycles


def cycle_halves(cycle: Cycle, el: Elements) -> list[Cycle]:
    """The cycle of one Step where `cycle` is two of them, the second with a few extra
    elements after it (the loop's logging every second Step: HF Trainer's loss gathered),
    which learning does not see whole three times in a row: a window of
    the cycle that the next window repeats, as long as can be and at least half of what
    SUPER_CYCLE_EXTRAS leaves, begun where `cycle` begins (where idle time put it).

    Micro-batches look so too, the optimizer's scalars their extras (tensor parallelism's;
    ZeRO-2 reducing each micro-batch's gradients, then the loop's metrics, the clipped norm
    once a Step): the extras must reduce nothing, or only scalars on groups that reduce no
    gradients in the window, where the window holds an update of its own (Megatron's log
    interval puts a world barrier before its timers' all-gather; a norm is reduced on the
    gradients' group or beside tensor parallelism, whose micro-batches gather nothing)."""
    reductions, scalars = el.reductions, el.small
    c = np.asarray(cycle.keys)
    p = len(c)
    if p < 4:
        return []
    c3 = np.concatenate([c, c, c])
    shortest = max(2, int(np.ceil(p * (1 - SUPER_CYCLE_EXTRAS) / 2)))
    for half in range(p // 2, shortest - 1, -1):
        differs = np.concatenate([[0], np.cumsum(c3[: 2 * p] != c3[half : half + 2 * p])])
        repeated = np.flatnonzero(differs[half : half + p] == differs[:p])
        if not len(repeated):
            continue
        at = int(repeated[0])
        window, extras = c3[at : at + half], c3[at + 2 * half : at + p]
        if reductions[extras].any() or (
            scalars[extras].any() and not _scalars_beside_updates(window, extras, el)
        ):
            return []
        begins = np.flatnonzero(window == c[0])
        if len(begins):
            window = np.roll(window, -int(begins[0]))
        return [Cycle(tuple(window.tolist()))]
    return []


def _scalars_beside_updates(window: np.ndarray, extras: np.ndarray, el: Elements) -> bool:
    """Whether the extras' scalar reductions are on groups that reduce no gradients in the
    window, and the window updates parameters: a group's gradient reduction, then a scalar
    reduction, then a gather on that group before it reduces again (ZeRO-1/2's and a
    distributed optimizer's parameter all-gathers; the window read as a cycle, from
    wherever it was cut)."""
    comm = el.comm_func >> 8
    scalar = el.small & ~el.reductions
    grads = np.unique(comm[window[el.reductions[window]]])
    if np.isin(comm[extras[scalar[extras]]], grads).any():
        return False
    h = len(window)
    ww = np.concatenate([window, window])
    for x in grads.tolist():
        mine = comm[ww] == x
        reduce_at = np.flatnonzero(mine & el.reductions[ww])
        gather_at = np.flatnonzero(mine & el.gathers[ww])
        for r in reduce_at[reduce_at < h].tolist():
            nxt = gather_at[gather_at > r]
            if not len(nxt) or nxt[0] - r >= h:
                continue
            j = int(nxt[0])
            if (
                not el.reductions[ww[r + 1 : j]][mine[r + 1 : j]].any()
                and scalar[ww[r + 1 : j]].any()
            ):
                return True
    return False


def _follow_cost(keys: np.ndarray, cyc: np.ndarray, op_cost: float):
    """The cycle followed over every op: (its description length, repetition starts, ops on
    it, coverage), or None when it never begins. Repetitions cut short count as much as ops
    off the cycle (the last may be cut by the end of input)."""
    starts, on_cycle = follow(keys, cyc)
    followed = len(starts)
    if not followed:
        return None
    counts = np.add.reduceat(on_cycle.astype(np.int64), starts)  # on-cycle ops per repetition
    first = _first_whole(starts, counts, len(on_cycle), len(cyc))
    if first:
        on_cycle[: starts[first]] = False
        starts, counts = starts[first:], counts[first:]
    tail = on_cycle[starts[0] :]
    coverage = float(np.count_nonzero(tail)) / len(tail) if len(tail) else 0.0
    on_counts = counts[:-1]
    missing = int(np.maximum(0, len(cyc) - on_counts).sum())
    cost = len(cyc) + float(len(tail) - np.count_nonzero(tail) + missing) * op_cost
    # (the first repetition may be a warm-up Step, unlike the steady ones: job_cut tells)
    steady = on_counts[1:] if len(on_counts) > 2 else on_counts
    whole = float((steady >= len(cyc)).mean()) if len(steady) else 1.0
    return cost, starts, on_cycle, coverage, whole, followed - len(starts)


def _first_whole(starts: np.ndarray, counts: np.ndarray, n: int, period: int) -> int:
    """The first repetition that is no fragment (`counts`: on-cycle ops per repetition):
    warm-up Steps unlike the steady ones (ZeRO-3 gathering every module while it records its
    trace) may hold the key a repetition begins with several times, each beginning a
    fragment (less than half the cycle among more ops off it, or more among at least twice
    as many off it); they are no repetitions but ops before the first (job_cut tells their
    Steps apart). A repetition cut short with nothing else in it (a Step whose update was
    skipped) is one. The steady repetitions begin with two in a row that are no fragments
    (the traced Step's last gathers may pass for a short one), and go on for MIN_REPEATS at
    least, or none are dropped (0)."""
    sizes = np.diff(np.append(starts, n))
    off = sizes - counts
    whole = ((2 * counts >= period) & (off < 2 * counts)) | (off <= counts)
    good = np.flatnonzero(whole & np.append(whole[1:], False))
    if not len(good) or good[0] == 0 or len(starts) - good[0] < MIN_REPEATS:
        return 0
    return int(good[0])


def after_optimizer(
    cyc: np.ndarray,
    small: np.ndarray,
    comm_func: np.ndarray,
    gathers: np.ndarray,
    stream: np.ndarray | None = None,
    reductions: np.ndarray | None = None,
    gaps: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> np.ndarray:
    """The cycle rotated to begin where a Step begins, when its ops show it: a Step ends
    with its optimizer, whose scalar reductions (gradient norm, found-inf, a success flag,
    the loss) come once per Step, together, with nothing between them that repeats within
    the Step, then maybe the parameter all-gathers or broadcasts of a sharded optimizer's
    update (on a communicator and function the cycle uses nowhere else). Where the scalars
    are spread over the Step (an auxiliary loss per layer) the rotation the idle gaps chose
    stays. `gathers`: per element key, an all-gather or broadcast.

    An update's gathers come only when the update does: a Step whose update is skipped
    (fp16 overflow) ends on its found-inf flag, and one that updates goes on to its
    gradient norms and gathers. A gather that follows the optimizer whatever it did (the
    flag alone, or the norms and other gathers) is the next Step's parameter fetch (ZeRO-3
    prefetching a whole small model before the forward, which leaves the backward none to
    gather): `stream`, the element keys in order, shows which ops each gather follows.

    With no scalar reduction at all, a sharded optimizer still shows its update
    (`reductions`: per element key, a gradient reduction): see _after_sharded_update.

    An update's gathers follow its optimizer at once, and the next forward comes after them
    (data loading, compute); parameters FSDP keeps through the backward are gathered as the
    next forward begins, after that idle time. With `gaps` (the idle time before each
    element of `stream`), gathers that come IDLE_RATIO times later after the optimizer than
    the op after them does after them are the next Step's.

    Counts reduced last (`counts`, per element key) are what the next iteration agrees on
    before its forward (veRL's dynamic micro-batch count, the tokens torchtitan averages a
    loss over): they begin the next Step.

    A scalar reduced once per micro-batch (older Megatron-LM averages each micro-batch's loss
    across data parallelism after its forward) is no optimizer's even where it follows the
    gradient reductions: see _per_micro_scalars."""
    p = len(cyc)
    is_small = small[cyc]
    if p >= 2 and not is_small.any() and reductions is not None:
        return _after_sharded_update(cyc, comm_func, gathers, reductions)
    if p < 2 or not is_small.any() or is_small.all():
        return cyc
    first_micro = _per_micro_scalars(cyc, is_small, reductions, stream, gaps)
    if first_micro is not None:
        return np.roll(cyc, -first_micro)
    uses = Counter(cyc.tolist())
    once = np.array([uses[k] == 1 for k in cyc.tolist()])
    last = _last_scalar(is_small, once)
    if last is None:
        return cyc
    if counts is not None:
        last = _before_counts(last, is_small, counts[cyc])
    cf = comm_func[cyc]
    cf_uses = Counter(cf.tolist())
    k = (last + 1) % p
    update: Counter = Counter()
    fetch = False  # the gathers stop where the next Step's parameter fetch begins
    while not is_small[k] and gathers[cyc[k]] and k != last:
        if _follows_anything(int(cyc[k]), stream):
            fetch = True
            break
        update[int(cf[k])] += 1
        k = (k + 1) % p
    # the update's pairs must be its own, or end where the fetch begins; else they are the
    # next Step's first gathers
    if not fetch and any(cf_uses[c] != n for c, n in update.items()):
        k = (last + 1) % p
    first = (last + 1) % p
    if k != first and _idles_before(int(cyc[first]), int(cyc[k]), stream, gaps):
        k = first
    return np.roll(cyc, -k)


IDLE_RATIO = 3.0  # idle time that tells the next forward's gathers from an update's
# of a Step's idle time, the share a scalar repeated in it must come after to be reduced per
# micro-batch, after each one's compute
PER_MICRO_IDLE_SHARE = 0.25


def _per_micro_scalars(
    cyc: np.ndarray,
    is_small: np.ndarray,
    reductions: np.ndarray | None,
    stream: np.ndarray | None,
    gaps: np.ndarray | None,
) -> int | None:
    """Where the Step begins when a scalar reduction is repeated through it, once per
    micro-batch, and the first of them follows the gradient reductions: at that first one,
    or None when the cycle is not so.

    An optimizer's scalars (a gradient norm, a found-inf flag) come together right after the
    gradient reductions, the GPU idle only while a norm is computed. A loss averaged per
    micro-batch comes after that micro-batch's forward, so the GPU idles before each one as
    long as a forward and backward take: far longer than between the gradient reductions,
    and together a good part of the Step's idle time (`gaps`, the idle time before each
    element of `stream`). The last one's backward reduces the gradients, so the Step ends
    there; the first begins the next Step, after the optimizer, as the forward's first
    collective. Other scalars between the reductions and it (a norm) are the optimizer's."""
    if gaps is None or stream is None or reductions is None:
        return None
    red = reductions[cyc] & ~is_small
    if not red.any():
        return None
    p = len(cyc)
    uses = Counter(cyc[is_small].tolist())
    # the scalars right after the last gradient reduction that the cycle repeats (cheap to
    # find; the idle times, over the whole stream, are read only for those)
    candidates = []
    k = (int(np.flatnonzero(red)[-1]) + 1) % p
    for _ in range(p):
        if not is_small[k]:
            break
        if uses[int(cyc[k])] >= 2:
            candidates.append(k)
        k = (k + 1) % p
    if not candidates:
        return None
    order = np.argsort(stream, kind="stable")
    by_key, gaps_by_key = stream[order], gaps[order]

    def before(key: int) -> np.ndarray:
        lo, hi = np.searchsorted(by_key, [key, key + 1])
        return gaps_by_key[lo:hi]

    gaps_of = {int(key): before(int(key)) for key in np.unique(cyc)}
    total = sum(
        float(np.median(gaps_of[int(key)])) for key in cyc.tolist() if len(gaps_of[int(key)])
    )
    reducing = np.concatenate([gaps_of[int(key)] for key in np.unique(cyc[red])])
    if total <= 0 or not len(reducing):
        return None
    between_reductions = float(np.median(reducing))
    for k in candidates:
        key = int(cyc[k])
        # each of them after long idle time, not only some (an optimizer's second norm
        # right after its first, both after a long host step)
        idle = float(np.quantile(gaps_of[key], 0.25)) if len(gaps_of[key]) else 0.0
        if (
            idle >= IDLE_RATIO * (between_reductions + 1.0)
            and uses[key] * idle >= PER_MICRO_IDLE_SHARE * total
            and _backward_follows(cyc, k, red, stream, gaps, idle)
        ):
            return k
    return None


def _backward_follows(
    cyc: np.ndarray, k: int, red: np.ndarray, stream: np.ndarray, gaps: np.ndarray, idle: float
) -> bool:
    """Whether a gradient reduction follows the run of scalars from cycle position k, and
    soon (IDLE_RATIO times sooner than they follow each other, measured where `stream` goes
    from the run's key to it): the last micro-batch's backward, reducing as it goes. Norms
    an optimizer computes on the host (ZeRO-Offload) are each as far apart, but its update's
    gathers or the next Step's forward come after them."""
    p = len(cyc)
    key = cyc[k]
    j = k
    while cyc[j % p] == key and j < k + p:
        j += 1
    if not red[j % p]:
        return False
    after = gaps[1:][(stream[:-1] == key) & (stream[1:] == cyc[j % p])]
    return len(after) > 0 and IDLE_RATIO * float(np.median(after)) < idle


def _idles_before(gather: int, after: int, stream, gaps) -> bool:
    """Whether the GPU idles IDLE_RATIO times longer before element `gather` than before
    `after` (medians over `stream`)."""
    if gaps is None or stream is None or gather == after:
        return False
    before_gather, before_after = gaps[stream == gather], gaps[stream == after]
    if not len(before_gather) or not len(before_after):
        return False
    return float(np.median(before_gather)) >= IDLE_RATIO * (float(np.median(before_after)) + 1.0)


def _after_sharded_update(
    cyc: np.ndarray, comm_func: np.ndarray, gathers: np.ndarray, reductions: np.ndarray
) -> np.ndarray:
    """The cycle rotated to begin after a sharded optimizer's update, when the cycle shows
    one and only one: a gradient reduction on a communicator, then at once the parameter
    all-gathers (or broadcasts) of the updated shards on the same communicator, and that
    communicator's reductions and gathers nowhere else in the cycle (Megatron's distributed
    optimizer, ZeRO-1/2: the gathers end `optimizer.step()`, so they end the Step). Without
    it the rotation the idle gaps chose stays: two idle times of about the same length,
    before the reduction (the other stages' backward drains) and after the gathers, would
    leave the phase to chance. Sharded parameters gathered layer by layer (FSDP, ZeRO-3,
    sequence parallelism) use their communicator all through the cycle: no rotation."""
    p = len(cyc)
    comm = comm_func[cyc] >> 8
    red, gat = reductions[cyc], gathers[cyc]
    # per communicator, its reductions and gathers in the cycle: a block holding all of them
    # is as long as their count
    comms, counts = np.unique(comm[red | gat], return_counts=True)
    on_comm = dict(zip(comms.tolist(), counts.tolist(), strict=True))
    blocks = []
    for i in np.flatnonzero(red).tolist():
        j = i + 1
        while j < i + p and gat[j % p] and comm[j % p] == comm[i]:
            j += 1
        if j > i + 1 and on_comm[int(comm[i])] == j - i:
            blocks.append(j % p)
    if len(blocks) != 1:
        return cyc
    return np.roll(cyc, -blocks[0])


def counts_first(cyc: np.ndarray, el: Elements) -> np.ndarray:
    """The cycle rotated to begin with the counts an iteration agrees on before its forward
    (HF Trainer's num_items_in_batch, veRL's micro-batch count: `el.counts`), where it has
    them in one place, right after the previous Step's end (its gradient reductions or
    optimizer scalars, and at most one op of a few bytes: the loss it logged) and followed by
    the forward's work, not by a scalar reduction. (all_gather_object gathers sizes as such
    counts, among the objects it gathers.)"""
    p = len(cyc)
    is_count, is_small = el.counts[cyc], el.small[cyc]
    red, few = el.reductions[cyc], el.few_bytes[cyc]
    if p < 2 or not is_count.any() or is_count.all():
        return cyc
    firsts = np.flatnonzero(is_count & ~np.roll(is_count, 1))
    if len(firsts) != 1:
        return cyc
    first = int(firsts[0])
    b = first
    while is_count[b % p]:
        b += 1
    if is_small[b % p]:
        return cyc

    def ends_step(k: int) -> bool:
        return bool(red[k % p] or is_small[k % p])

    if not (ends_step(first - 1) or (few[(first - 1) % p] and ends_step(first - 2))):
        return cyc
    return np.roll(cyc, -first)


def broadcasts_first(cyc: np.ndarray, broadcasts: np.ndarray) -> np.ndarray:
    """The cycle rotated so that the broadcasts it ends with begin it instead: a broadcast
    begins an iteration, not ends one (a batch sent from the first tensor-parallel rank,
    DDP's buffers at each forward, weights synced to a rollout engine). A cycle of
    broadcasts alone stays as it is."""
    p = len(cyc)
    is_broadcast = broadcasts[cyc]
    if p < 2 or is_broadcast.all() or not is_broadcast[-1]:
        return cyc
    trailing = int(np.argmin(is_broadcast[::-1]))
    return np.roll(cyc, trailing)


def _follows_anything(key: int, stream: np.ndarray | None) -> bool:
    """Whether the element `key` follows more than one kind of element in `stream` (itself
    aside: an update gathers bucket after bucket of one size)."""
    if stream is None or len(stream) < 2:
        return False
    before = stream[:-1][stream[1:] == key]
    before = before[before != key]
    return len(before) > 1 and bool((before != before[0]).any())


def after_reductions(cyc: np.ndarray, reductions: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Without measured idle time, the cycle rotated to begin the longest stretch free of
    gradient reductions (all-reduces and reduce-scatters of more than a few scalars) and
    scalars (`reductions` marks both): a Step's forward pass (parameter gathers, expert
    all-to-alls), after the previous Step's backward reduced its gradients and its loop
    logged or counted. A cycle of those only (DDP's buckets) begins after the op the run
    ended with, when that op has one place in the cycle: a run ends with a whole Step."""
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


def _before_counts(last: int, is_small: np.ndarray, is_count: np.ndarray) -> int:
    """Where the optimizer's scalars end when the run of scalars ending at `last` ends with
    counts: before them (at the norm or flag they follow, or at the op before the run)."""
    p = len(is_small)
    j = last
    while is_count[j] and (j - 1) % p != last:
        j = (j - 1) % p
        if not is_small[j]:
            break
    return j


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
    return LocalUnits(max(1, period), op_starts, op_on, coverage, el.key_of_op, int(cyc[0]))
