"""The per-Step op cycle: the sequence of op keys that repeats once per Step, and where it starts.

`learn_cycle` finds, in a probe of ops, the period p whose repetition covers the longest
uninterrupted stretch (so warm-up Steps that differ and occasional extra ops do not hide it),
the smallest such p on a tie (a multiple of the period repeats as far). Which rotation of the
cycle begins a Step is not in the keys; it is where the GPU idles longest: a Step's first op
follows the optimizer, data loading and forward compute, its other ops only a slice of
compute. `CycleTracker` then follows the stream through the cycle, op by op.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_REPEATS = 3  # a cycle must be seen whole this many times in a row


@dataclass(frozen=True)
class Cycle:
    keys: tuple[Hashable, ...]  # starting with the key of a Step's first op

    def __len__(self) -> int:
        return len(self.keys)


def _longest_true_run(eq: np.ndarray) -> tuple[int, int]:
    """(length, start) of the longest run of True in eq."""
    if not eq.any():
        return 0, 0
    padded = np.concatenate(([0], eq.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[0::2], edges[1::2]
    i = int(np.argmax(ends - starts))  # the first longest
    return int(ends[i] - starts[i]), int(starts[i])


def learn_cycle(
    keys: Sequence[Hashable],
    gaps: Sequence[int],
    max_period: int = 4096,
    min_repeats: int = MIN_REPEATS,
):
    """The cycle of `keys` (with `gaps[i]`: GPU idle time before op i), or None when no period
    repeats `min_repeats` times in a row."""
    codes = _codes(keys)
    n = len(codes)
    best: tuple[int, int, int] | None = None  # (stretch length, -p, start)
    for p in range(1, min(max_period, n // min_repeats) + 1):
        run, start = _longest_true_run(codes[p:] == codes[:-p])
        length = run + p  # keys[start .. start+run+p) repeat with period p
        if run == 0 or length < min_repeats * p:
            continue
        if best is None or (length, -p) > (best[0], best[1]):
            best = (length, -p, start)
    if best is None:
        return None
    length, p, start = best[0], -best[1], best[2]
    run = range(start, start + length)
    by_phase: list[list[int]] = [[] for _ in range(p)]
    for i in run:
        by_phase[(i - start) % p].append(gaps[i])
    phase = max(range(p), key=lambda r: (statistics.median(by_phase[r]), -r))
    first = start + phase
    return Cycle(tuple(keys[first + k] for k in range(p)))


def _codes(keys: Sequence[Hashable]) -> np.ndarray:
    ids: dict[Hashable, int] = {}
    return np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, len(keys))


class CycleTracker:
    """Where the stream is in the cycle. `advance(key)` says whether the op starts a new
    repetition, continues it, or is off the cycle (an extra op: the position does not move)."""

    def __init__(self, cycle: Cycle, pos: int = 0) -> None:
        self.cycle = cycle
        self.pos = pos  # index in cycle.keys of the key expected next

    def advance(self, key: Hashable) -> str:
        keys = self.cycle.keys
        if key == keys[self.pos]:
            starts = self.pos == 0
            self.pos = (self.pos + 1) % len(keys)
            return "start" if starts else "in"
        if key == keys[0]:  # lost our place (ops missing): a new repetition begins here
            self.pos = 1 % len(keys)
            return "start"
        return "off"
