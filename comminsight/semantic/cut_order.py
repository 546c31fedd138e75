"""The order in which the job cut fixes its ranks, and where each rank's carried labels come
from, decided from which op instances each rank has: no labels, no ops.

The job cut (job_cut) fixes one rank at a time: the rank with the most ops whose instance is
labelled already (the first such rank on a tie), or, when no rank left has any, a new pivot
(choose_pivot). Fixing a rank labels every instance of it that was not labelled yet, with
that rank's label for it. Which instances are labelled after each step depends only on which
ranks were fixed, never on the labels: so the whole order, and for each rank the ranks whose
labels it reads (its providers: those that first labelled one of its instances), follow from
the ranks' instance sets alone. A rank is then cut as soon as its providers are, which lets
ranks held by different processes be cut at once (distributed_steps), with the very labels
one process would give them.

Instances come in families (job_ops.instance_keys), numbered within the family, and a rank
holds an interval of numbers per family (a few when records were lost): its instance set is
a few intervals per family, and so is every set kept here. A number a rank holds twice counts
twice, as its ops do.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field

import numpy as np

MIN_COVERAGE = 0.5  # a pivot's cycle must cover this share of its ops to be preferred


@dataclass(frozen=True)
class Instances:
    """A set of instances: intervals [lo, hi) of numbers within a family, sorted by (family,
    lo) and disjoint; `extra[(family, number)]` is how many more times than once a rank holds
    that instance."""

    family: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    extra: dict[tuple[int, int], int] = field(default_factory=dict)

    def by_family(self) -> dict[int, list[tuple[int, int]]]:
        out: dict[int, list[tuple[int, int]]] = {}
        for f, a, b in zip(self.family.tolist(), self.lo.tolist(), self.hi.tolist(), strict=True):
            out.setdefault(f, []).append((a, b))
        return out


def rank_instances(family: np.ndarray, number: np.ndarray) -> Instances:
    """A rank's instances from each op's (family, number)."""
    if not len(family):
        empty = np.zeros(0, np.int64)
        return Instances(empty, empty, empty)
    order = np.lexsort((number, family))
    f, n = family[order], number[order]
    first = np.ones(len(f), bool)
    first[1:] = (f[1:] != f[:-1]) | (n[1:] != n[:-1])
    at = np.flatnonzero(first)
    times = np.diff(np.append(at, len(f)))
    uf, un = f[at], n[at]
    extra = {
        (int(a), int(b)): int(t) - 1
        for a, b, t in zip(uf[times > 1], un[times > 1], times[times > 1], strict=True)
    }
    begins = np.ones(len(uf), bool)
    begins[1:] = (uf[1:] != uf[:-1]) | (un[1:] != un[:-1] + 1)
    starts = np.flatnonzero(begins)
    ends = np.append(starts[1:], len(uf)) - 1
    return Instances(uf[starts], un[starts], un[ends] + 1, extra)


@dataclass(frozen=True)
class PivotFacts:
    """What choosing a pivot reads of a rank: its cycle and its size."""

    found: bool  # a cycle repeats
    coverage: float
    period: int
    ops: int
    rank: int


def choose_pivot(candidates: list[int], facts: list[PivotFacts]) -> int:
    """The coarsest well-covered cycle (most ops per repetition); among equals the GPU with
    the most ops (the others lost some: a cut or missing segment) and the best coverage;
    else the best-covered cycle; else the GPU with the most ops."""
    good = [i for i in candidates if facts[i].found and facts[i].coverage >= MIN_COVERAGE]
    if good:
        return min(
            good,
            key=lambda i: (-facts[i].period, -facts[i].ops, -facts[i].coverage, facts[i].rank),
        )
    found = [i for i in candidates if facts[i].found]
    if found:
        return max(found, key=lambda i: (facts[i].coverage, -facts[i].rank))
    return max(candidates, key=lambda i: (facts[i].ops, -facts[i].rank))


@dataclass(frozen=True)
class CutStep:
    gpu: int  # index of the rank in the job
    pivot: bool  # a pivot: its own cycle decides its Steps
    component: int  # ranks linked by shared instances have the same component
    providers: tuple[int, ...]  # ranks whose labels it reads, in ascending order
    new: Instances  # the instances it labels first (its labels for them are carried on)


class _Coverage:
    """The instances labelled so far, per family as disjoint sorted intervals, each with the
    rank that labelled it."""

    def __init__(self) -> None:
        self._lo: dict[int, list[int]] = {}
        self._hi: dict[int, list[int]] = {}
        self._by: dict[int, list[int]] = {}

    def pieces(self, family: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The labelled parts of [lo, hi): (lo, hi, labelled by)."""
        los = self._lo.get(family)
        if not los:
            return []
        his, by = self._hi[family], self._by[family]
        k = max(0, bisect.bisect_right(los, lo) - 1)
        out = []
        while k < len(los) and los[k] < hi:
            a, b = max(los[k], lo), min(his[k], hi)
            if a < b:
                out.append((a, b, by[k]))
            k += 1
        return out

    def add(self, family: int, lo: int, hi: int, by: int) -> None:
        los = self._lo.setdefault(family, [])
        his, bys = self._hi.setdefault(family, []), self._by.setdefault(family, [])
        k = bisect.bisect_left(los, lo)
        los.insert(k, lo)
        his.insert(k, hi)
        bys.insert(k, by)


