"""Step templates: YAML data files (semantic-engine v1, kind: template), loaded and checked.

Built-in templates live in `comminsight/semantic/templates/`; COMMINSIGHT_SEMANTIC_TEMPLATE_DIRS
adds directories (a user drops a file there, no code changes). Each file is decoded through the
generated `Template` model (types, bounds, patterns, unknown keys refused) and then checked for
what a schema cannot say: unique role and state names, transitions that name known roles and
states, regular expressions that compile. A bad file is a `TemplateError` naming the file and
the field; the others still load.

`CompiledTemplate.role_of(op)` gives an op its role (the first rule that matches, else
`unmatched`), cached per distinct op shape, since a training run repeats a few shapes millions
of times.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import msgspec
import yaml

from comminsight.semantic.op_batch import OpShape
from comminsight.semantic.ops import EngineOp
from comminsight_gen.models.semantic_engine_v1 import FsmTransition, Template

UNMATCHED = "unmatched"
# libyaml's safe loader where PyYAML was built with it (20 times faster), else PyYAML's own
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# NVIDIA Inspector spells some functions differently from NCCL's profiler.
FUNC_ALIASES = {"All2All": "AlltoAll", "AllToAll": "AlltoAll"}


class TemplateError(ValueError):
    """A template file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class RoleRule:
    name: str
    funcs: frozenset[str]
    comm_name: re.Pattern | None
    nranks_min: int | None
    nranks_max: int | None
    single_node: bool | None
    bytes_min: int | None
    bytes_max: int | None
    peer_offsets: tuple[int, ...] | None

    def matches(self, op: EngineOp | OpShape) -> bool:
        if FUNC_ALIASES.get(op.func, op.func) not in self.funcs:
            return False
        if self.comm_name is not None and (
            op.comm_name is None or not self.comm_name.search(op.comm_name)
        ):
            return False
        if self.nranks_min is not None and op.comm_nranks < self.nranks_min:
            return False
        if self.nranks_max is not None and op.comm_nranks > self.nranks_max:
            return False
        if self.single_node is not None:
            if op.comm_nnodes is None or (op.comm_nnodes == 1) != self.single_node:
                return False
        if self.bytes_min is not None and op.size_bytes < self.bytes_min:
            return False
        if self.bytes_max is not None and op.size_bytes > self.bytes_max:
            return False
        if self.peer_offsets is not None:
            if op.peer is None or op.comm_nranks <= 0:
                return False
            offset = (op.peer - op.comm_rank) % op.comm_nranks
            if offset not in {o % op.comm_nranks for o in self.peer_offsets}:
                return False
        return True


@dataclass
class CompiledTemplate:
    spec: Template
    source: str  # the file it came from
    rules: list[RoleRule]
    in_step: dict[str, bool]
    transitions: list[FsmTransition]
    cycle_roles: frozenset[str]  # with cycle_start transitions: the roles a Step's cycle has
    _cache: dict[tuple, str] = field(default_factory=dict)
    derived: dict = field(default_factory=dict)  # what runners compute once from the template

    @property
    def name(self) -> str:
        return self.spec.name

    def role_of(self, op: EngineOp | OpShape) -> str:
        # a communicator's name, size and node count never change: its id stands for them
        shape = (op.comm_id, op.comm_rank, op.func, op.size_bytes, op.peer)
        role = self._cache.get(shape)
        if role is None:
            role = next((r.name for r in self.rules if r.matches(op)), UNMATCHED)
            if len(self._cache) < 100_000:  # bounded: shapes repeat, except under MoE
                self._cache[shape] = role
        return role

    def canonical(self) -> bytes:
        return json.dumps(msgspec.to_builtins(self.spec), sort_keys=True).encode()


def _unset(value):
    return None if value is msgspec.UNSET else value


