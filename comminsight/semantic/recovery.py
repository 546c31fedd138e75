"""Step boundaries on a role-labelled op stream: a template's FSM, or a bare period.

A runner decides, for each op of a batch, where it goes: it begins a Step, ends one,
continues the open one, or falls between Steps; and whether it fitted the pattern. The
decision depends only on (FSM state, the op's role, where the op is in the per-Step cycle):
`TemplateRunner` computes that table once and native.decide runs it over the batch. Runners
keep only small state (the FSM state, the position in the cycle), which checkpoints save.
"""

from __future__ import annotations

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.cycle import Cycle
from comminsight.semantic.op_batch import FUNCS, OpBatch
from comminsight.semantic.templates import UNMATCHED, CompiledTemplate

OFF_CYCLE = 1 << 30  # the key code of an op on no position of the cycle


def cycle_key(role: str, func: str, size: int) -> tuple:
    return (role, func, size)


def _cycle_codes(cycle: Cycle | None) -> tuple[np.ndarray, dict]:
    if cycle is None:
        return np.zeros(0, np.int32), {}
    codes: dict = {}
    for key in cycle.keys:
        codes.setdefault(key, len(codes))
    return np.array([codes[k] for k in cycle.keys], np.int32), codes


class Labels:
    """Per batch: each op's role (a code into `names`) and its cycle key code (-1 when its
    role is not part of the cycle)."""

    def __init__(self, role: np.ndarray, ckey: np.ndarray) -> None:
        self.role = role
        self.ckey = ckey


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
        self.cycle = cycle
        self.state = state or template.spec.fsm.initial_state
        self.cycle_pos = cycle_pos
        self.unexpected_policy = template.spec.fsm.unmatched_ops.value == "unexpected"
        self.names = [r.name for r in template.rules] + [UNMATCHED]
        self._codes = {name: i for i, name in enumerate(self.names)}
        self._states = list(template.in_step)
        self._cycle, self._key_codes = _cycle_codes(cycle)
        # the decision table depends on the template alone: built once per template
        table = template.derived.get("decision_table")
        if table is None:
            table = template.derived["decision_table"] = self._build_table()
        self._table = table

    def labels(self, batch: OpBatch) -> Labels:
        """Roles from the op shapes (a training run repeats a few shapes)."""
        first, inverse = batch.shapes()
        t = self.template
        roles, ckeys = [], []
        for i in first.tolist():
            op = batch.shape(i)
            role = t.role_of(op)
            roles.append(self._codes[role])
            if self.cycle is not None and role in t.cycle_roles:
                key = cycle_key(role, op.func, op.size_bytes)
                ckeys.append(self._key_codes.get(key, OFF_CYCLE))
            else:
                ckeys.append(-1)
        role = np.array(roles, np.int32)[inverse] if len(first) else np.zeros(0, np.int32)
        ckey = np.array(ckeys, np.int32)[inverse] if len(first) else np.zeros(0, np.int32)
        return Labels(role, ckey)

    def decide(self, labels: Labels) -> np.ndarray:
        """Decision bits (native.B_BEGIN ...) of each op, in order; the state moves on."""
        dec, state, pos, _ = native.decide(
            labels.role,
            labels.ckey,
            self._cycle,
            self._table,
            len(self.names),
            self._states.index(self.state),
            self.cycle_pos,
            False,
            period=False,
        )
        self.state, self.cycle_pos = self._states[state], pos
        return dec

    def code(self, role: str) -> int:
        return self._codes[role]

    def _build_table(self) -> np.ndarray:
        table = np.zeros((len(self._states), len(self.names), len(native.WHERE)), np.int32)
        for s, state in enumerate(self._states):
            for r, role in enumerate(self.names):
                for where, w in native.WHERE.items():  # ci_decide's codes
                    after, bits = self._decide(state, role, where)
                    table[s, r, w] = self._states.index(after) << 8 | bits
        return table.ravel()

    def _decide(self, state: str, role: str, where: str | None) -> tuple[str, int]:
        """(the state after, the decision bits) for an op of `role` at `where` in the cycle."""
        t = self.template
        off = where == "off" and t.in_step[state]
        for tr in t.transitions:
            if role not in tr.on_roles:
                continue
            if off and tr.step.value == "none":
                # an extra op inside a Step (evaluation, a checkpoint barrier) fits nothing,
                # unless a transition names it as a boundary (DDP's bucket-rebuild broadcasts)
                continue
            if "*" not in tr.from_states and state not in tr.from_states:
                continue
            if tr.cycle_start is True and where != "start":
                continue
            boundary = tr.step.value
            in_step = boundary != "none" or t.in_step[tr.to_state]
            bits = {"begin": native.B_BEGIN, "end": native.B_END}.get(boundary, 0)
            bits |= native.IN_STEP if in_step else 0
            bits |= native.MICRO if tr.micro_step is True else 0
            return tr.to_state, bits
        if off:
            return state, native.IN_STEP | native.UNEXPECTED
        in_step = t.in_step[state]
        unexpected = self.unexpected_policy or role == UNMATCHED or not in_step
        bits = (native.IN_STEP if in_step else 0) | (native.UNEXPECTED if unexpected else 0)
        return state, bits


class PeriodRunner:
    """No template fits: a Step is one repetition of the op cycle itself; an op's role is its
    function."""

    method = "period"

    def __init__(self, cycle: Cycle, pos: int = 0, started: bool = False) -> None:
        self.cycle = cycle
        self.cycle_pos = pos
        self.started = started
        self.names: list[str] = []
        self._codes: dict[str, int] = {}
        self._cycle, self._key_codes = _cycle_codes(cycle)

    def labels(self, batch: OpBatch) -> Labels:
        first, inverse = batch.shapes()
        roles, ckeys = [], []
        for i in first.tolist():
            comm = batch.comm(i)
            func = FUNCS[int(batch["func"][i])]
            name = func_role(func)
            if name not in self._codes:
                self._codes[name] = len(self.names)
                self.names.append(name)
            roles.append(self._codes[name])
            key = (comm.comm_id, func, int(batch["size"][i]))
            ckeys.append(self._key_codes.get(key, OFF_CYCLE))
        role = np.array(roles, np.int32)[inverse] if len(first) else np.zeros(0, np.int32)
        ckey = np.array(ckeys, np.int32)[inverse] if len(first) else np.zeros(0, np.int32)
        return Labels(role, ckey)

    def decide(self, labels: Labels) -> np.ndarray:
        dec, _, pos, started = native.decide(
            labels.role,
            labels.ckey,
            self._cycle,
            None,
            len(self.names),
            0,
            self.cycle_pos,
            self.started,
            period=True,
        )
        self.cycle_pos, self.started = pos, started
        return dec

    def code(self, role: str) -> int:
        if role not in self._codes:
            self._codes[role] = len(self.names)
            self.names.append(role)
        return self._codes[role]


def func_role(func: str) -> str:
    """A role name for period mode, where there are no template roles: the function."""
    name = "".join(c for c in func.lower() if c.isascii() and c.isalnum())
    return name if name[:1].isalpha() else "op"
