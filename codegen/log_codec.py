"""inspector-log: the line's encoders, generated for both writers (the Profiler's log writer
in C, the Agent's lines for a dead process's records in Python), so that the keys of a line,
their order, which of them may be left out and how each value is spelled are the schema's.

Every object of a line (`CODEC_DEFS`: NVIDIA's header, metadata and perf objects, the ci object
of every kind - op lines in both forms, communicators made and finalized, gaps, hang evidence,
segment starts and seals - the objects they hold, and the line itself) is written key for key
in the order of its schema `properties`. For C, each object gets a struct with a member per
property and an encoder that appends it to the writer's line through macros the includer
defines (the header lists them), literal text joined into as few appends as the optional keys
allow; an object member is a pointer to its struct, the line's `ci` (a oneOf) a pointer per
kind, and an array the writer's function that appends its items. For Python, each object's key
order, the objects it holds, and a function that orders an object's values (nested ones too)
by them, refusing a key the schema does not have or a required one missing.

How a property is spelled follows from its schema:
- integer: written signed (a negative value a writer was handed stays visible, and a reader
  refuses it where the schema's minimum is 0), unsigned where the schema's maximum passes
  INT64_MAX (a user tag); read unsigned where the minimum is 0 or more;
- string of hex digits (`_HEX`: a communicator id, a CUDA stream, NVIDIA's 0x-prefixed id): a
  uint64, with the prefix and zero padding its pattern asks; any other string: text, made
  valid JSON;
- boolean: `true`/`false`; number: six decimals (as NVIDIA's bandwidths), or, for an anyOf of
  a number and a const text (NVIDIA's "nan"), that text where the number is not finite;
- const: the value itself, written always and holding no member (the kind tag, a format
  version); an optional const true is a flag: `"key":true` where the member is true;
- an object no encoder writes (NVIDIA's event traces) is never written, and must be optional.
A property not in `required` is left out: a NULL text or object, or `has_<key>` false.
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

# the objects of a line, each before the objects that hold it; ROOT is the line itself
ROOT = "InspectorLogRecord"
CODEC_DEFS = (
    "Header",
    "Metadata",
    "CollPerf",
    "P2pPerf",
    "CiColl",
    "CiP2p",
    "CiCollCompact",
    "CiP2pCompact",
    "CommIdentity",
    "ProcessIdentity",
    "ClockAnchor",
    "SeqProgress",
    "CommProgress",
    "CiCommInit",
    "CiCommFinalize",
    "CiGap",
    "CiHangEvidence",
    "CiSegmentStart",
    "CiSeal",
    ROOT,
)
# hex string patterns -> (prefix, least digits)
_HEX = {
    "^[0-9a-f]{16}$": ("", 16),
    "^[0-9a-f]{1,16}$": ("", 1),
    "^0x[0-9a-f]{1,16}$": ("0x", 1),
    "^0x[0-9a-fA-F]{1,16}$": ("0x", 1),
}
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
    key: str  # the JSON key
    name: str  # the C member (the key, or key_<object> for one alternative of a oneOf)
    shape: str  # const, flag, uint, int, hex, text, bool, number, object, array
    required: bool
    c_type: str
    doc: str
    const: str = ""  # a const's JSON text; a number's text where it is not finite
    hex_prefix: str = ""
    hex_digits: int = 0  # a hex string's least number of digits (zero padded)
    wide: bool = False  # an integer that may pass INT64_MAX: written unsigned
    encoder: str = ""  # an object's or an array's items': the snake name of their encoder
    target: str = ""  # an object's or an array's items': the schema's name of their object


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _alternative(key: str, name: str) -> str:
    """The C member of one alternative of a oneOf: ci + CiColl -> ci_coll."""
    snake = _snake(name)
    return snake if snake.startswith(f"{key}_") else f"{key}_{snake}"


def _ref_name(node: object) -> str | None:
    ref = node.get("$ref", "") if isinstance(node, dict) else ""
    return ref[8:] if ref.startswith("#/$defs/") else None


def _resolve(doc: dict, node: dict, source: str, where: str) -> dict:
    ref = node.get("$ref")
    if ref is None:
        return node
    if _ref_name(node) not in doc.get("$defs", {}):
        raise SchemaError(source, where, f"unresolvable $ref {ref}")
    return {**doc["$defs"][ref[8:]], **{k: v for k, v in node.items() if k != "$ref"}}


def _first_sentence(text: str) -> str:
    """What a C comment keeps of a description: up to the first full stop after a word (not
    one of "e.g.", "i.e.") that a capital letter follows."""
    head = re.split(r"(?:(?<=[a-z]{3}\.)|(?<=\)\.))\s+(?=[A-Z])", text.strip(), maxsplit=1)[0]
    return head.replace("*/", "* /")


def _check_name(name: str, source: str, where: str) -> None:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or name in _C_KEYWORDS:
        raise SchemaError(source, where, f"key {name!r} is no C member name")


def _members(
    doc: dict, prefix: str, key: str, node: dict, required: bool, source: str, where: str
) -> list[Member]:
    """The C members of one property: one, or one per encoded alternative of a oneOf (the
    line's ci object), or none for an optional object no encoder writes (NVIDIA's event
    traces: CommInsight never writes them)."""
    _check_name(key, source, where)
    text = _first_sentence(node.get("description", ""))
    if "oneOf" in node:
        names = [_ref_name(alt) for alt in node["oneOf"]]
        if None in names:
            raise SchemaError(source, where, "a oneOf of $refs alone can be encoded")
        encoded = [n for n in names if n in CODEC_DEFS]
        if required or not encoded:
            raise SchemaError(source, where, "an optional oneOf with encoded alternatives only")
        return [
            Member(
                key,
                _alternative(key, n),
                "object",
                False,
                f"const {prefix}_{_snake(n)}_t*",
                f"{text} ({n})",
                encoder=_snake(n),
                target=n,
            )
            for n in encoded
        ]
    target = _ref_name(node)
    body = _resolve(doc, node, source, where)
    text = _first_sentence(node.get("description") or body.get("description", ""))
    if body.get("type") == "object":
        if target in CODEC_DEFS:
            return [
                Member(
                    key,
                    key,
                    "object",
                    required,
                    f"const {prefix}_{_snake(target)}_t*",
                    text,
                    encoder=_snake(target),
                    target=target,
                )
            ]
        if required:
            raise SchemaError(source, where, "a required object no encoder writes")
        return []
    if body.get("type") == "array":
        item = _ref_name(body.get("items"))
        if item not in CODEC_DEFS:
            raise SchemaError(source, where, "an array of objects an encoder writes alone")
        # the writer's own loop writes the items (their encoder, a comma between): a
        # callback, so that no array of them need be built to write one line
        return [
            Member(
                key,
                key,
                "array",
                required,
                "void (*",
                f"{text} (writes each {item}, a comma between)",
                encoder=_snake(item),
                target=item,
            )
        ]
    if "const" in body:
        if required:  # the kind tag, a format's version: written always, no member
            return [Member(key, key, "const", True, "", text, const=json.dumps(body["const"]))]
        if body["const"] is not True:
            raise SchemaError(source, where, "an optional const is a flag: true")
        return [Member(key, key, "flag", False, "bool", text, const="true")]
    kind = body.get("type")
    if "anyOf" in body:  # a number, or a const text where it is not finite (Inspector's "nan")
        alts = body["anyOf"]
        texts = [a["const"] for a in alts if isinstance(a.get("const"), str)]
        if len(alts) != 2 or len(texts) != 1 or not any(a.get("type") == "number" for a in alts):
            raise SchemaError(source, where, "anyOf: a number or one const text alone")
        return [Member(key, key, "number", required, "double", text, const=json.dumps(texts[0]))]
    if kind == "integer":
        # read as the schema bounds it: a reader refuses a sign where the minimum is 0; written
        # signed unless it may pass INT64_MAX, so that a negative value a writer was handed
        # (a rank NCCL gave as -1) reads as what it is and is refused, not as 2**64 - 1
        unsigned = body.get("minimum", -1) >= 0
        wide = body.get("maximum", 0) > _INT64_MAX
        return [
            Member(
                key,
                key,
                "uint" if unsigned else "int",
                required,
                "uint64_t" if wide else "int64_t",
                text,
                wide=wide,
            )
        ]
    if kind == "string":
        hexed = _HEX.get(body.get("pattern", ""))
        if hexed is not None:
            return [
                Member(
                    key,
                    key,
                    "hex",
                    required,
                    "uint64_t",
                    text,
                    hex_prefix=hexed[0],
                    hex_digits=hexed[1],
                )
            ]
        return [Member(key, key, "text", required, "const char*", text)]
    if kind == "boolean":
        return [Member(key, key, "bool", required, "bool", text)]
    if kind == "number":
        return [Member(key, key, "number", required, "double", text)]
    raise SchemaError(source, where, f"no encoder for a property of type {kind!r}")


_INT64_MAX = (1 << 63) - 1


def _value(m: Member, prefix: str) -> str:
    v = f"v->{m.name}"
    if m.shape == "hex":
        return f"CI_JSON_HEX({v}, {json.dumps(m.hex_prefix)}, {m.hex_digits});"
    if m.shape == "bool":  # two literals: CI_JSON_LIT may take its text's length by sizeof
        return f'if ({v}) CI_JSON_LIT("true"); else CI_JSON_LIT("false");'
    if m.shape == "number":
        if not m.const:
            return f"CI_JSON_F6({v});"
        return f"if (isfinite({v})) CI_JSON_F6({v}); else CI_JSON_LIT({json.dumps(m.const)});"
    if m.shape in ("uint", "int"):
        return f"CI_JSON_U64({v});" if m.wide else f"CI_JSON_I64({v});"
    if m.shape == "text":
        return f"CI_JSON_STR({v});"
    if m.shape == "object":
        return f"{prefix}_put_{m.encoder}({v});"
    if m.shape == "array":
        return f'CI_JSON_LIT("["); {v}({v}_ctx); CI_JSON_LIT("]");'
    raise AssertionError(m.shape)  # every shape is spelled above


def _present(m: Member) -> str:
    if m.shape in ("text", "object", "flag", "array"):
        return f"v->{m.name}"
    return f"v->has_{m.name}"


class _LiteralRun:
    """Literal text (keys, commas, constants) gathered into one call of `macro` until a value
    comes between: one compare or append for the run instead of one per piece."""

    def __init__(self, macro: str, out: list[str]) -> None:
        self.macro, self.out, self.text = macro, out, ""

    def add(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        if self.text:
            self.out.append(f"{self.macro}({json.dumps(self.text)});")
        self.text = ""


def _statements(members: list[Member], prefix: str) -> list[str]:
    """The C statements that append the object: literal text (keys, commas, constants)
    joined into as few appends as the optional keys allow, then each value by its type. An
    object whose first key may be left out (the line itself) tracks at run time whether a
    comma is due; the alternatives of a oneOf (one key) are an if/else chain."""
    out: list[str] = []
    literal = _LiteralRun("CI_JSON_LIT", out)
    literal.add("{")
    groups: list[list[Member]] = []
    for m in members:
        if groups and groups[-1][0].key == m.key:
            groups[-1].append(m)
        else:
            groups.append([m])
    tracked = not members[0].required
    if tracked:
        literal.flush()
        out.append("int more = 0;")
    for i, group in enumerate(groups):
        m = group[0]
        key = f'"{m.key}":'
        comma = "," if i else ""
        if tracked:
            for j, alt in enumerate(group):
                out.append(f"{'else ' if j else ''}if ({_present(alt)}) {{")
                out.append('    if (more) CI_JSON_LIT(",");')
                value = (
                    f"CI_JSON_LIT({json.dumps(alt.const)});"
                    if alt.shape == "flag"
                    else (_value(alt, prefix))
                )
                out.append(f"    CI_JSON_LIT({json.dumps(key)});")
                out.append(f"    {value}")
                out.append("    more = 1;")
                out.append("}")
        elif m.shape == "const":
            literal.add(comma + key + m.const)
        elif m.shape == "flag":
            literal.flush()
            out.append(f"if (v->{m.name}) CI_JSON_LIT({json.dumps(comma + key + m.const)});")
        elif m.required and m.shape == "array":  # the brackets joined to the literals
            literal.add(comma + key + "[")
            literal.flush()
            out.append(f"v->{m.name}(v->{m.name}_ctx);")
            literal.add("]")
        elif m.required:
            literal.add(comma + key)
            literal.flush()
            out.append(_value(m, prefix))
        else:
            literal.flush()
            for j, alt in enumerate(group):
                out.append(f"{'else ' if j else ''}if ({_present(alt)}) {{")
                out.append(f"    CI_JSON_LIT({json.dumps(comma + key)});")
                out.append(f"    {_value(alt, prefix)}")
                out.append("}")
    literal.add("}")
    literal.flush()
    return out


def codecs(p: Protocol, doc: dict, prefix: str = "ci") -> list[dict]:
    out = []
    for name in CODEC_DEFS:
        where = "(root)" if name == ROOT else f"$defs.{name}"
        body = doc if name == ROOT else doc.get("$defs", {}).get(name)
        if not isinstance(body, dict) or not isinstance(body.get("properties"), dict):
            raise SchemaError(p.source, where, "a line's encoder needs this object")
        required = set(body.get("required", []))
        members = [
            m
            for key, node in body["properties"].items()
            for m in _members(
                doc, prefix, key, node, key in required, p.source, f"{where}.properties.{key}"
            )
        ]
        if not members:
            raise SchemaError(p.source, where, "an object with nothing to write")
        first = members[0]
        out.append(
            {
                "name": name,
                "snake": _snake(name),
                "kind": json.loads(first.const) if first.key == "kind" else None,
                "members": members,
                "statements": _statements(members, prefix),
                "key_order": tuple(dict.fromkeys(m.key for m in members)),
                # key -> the object its value is (a list of, for an array); "" for a oneOf,
                # told by the value's kind
                "nested": {
                    m.key: "" if m.name != m.key else m.target
                    for m in members
                    if m.shape in ("object", "array")
                },
                "required_keys": tuple(m.key for m in members if m.required),
            }
        )
    return out


# the objects a reader takes in the writer's layout (the engine's C scanner: a sealed
# segment's op lines in either form), each read key for key in the schema's order; the line
# itself is read by a decoder of its own (`line_decoder`) from the objects of these it holds,
# the alternatives of its ci oneOf tried in this order: the compact kinds first, the default
# form's, so that most lines are read at the first try
DECODE_DEFS = (
    "CiCollCompact",
    "CiP2pCompact",
    "CiColl",
    "CiP2p",
    "Header",
    "Metadata",
    "CollPerf",
    "P2pPerf",
)
_TAKE = {"uint": "CI_TAKE_UINT", "int": "CI_TAKE_INT", "number": "CI_TAKE_NUM"}
# a decoder reads at most 63 integers of an object: one bit each of its `wanted`; the line's
# decoder steps over an object whose `wanted` has the top bit (<PREFIX>_SKIP_OBJECT)
_WANT_BITS = 63


def _take(m: Member, want: str) -> list[str]:
    """The statements that read one value at p (its key already taken); an integer only where
    the reader wants it (want: its bit), else stepped over (reading digits costs)."""
    v = f"v->{m.name}"
    if m.shape in ("text", "hex"):  # its opening quote is in the key's literal
        return [f"CI_TAKE_TEXT({v});"]
    if m.shape == "bool":
        return [
            f'if (CI_TRY("true")) {v} = 1;',
            "else {",
            '    CI_TAKE("false");',
            f"    {v} = 0;",
            "}",
        ]
    if m.shape in ("uint", "int"):  # the digits' text too: a reader may keep it as it is
        skip = "CI_SKIP_UINT();" if m.shape == "uint" else "CI_SKIP_INT();"
        return [
            f"if (wanted & {want}) {{",
            f"    {v}_text.s = p;",
            f"    {_TAKE[m.shape]}({v});",
            f"    {v}_text.n = p - {v}_text.s;",
            "} else {",
            f"    {skip}",
            "}",
        ]
    return [f"{_TAKE[m.shape]}({v});"]


def _want(prefix: str, snake: str, m: Member) -> str:
    return f"{prefix.upper()}_WANT_{snake.upper()}_{m.name.upper()}"


def _decoder(members: list[Member], source: str, name: str, prefix: str) -> list[str]:
    """The C statements that read the object at p in the writer's layout: every literal
    (keys, commas, constants) compared, each value read by its type; 0 returned at the first
    byte that is not the layout."""
    out: list[str] = []
    literal = _LiteralRun("CI_TAKE", out)
    literal.add("{")
    for i, m in enumerate(members):
        if m.shape in ("object", "array"):
            raise SchemaError(source, name, f"{m.key}: no decoder reads a nested object")
        key = f'{"," if i else ""}"{m.key}":' + ('"' if m.shape in ("text", "hex") else "")
        if m.shape == "const":
            literal.add(key + m.const)
        elif m.shape == "flag":
            literal.flush()
            out.append(f"v->{m.name} = CI_TRY({json.dumps(key + m.const)});")
        elif m.required:
            literal.add(key)
            literal.flush()
            out += _take(m, _want(prefix, _snake(name), m))
        else:
            literal.flush()
            out.append(f"if ((v->has_{m.name} = CI_TRY({json.dumps(key)}))) {{")
            out += [f"    {line}" for line in _take(m, _want(prefix, _snake(name), m))]
            out.append("}")
    literal.add("}")
    literal.flush()
    return out


def decoders(p: Protocol, codecs_: list[dict], prefix: str) -> list[dict]:
    out = []
    for c in codecs_:
        if c["name"] not in DECODE_DEFS:
            continue
        ints = [m for m in c["members"] if m.shape in ("uint", "int")]
        if len(ints) > _WANT_BITS:
            raise SchemaError(
                p.source, c["name"], "a decoder's `wanted` has 63 bits: too many integers"
            )
        wants = [(_want(prefix, c["snake"], m), i) for i, m in enumerate(ints)]
        out.append(
            {**c, "take": _decoder(c["members"], p.source, c["name"], prefix), "wants": wants}
        )
    return out


def line_decoder(codecs_: list[dict], prefix: str, source: str) -> dict:
    """The line's decoder: its keys in the schema's order, each optional; an object that has
    a decoder is read by it, or stepped over whole where the reader wants nothing of it (the
    SKIP_OBJECT bit of its `wanted`), its bytes kept as <key>_text either way (a reader may
    keep an object as written); the alternatives of the `ci` oneOf that have one are tried in
    DECODE_DEFS' order, the one read named by `ci_took`. A line holding any other object is
    not read."""
    root = next(c for c in codecs_ if c["name"] == ROOT)
    decoded = {c["name"] for c in codecs_ if c["name"] in DECODE_DEFS}
    keys: dict[str, list[Member]] = {}
    for m in root["members"]:
        if m.target in decoded:
            keys.setdefault(m.key, []).append(m)
    for ms in keys.values():
        ms.sort(key=lambda m: DECODE_DEFS.index(m.target))
    missing = sorted(set(root["key_order"]) - set(keys))
    if missing:
        raise SchemaError(source, "(root)", f"the line's keys {missing} have no decoder")
    took = [
        (f"{prefix.upper()}_TOOK_{m.name.upper()}", i + 1, m)
        for ms in keys.values()
        if len(ms) > 1
        for i, m in enumerate(ms)
    ]
    body = ['CI_TAKE("{");', "int more = 0; /* a key was read: the next follows a comma */"]
    for key, ms in keys.items():
        first, rest = json.dumps(f'"{key}":'), json.dumps(f',"{key}":')
        found = f"(more ? CI_TRY({rest}) : CI_TRY({first}))"
        if len(ms) == 1:
            m = ms[0]
            take = f"{prefix}_take_{m.encoder}(&p, e, wanted->{m.name}, &v->{m.name})"
            body += [
                f"if ((v->has_{m.name} = {found})) {{",
                f"    v->{m.name}_text.s = p;",
                f"    if (wanted->{m.name} & {prefix.upper()}_SKIP_OBJECT) {{",
                "        CI_SKIP_OBJECT();",
                f"    }} else if (!{take}) {{",
                "        return 0;",
                "    }",
                f"    v->{m.name}_text.n = p - v->{m.name}_text.s;",
                "    more = 1;",
                "}",
            ]
            continue
        body += [f"v->{key}_took = 0;", f"if {found} {{"]
        for i, (macro, _, m) in enumerate(t for t in took if t[2].key == key):
            test = f"{prefix}_take_{m.encoder}(&p, e, wanted->{m.name}, &v->{m.name})"
            body.append(f"    {'if' if i == 0 else '} else if'} ({test}) {{")
            body.append(f"        v->{key}_took = {macro};")
        body += ["    } else {", "        return 0;", "    }", "    more = 1;", "}"]
    body += ["(void)more;", 'CI_TAKE("}");']
    members = [m for ms in keys.values() for m in ms]
    return {
        "name": ROOT,
        "snake": root["snake"],
        "members": members,
        "choices": sorted({m.key for _, _, m in took}),
        "took": [(macro, value, m.target) for macro, value, m in took],
        "single": [ms[0] for ms in keys.values() if len(ms) == 1],
        "take": body,
    }


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    prefix = f"ci_{p.id.replace('-', '_')}_v{p.version}"
    view = {
        "source": p.source,
        "prefix": prefix,
        "guard": f"COMMINSIGHT_{_macro_part(p.id)}_V{p.version}_CODEC_H",
        "codecs": codecs(p, doc, prefix),
        "version": p.version,
    }
    view["decoders"] = decoders(p, view["codecs"], prefix)
    view["line_decoder"] = line_decoder(view["codecs"], prefix, p.source)
    ctx.write(f"generated/c/include/comminsight/{p.stem}_codec.h", render("log_codec.h.j2", view))
    ctx.write(
        f"generated/python/comminsight_gen/{p.stem}_codec.py", render("log_codec.py.j2", view)
    )
