"""inspector-log: the op line's encoders, generated for both writers (the Profiler's log writer
in C, the Agent's lines for a dead process's records in Python), so that the keys of a line,
their order, which of them may be left out and how each value is spelled are the schema's.

The compact form's `ci` object (the kinds c and p, `CODEC_DEFS`) is written key for key in the
order of its schema `properties`. For C, each kind gets a struct with a member per property and
an encoder that appends the object to the writer's line through macros the includer defines
(the header lists them), literal text joined into as few appends as the optional keys allow;
for Python, each kind's key order and a function that orders a line's values by it, refusing
a key the schema does not have or a required one missing.

How a property is spelled follows from its schema:
- integer: unsigned where its minimum is 0 or more, else signed (a difference of clocks);
- string of 16 hex digits (`^[0-9a-f]{16}$`: a communicator id): a uint64 in 16 zero-padded
  lowercase hex digits; of 1 to 16 (`^[0-9a-f]{1,16}$`: a CUDA stream): in as many as it
  takes; any other string: text, made valid JSON;
- boolean: `true`/`false`; number: six decimals (as the Inspector form's bandwidths);
- const: the value itself, written always and holding no member (the kind tag); an optional
  const true is a flag: `"key":true` where the member is true, else left out.
A property not in `required` is left out: a NULL text, or `has_<key>` false.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.log_fields import _macro_part
from codegen.registry import Protocol
from codegen.templating import render

CODEC_DEFS = ("CiCollCompact", "CiP2pCompact")
_HEX = {"^[0-9a-f]{16}$": 16, "^[0-9a-f]{1,16}$": 1}  # pattern -> least digits
_C_KEYWORDS = {
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "int",
    "long",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
}


@dataclass(frozen=True)
class Member:
    key: str
    shape: str  # const, flag, uint, int, hex, text, bool, number
    required: bool
    c_type: str
    digits: int  # a hex string's least number of digits (zero padded); 0 for the rest
    const: str  # a const's JSON text
    doc: str


def _resolve(doc: dict, node: dict, source: str, where: str) -> dict:
    ref = node.get("$ref")
    if ref is None:
        return node
    if not ref.startswith("#/$defs/") or ref[8:] not in doc.get("$defs", {}):
        raise SchemaError(source, where, f"unresolvable $ref {ref}")
    return {**doc["$defs"][ref[8:]], **{k: v for k, v in node.items() if k != "$ref"}}


def _first_sentence(text: str) -> str:
    """What a C comment keeps of a description: up to the first full stop after a word (not
    one of "e.g.", "i.e.") that a capital letter follows."""
    head = re.split(r"(?:(?<=[a-z]{3}\.)|(?<=\)\.))\s+(?=[A-Z])", text.strip(), maxsplit=1)[0]
    return head.replace("*/", "* /")


def _member(doc: dict, key: str, node: dict, required: bool, source: str, where: str) -> Member:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", key) or key in _C_KEYWORDS:
        raise SchemaError(source, where, f"key {key!r} is no C member name")
    body = _resolve(doc, node, source, where)
    doc_text = _first_sentence(node.get("description") or body.get("description", ""))
    if "const" in body:
        if required:  # the kind tag: written always, no member
            return Member(key, "const", True, "", 0, json.dumps(body["const"]), doc_text)
        if body["const"] is not True:
            raise SchemaError(source, where, "an optional const is a flag: true")
        return Member(key, "flag", False, "bool", 0, "true", doc_text)
    kind = body.get("type")
    if kind == "integer":
        unsigned = body.get("minimum", -1) >= 0
        return Member(
            key,
            "uint" if unsigned else "int",
            required,
            "uint64_t" if unsigned else "int64_t",
            0,
            "",
            doc_text,
        )
    if kind == "string":
        digits = _HEX.get(body.get("pattern", ""))
        if digits is not None:
            return Member(key, "hex", required, "uint64_t", digits, "", doc_text)
        return Member(key, "text", required, "const char*", 0, "", doc_text)
    if kind == "boolean":
        return Member(key, "bool", required, "bool", 0, "", doc_text)
    if kind == "number":
        return Member(key, "number", required, "double", 0, "", doc_text)
    raise SchemaError(source, where, f"no encoder for a property of type {kind!r}")


_APPEND = {  # shape -> the includer's macro that appends a value of it
    "uint": "CI_JSON_U64",
    "int": "CI_JSON_I64",
    "number": "CI_JSON_F6",
    "text": "CI_JSON_STR",
}


def _value(m: Member) -> str:
    if m.shape == "hex":
        return f"CI_JSON_HEX(v->{m.key}, {m.digits});"
    if m.shape == "bool":  # two literals: CI_JSON_LIT may take its text's length by sizeof
        return f'if (v->{m.key}) CI_JSON_LIT("true"); else CI_JSON_LIT("false");'
    return f"{_APPEND[m.shape]}(v->{m.key});"


def _statements(members: list[Member]) -> list[str]:
    """The C statements that append the object: literal text (keys, commas, constants)
    joined into as few appends as the optional keys allow, then each value by its type."""
    out: list[str] = []
    pending = ""

    def literal(text: str) -> None:
        nonlocal pending
        pending += text

    def flush() -> None:
        nonlocal pending
        if pending:
            out.append(f"CI_JSON_LIT({json.dumps(pending)});")
        pending = ""

    literal("{")
    for i, m in enumerate(members):
        key = f'{"," if i else ""}"{m.key}":'
        if m.shape == "const":
            literal(key + m.const)
            continue
        if m.shape == "flag":
            flush()
            out.append(f"if (v->{m.key}) CI_JSON_LIT({json.dumps(key + m.const)});")
            continue
        if m.required:
            literal(key)
            flush()
            out.append(_value(m))
            continue
        flush()
        present = f"v->{m.key}" if m.shape == "text" else f"v->has_{m.key}"
        out.append(f"if ({present}) {{")
        out.append(f"    CI_JSON_LIT({json.dumps(key)});")
        out.append(f"    {_value(m)}")
        out.append("}")
    literal("}")
    flush()
    return out


def codecs(p: Protocol, doc: dict) -> list[dict]:
    out = []
    for name in CODEC_DEFS:
        where = f"$defs.{name}"
        body = doc.get("$defs", {}).get(name)
        if not isinstance(body, dict) or not isinstance(body.get("properties"), dict):
            raise SchemaError(p.source, where, "an op line's encoder needs this object")
        required = set(body.get("required", []))
        members = [
            _member(doc, key, node, key in required, p.source, f"{where}.properties.{key}")
            for key, node in body["properties"].items()
        ]
        if members[0].shape != "const":
            raise SchemaError(p.source, where, "the first property must be the kind tag (const)")
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        out.append(
            {
                "name": name,
                "snake": snake,
                "kind": json.loads(members[0].const),
                "members": members,
                "statements": _statements(members),
                "key_order": tuple(m.key for m in members),
                "required_keys": tuple(m.key for m in members if m.required),
            }
        )
    return out


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    prefix = f"ci_{p.id.replace('-', '_')}_v{p.version}"
    view = {
        "source": p.source,
        "prefix": prefix,
        "guard": f"COMMINSIGHT_{_macro_part(p.id)}_V{p.version}_CODEC_H",
        "codecs": codecs(p, doc),
        "version": p.version,
    }
    ctx.write(f"generated/c/include/comminsight/{p.stem}_codec.h", render("log_codec.h.j2", view))
    ctx.write(
        f"generated/python/comminsight_gen/{p.stem}_codec.py", render("log_codec.py.j2", view)
    )
