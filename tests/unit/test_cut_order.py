"""The job cut's plan (cut_order) against the rule it stands for, written out plainly over
explicit sets: fix the rank with the most ops whose instance is labelled (the first on a
tie), or a pivot when none has any; fixing labels every instance of the rank. Random jobs of
ranks that share families, with records lost (holes) and instances held twice; and the label
runs that carry a rank's labels to the ranks after it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from comminsight.semantic.cut_order import (
    LabelRuns,
    PivotFacts,
    carried_labels,
    choose_pivot,
    label_runs,
    plan_cut,
    rank_instances,
)

UNKNOWN = -(1 << 40)


def random_job(rng: random.Random, ranks: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each rank's ops as (family, number): a few families shared by groups of ranks, each
    op numbered in its family, some numbers lost and some held twice."""
    families = [rng.getrandbits(40) for _ in range(rng.randint(1, 6))]
    out = []
    for _ in range(ranks):
        fam, num = [], []
        for f in rng.sample(families, rng.randint(0, len(families))):
            start = rng.choice([0, 0, rng.randint(0, 30)])
            for n in range(start, start + rng.randint(0, 40)):
                if rng.random() < 0.1:
                    continue  # lost
                copies = 2 if rng.random() < 0.03 else 1
                fam += [f] * copies
                num += [n] * copies
        order = list(range(len(fam)))
        rng.shuffle(order)  # ops come in issue order, not sorted by instance
        out.append(
            (
                np.array([fam[i] for i in order], np.int64),
                np.array([num[i] for i in order], np.int64),
            )
        )
    return out


def facts_of(job, rng: random.Random) -> list[PivotFacts]:
    return [
        PivotFacts(rng.random() < 0.8, rng.random(), rng.randint(0, 5), len(f), rank)
        for rank, (f, _) in enumerate(job)
    ]


def plain_plan(job, facts):
    """The rule over explicit sets: (gpu, pivot, providers, first-labelled instances)."""
    labelled: dict[tuple[int, int], int] = {}  # instance -> rank that labelled it first
    fixed: list[int] = []
    out = []
    while len(fixed) < len(job):
        known = [
            -1 if i in fixed else sum((f, n) in labelled for f, n in zip(*job[i], strict=True))
            for i in range(len(job))
        ]
        best = known.index(max(known))
        pivot = known[best] <= 0
        if pivot:
            best = choose_pivot([i for i in range(len(job)) if i not in fixed], facts)
        mine = set(zip(job[best][0].tolist(), job[best][1].tolist(), strict=True))
        providers = sorted({labelled[x] for x in mine if x in labelled})
        new = {x for x in mine if x not in labelled}
        for x in new:
            labelled[x] = best
        fixed.append(best)
        out.append((best, pivot, tuple(providers), new))
    return out


def as_set(instances) -> set[tuple[int, int]]:
    return {
        (f, n)
        for f, a, b in zip(
            instances.family.tolist(), instances.lo.tolist(), instances.hi.tolist(), strict=True
        )
        for n in range(a, b)
    }


@pytest.mark.parametrize("seed", range(40))
def test_the_plan_fixes_ranks_as_the_rule_over_explicit_sets_does(seed):
    rng = random.Random(seed)
    job = random_job(rng, rng.randint(1, 12))
    facts = facts_of(job, rng)
    plan = plan_cut([rank_instances(f, n) for f, n in job], facts)
    expected = plain_plan(job, facts)
    assert [(s.gpu, s.pivot, s.providers) for s in plan] == [e[:3] for e in expected]
    assert [as_set(s.new) for s in plan] == [e[3] for e in expected]
    components = [s.component for s in plan]
    assert components == list(np.cumsum([s.pivot for s in plan]) - 1)


def test_a_rank_s_instances_are_intervals_with_what_it_holds_twice():
    family = np.array([7, 7, 7, 7, 3, 7, 3], np.int64)
    number = np.array([0, 1, 3, 1, 5, 4, 6], np.int64)
    got = rank_instances(family, number)
    assert got.family.tolist() == [3, 7, 7]
    assert list(zip(got.lo.tolist(), got.hi.tolist(), strict=True)) == [(5, 7), (0, 2), (3, 5)]
    assert got.extra == {(7, 1): 1}


@pytest.mark.parametrize("seed", range(20))
def test_labels_carried_through_runs_are_the_labelling_rank_s(seed):
    rng = random.Random(seed)
    (fam, num), (other_fam, other_num) = random_job(rng, 2)
    label = np.array(sorted(rng.randint(0, 4) for _ in range(len(fam))), np.int64)
    (step,) = [s for s in plan_cut([rank_instances(fam, num)], [PivotFacts(True, 1, 1, 1, 0)])]
    runs = label_runs(fam, num, label, step.new)
    # the label of each instance: its last op's, as assigning in op order leaves it
    last = {}
    for f, n, lab in zip(fam.tolist(), num.tolist(), label.tolist(), strict=True):
        last[(f, n)] = lab
    got = carried_labels(other_fam, other_num, [LabelRuns.empty(), runs], UNKNOWN)
    want = [
        last.get((f, n), UNKNOWN)
        for f, n in zip(other_fam.tolist(), other_num.tolist(), strict=True)
    ]
    assert got.tolist() == want
    assert len(runs.family) <= len(fam)  # runs, not one entry per op
