"""Render a laid-out C-ABI schema into its outputs: C header, Python layout module, layout dump."""

from __future__ import annotations

from codegen.cabi.model import SCALARS, AbiSchema, Field, Function, Record
from codegen.templating import render


def _pascal(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _field_decl(s: AbiSchema, f: Field) -> str:
    suffix = f"[{f.count}]" if f.count else ""
    return f"{_spelled(s, f.type, f.pointer, f.const)} {f.name}{suffix};"


def _spelled(s: AbiSchema, type_name: str, pointer: int, const: bool) -> str:
    return ("const " if const else "") + s.c_type(type_name) + "*" * pointer


def _params(s: AbiSchema, fn: Function) -> str:
    params = [f"{_spelled(s, p.type, p.pointer, p.const)} {p.name}" for p in fn.params]
    if fn.variadic:
        params.append("...")
    return ", ".join(params) or "void"


def _fn_typedef(s: AbiSchema, fn: Function) -> str:
    return f"typedef {s.c_type(fn.returns)} (*{s.c_type(fn.name)})({_params(s, fn)});"


def _prototype(s: AbiSchema, fn: Function) -> str:
    returns = _spelled(s, fn.returns, fn.returns_pointer, fn.returns_const)
    return f"{returns} {fn.name}({_params(s, fn)});"


def _pointee_numpy(s: AbiSchema, f: Field) -> str | None:
    """The numpy format of what a pointer field points to (an array of it), where numpy has
    one: the Python side allocates those arrays."""
    if f.pointer != 1 or f.count:  # an array of pointers is no one array's
        return None
    if f.type in SCALARS and f.type not in ("ptr", "cstr", "char"):
        return SCALARS[f.type].numpy
    if f.type in s.enum_by_name:
        return s.enum_by_name[f.type].storage.numpy
    return None


def _numpy_format(s: AbiSchema, f: Field) -> str:
    """numpy format expression (Python source) for one field."""
    if f.pointer:
        base = repr("<u8")
        return f"({base}, ({f.count},))" if f.count else base
    if f.type == "char":
        return repr(f"S{f.count or 1}")
    if f.type in SCALARS:
        base = repr(SCALARS[f.type].numpy)
    elif f.type in s.enum_by_name:
        base = repr(s.enum_by_name[f.type].storage.numpy)
    elif f.type in s.function_by_name:
        base = repr("<u8")
    else:
        base = f"{f.type.upper()}_DTYPE"
    return f"({base}, ({f.count},))" if f.count else base


def _record_view(s: AbiSchema, r: Record) -> dict:
    return {
        "kind": r.kind,
        "name": r.name,
        "ctype": s.c_type(r.name),
        "tag": s.c_type(r.name)[:-2],
        "description": r.description.strip(),
        "size": r.size,
        "align": r.align,
        "dtype": f"{r.name.upper()}_DTYPE",
        "fields": [
            {
                "name": f.name,
                "decl": _field_decl(s, f),
                "offset": f.offset,
                "size": f.size,
                "description": " ".join(f.description.split()),
                "numpy": _numpy_format(s, f),
                "pointee": _pointee_numpy(s, f),
            }
            for f in r.fields
        ],
        "has_pointees": any(_pointee_numpy(s, f) for f in r.fields),
    }


def view(s: AbiSchema, source: str) -> dict:
    """Everything the templates need, computed once, so templates hold no logic."""
    functions = (*s.functions, *s.exports)
    uses_bool = (
        any(f.type == "bool" for r in s.records for f in r.fields)
        or any(fn.returns == "bool" for fn in functions)
        or any(p.type == "bool" for fn in functions for p in fn.params)
    )
    return {
        "source": source,
        "protocol": s.protocol,
        "version": s.version,
        "description": s.description,
        "guard": f"COMMINSIGHT_{s.protocol.upper().replace('-', '_')}_V{s.version}_H",
        "static_assert": s.macro("STATIC_ASSERT"),
        "version_macro": s.macro("PROTOCOL_VERSION"),
        "uses_bool": uses_bool,
        "constants": [
            {
                "name": c.name,
                "macro": s.macro(c.name),
                "value": c.value,
                "literal": _c_literal(c.value, c.type.signed, c.type.size),
                "cdef_literal": _c_literal(c.value, c.type.signed, c.type.size, cdef=True),
                "description": " ".join(c.description.split()),
            }
            for c in s.constants
        ],
        "enums": [
            {
                "name": e.name,
                "class_name": _pascal(e.name),
                "python_base": "enum.IntFlag" if e.flags else "enum.IntEnum",
                "storage": e.storage.c,
                "description": " ".join(e.description.split()),
                "label_fn": f"{s.prefix}_v{s.version}_{e.name}_label",
                "has_labels": any(v.label is not None for v in e.values),
                "members": [
                    {
                        "name": v.name,
                        "macro": s.macro(e.name, v.name),
                        "value": v.value,
                        "label": v.label,
                        "literal": _c_literal(v.value, e.storage.signed, e.storage.size),
                        "cdef_literal": _c_literal(
                            v.value, e.storage.signed, e.storage.size, cdef=True
                        ),
                        "description": " ".join(v.description.split()),
                    }
                    for v in e.values
                ],
            }
            for e in s.enums
        ],
        "functions": [
            {
                "name": fn.name,
                "typedef": _fn_typedef(s, fn),
                "description": " ".join(fn.description.split()),
            }
            for fn in s.functions
        ],
        "records": [_record_view(s, r) for r in s.records],
        "opaques": [
            {
                "name": o.name,
                "ctype": s.c_type(o.name),
                "tag": s.c_type(o.name)[:-2],
                "description": " ".join(o.description.split()),
            }
            for o in s.opaques
        ],
        "exports": [
            {
                "name": fn.name,
                "prototype": _prototype(s, fn),
                "description": " ".join(fn.description.split()),
            }
            for fn in s.exports
        ],
    }


def _c_literal(value: int, signed: bool | None, size: int, cdef: bool = False) -> str:
    """A C integer literal; cffi's cdef takes only bare decimal/hex, so no parentheses there."""
    if value < 0:
        return str(value) if cdef else f"({value})"
    if not signed and size == 8 and value > 0x7FFFFFFF:
        return f"0x{value:X}"
    return str(value)


def header(s: AbiSchema, source: str) -> str:
    return render("cabi_header.h.j2", view(s, source))


def python_module(s: AbiSchema, source: str, header_name: str) -> str:
    v = view(s, source)
    v["header_name"] = header_name
    v["cdef"] = render("cabi_cdef.j2", v)
    return render("cabi_module.py.j2", v)


def layout_dump(s: AbiSchema, source: str, header_name: str) -> str:
    v = view(s, source)
    v["header_name"] = header_name
    return render("cabi_layout_dump.c.j2", v)
