"""config protocol: typed Python settings, a C header of keys/defaults/limits, a docs table.

The Profiler (C) and the Agent/Engine/Inject (Python) read the same keys and defaults from
these outputs, so a key or default exists once: in protocols/config/v<N>/config.schema.json.
"""

from __future__ import annotations

import json

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.registry import Protocol
from codegen.templating import render

_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
_ALLOWED = {
    "type",
    "default",
    "description",
    "x-unit",
    "x-components",
    "minimum",
    "maximum",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
}
COMPONENTS = ("profiler", "agent", "engine", "inject")


def _check(p: Protocol, doc: dict) -> list[dict]:
    prefix = doc.get("x-key-prefix")
    if not isinstance(prefix, str) or not prefix:
        raise SchemaError(p.source, "x-key-prefix", "missing key prefix")
    if doc.get("additionalProperties") is not False:
        raise SchemaError(
            p.source, "additionalProperties", "must be false: unknown keys are errors"
        )
    keys = []
    for name, spec in doc.get("properties", {}).items():
        where = f"properties.{name}"
        if not name.startswith(prefix) or name != name.upper():
            raise SchemaError(p.source, where, f"key must be upper case and start with {prefix}")
        unknown = sorted(set(spec) - _ALLOWED)
        if unknown:
            raise SchemaError(p.source, where, f"unsupported keyword(s) {unknown}")
        t = spec.get("type")
        if t not in _TYPES:
            raise SchemaError(
                p.source, f"{where}.type", f"unknown type '{t}'; use one of {sorted(_TYPES)}"
            )
        for req in ("default", "description", "x-components"):
            if req not in spec:
                raise SchemaError(p.source, where, f"missing '{req}'")
        comps = spec["x-components"]
        if not comps or any(c not in COMPONENTS for c in comps):
            raise SchemaError(
                p.source, f"{where}.x-components", f"must be a subset of {COMPONENTS}"
            )
        default = spec["default"]
        ok = {
            "string": isinstance(default, str),
            "boolean": isinstance(default, bool),
            "integer": isinstance(default, int) and not isinstance(default, bool),
            "number": isinstance(default, (int, float)) and not isinstance(default, bool),
        }[t]
        if not ok:
            raise SchemaError(p.source, f"{where}.default", f"default {default!r} is not a {t}")
        if "enum" in spec and default not in spec["enum"]:
            raise SchemaError(p.source, f"{where}.default", f"default {default!r} not in enum")
        lo, hi = spec.get("minimum"), spec.get("maximum")
        if (lo is not None and default < lo) or (hi is not None and default > hi):
            raise SchemaError(p.source, f"{where}.default", f"default {default!r} out of range")
        field = name[len(prefix) :].lower()
        keys.append(
            {
                "name": name,
                "field": field,
                "macro": f"CI_CONFIG_V{p.version}_{name[len(prefix) :]}",
                "type": t,
                "py_type": (
                    f"Literal[{', '.join(json.dumps(c) for c in spec['enum'])}]"
                    if "enum" in spec
                    else _TYPES[t]
                ),
                "default": default,
                "default_py": repr(float(default) if t == "number" else default),
                "default_text": _text(default),
                "unit": spec.get("x-unit", ""),
                "description": " ".join(spec["description"].split()),
                "components": list(comps),
                "minimum": lo,
                "maximum": hi,
                "enum": spec.get("enum"),
                "pattern": spec.get("pattern"),
                "min_length": spec.get("minLength"),
                "max_length": spec.get("maxLength"),
            }
        )
    return keys


def _text(value: object) -> str:
    """How the value is written in the KEY=VALUE file and the environment."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    keys = _check(p, doc)
    view = {
        "source": p.source,
        "version": p.version,
        "keys": keys,
        "prefix": doc["x-key-prefix"],
        "description": " ".join(doc["description"].split()),
        "json": json,
    }
    ctx.write(f"generated/c/include/comminsight/{p.stem}.h", render("config.h.j2", view))
    ctx.write(f"generated/python/comminsight_gen/{p.stem}.py", render("config.py.j2", view))
    ctx.write(f"generated/docs/{p.stem}.md", render("config.md.j2", view))
    ctx.write(
        f"generated/python/comminsight_gen/config_file_v{p.version}.py",
        render("config_file.py.j2", view),
    )
