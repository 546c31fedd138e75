"""Ties (hangs/ties.py): what is tied together, in turn, is one group named by its least
member, whatever order the ties came in."""

from __future__ import annotations

import random

from comminsight.agent.hangs.ties import Ties


def test_ties_in_any_order_give_the_same_groups():
    pairs = [(1, 2), (3, 4), (2, 3), (7, 8), (9, 9)]
    for seed in range(20):
        rng = random.Random(seed)
        shuffled = [tuple(rng.sample(p, 2)) if p[0] != p[1] else p for p in pairs]
        rng.shuffle(shuffled)
        ties = Ties()
        for a, b in shuffled:
            ties.tie(a, b)
        groups = ties.groups()
        assert groups[1] == groups[4] == {1, 2, 3, 4} and groups[7] == {7, 8}
        assert groups[9] == {9}
        assert ties.roots() == {1: 1, 2: 1, 3: 1, 4: 1, 7: 7, 8: 7, 9: 9}
