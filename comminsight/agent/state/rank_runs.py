"""A set of ranks held as runs of consecutive ranks: how a class of 100,000 ranks in the same
state travels up a relay tree and sits in a master's snapshot in a few numbers.

Ranks of one communicator that share a state are mostly consecutive (a data-parallel group
waiting at the same op, every rank but a culprit), so runs stay few where a list would hold
every rank.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

RANK_MAX = (1 << 32) - 1  # ranks travel as uint32
# runs a peer may send for one class: far more than any real set needs (every other rank of
# a 100,000-rank communicator is 50,000), so that a hostile message cannot make the master
# build millions of runs
RUNS_MAX = 1 << 17


class BadRuns(ValueError):
    """Runs that are not increasing, overlap, are empty or pass the communicator's size."""


@dataclass(frozen=True)
class RankRuns:
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()  # exclusive

    @classmethod
    def of(cls, ranks: Iterable[int]) -> RankRuns:
        starts: list[int] = []
        ends: list[int] = []
        for r in sorted(set(ranks)):
            if ends and ends[-1] == r:
                ends[-1] = r + 1
            else:
                starts.append(r)
                ends.append(r + 1)
        return cls(tuple(starts), tuple(ends))

    @classmethod
    def from_flat(cls, flat: Sequence[int], limit: int = RANK_MAX + 1) -> RankRuns:
        """From start, length, start, length, ... (agent-master-slave RankClass.rank_runs);
        every rank below `limit`."""
        if len(flat) % 2:
            raise BadRuns(f"{len(flat)} numbers are not start/length pairs")
        if len(flat) // 2 > RUNS_MAX:
            raise BadRuns(f"{len(flat) // 2} runs (at most {RUNS_MAX})")
        starts, ends = flat[0::2], [s + n for s, n in zip(flat[0::2], flat[1::2], strict=True)]
        previous = -1
        for start, end in zip(starts, ends, strict=True):
            if end <= start:
                raise BadRuns(f"an empty run at rank {start}")
            if start <= previous:
                raise BadRuns(f"run at rank {start} is not after the one ending at {previous}")
            if end > limit:
                raise BadRuns(f"run {start}..{end - 1} passes the communicator's {limit} ranks")
            previous = end
        return cls(tuple(starts), tuple(ends))

    def flat(self) -> list[int]:
        out: list[int] = []
        for start, end in zip(self.starts, self.ends, strict=True):
            out += (start, end - start)
        return out

    def __len__(self) -> int:
        return sum(e - s for s, e in zip(self.starts, self.ends, strict=True))

    def __bool__(self) -> bool:
        return bool(self.starts)

    def __contains__(self, rank: object) -> bool:
        if not isinstance(rank, int):
            return False
        i = bisect.bisect_right(self.starts, rank) - 1
        return i >= 0 and rank < self.ends[i]

    def __iter__(self) -> Iterator[int]:
        for start, end in zip(self.starts, self.ends, strict=True):
            yield from range(start, end)

    def union(self, other: RankRuns) -> RankRuns:
        return RankRuns.union_all((self, other))

    @staticmethod
    def union_all(sets: Iterable[RankRuns]) -> RankRuns:
        """All the sets' ranks, their runs sorted once (folding them pairwise was quadratic in
        the number of sets)."""
        pairs = sorted(
            (start, end) for s in sets for start, end in zip(s.starts, s.ends, strict=True)
        )
        starts: list[int] = []
        ends: list[int] = []
        for start, end in pairs:
            if ends and start <= ends[-1]:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        return RankRuns(tuple(starts), tuple(ends))

    def missing(self, limit: int) -> RankRuns:
        """The ranks in 0..limit-1 that are not in this set."""
        starts: list[int] = []
        ends: list[int] = []
        at = 0
        for start, end in zip(self.starts, self.ends, strict=True):
            if start >= limit:
                break
            if start > at:
                starts.append(at)
                ends.append(start)
            at = max(at, end)
        if at < limit:
            starts.append(at)
            ends.append(limit)
        return RankRuns(tuple(starts), tuple(ends))

    def text(self, max_runs: int = 8) -> str:
        """'0-6,8-99999', the runs past max_runs summarized by count."""
        parts = [
            str(s) if e - s == 1 else f"{s}-{e - 1}"
            for s, e in zip(self.starts[:max_runs], self.ends[:max_runs], strict=True)
        ]
        rest = len(self.starts) - max_runs
        if rest > 0:
            parts.append(f"... ({rest} more runs)")
        return ",".join(parts)


EMPTY = RankRuns()
