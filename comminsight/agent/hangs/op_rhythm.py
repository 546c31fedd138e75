"""Which op a communicator's own rhythm expects at an op index: how hang diagnosis tells the
odd rank out when ranks disagree and no majority can (two ranks, an even split).

Training repeats itself: every Step issues the same collectives on a communicator in the same
order, so the op at index N is the op one cycle of P ops earlier, at N - P. P comes from the
evidence the Agent holds when it diagnoses:

- the job's Step cycle: how many collectives the Semantic Engine's latest Steps of a member's
  GPU had on the communicator (step_cycles reads them back from the live step summaries);
- the communicator's own op sequence: the members' completed collectives the Agent keeps
  (recent_ops), whose repeating period is found here. The engine places Steps only once they
  have settled, several Steps behind and not at all in a job's first Steps, while the
  completed ops reach up to the op in question.

A cycle is believed only where the completed ops show it: it must have repeated at least
MIN_CYCLES times in a row right before N (a period found in the ops alone also over at least
MIN_SPAN_OPS ops), so the op at N - P is the op that offset of every recent cycle had. Where
the evidence is missing, too short, or the two sources expect different ops, nothing is
expected and `Unknown` says why: the caller then names no culprit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from comminsight.agent.state.snapshot import InflightOp
from comminsight.shm_reader import ROOTED_FUNCS

# The cycle seen twice in a row: once shows no rhythm at all.
MIN_CYCLES = 2
# A few equal ops in a row (a run of same-size gradient buckets) repeat with period 1 by
# accident; a period found in the ops alone must hold over at least this many of them.
MIN_SPAN_OPS = 8
# The newest completed ops looked at: the Agent keeps 4096 per process by default, and the
# period search costs one comparison of this length per candidate period.
MAX_HISTORY = 4096


@dataclass(frozen=True)
class StepCycle:
    """What the Semantic Engine's latest Steps of one GPU say about one communicator."""

    ops_per_step: int  # collectives per Step on the communicator
    steps: int  # the newest Steps that agree on it
    confidence: float  # the lowest recovery confidence among them


@dataclass(frozen=True)
class Expectation:
    """The op the rhythm expects at `op_index`: the op one cycle earlier."""

    op: InflightOp  # as completed at op_index - period
    op_index: int
    period: int  # ops per cycle
    cycles: int  # cycles in a row before op_index that repeated it
    step_cycle: StepCycle | None  # the engine's Step cycle, where the period is its

    @property
    def source(self) -> str:
        return (
            "the job's Step cycle"
            if self.step_cycle is not None
            else "the communicator's repeating op sequence"
        )

    def evidence(self) -> str:
        """How sure: the cycle, where it came from, how often it repeated."""
        learned = (
            f"{self.step_cycle.ops_per_step} collectives per Step in the Semantic Engine's "
            f"last {self.step_cycle.steps} Steps (confidence {self.step_cycle.confidence:.2f})"
            if self.step_cycle is not None
            else f"a cycle of {self.period} ops"
        )
        return (
            f"{learned}; op #{self.op_index - self.period} one cycle earlier, the same in the "
            f"{self.cycles} cycles before op #{self.op_index}"
        )


@dataclass(frozen=True)
class Unknown:
    """Why the rhythm expects nothing at the op index."""

    reason: str


def comm_history(windows: Iterable[Mapping[int, InflightOp]], before: int) -> dict[int, InflightOp]:
    """The communicator's completed collectives below op index `before`, joined from the
    members' windows (each holds a different stretch). An index whose ops differ between
    windows is left out: there the ranks had already gone apart, it is no rhythm."""
    joined: dict[int, InflightOp] = {}
    split: set[int] = set()
    for window in windows:
        for index, op in window.items():
            if index >= before or index in split:
                continue
            known = joined.get(index)
            if known is None:
                joined[index] = op
            elif rhythm_key(known) != rhythm_key(op):
                split.add(index)
                del joined[index]
    return joined


