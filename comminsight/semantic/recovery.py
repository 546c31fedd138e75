"""Step boundaries on a role-labelled op stream: a template's FSM, or a bare period.

A runner looks at one op at a time and decides where it goes: it begins a Step, ends one,
continues the open one, or falls between Steps; and whether it fitted the pattern. Runners
keep only small state (the FSM state, the position in the cycle), which checkpoints save.
"""

from __future__ import annotations

from typing import NamedTuple

from comminsight.semantic.cycle import Cycle, CycleTracker
from comminsight.semantic.ops import EngineOp
from comminsight.semantic.templates import UNMATCHED, CompiledTemplate


class Decision(NamedTuple):  # one per op: a tuple is the cheapest to make
    role: str
    boundary: str  # "begin", "end" or "none"
    in_step: bool  # the op belongs to a Step (the one it begins, ends or continues)
    unexpected: bool  # it did not fit the pattern
    micro_step: bool  # it begins a micro-batch


def cycle_key(role: str, op: EngineOp) -> tuple:
    return (role, op.func, op.size_bytes)


class TemplateRunner:
    method = "template"

    def __init__(
        self,
        template: CompiledTemplate,
        cycle: Cycle | None = None,
        state: str | None = None,
        cycle_pos: int = 0,
    ) -> None:
        self.template = template
        self.state = state or template.spec.fsm.initial_state
        self.tracker = CycleTracker(cycle, cycle_pos) if cycle is not None else None
        self.unexpected_policy = template.spec.fsm.unmatched_ops.value == "unexpected"
        self._table: dict[tuple, tuple[str, Decision]] = {}

    def decide(self, op: EngineOp) -> Decision:
        t = self.template
        role = t.role_of(op)
        where = None
        if self.tracker is not None and role in t.cycle_roles:
            where = self.tracker.advance(cycle_key(role, op))
        # The decision depends only on (state, role, where): computed once, then looked up
        # (this runs for every op).
        key = (self.state, role, where)
        hit = self._table.get(key)
        if hit is None:
            hit = self._table[key] = self._decide(role, where)
        self.state, decision = hit
        return decision

    def _decide(self, role: str, where: str | None) -> tuple[str, Decision]:
        """(the state after, the decision) for an op of `role` at `where` in the cycle."""
        t = self.template
        off = where == "off" and t.in_step[self.state]
        for tr in t.transitions:
            if role not in tr.on_roles:
                continue
            if off and tr.step.value == "none":
                # an extra op inside a Step (evaluation, a checkpoint barrier) fits nothing,
                # unless a transition names it as a boundary (DDP's bucket-rebuild broadcasts)
                continue
            if "*" not in tr.from_states and self.state not in tr.from_states:
                continue
            if tr.cycle_start is True and where != "start":
                continue
            boundary = tr.step.value
            in_step = boundary != "none" or t.in_step[tr.to_state]
            return tr.to_state, Decision(role, boundary, in_step, False, tr.micro_step is True)
        if off:
            return self.state, Decision(role, "none", True, True, False)
        in_step = t.in_step[self.state]
        unexpected = self.unexpected_policy or role == UNMATCHED or not in_step
        return self.state, Decision(role, "none", in_step, unexpected, False)


class PeriodRunner:
    """No template fits: a Step is one repetition of the op cycle itself."""

    method = "period"

    def __init__(self, cycle: Cycle, pos: int = 0) -> None:
        self.tracker = CycleTracker(cycle, pos)
        self.started = False

    def decide(self, op: EngineOp) -> Decision:
        role = func_role(op.func)
        where = self.tracker.advance(op.key())
        if where == "start":
            self.started = True
            return Decision(role, "begin", True, False, False)
        if not self.started:  # before the first repetition: not in a Step
            return Decision(role, "none", False, True, False)
        return Decision(role, "none", True, where == "off", False)


def func_role(func: str) -> str:
    """A role name for period mode, where there are no template roles: the function."""
    name = "".join(c for c in func.lower() if c.isalnum())
    return name if name[:1].isalpha() else "op"
