"""Which ranks issued the odd op where a communicator's ranks disagree at one op index.

A majority (or plurality) decides when there is one: the ranks that issued anything else are
odd. Between two ranks, or in an even split, no count can; then the job's rhythm (op_rhythm)
does: the ranks whose op is not the one the communicator's cycle expects at that index are
odd, provided some rank issued the expected op. When the rhythm expects nothing, or an op no
rank issued, no rank is odd and `why` says what failed to decide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from comminsight.agent.hangs.op_rhythm import Expectation, Unknown, op_text, rhythm_key
from comminsight.agent.state.snapshot import InflightOp
from comminsight_gen.models.hang_report_v1 import CulpritBasis


@dataclass(frozen=True)
class OddRanks:
    basis: CulpritBasis
    odd: frozenset[int]  # ranks whose op is the odd one; empty when undecided
    right: InflightOp | None  # the op the other ranks issued; None when undecided
    expectation: Expectation | None = None  # with basis rhythm
    why: str = ""  # with basis undecided

    def right_ranks(self, ops: Mapping[int, InflightOp]) -> list[int]:
        return sorted(r for r, o in ops.items() if r not in self.odd)


def odd_ranks(
    ops: Mapping[int, InflightOp],
    expect: Callable[[], Expectation | Unknown],
    weights: Mapping[int, int] | None = None,
) -> OddRanks:
    """ops: each rank's op at one index, of at least two different signatures. expect is
    asked only on a tie (reading what the rhythm rests on costs more than counting).
    weights: ranks a rank's op counts for (a relay's class, all the ranks in its state)."""
    counts: Counter = Counter()
    for r, o in ops.items():
        counts[o.signature()] += weights.get(r, 1) if weights else 1
    (top, n_top), *rest = counts.most_common()
    if rest and n_top > rest[0][1]:
        right = next(o for _, o in sorted(ops.items()) if o.signature() == top)
        odd = frozenset(r for r, o in ops.items() if o.signature() != top)
        return OddRanks(CulpritBasis.majority, odd, right)
    expected = expect()
    if isinstance(expected, Unknown):
        return OddRanks(
            CulpritBasis.undecided, frozenset(), None, why=f"no majority, and {expected.reason}"
        )
    key = rhythm_key(expected.op)
    matching = sorted(r for r, o in ops.items() if rhythm_key(o) == key)
    if not matching:
        return OddRanks(
            CulpritBasis.undecided,
            frozenset(),
            None,
            expected,
            f"no majority, and {expected.source} expects {op_text(expected.op)}, which no "
            f"rank issued ({expected.evidence()})",
        )
    odd = frozenset(r for r in ops if r not in matching)
    return OddRanks(CulpritBasis.rhythm, odd, ops[matching[0]], expected)


def rhythm_reason(mine: InflightOp, decided: OddRanks, ops: Mapping[int, InflightOp]) -> str:
    """Why a rank the rhythm found odd is blamed, in one line."""
    e = decided.expectation
    assert e is not None and decided.right is not None
    ranks = decided.right_ranks(ops)
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    return (
        f"issued {op_text(mine)} where {e.source} expects {op_text(decided.right)} "
        f"(as {who} issued; {e.evidence()})"
    )