def _minus(lo: int, hi: int, pieces: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """[lo, hi) less the (sorted, disjoint) pieces."""
    out, at = [], lo
    for a, b, _ in pieces:
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < hi:
        out.append((at, hi))
    return out


def _count(rank: Instances, family: int, spans: list[tuple[int, int]]) -> int:
    """How many of the rank's ops have an instance of `family` inside the spans."""
    mine = rank.family == family
    lo, hi = rank.lo[mine], rank.hi[mine]
    total = 0
    for a, b in spans:
        total += int(np.maximum(0, np.minimum(hi, b) - np.maximum(lo, a)).sum())
    if rank.extra:
        total += sum(
            t
            for (f, n), t in rank.extra.items()
            if f == family and any(a <= n < b for a, b in spans)
        )
    return total


def plan_cut(instances: list[Instances], facts: list[PivotFacts]) -> list[CutStep]:
    """Every rank, in the order the job cut fixes them (see the module docstring)."""
    n = len(instances)
    families = [r.by_family() for r in instances]
    holders: dict[int, list[int]] = {}
    for i, fam in enumerate(families):
        for f in fam:
            holders.setdefault(f, []).append(i)
    known = [0] * n  # each unfixed rank's ops whose instance is labelled
    fixed = [False] * n
    # (-known, rank) of the ranks whose count rose, stale entries left in and passed over:
    # the next rank is found in log time, not by a pass over every rank
    rising: list[tuple[int, int]] = []
    coverage = _Coverage()
    steps: list[CutStep] = []
    component = -1
    for _ in range(n):
        while rising and (fixed[rising[0][1]] or -rising[0][0] != known[rising[0][1]]):
            heapq.heappop(rising)
        pivot = not rising
        if pivot:
            best = choose_pivot([i for i in range(n) if not fixed[i]], facts)
            component += 1
        else:
            best = heapq.heappop(rising)[1]
        providers: set[int] = set()
        new_f, new_lo, new_hi = [], [], []
        for f, spans in families[best].items():
            for lo, hi in spans:
                pieces = coverage.pieces(f, lo, hi)
                providers.update(by for _, _, by in pieces)
                for a, b in _minus(lo, hi, pieces):
                    new_f.append(f)
                    new_lo.append(a)
                    new_hi.append(b)
        for f, a, b in zip(new_f, new_lo, new_hi, strict=True):
            coverage.add(f, a, b, best)
        fixed[best] = True
        new = _instances(new_f, new_lo, new_hi, instances[best].extra)
        steps.append(CutStep(best, pivot, component, tuple(sorted(providers)), new))
        for f, spans in new.by_family().items():
            for i in holders[f]:
                if not fixed[i]:
                    more = _count(instances[i], f, spans)
                    if more:
                        known[i] += more
                        heapq.heappush(rising, (-known[i], i))
    return steps


def _instances(family, lo, hi, extra: dict[tuple[int, int], int]) -> Instances:
    f = np.array(family, np.int64)
    a = np.array(lo, np.int64)
    b = np.array(hi, np.int64)
    order = np.lexsort((a, f))
    f, a, b = f[order], a[order], b[order]
    inside = {
        key: t for key, t in extra.items() if ((f == key[0]) & (a <= key[1]) & (key[1] < b)).any()
    }
    return Instances(f, a, b, inside)


@dataclass(frozen=True)
class LabelRuns:
    """A rank's labels for the instances it labelled first: runs [lo, hi) of numbers within a
    family that have one label, sorted by (family, lo)."""

    family: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    label: np.ndarray

    @staticmethod
    def empty() -> LabelRuns:
        z = np.zeros(0, np.int64)
        return LabelRuns(z, z, z, z)


def label_runs(
    family: np.ndarray, number: np.ndarray, label: np.ndarray, new: Instances
) -> LabelRuns:
    """The runs of a rank's labels (op i has instance (family[i], number[i]) and label[i])
    over the instances in `new`; where the rank holds an instance twice, its later op's label
    is the instance's, as assigning the labels in op order leaves it."""
    keep = _inside(family, number, new)
    if not keep.any():
        return LabelRuns.empty()
    f, n, lab = family[keep], number[keep], label[keep]
    # the last op of each instance: sorted by (family, number, op order), the last of each
    pos = np.arange(len(f))
    order = np.lexsort((pos, n, f))
    f, n, lab = f[order], n[order], lab[order]
    last = np.ones(len(f), bool)
    last[:-1] = (f[1:] != f[:-1]) | (n[1:] != n[:-1])
    f, n, lab = f[last], n[last], lab[last]
    begins = np.ones(len(f), bool)
    begins[1:] = (f[1:] != f[:-1]) | (n[1:] != n[:-1] + 1) | (lab[1:] != lab[:-1])
    starts = np.flatnonzero(begins)
    ends = np.append(starts[1:], len(f)) - 1
    return LabelRuns(f[starts], n[starts], n[ends] + 1, lab[starts])


def _inside(family: np.ndarray, number: np.ndarray, s: Instances) -> np.ndarray:
    """Whether each (family, number) lies in the set's intervals."""
    out = np.zeros(len(family), bool)
    for f in np.unique(s.family).tolist():
        mine = s.family == f
        lo, hi = s.lo[mine], s.hi[mine]
        at = np.flatnonzero(family == f)
        k = np.searchsorted(lo, number[at], side="right") - 1
        ok = k >= 0
        ok[ok] = number[at][ok] < hi[k[ok]]
        out[at] = ok
    return out


def carried_labels(
    family: np.ndarray, number: np.ndarray, runs: list[LabelRuns], unknown: int
) -> np.ndarray:
    """Each op's label from the providers' runs (which do not overlap: each instance was
    labelled once), `unknown` where none labelled its instance."""
    out = np.full(len(family), unknown, np.int64)
    runs = [r for r in runs if len(r.family)]
    if not runs:
        return out
    rf = np.concatenate([r.family for r in runs])
    rlo = np.concatenate([r.lo for r in runs])
    rhi = np.concatenate([r.hi for r in runs])
    rlab = np.concatenate([r.label for r in runs])
    for f in np.unique(family).tolist():
        mine = np.flatnonzero(rf == f)
        if not len(mine):
            continue
        order = mine[np.argsort(rlo[mine], kind="stable")]
        lo, hi, lab = rlo[order], rhi[order], rlab[order]
        at = np.flatnonzero(family == f)
        k = np.searchsorted(lo, number[at], side="right") - 1
        ok = k >= 0
        ok[ok] = number[at][ok] < hi[k[ok]]
        out[at[ok]] = lab[k[ok]]
    return out
