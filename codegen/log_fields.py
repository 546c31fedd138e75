"""inspector-log: every JSON field name and string constant of the schema, as a C header (the
Profiler's writer, the engine's C scanner) and a Python module (the Agent's writer of recovered
lines, the engine's reader), so no writer or reader spells one by hand."""

from __future__ import annotations

import re

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.registry import Protocol
from codegen.templating import render


def _property_names(node: object, out: set[str]) -> None:
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            out.update(props)
        for value in node.values():
            _property_names(value, out)
    elif isinstance(node, list):
        for value in node:
            _property_names(value, out)


def _const_values(node: object, out: set[str]) -> None:
    """String constants and enum members: the values of kind/discriminator fields."""
    if isinstance(node, dict):
        if isinstance(node.get("const"), str):
            out.add(node["const"])
        if isinstance(node.get("enum"), list):
            out.update(v for v in node["enum"] if isinstance(v, str))
        for value in node.values():
            _const_values(value, out)
    elif isinstance(node, list):
        for value in node:
            _const_values(value, out)


def _int_consts(node: object, out: dict[str, set[int]]) -> None:
    """Integer constants by the property that holds them (schema_version: 1)."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for name, body in props.items():
                if isinstance(body, dict) and type(body.get("const")) is int:
                    out.setdefault(name, set()).add(body["const"])
        for value in node.values():
            _int_consts(value, out)
    elif isinstance(node, list):
        for value in node:
            _int_consts(value, out)


def _macro_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper()


def _macros(prefix: str, items: set[str], source: str) -> list[dict]:
    by_macro: dict[str, str] = {}
    for item in sorted(items):
        part = _macro_part(item)
        if not part:
            continue
        macro = f"{prefix}_{part}"
        if macro in by_macro:
            raise SchemaError(
                source, item, f"'{item}' and '{by_macro[macro]}' map to the same C macro {macro}"
            )
        by_macro[macro] = item
    return [{"macro": m, "value": v} for m, v in by_macro.items()]


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    names: set[str] = set()
    values: set[str] = set()
    _property_names(doc, names)
    _const_values(doc, values)
    prefix = f"CI_{_macro_part(p.id)}_V{p.version}"
    fields = _macros(f"{prefix}_F", names, p.source)
    consts = _macros(f"{prefix}_V", values, p.source)
    ints: dict[str, set[int]] = {}
    _int_consts(doc, ints)
    for name, found in ints.items():
        if len(found) != 1:
            raise SchemaError(p.source, name, f"constant with several values {sorted(found)}")
    ctx.write(
        f"generated/c/include/comminsight/{p.stem}.h",
        render(
            "log_fields.h.j2",
            {
                "source": p.source,
                "guard": f"COMMINSIGHT_{_macro_part(p.id)}_V{p.version}_H",
                "prefix": prefix,
                "version": p.version,
                "fields": fields,
                "values": consts,
            },
        ),
    )
    short = len(prefix) + 3  # Python names drop the C prefix: F.COLL_PERF, V.SEGMENT_START
    ctx.write(
        f"generated/python/comminsight_gen/{p.stem}_fields.py",
        render(
            "log_fields.py.j2",
            {
                "source": p.source,
                "version": p.version,
                "fields": [{"name": f["macro"][short:], "value": f["value"]} for f in fields],
                "values": [{"name": v["macro"][short:], "value": v["value"]} for v in consts],
                "ints": [
                    {"name": _macro_part(k), "value": next(iter(v))}
                    for k, v in sorted(ints.items())
                ],
            },
        ),
    )
