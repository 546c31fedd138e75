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


CELLS_PER_BLOCK = 1 << 21  # periods x positions handled at once: bounded memory


def _longest_runs(codes: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every period p: (length, start) of the longest run of positions i with
    codes[i + p] == codes[i], the first on a tie. Blocks of (periods x n) cells, no Python
    loop per period."""
    block = max(1, CELLS_PER_BLOCK // max(1, len(codes)))
    parts = [_runs_block(codes, periods[i : i + block]) for i in range(0, len(periods), block)]
    return np.concatenate([r for r, _ in parts]), np.concatenate([s for _, s in parts])


def _runs_block(codes: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(codes)
    idx = np.arange(n)
    shifted = idx[None, :] + periods[:, None]
    valid = shifted < n
    same = np.zeros((len(periods), n), dtype=bool)
    same[valid] = codes[shifted[valid]] == np.broadcast_to(codes, same.shape)[valid]
    # run length ending at each position: distance to the last mismatch before it
    last_miss = np.maximum.accumulate(np.where(same, -1, idx[None, :]), axis=1)
    run_end = idx[None, :] - last_miss  # 0 at a mismatch
    best_end = run_end.argmax(axis=1)
    runs = run_end[np.arange(len(periods)), best_end]
    return runs, best_end - runs + 1


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
    periods = np.arange(1, min(max_period, n // min_repeats) + 1)
    if not len(periods):
        return None
    runs, starts = _longest_runs(codes, periods)
    lengths = runs + periods  # keys[start .. start+run+p) repeat with period p
    ok = (runs > 0) & (lengths >= min_repeats * periods)
    if not ok.any():
        return None
    # the longest stretch; on a tie the smallest period (multiples repeat as far)
    i = int(np.flatnonzero(ok & (lengths == lengths[ok].max()))[0])
    length, p, start = int(lengths[i]), int(periods[i]), int(starts[i])
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
