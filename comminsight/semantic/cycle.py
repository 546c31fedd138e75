"""The per-Step op cycle: the sequence of op keys that repeats once per Step, and where it starts.

`learn_cycle` finds, in a probe of ops, the period p whose repetition covers the longest
uninterrupted stretch (so warm-up Steps that differ and occasional extra ops do not hide it),
the smallest such p on a tie (a multiple of the period repeats as far). Which rotation of the
cycle begins a Step is not in the keys; it is where the GPU idles longest: a Step's first op
follows the optimizer, data loading and forward compute, its other ops only a slice of
compute. native.decide (engine_core.c) then follows the stream through the cycle, op by op:
an op with the next key continues it, one with the first key starts a new repetition, any
other is off the cycle.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from comminsight.semantic import native

MIN_REPEATS = 3  # a cycle must be seen whole this many times in a row


@dataclass(frozen=True)
class Cycle:
    keys: tuple[Hashable, ...]  # starting with the key of a Step's first op

    def __len__(self) -> int:
        return len(self.keys)


def learn_cycle(
    keys: Sequence[Hashable],
    gaps: Sequence[int],
    max_period: int = 4096,
    min_repeats: int = MIN_REPEATS,
):
    """The cycle of `keys` (with `gaps[i]`: GPU idle time before op i), or None when no period
    repeats `min_repeats` times in a row."""
    ids: dict[Hashable, int] = {}
    codes = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, len(keys))
    return learn_cycle_codes(codes, np.asarray(gaps), list(ids), max_period, min_repeats)


def learn_cycle_codes(
    codes: np.ndarray,
    gaps: np.ndarray,
    key_of: Sequence[Hashable],
    max_period: int = 4096,
    min_repeats: int = MIN_REPEATS,
):
    """learn_cycle over key codes (key_of[code] is the key): the cycle of the longest
    stretch, the smallest period on a tie (multiples repeat as far)."""
    cycles = learn_cycles_codes(codes, gaps, key_of, max_period, min_repeats, count=1)
    return cycles[0] if cycles else None


def learn_cycles_codes(
    codes: np.ndarray,
    gaps: np.ndarray,
    key_of: Sequence[Hashable],
    max_period: int = 4096,
    min_repeats: int = MIN_REPEATS,
    count: int = 4,
) -> list[Cycle]:
    """Up to `count` cycles of `codes`: the one learn_cycle_codes finds, then those of the
    next longest stretches whose periods are no multiple of a period taken before (an
    evaluation every few Steps makes a stretch of several Steps the longest, but the
    per-Step period repeats almost as far between evaluations)."""
    n = len(codes)
    periods = np.arange(1, min(max_period, n // min_repeats) + 1)
    if not len(periods):
        return []
    runs, starts = native.longest_runs(codes, periods)
    lengths = runs + periods
    ok = np.flatnonzero((runs > 0) & (lengths >= min_repeats * periods))
    cycles: list[Cycle] = []
    taken: list[int] = []
    for i in ok[np.lexsort((periods[ok], -lengths[ok]))].tolist():
        p = int(periods[i])
        if any(p % q == 0 or q % p == 0 for q in taken):
            continue
        taken.append(p)
        cycles.append(_cycle_at(codes, gaps, key_of, int(lengths[i]), p, int(starts[i])))
        if len(cycles) == count:
            break
    return cycles


def _cycle_at(codes, gaps, key_of, length: int, p: int, start: int) -> Cycle:
    """The cycle of period p repeating from `start` for `length` keys, rotated to begin
    after the longest median idle gap."""
    run_gaps = np.asarray(gaps[start : start + length])
    phase = max(range(p), key=lambda r: (statistics.median(run_gaps[r::p].tolist()), -r))
    first = start + phase
    return Cycle(tuple(key_of[int(codes[first + k])] for k in range(p)))


def rare_key_floors(counts: list[int], total: int) -> list[float]:
    """Guesses of the count below which a key is rarer than once per Step: none (0); three
    quarters of the median count over distinct keys; three quarters of the count of the
    least frequent of the keys that together make three quarters of the ops."""
    floors = [0.0]
    if len(counts) >= 2:
        floors.append(0.75 * statistics.median(counts))
        covered = 0
        for count in sorted(counts, reverse=True):
            covered += count
            if covered >= 0.75 * total:
                floors.append(0.75 * count)
                break
    return floors