def expected_op(
    history: Mapping[int, InflightOp],
    op_index: int,
    step_cycles: Iterable[StepCycle | None] = (),
) -> Expectation | Unknown:
    """The op the rhythm expects at op_index, from the completed collectives before it
    (comm_history) and the engine's Step cycles of the members' GPUs, if any."""
    tail = _tail(history, op_index)
    if not tail:
        return Unknown(
            f"no completed op of this communicator right before op #{op_index} is known to "
            "learn its rhythm from"
        )
    ids: dict[tuple, int] = {}
    codes = np.fromiter((ids.setdefault(rhythm_key(o), len(ids)) for o in tail), np.int64)
    found: list[Expectation] = []
    cycle = _agreed(step_cycles)
    if cycle is not None and 0 < cycle.ops_per_step <= len(tail):
        seen = _cycles(codes, cycle.ops_per_step)
        if seen >= MIN_CYCLES:
            found.append(_expectation(tail, op_index, cycle.ops_per_step, seen, cycle))
    period = _period(codes)
    if period is not None:
        found.append(_expectation(tail, op_index, period, _cycles(codes, period), None))
    if not found:
        return Unknown(
            f"the {len(tail)} completed op(s) right before op #{op_index} show no cycle "
            f"repeated {MIN_CYCLES} times"
            + (
                f", not even the job's Step cycle of {cycle.ops_per_step} collectives"
                if cycle is not None
                else ""
            )
        )
    if len({rhythm_key(e.op) for e in found}) > 1:
        a, b = found
        return Unknown(
            f"{a.source} ({a.period} ops) expects {op_text(a.op)} and {b.source} "
            f"({b.period} ops) {op_text(b.op)}"
        )
    return found[0]


def rhythm_key(op: InflightOp) -> tuple:
    """What an op must share with the op one cycle earlier: its signature, where a
    collective's root counts only for rooted functions. The in-flight view carries the root
    argument of every collective (0 for an all-reduce), the completed-op window only that of
    rooted ones."""
    kind, func, count, datatype, peer = op.signature()
    if op.is_coll and func not in ROOTED_FUNCS:
        peer = None
    return (kind, func, count, datatype, peer)


def op_text(op: InflightOp) -> str:
    root = f" root {op.peer}" if op.peer is not None and op.func in ROOTED_FUNCS else ""
    return f"{op.func} count {op.count} {op.datatype}{root}"


def _tail(history: Mapping[int, InflightOp], op_index: int) -> list[InflightOp]:
    """The unbroken stretch of known ops ending right before op_index, oldest first."""
    out = []
    index = op_index - 1
    while index >= 0 and index in history and len(out) < MAX_HISTORY:
        out.append(history[index])
        index -= 1
    return out[::-1]


def _run(codes: np.ndarray, period: int) -> int:
    """How many ops, counting back from the newest, equal the op one period before them."""
    same = codes[period:] == codes[:-period]
    misses = np.flatnonzero(~same)
    return len(same) - (int(misses[-1]) + 1 if len(misses) else 0)


def _cycles(codes: np.ndarray, period: int) -> int:
    """Whole cycles in a row at the end of codes that repeat one another."""
    return (_run(codes, period) + period) // period


def _period(codes: np.ndarray) -> int | None:
    """The period of the sequence's end: the one that explains the longest stretch of it (a
    multiple of the true period explains less, a chance period much less), the shortest on a
    tie; None when none repeated MIN_CYCLES times over MIN_SPAN_OPS ops."""
    best, best_run = None, -1
    for period in range(1, len(codes) // MIN_CYCLES + 1):
        run = _run(codes, period)
        if run > best_run:
            best, best_run = period, run
    if best is None or (best_run + best) // best < MIN_CYCLES or best_run + best < MIN_SPAN_OPS:
        return None
    return best


def _agreed(cycles: Iterable[StepCycle | None]) -> StepCycle | None:
    """The members' GPUs' Step cycles where they agree on its length; none where they do not
    (the engine has not settled on one)."""
    known = [c for c in cycles if c is not None]
    if not known or len({c.ops_per_step for c in known}) > 1:
        return None
    return min(known, key=lambda c: (c.confidence, c.steps))


def _expectation(
    tail: list[InflightOp], op_index: int, period: int, cycles: int, step: StepCycle | None
) -> Expectation:
    return Expectation(tail[len(tail) - period], op_index, period, cycles, step)