def compile_template(spec: Template, source: str) -> CompiledTemplate:
    def bad(where: str, why: str) -> TemplateError:
        return TemplateError(f"{source}: {where}: {why}")

    rules = []
    names = set()
    for i, role in enumerate(spec.roles):
        if role.name in names:
            raise bad(f"roles[{i}].name", f"role {role.name!r} is defined twice")
        if role.name == UNMATCHED:
            raise bad(f"roles[{i}].name", f"{UNMATCHED!r} is reserved for ops no role matched")
        names.add(role.name)
        m = role.match
        regex = _unset(m.comm_name_regex)
        try:
            pattern = re.compile(regex) if regex is not None else None
        except re.error as e:
            raise bad(
                f"roles[{i}].match.comm_name_regex", f"not a regular expression: {e}"
            ) from None
        peers = _unset(m.peer_offsets)
        rules.append(
            RoleRule(
                role.name,
                frozenset(f.value for f in m.funcs),
                pattern,
                _unset(m.comm_nranks_min),
                _unset(m.comm_nranks_max),
                _unset(m.comm_single_node),
                _unset(m.bytes_min),
                _unset(m.bytes_max),
                tuple(peers) if peers is not None else None,
            )
        )
    states: dict[str, bool] = {}
    for i, state in enumerate(spec.fsm.states):
        if state.name in states:
            raise bad(f"fsm.states[{i}].name", f"state {state.name!r} is defined twice")
        states[state.name] = state.in_step
    if spec.fsm.initial_state not in states:
        raise bad("fsm.initial_state", f"{spec.fsm.initial_state!r} is not a state")
    for i, t in enumerate(spec.fsm.transitions):
        for s in t.from_states:
            if s != "*" and s not in states:
                raise bad(f"fsm.transitions[{i}].from_states", f"{s!r} is not a state")
        if t.to_state not in states:
            raise bad(f"fsm.transitions[{i}].to_state", f"{t.to_state!r} is not a state")
        for r in t.on_roles:
            if r not in names and r != UNMATCHED:
                raise bad(f"fsm.transitions[{i}].on_roles", f"{r!r} is not a role")
    tol = spec.tolerance
    lo, hi = _unset(tol.micro_steps_min), _unset(tol.micro_steps_max)
    if lo is not None and hi is not None and lo > hi:
        raise bad("tolerance", f"micro_steps_min {lo} > micro_steps_max {hi}")
    return CompiledTemplate(
        spec, source, rules, states, list(spec.fsm.transitions), cycle_roles_of(spec)
    )


def cycle_roles_of(spec: Template) -> frozenset[str]:
    """What the per-Step cycle is made of: the roles of the cycle_start transitions and of the
    transitions that continue a Step in the states those enter (no boundary). Roles that only
    mark a boundary elsewhere (DDP's bucket-rebuild broadcasts) or set up are not in it."""
    starts = [t for t in spec.fsm.transitions if t.cycle_start is True]
    entered = {t.to_state for t in starts}
    roles = {r for t in starts for r in t.on_roles}
    for t in spec.fsm.transitions:
        from_entered = "*" in t.from_states or entered.intersection(t.from_states)
        if t.step.value == "none" and t.cycle_start is not True and from_entered:
            roles.update(t.on_roles)
    return frozenset(roles)


MAX_TEMPLATE_BYTES = 1 << 20


def _template_text(path: Path) -> str:
    """The file's text, or TemplateError naming it: opened without blocking (a FIFO named
    *.yaml must not stop the Agent's start), a regular file of bounded size, UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TemplateError(f"{path}: cannot be read: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TemplateError(f"{path}: not a regular file")
        if st.st_size > MAX_TEMPLATE_BYTES:
            raise TemplateError(f"{path}: larger than {MAX_TEMPLATE_BYTES} bytes")
        try:
            data = f.read(MAX_TEMPLATE_BYTES + 1)
        except OSError as e:
            raise TemplateError(f"{path}: cannot be read: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TemplateError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


def load_template_file(path: Path) -> CompiledTemplate:
    text = _template_text(path)
    try:
        raw = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as e:
        raise TemplateError(f"{path}: not readable YAML: {e}") from None
    try:
        spec = msgspec.convert(raw, Template)
    except msgspec.ValidationError as e:
        raise TemplateError(f"{path}: not a semantic-engine v1 template: {e}") from None
    return compile_template(spec, str(path))


def builtin_dir() -> Path:
    return Path(str(resources.files("comminsight.semantic").joinpath("templates")))


@dataclass
class TemplateSet:
    templates: list[CompiledTemplate]
    problems: list[str]

    def digest(self, settings: dict | None = None) -> str:
        """sha256 over the templates (canonical JSON, by name) and output-relevant settings."""
        h = hashlib.sha256()
        for t in sorted(self.templates, key=lambda t: t.name):
            h.update(t.canonical())
        h.update(json.dumps(settings or {}, sort_keys=True).encode())
        return "sha256:" + h.hexdigest()


def load_templates(extra_dirs: str | list[str] = "") -> TemplateSet:
    """The built-in templates plus those of `extra_dirs` (colon-separated or a list); a file
    whose name is taken by an earlier one replaces it (users can override a built-in)."""
    dirs = [builtin_dir()]
    if isinstance(extra_dirs, str):
        extra_dirs = [d for d in extra_dirs.split(":") if d]
    dirs += [Path(d) for d in extra_dirs]
    by_name: dict[str, CompiledTemplate] = {}
    problems = []
    for d in dirs:
        try:
            paths = sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")) if d.is_dir() else None
        except OSError as e:  # an unreadable directory is named and left out
            problems.append(f"{d}: template directory cannot be read: {e.strerror}")
            continue
        if paths is None:
            problems.append(f"{d}: template directory does not exist")
            continue
        for path in paths:
            try:
                t = load_template_file(path)
            except TemplateError as e:
                problems.append(str(e))
                continue
            by_name[t.name] = t
    return TemplateSet(sorted(by_name.values(), key=lambda t: t.name), problems)
