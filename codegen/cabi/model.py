"""The C-ABI schema language: parse a YAML layout description, check it, and lay it out.

A C-ABI schema describes fixed binary layouts shared by C and Python (SHM, FIFO events) or
consumed from a foreign ABI (NCCL's profiler plugin). The generator computes every offset
itself with the System V x86-64 (LP64) rules, checks it against the sizes and offsets the
schema asserts, and later the contract tests check both against a real C compiler, cffi and
numpy. See protocols/README.md for the language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from codegen.errors import SchemaError

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Scalar:
    """A built-in type: its C spelling, size and alignment on LP64, numpy format."""

    name: str
    c: str
    size: int
    numpy: str
    signed: bool | None = None  # None: not an integer

    @property
    def align(self) -> int:
        return self.size


SCALARS: dict[str, Scalar] = {
    s.name: s
    for s in (
        Scalar("u8", "uint8_t", 1, "<u1", False),
        Scalar("u16", "uint16_t", 2, "<u2", False),
        Scalar("u32", "uint32_t", 4, "<u4", False),
        Scalar("u64", "uint64_t", 8, "<u8", False),
        Scalar("i8", "int8_t", 1, "<i1", True),
        Scalar("i16", "int16_t", 2, "<i2", True),
        Scalar("i32", "int32_t", 4, "<i4", True),
        Scalar("i64", "int64_t", 8, "<i8", True),
        Scalar("f32", "float", 4, "<f4"),
        Scalar("f64", "double", 8, "<f8"),
        Scalar("bool", "bool", 1, "?"),
        Scalar("char", "char", 1, "S1"),
        Scalar("size", "size_t", 8, "<u8", False),
        Scalar("ptr", "void*", 8, "<u8"),
        Scalar("cstr", "const char*", 8, "<u8"),
    )
}
INTEGER_SCALARS = {n for n, s in SCALARS.items() if s.signed is not None}


@dataclass
class EnumValue:
    name: str
    value: int
    description: str
    label: str | None  # the external spelling (e.g. NCCL's "AllReduce"), if the enum maps one


@dataclass
class Enum:
    name: str
    storage: Scalar
    description: str
    values: list[EnumValue]
    flags: bool


@dataclass
class Constant:
    name: str
    type: Scalar
    value: int
    description: str


@dataclass
class Param:
    name: str
    type: str  # a scalar, record, enum or function name, or "void"
    pointer: int
    const: bool


@dataclass
class Function:
    """A function-pointer type (NCCL's plugin entry points and logger), or, in `exports`, a
    function a library defines (its C prototype, named as the library names it)."""

    name: str
    description: str
    returns: str
    params: list[Param]
    variadic: bool
    returns_pointer: int = 0
    returns_const: bool = False


@dataclass
class Opaque:
    """A struct only one side sees inside: the other holds pointers to it."""

    name: str
    description: str


@dataclass
class Field:
    name: str
    type: str
    count: int | None
    declared_offset: int | None
    description: str
    pointer: int = 0  # levels of indirection: a pointer to `type` (an array the other side owns)
    const: bool = False  # with pointer: the pointee is const
    # Filled in by layout():
    offset: int = -1
    size: int = -1
    align: int = -1


@dataclass
class Record:
    """A struct or a union."""

    kind: str  # "struct" | "union"
    name: str
    description: str
    fields: list[Field]
    declared_size: int | None
    explicit_padding: bool
    where: str
    size: int = -1
    align: int = -1


@dataclass
class AbiSchema:
    path: Path
    protocol: str
    version: int
    prefix: str
    description: str
    constants: list[Constant] = field(default_factory=list)
    enums: list[Enum] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)  # in dependency order after layout()
    opaques: list[Opaque] = field(default_factory=list)
    exports: list[Function] = field(default_factory=list)  # a library's functions, by C name

    # ---- naming (one place, used by every template) ----
    def c_type(self, name: str) -> str:
        """C spelling of a schema type name used as a field or parameter type."""
        if name == "void":
            return "void"
        if name in SCALARS:
            return SCALARS[name].c
        if name in self.enum_by_name:
            return self.enum_by_name[name].storage.c
        if name in self.function_by_name:
            return f"{self.prefix}_{name}_v{self.version}_fn"
        return f"{self.prefix}_{name}_v{self.version}_t"

    def macro(self, *parts: str) -> str:
        return "_".join([self.prefix.upper(), f"V{self.version}", *(p.upper() for p in parts)])

    @property
    def enum_by_name(self) -> dict[str, Enum]:
        return {e.name: e for e in self.enums}

    @property
    def function_by_name(self) -> dict[str, Function]:
        return {f.name: f for f in self.functions}

    @property
    def record_by_name(self) -> dict[str, Record]:
        return {r.name: r for r in self.records}

    @property
    def opaque_by_name(self) -> dict[str, Opaque]:
        return {o.name: o for o in self.opaques}


# ---------------------------------------------------------------------------------------------
# Parsing


def _req(d: dict, key: str, path: Path, where: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise SchemaError(path, where, f"missing required key '{key}'")
    value = d[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SchemaError(path, f"{where}.{key}", f"expected {names}, got {type(value).__name__}")
    return value


def _ident(value: str, path: Path, where: str) -> str:
    if not IDENT.match(value):
        raise SchemaError(path, where, f"'{value}' is not a C identifier")
    return value


def _only_keys(d: dict, allowed: set[str], path: Path, where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise SchemaError(path, where, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def _unique(names: list[str], path: Path, where: str, what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise SchemaError(path, f"{where}.{n}", f"duplicate {what} '{n}'")
        seen.add(n)


def load(path: Path) -> AbiSchema:
    """Parse and fully check one C-ABI schema file; raises SchemaError naming file and field."""
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SchemaError(path, "", "source file does not exist") from None
    except yaml.YAMLError as e:
        raise SchemaError(path, "", f"not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise SchemaError(path, "", "top level must be a mapping")
    _only_keys(
        doc,
        {
            "protocol",
            "version",
            "prefix",
            "description",
            "platform",
            "explicit_padding",
            "constants",
            "enums",
            "functions",
            "structs",
            "unions",
            "opaque",
            "exports",
        },
        path,
        "",
    )
    if doc.get("platform", "lp64") != "lp64":
        raise SchemaError(path, "platform", "only 'lp64' (x86-64/aarch64 Linux) is supported")
    schema = AbiSchema(
        path=path,
        protocol=_req(doc, "protocol", path, "", str),
        version=_req(doc, "version", path, "", int),
        prefix=_ident(_req(doc, "prefix", path, "", str), path, "prefix"),
        description=_req(doc, "description", path, "", str).strip(),
    )
    explicit_padding = bool(doc.get("explicit_padding", False))

    for i, c in enumerate(doc.get("constants") or []):
        where = f"constants[{i}]"
        _only_keys(c, {"name", "type", "value", "description"}, path, where)
        name = _ident(_req(c, "name", path, where, str), path, f"{where}.name")
        where = f"constants.{name}"
        schema.constants.append(
            Constant(
                name,
                _int_scalar(c.get("type", "u64"), path, f"{where}.type"),
                _req(c, "value", path, where, int),
                _req(c, "description", path, where, str),
            )
        )
    _unique([c.name for c in schema.constants], path, "constants", "constant")
    for c in schema.constants:
        _check_range(c.value, c.type, path, f"constants.{c.name}.value")

    for i, e in enumerate(doc.get("enums") or []):
        where = f"enums[{i}]"
        _only_keys(e, {"name", "storage", "description", "values", "flags"}, path, where)
        name = _ident(_req(e, "name", path, where, str), path, f"{where}.name")
        where = f"enums.{name}"
        storage = _int_scalar(_req(e, "storage", path, where, str), path, f"{where}.storage")
        values = []
        for j, v in enumerate(_req(e, "values", path, where, list)):
            vwhere = f"{where}.values[{j}]"
            _only_keys(v, {"name", "value", "description", "label"}, path, vwhere)
            vname = _ident(_req(v, "name", path, vwhere, str), path, f"{vwhere}.name")
            vwhere = f"{where}.values.{vname}"
            value = _req(v, "value", path, vwhere, int)
            _check_range(value, storage, path, f"{vwhere}.value")
            label = v.get("label")
            if label is not None and not isinstance(label, str):
                raise SchemaError(path, f"{vwhere}.label", "label must be a string")
            values.append(EnumValue(vname, value, _req(v, "description", path, vwhere, str), label))
        if not values:
            raise SchemaError(path, f"{where}.values", "an enum needs at least one value")
        _unique([v.name for v in values], path, f"{where}.values", "enum value name")
        _unique(
            [v.label for v in values if v.label is not None], path, f"{where}.values", "enum label"
        )
        by_value: dict[int, str] = {}
        for v in values:
            if v.value in by_value:
                raise SchemaError(
                    path,
                    f"{where}.values.{v.name}",
                    f"duplicate enum value {v.value} (also '{by_value[v.value]}')",
                )
            by_value[v.value] = v.name
        schema.enums.append(
            Enum(
                name,
                storage,
                _req(e, "description", path, where, str),
                values,
                bool(e.get("flags", False)),
            )
        )

    for i, f in enumerate(doc.get("functions") or []):
        schema.functions.append(_function(f, path, "functions", i, exported=False))
    for i, f in enumerate(doc.get("exports") or []):
        schema.exports.append(_function(f, path, "exports", i, exported=True))
    _unique([f.name for f in schema.exports], path, "exports", "export")
    for i, o in enumerate(doc.get("opaque") or []):
        where = f"opaque[{i}]"
        _only_keys(o, {"name", "description"}, path, where)
        name = _ident(_req(o, "name", path, where, str), path, f"{where}.name")
        schema.opaques.append(Opaque(name, _req(o, "description", path, f"opaque.{name}", str)))

    for kind, key in (("struct", "structs"), ("union", "unions")):
        for i, r in enumerate(doc.get(key) or []):
            where = f"{key}[{i}]"
            _only_keys(r, {"name", "description", "size", "fields"}, path, where)
            name = _ident(_req(r, "name", path, where, str), path, f"{where}.name")
            where = f"{key}.{name}"
            fields = []
            for j, fd in enumerate(_req(r, "fields", path, where, list)):
                fwhere = f"{where}.fields[{j}]"
                _only_keys(
                    fd,
                    {"name", "type", "count", "offset", "description", "pointer", "const"},
                    path,
                    fwhere,
                )
                fname = _ident(_req(fd, "name", path, fwhere, str), path, f"{fwhere}.name")
                fwhere = f"{where}.fields.{fname}"
                count = fd.get("count")
                if count is not None and (not isinstance(count, int) or count < 1):
                    raise SchemaError(path, f"{fwhere}.count", "count must be an integer >= 1")
                offset = fd.get("offset")
                if offset is not None and (not isinstance(offset, int) or offset < 0):
                    raise SchemaError(path, f"{fwhere}.offset", "offset must be an integer >= 0")
                fields.append(
                    Field(
                        fname,
                        _req(fd, "type", path, fwhere, str),
                        count,
                        offset,
                        _req(fd, "description", path, fwhere, str),
                        _pointer_levels(fd, path, fwhere),
                        bool(fd.get("const", False)),
                    )
                )
            if not fields:
                raise SchemaError(path, f"{where}.fields", f"a {kind} needs at least one field")
            _unique([f.name for f in fields], path, f"{where}.fields", "field")
            size = r.get("size")
            if size is not None and (not isinstance(size, int) or size < 1):
                raise SchemaError(path, f"{where}.size", "size must be an integer >= 1")
            schema.records.append(
                Record(
                    kind,
                    name,
                    _req(r, "description", path, where, str),
                    fields,
                    size,
                    explicit_padding and kind == "struct",
                    where,
                )
            )

    _unique(
        [
            n
            for n in [
                *(e.name for e in schema.enums),
                *(f.name for f in schema.functions),
                *(r.name for r in schema.records),
                *(o.name for o in schema.opaques),
            ]
        ],
        path,
        "types",
        "type name",
    )
    for n in [
        *schema.enum_by_name,
        *schema.function_by_name,
        *schema.record_by_name,
        *schema.opaque_by_name,
    ]:
        if n in SCALARS or n == "void":
            raise SchemaError(path, f"types.{n}", f"'{n}' shadows a built-in type")
    _check_functions(schema)
    layout(schema)
    return schema


def _function(f: dict, path: Path, key: str, i: int, exported: bool) -> Function:
    where = f"{key}[{i}]"
    keys = {"name", "description", "returns", "params", "variadic"}
    if exported:  # a prototype may return a pointer (a function-pointer type names its own)
        keys |= {"returns_pointer", "returns_const"}
    _only_keys(f, keys, path, where)
    name = _ident(_req(f, "name", path, where, str), path, f"{where}.name")
    where = f"{key}.{name}"
    params = []
    for j, p in enumerate(_req(f, "params", path, where, list)):
        pwhere = f"{where}.params[{j}]"
        _only_keys(p, {"name", "type", "pointer", "const"}, path, pwhere)
        pname = _ident(_req(p, "name", path, pwhere, str), path, f"{pwhere}.name")
        params.append(
            Param(
                pname,
                _req(p, "type", path, f"{where}.params.{pname}", str),
                _pointer_levels(p, path, f"{where}.params.{pname}"),
                bool(p.get("const", False)),
            )
        )
    _unique([p.name for p in params], path, f"{where}.params", "parameter")
    return Function(
        name,
        _req(f, "description", path, where, str),
        f.get("returns", "void"),
        params,
        bool(f.get("variadic", False)),
        _pointer_levels(f, path, where, key="returns_pointer"),
        bool(f.get("returns_const", False)),
    )


def _pointer_levels(d: dict, path: Path, where: str, key: str = "pointer") -> int:
    levels = d.get(key, 0)
    if not isinstance(levels, int) or isinstance(levels, bool) or not 0 <= levels <= 2:
        raise SchemaError(path, f"{where}.{key}", "pointer levels must be 0, 1 or 2")
    return levels


def _int_scalar(name: str, path: Path, where: str) -> Scalar:
    if name not in INTEGER_SCALARS:
        raise SchemaError(
            path, where, f"unknown integer type '{name}'; use one of {sorted(INTEGER_SCALARS)}"
        )
    return SCALARS[name]


def _check_range(value: int, t: Scalar, path: Path, where: str) -> None:
    bits = t.size * 8
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t.signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise SchemaError(path, where, f"value {value} does not fit in {t.name}")


def _check_functions(schema: AbiSchema) -> None:
    known = {
        "void",
        *SCALARS,
        *schema.enum_by_name,
        *schema.function_by_name,
        *schema.record_by_name,
        *schema.opaque_by_name,
    }
    by_value = {*schema.record_by_name, *schema.opaque_by_name}  # only through a pointer
    for key, functions in (("functions", schema.functions), ("exports", schema.exports)):
        for f in functions:
            where = f"{key}.{f.name}"
            if f.returns not in known or (f.returns in by_value and not f.returns_pointer):
                raise SchemaError(
                    schema.path,
                    f"{where}.returns",
                    f"unknown or unsupported return type '{f.returns}'",
                )
            for p in f.params:
                pwhere = f"{where}.params.{p.name}.type"
                if p.type not in known:
                    raise SchemaError(schema.path, pwhere, f"unknown type '{p.type}'")
                if p.type == "void" and p.pointer == 0:
                    raise SchemaError(schema.path, pwhere, "'void' parameter needs pointer >= 1")
                if p.type in schema.opaque_by_name and p.pointer == 0:
                    raise SchemaError(schema.path, pwhere, "an opaque type is passed by pointer")


# ---------------------------------------------------------------------------------------------
# Layout


def _align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def layout(schema: AbiSchema) -> None:
    """Compute sizes/offsets (LP64 rules), check assertions, order records by dependency."""
    records = schema.record_by_name
    done: dict[str, Record] = {}
    visiting: set[str] = set()

    def type_size_align(t: str, where: str) -> tuple[int, int]:
        if t in SCALARS:
            s = SCALARS[t]
            return s.size, s.align
        if t in schema.enum_by_name:
            s = schema.enum_by_name[t].storage
            return s.size, s.align
        if t in schema.function_by_name:
            return 8, 8
        if t in records:
            visit(records[t], where)
            return records[t].size, records[t].align
        raise SchemaError(schema.path, where, f"unknown type '{t}'")

    def visit(r: Record, where_from: str) -> None:
        if r.name in done:
            return
        if r.name in visiting:
            raise SchemaError(schema.path, where_from, f"'{r.name}' contains itself")
        visiting.add(r.name)
        offset, align = 0, 1
        for f in r.fields:
            fwhere = f"{r.where}.fields.{f.name}"
            if f.type == "void" and not f.pointer:
                raise SchemaError(schema.path, f"{fwhere}.type", "a field cannot be 'void'")
            if f.pointer:  # a pointer to any known type (an opaque one too), not its layout
                pointees = (
                    "void",
                    *SCALARS,
                    *schema.enum_by_name,
                    *records,
                    *schema.opaque_by_name,
                )
                if f.type not in pointees:
                    raise SchemaError(schema.path, f"{fwhere}.type", f"unknown type '{f.type}'")
                esize, ealign = 8, 8
            elif f.type in schema.opaque_by_name:
                raise SchemaError(
                    schema.path, f"{fwhere}.type", "an opaque type needs pointer >= 1"
                )
            else:
                esize, ealign = type_size_align(f.type, f"{fwhere}.type")
            f.size, f.align = esize * (f.count or 1), ealign
            if r.kind == "union":
                f.offset = 0
            else:
                aligned = _align_up(offset, ealign)
                if r.explicit_padding and aligned != offset:
                    raise SchemaError(
                        schema.path,
                        fwhere,
                        f"needs {aligned - offset} byte(s) of implicit padding before it "
                        f"(offset {offset} is not {ealign}-aligned); add an explicit "
                        f"padding field - this protocol names every byte",
                    )
                f.offset = aligned
            if f.declared_offset is not None and f.declared_offset != f.offset:
                raise SchemaError(
                    schema.path,
                    f"{fwhere}.offset",
                    f"declared offset {f.declared_offset} but the layout puts it at {f.offset}",
                )
            offset = max(offset, f.offset + f.size) if r.kind == "union" else f.offset + f.size
            align = max(align, ealign)
        size = _align_up(offset, align)
        if r.explicit_padding and size != offset:
            raise SchemaError(
                schema.path,
                r.where,
                f"needs {size - offset} byte(s) of tail padding to reach its "
                f"alignment {align}; add an explicit padding field",
            )
        if r.declared_size is not None and r.declared_size != size:
            raise SchemaError(
                schema.path,
                f"{r.where}.size",
                f"declared size {r.declared_size} but the fields lay out to {size} bytes",
            )
        r.size, r.align = size, align
        visiting.discard(r.name)
        done[r.name] = r

    for r in schema.records:
        visit(r, r.where)
    schema.records = list(done.values())
