"""`python -m codegen check-compat`: live protocol versions stay compatible with their baseline.

A breaking change is a new version folder; this is what holds the project to it.

The baseline is in the repository, not in a tag
-----------------------------------------------
What each live protocol version was when it was frozen is committed beside the sources, in
protocols/compat-baseline/, so every clone - shallow, tagless, a fork - checks against it:

  protocols/compat-baseline/index.json      {"format": 1, "versions": [one line per frozen
                                            version: id, version, kind, file, sha256 of file]}
  protocols/compat-baseline/<id>-v<N>.json  one frozen version: format, id, version, kind,
                                            source, and its surface (below)

`make compat-baseline` (`python -m codegen compat-baseline`) writes it: a release step, whose
result is committed with the release. It freezes every version `live` in the registry,
writes only the files whose bytes change, removes those of versions no longer live, and
refuses while the working tree breaks the baseline it would replace (`--force`, `make
compat-baseline COMPAT_FORCE=1`, freezes anyway: a release that really breaks a live version
then shows it in review as a change of that version's baseline file).

Both kinds of file are canonical JSON - keys sorted, an object or list that fits in 100
columns (the index: 200) on one line, one member per line otherwise - so the same sources
always give the same bytes and a re-frozen version reads as a small diff. A surface keeps
what the checks below read and nothing else; descriptions, titles and comments go:

- c-abi: the prefix; each struct/union's kind, size, alignment and fields (name, type, count,
  offset, pointer levels); each enum's storage, flags and values (name, value, label);
  constants (type, value); function types and a library's exports as signatures; the names
  of its opaque types.
- json-schema: the document without annotations (description, title, $comment, examples).
- openapi: the document bundled as codegen bundles it (external schemas inlined), without
  annotations (descriptions, summaries, tags, examples, externalDocs, servers).
- protobuf: from protoc's descriptor set: messages (fields by number: name, type, label;
  reserved numbers), enums (values; reserved numbers), services (methods: request and
  response types, streaming), and the packages the names are shortened by.

The working tree's sources are reduced to surfaces the same way before they are compared, so
a verdict against the baseline is the verdict against the sources it was frozen from.

`check-compat` compares every version in the baseline with the working tree and fails (exit
1) with one line per break, e.g. `shm v1: structs.op_slot.fields.rank: offset 32 -> 36`. A
live version that is not in the baseline (a new version folder) is new, not a break, and is
named as such; it is frozen at the next compat-baseline. A frozen version that left the
registry is a break (deprecate it instead); one that went `deprecated` is still compared
(deprecated versions are still read) and named as such; `draft` is a break. A baseline that is
missing, not valid JSON, of another format, or whose file does not match the sha256 in the
index (edited by hand, truncated, a merge gone wrong) is an error (exit 2), never a pass.

`--base REF` (`make check-compat COMPAT_BASE=<ref>`) compares with a git ref's protocols/
tree instead: every version live in that ref's registry, from that ref's sources.

What counts as a break:

- c-abi: both laid out by codegen.cabi. Records keep their size and alignment; each field keeps
  name, type, count and offset, except reserved fields (`reserved*`, `pad*`), whose bytes new
  fields may take; enums keep every value's number and label; constants their values;
  function types and exports their signatures; opaque types stay; the C prefix stays.
- json-schema: every property (through $ref, $defs, items, oneOf/anyOf/allOf) stays, with the
  same type(s); no new `required` entry, no removed enum value, no new or changed const, no
  new enum, additionalProperties not newly false, no oneOf/anyOf alternative removed; each
  $defs entry that is still there stays compatible (one that went is judged where it was
  used).
- openapi: both bundled as codegen bundles them; every path and method stays, no parameter is
  removed or becomes required, request and response bodies follow the json-schema rules, as
  does each components/schemas entry still there.
- protobuf: both compiled to descriptor sets by grpc_tools.protoc. Each field number keeps its
  name, type and label, a removed one must be reserved; enum numbers keep their names (a
  removed one must be reserved); services and methods stay, with their types and streaming.
  A message or enum no field or method names any more may go: the wire never carries it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path, PurePosixPath

import yaml

from codegen import openapi_gen, registry
from codegen.cabi import model as cabi_model
from codegen.errors import SchemaError

PROTOCOLS = "protocols"
REGISTRY = "protocols/registry.yaml"
BASELINE_DIR = "protocols/compat-baseline"
BASELINE_INDEX = f"{BASELINE_DIR}/index.json"
BASELINE_FORMAT = 1
# Fields with these names hold no data: later versions may give their bytes to new fields.
RESERVED_FIELD = re.compile(r"^_?(reserved|pad)")
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
FIX = (
    "A live protocol version is frozen: put the change in a new version folder "
    "(protocols/<id>/v<N+1>/) and list it in protocols/registry.yaml."
)


@dataclass(frozen=True)
class Break:
    """One incompatible change: the protocol version, the element, what changed."""

    label: str  # "shm v1"
    where: str  # "structs.op_slot.fields.rank"
    what: str  # "offset 32 -> 40"

    def __str__(self) -> str:
        return f"{self.label}: {self.where or '(root)'}: {self.what}"


class CompatError(Exception):
    """The comparison could not be made (no git, unknown ref); not a verdict on protocols."""


class BaselineError(CompatError):
    """The committed baseline is missing, unreadable or damaged: no verdict without it."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


Changes = list[tuple[str, str]]  # (where, what) inside one protocol version


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------------
# Canonical JSON: what a surface is, in memory and on disk

WIDTH = 100


def _plain(node: object) -> object:
    """JSON's data model: YAML's integer keys (`200:`) become strings, dates ISO strings."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    if isinstance(node, datetime | date):
        return node.isoformat()
    if node is None or isinstance(node, str | int | float | bool):
        return node
    return str(node)


def dumps(node: object, indent: int = 0, lead: int = 0, width: int = WIDTH) -> str:
    """Canonical JSON: sorted keys; what fits in `width` columns on one line, else one member
    per line."""
    compact = json.dumps(node, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(node, dict | list) or not node or lead + len(compact) <= width:
        return compact
    inner = " " * (indent + 2)
    if isinstance(node, dict):
        parts = []
        for k in sorted(node):
            key = json.dumps(k, ensure_ascii=False) + ": "
            parts.append(inner + key + dumps(node[k], indent + 2, len(inner) + len(key), width))
        return "{\n" + ",\n".join(parts) + "\n" + " " * indent + "}"
    parts = [inner + dumps(v, indent + 2, len(inner), width) for v in node]
    return "[\n" + ",\n".join(parts) + "\n" + " " * indent + "]"


def canonical(node: object) -> object:
    """The node as it reads back from its baseline file (so both sides compare alike)."""
    return json.loads(dumps(_plain(node)))


# ---------------------------------------------------------------------------------------------
# c-abi


def _is_pointer(schema: cabi_model.AbiSchema, type_name: str) -> bool:
    return type_name in ("ptr", "cstr") or type_name in schema.function_by_name


def _signature(f: cabi_model.Function) -> str:
    params = [f"{'const ' if p.const else ''}{p.type}{'*' * p.pointer}" for p in f.params]
    if f.variadic:
        params.append("...")
    returns = f"{'const ' if f.returns_const else ''}{f.returns}{'*' * f.returns_pointer}"
    return f"{returns}({', '.join(params)})"


def cabi_surface(schema: cabi_model.AbiSchema) -> dict:
    """What of a laid-out C-ABI schema the checks read (the layout, no descriptions)."""
    return {
        "prefix": schema.prefix,
        "records": {
            r.name: {
                "kind": r.kind,
                "size": r.size,
                "align": r.align,
                "fields": [
                    {
                        "name": f.name,
                        "type": f.type,
                        "count": f.count or 1,
                        "offset": f.offset,
                        # the levels of a pointer field (i64* -> i64** breaks), else whether
                        # its type is one (as older baselines have it)
                        "pointer": f.pointer or _is_pointer(schema, f.type),
                    }
                    for f in r.fields
                ],
            }
            for r in schema.records
        },
        "enums": {
            e.name: {
                "storage": e.storage.name,
                "flags": e.flags,
                "values": [{"name": v.name, "value": v.value, "label": v.label} for v in e.values],
            }
            for e in schema.enums
        },
        "constants": {k.name: {"type": k.type.name, "value": k.value} for k in schema.constants},
        "functions": {f.name: _signature(f) for f in schema.functions},
        # a library's exports and opaque types, where it has them (older baselines have none)
        **({"exports": {f.name: _signature(f) for f in schema.exports}} if schema.exports else {}),
        **({"opaque": sorted(o.name for o in schema.opaques)} if schema.opaques else {}),
    }


def _field_shape(f: dict) -> tuple:
    return (f["type"], f["count"], f["pointer"], f["offset"])


def _records(b: dict, c: dict, out: Changes) -> None:
    for name in sorted(b["records"]):
        br = b["records"][name]
        where = f"{br['kind']}s.{name}"
        cr = c["records"].get(name)
        if cr is None:
            out.append((where, "removed"))
            continue
        if cr["kind"] != br["kind"]:
            out.append((where, f"{br['kind']} -> {cr['kind']}"))
            continue
        # Size kept and every named field in place: a new field can only lie in bytes the base
        # left reserved or as padding, so new fields need no check of their own.
        if cr["size"] != br["size"]:
            out.append((where, f"size {br['size']} -> {cr['size']}"))
        if cr["align"] != br["align"]:
            out.append((where, f"alignment {br['align']} -> {cr['align']}"))
        cur_fields = {f["name"]: f for f in cr["fields"]}
        base_names = {f["name"] for f in br["fields"]}
        for bf in br["fields"]:
            if RESERVED_FIELD.match(bf["name"]):
                continue
            fw = f"{where}.fields.{bf['name']}"
            cf = cur_fields.get(bf["name"])
            if cf is None:
                same = [
                    x["name"]
                    for x in cr["fields"]
                    if x["name"] not in base_names and _field_shape(x) == _field_shape(bf)
                ]
                out.append((fw, f"renamed to {same[0]}" if same else "removed"))
                continue
            if cf["type"] != bf["type"]:
                bp, cp = bf["pointer"], cf["pointer"]
                note = f" ({'pointer' if bp else 'value'} -> {'pointer' if cp else 'value'})"
                out.append((fw, f"type {bf['type']} -> {cf['type']}" + (note if bp != cp else "")))
            elif int(cf["pointer"]) != int(bf["pointer"]):  # the same type, other levels
                out.append((fw, f"pointer levels {int(bf['pointer'])} -> {int(cf['pointer'])}"))
            if cf["count"] != bf["count"]:
                out.append((fw, f"count {bf['count']} -> {cf['count']}"))
            if cf["offset"] != bf["offset"]:
                out.append((fw, f"offset {bf['offset']} -> {cf['offset']}"))


def _enums(b: dict, c: dict, out: Changes) -> None:
    for name in sorted(b["enums"]):
        be = b["enums"][name]
        where = f"enums.{name}"
        ce = c["enums"].get(name)
        if ce is None:
            out.append((where, "removed"))
            continue
        if ce["storage"] != be["storage"]:
            out.append((where, f"storage {be['storage']} -> {ce['storage']}"))
        if ce["flags"] != be["flags"]:
            out.append((where, f"flags {be['flags']} -> {ce['flags']}"))
        by_name = {v["name"]: v for v in ce["values"]}
        by_value = {v["value"]: v for v in ce["values"]}
        for bv in be["values"]:
            vw = f"{where}.values.{bv['name']}"
            cv = by_name.get(bv["name"])
            if cv is None:
                other = by_value.get(bv["value"])
                out.append(
                    (
                        vw,
                        f"{bv['value']} renamed to {other['name']}"
                        if other
                        else f"{bv['value']} removed",
                    )
                )
                continue
            if cv["value"] != bv["value"]:
                out.append((vw, f"value {bv['value']} -> {cv['value']}"))
            if cv["label"] != bv["label"]:
                out.append((vw, f"label {bv['label']!r} -> {cv['label']!r}"))


def _constants(b: dict, c: dict, out: Changes) -> None:
    for name in sorted(b["constants"]):
        bk = b["constants"][name]
        where = f"constants.{name}"
        ck = c["constants"].get(name)
        if ck is None:
            out.append((where, "removed"))
            continue
        if ck["value"] != bk["value"]:
            out.append((where, f"value {bk['value']:#x} -> {ck['value']:#x}"))
        if ck["type"] != bk["type"]:
            out.append((where, f"type {bk['type']} -> {ck['type']}"))


def _functions(b: dict, c: dict, out: Changes) -> None:
    # Parameter names are not part of a signature; their types, order and count are.
    for name in sorted(b["functions"]):
        where = f"functions.{name}"
        bsig, csig = b["functions"][name], c["functions"].get(name)
        if csig is None:
            out.append((where, "removed"))
        elif csig != bsig:
            out.append((where, f"signature {bsig} -> {csig}"))


def _exports(b: dict, c: dict, out: Changes) -> None:
    # a library's callers bind every export by name and signature; an opaque type they only
    # pass along, so it may not disappear
    for name in sorted(b.get("exports", {})):
        where = f"exports.{name}"
        bsig, csig = b["exports"][name], c.get("exports", {}).get(name)
        if csig is None:
            out.append((where, "removed"))
        elif csig != bsig:
            out.append((where, f"signature {bsig} -> {csig}"))
    for name in sorted(set(b.get("opaque", ())) - set(c.get("opaque", ()))):
        out.append((f"opaque.{name}", "removed"))


def compare_cabi_surfaces(b: dict, c: dict) -> Changes:
    """Incompatible changes from the C-ABI surface `b` to `c`."""
    out: Changes = []
    if c["prefix"] != b["prefix"]:
        out.append(("prefix", f"{b['prefix']} -> {c['prefix']} (every C name changes)"))
    _records(b, c, out)
    _enums(b, c, out)
    _constants(b, c, out)
    _functions(b, c, out)
    _exports(b, c, out)
    return out


def compare_cabi(base: Path, current: Path) -> Changes:
    """Incompatible changes from the C-ABI schema `base` to `current` (files, laid out here)."""
    return compare_cabi_surfaces(
        canonical(cabi_surface(cabi_model.load(base))),
        canonical(cabi_surface(cabi_model.load(current))),
    )


# ---------------------------------------------------------------------------------------------
# JSON Schema (also the bodies of OpenAPI documents)

_NAMED_REF = re.compile(r"^#/(?:\$defs|components/schemas)/([^/]+)$")
_MISSING = object()


def _pointer(doc: object, ref: str) -> object:
    """The node a local `#/...` reference names, or _MISSING."""
    if not ref.startswith("#"):
        return _MISSING
    node = doc
    for raw in [p for p in ref[1:].split("/") if p]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _MISSING
    return node


def _types(node: dict) -> frozenset[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return frozenset([t] if isinstance(t, str) else t)


def _fmt_types(t: frozenset[str] | None) -> str:
    return "any" if t is None else "|".join(sorted(t))


def _pure_ref(node: object) -> str | None:
    if isinstance(node, dict) and isinstance(node.get("$ref"), str):
        extra = set(node) - {"$ref", "description", "title", "$comment"}
        return None if extra else node["$ref"]
    return None


def _resolve(doc: object, node: object) -> object:
    """Follow local references (a bounded chain); sibling keywords of a $ref override."""
    for _ in range(64):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
            break
        target = _pointer(doc, node["$ref"])
        if target is _MISSING or not isinstance(target, dict):
            break
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **siblings} if siblings else target
    return node


class SchemaDiff:
    """Compares schemas of a base document with those of the current one.

    A reference to a named definition is not followed when both sides name the same one: each
    definition is compared once, under its own name, so a change is reported once.
    """

    def __init__(self, base_doc: object, cur_doc: object, out: Changes) -> None:
        self.base_doc, self.cur_doc, self.out = base_doc, cur_doc, out
        self._seen: set[tuple[int, int]] = set()

    def compare(self, b: object, c: object, where: str) -> None:
        if b is None or c is None:
            return
        if isinstance(b, bool) or isinstance(c, bool):
            if c is False and b is not False:
                self.out.append((where, "schema now false (accepts nothing)"))
            return
        bref, cref = _pure_ref(b), _pure_ref(c)
        if bref is not None and bref == cref and _NAMED_REF.match(bref):
            return
        key = (id(b), id(c))
        if key in self._seen:
            return
        self._seen.add(key)
        b, c = _resolve(self.base_doc, b), _resolve(self.cur_doc, c)
        if not (isinstance(b, dict) and isinstance(c, dict)):
            return
        bt, ct = _types(b), _types(c)
        if bt is not None and bt != ct:
            self.out.append((where, f"type {_fmt_types(bt)} -> {_fmt_types(ct)}"))
        self._values(b, c, where)
        for name in sorted(set(c.get("required") or []) - set(b.get("required") or [])):
            self.out.append((_join(where, "required"), f"new required property '{name}'"))
        bp, cp = b.get("properties") or {}, c.get("properties") or {}
        for name, bs in bp.items():
            pw = _join(where, "properties", name)
            if name not in cp:
                self.out.append((pw, "removed"))
            else:
                self.compare(bs, cp[name], pw)
        for key_ in ("additionalProperties", "unevaluatedProperties"):
            ba, ca = b.get(key_, True), c.get(key_, True)
            if ca is False and ba is not False:
                self.out.append((_join(where, key_), "newly false"))
            elif isinstance(ba, dict) and isinstance(ca, dict):
                self.compare(ba, ca, _join(where, key_))
        if isinstance(b.get("items"), dict | bool) and isinstance(c.get("items"), dict | bool):
            self.compare(b["items"], c["items"], _join(where, "items"))
        bpi, cpi = b.get("prefixItems") or [], c.get("prefixItems") or []
        for i, bs in enumerate(bpi):
            if i < len(cpi):
                self.compare(bs, cpi[i], _join(where, "prefixItems", str(i)))
        for key_ in ("oneOf", "anyOf", "allOf"):
            self._alternatives(b, c, key_, where)

    def _values(self, b: dict, c: dict, where: str) -> None:
        if "enum" in b and isinstance(b["enum"], list):
            if isinstance(c.get("enum"), list):
                for v in b["enum"]:
                    if v not in c["enum"]:
                        self.out.append((where, f"enum value {v!r} removed"))
        elif isinstance(c.get("enum"), list) and "const" not in b:
            self.out.append((where, "enum added (the base accepted other values)"))
        if "const" in c and ("const" not in b or b["const"] != c["const"]):
            before = repr(b["const"]) if "const" in b else "none"
            self.out.append((where, f"const {before} -> {c['const']!r}"))

    def _alternatives(self, b: dict, c: dict, key: str, where: str) -> None:
        bl, cl = b.get(key), c.get(key)
        if not isinstance(bl, list):
            return
        cl = cl if isinstance(cl, list) else []
        by_ref = {r: x for x in cl if (r := _pure_ref(x)) is not None}
        inline = [x for x in cl if _pure_ref(x) is None]
        inline_base = 0
        for i, bx in enumerate(bl):
            ref = _pure_ref(bx)
            if ref is not None:
                m = _NAMED_REF.match(ref)
                aw = _join(where, key, m.group(1) if m else str(i))
                if ref in by_ref:
                    self.compare(bx, by_ref[ref], aw)
                elif key != "allOf":
                    self.out.append((aw, "alternative removed"))
                continue
            aw = _join(where, key, str(i))
            # inline alternatives: the one at the same inline position if its type is
            # unchanged, else the first with the same type
            bres = _resolve(self.base_doc, bx)
            btypes = _types(bres) if isinstance(bres, dict) else None
            match = None
            if inline_base < len(inline):
                cand = _resolve(self.cur_doc, inline[inline_base])
                if isinstance(cand, dict) and _types(cand) == btypes:
                    match = inline[inline_base]
            if match is None:
                for x in inline:
                    res = _resolve(self.cur_doc, x)
                    if isinstance(res, dict) and _types(res) == btypes:
                        match = x
                        break
            inline_base += 1
            if match is not None:
                self.compare(bx, match, aw)
            elif key != "allOf":
                self.out.append((aw, f"alternative of type {_fmt_types(btypes)} removed"))

    def compare_named(self, b_defs: object, c_defs: object, where: str) -> None:
        """Each named definition of the base that still exists stays compatible.

        One that is gone is no break by itself: a property that referred to it now refers to
        something else (compared there) or the document would not resolve.
        """
        if not isinstance(b_defs, dict) or not isinstance(c_defs, dict):
            return
        for name, bs in b_defs.items():
            if name in c_defs:
                self.compare(bs, c_defs[name], f"{where}.{name}")


# Annotations: keywords that describe a schema without constraining what it accepts.
ANNOTATIONS = frozenset({"description", "title", "$comment", "examples"})
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_ONE = frozenset(
    {
        "items",
        "additionalProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "additionalItems",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "contentSchema",
    }
)
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})


def strip_schema(node: object) -> object:
    """A JSON Schema without annotations; keywords are told from property names by position."""
    if not isinstance(node, dict):
        return node  # true/false, or not a schema at all (left as it is)
    out = {}
    for k, v in node.items():
        if k in ANNOTATIONS:
            continue
        if k in _SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: strip_schema(s) for name, s in v.items()}
        elif (k in _SCHEMA_LISTS or k in _SCHEMA_ONE) and isinstance(v, list):
            out[k] = [strip_schema(s) for s in v]  # (items as a list: drafts before 2020-12)
        elif k in _SCHEMA_ONE:
            out[k] = strip_schema(v)
        else:
            out[k] = v
    return out


def json_schema_surface(doc: object) -> object:
    return canonical(strip_schema(doc))


def _load_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SchemaError(path, "", "source file does not exist") from None
    except json.JSONDecodeError as e:
        raise SchemaError(path, f"line {e.lineno}", f"not valid JSON: {e.msg}") from None


def compare_json_schema_surfaces(b: object, c: object) -> Changes:
    """Incompatible changes from the JSON Schema surface `b` to `c`."""
    out: Changes = []
    diff = SchemaDiff(b, c, out)
    diff.compare(b, c, "")
    if isinstance(b, dict):
        diff.compare_named(b.get("$defs"), c.get("$defs") if isinstance(c, dict) else None, "$defs")
    return out


def compare_json_schema(base: Path, current: Path) -> Changes:
    """Incompatible changes from the JSON Schema file `base` to `current`."""
    return compare_json_schema_surfaces(
        json_schema_surface(_load_json(base)), json_schema_surface(_load_json(current))
    )


# ---------------------------------------------------------------------------------------------
# OpenAPI

_OPENAPI_NOTES = frozenset({"description", "summary", "externalDocs", "example", "examples"})


def _drop(node: object, keys: frozenset[str] = _OPENAPI_NOTES) -> dict:
    return {k: v for k, v in node.items() if k not in keys} if isinstance(node, dict) else node


def _oa_content(content: object) -> object:
    if not isinstance(content, dict):
        return content
    out = {}
    for media, m in content.items():
        m = _drop(m)
        if isinstance(m, dict) and "schema" in m:
            m = {**m, "schema": strip_schema(m["schema"])}
        out[media] = m
    return out


def _oa_parameter(p: object) -> object:
    p = _drop(p)
    if isinstance(p, dict):
        if "schema" in p:
            p = {**p, "schema": strip_schema(p["schema"])}
        if "content" in p:
            p = {**p, "content": _oa_content(p["content"])}
    return p


def _oa_body(r: object) -> object:
    """A request body or a response."""
    r = _drop(r)
    if isinstance(r, dict):
        if "content" in r:
            r = {**r, "content": _oa_content(r["content"])}
        if isinstance(r.get("headers"), dict):
            r = {**r, "headers": {n: _oa_parameter(h) for n, h in r["headers"].items()}}
    return r


def _oa_operation(op: object) -> object:
    op = _drop(op, _OPENAPI_NOTES | {"tags"})
    if not isinstance(op, dict):
        return op
    out = dict(op)
    if isinstance(op.get("parameters"), list):
        out["parameters"] = [_oa_parameter(p) for p in op["parameters"]]
    if "requestBody" in op:
        out["requestBody"] = _oa_body(op["requestBody"])
    if isinstance(op.get("responses"), dict):
        out["responses"] = {code: _oa_body(r) for code, r in op["responses"].items()}
    return out


def _oa_path_item(item: object) -> object:
    item = _drop(item, _OPENAPI_NOTES | {"servers"})
    if not isinstance(item, dict):
        return item
    out = {}
    for k, v in item.items():
        if k == "parameters" and isinstance(v, list):
            out[k] = [_oa_parameter(p) for p in v]
        elif k in HTTP_METHODS:
            out[k] = _oa_operation(v)
        else:
            out[k] = v
    return out


_OA_COMPONENTS: dict[str, Callable[[object], object]] = {
    "schemas": strip_schema,
    "parameters": _oa_parameter,
    "headers": _oa_parameter,
    "requestBodies": _oa_body,
    "responses": _oa_body,
    "securitySchemes": _drop,
}


def strip_openapi(doc: dict) -> dict:
    """An OpenAPI document without annotations, structure by structure."""
    out = {}
    for k, v in doc.items():
        if k in ("tags", "externalDocs", "servers"):
            continue
        if k == "info" and isinstance(v, dict):
            notes = {"title", "summary", "description", "contact", "license", "termsOfService"}
            out[k] = {ik: iv for ik, iv in v.items() if ik not in notes}
        elif k in ("paths", "webhooks") and isinstance(v, dict):
            out[k] = {p: _oa_path_item(item) for p, item in v.items()}
        elif k == "components" and isinstance(v, dict):
            out[k] = {
                kind: {n: _OA_COMPONENTS[kind](x) for n, x in entries.items()}
                if kind in _OA_COMPONENTS and isinstance(entries, dict)
                else entries
                for kind, entries in v.items()
            }
        else:
            out[k] = v
    return out


def openapi_surface(root: Path, source: str) -> dict:
    """The document bundled as codegen bundles it, without annotations."""
    return canonical(strip_openapi(openapi_gen.bundle(root, source)))


def _parameters(doc: dict, item: dict, op: dict) -> dict[tuple[str, str], dict]:
    """Path-level and operation-level parameters by (in, name); the operation's win."""
    result: dict[tuple[str, str], dict] = {}
    for p in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:
        p = _resolve(doc, p)
        if isinstance(p, dict) and "name" in p:
            result[(str(p.get("in")), str(p["name"]))] = p
    return result


def _content(diff: SchemaDiff, b: object, c: object, where: str) -> None:
    bc = (b.get("content") if isinstance(b, dict) else None) or {}
    cc = (c.get("content") if isinstance(c, dict) else None) or {}
    for media, bm in bc.items():
        mw = f"{where}.content.{media}"
        if media not in cc:
            diff.out.append((mw, "removed"))
        elif isinstance(bm, dict) and isinstance(cc[media], dict):
            diff.compare(bm.get("schema"), cc[media].get("schema"), f"{mw}.schema")


def _operation(diff: SchemaDiff, b: dict, c: dict, bpath: tuple, cpath: tuple, w: str) -> None:
    (bitem, bop), (citem, cop) = bpath, cpath
    bparams, cparams = _parameters(b, bitem, bop), _parameters(c, citem, cop)
    for (loc, name), cp in cparams.items():
        bp = bparams.get((loc, name))
        if cp.get("required") and not (bp and bp.get("required")):
            what = "now required" if bp else "new required parameter"
            diff.out.append((f"{w}.parameters.{loc}.{name}", what))
    for (loc, name), bp in bparams.items():
        pw = f"{w}.parameters.{loc}.{name}"
        if (loc, name) not in cparams:
            diff.out.append((pw, "removed"))
        else:
            diff.compare(bp.get("schema"), cparams[(loc, name)].get("schema"), f"{pw}.schema")
    brb = _resolve(b, bop.get("requestBody"))
    crb = _resolve(c, cop.get("requestBody"))
    if isinstance(crb, dict) and crb.get("required"):
        if not (isinstance(brb, dict) and brb.get("required")):
            diff.out.append((f"{w}.requestBody", "newly required"))
    if isinstance(brb, dict):
        if not isinstance(crb, dict):
            diff.out.append((f"{w}.requestBody", "removed"))
        else:
            _content(diff, brb, crb, f"{w}.requestBody")
    cresps = cop.get("responses") or {}
    for code, bresp in (bop.get("responses") or {}).items():
        rw = f"{w}.responses.{code}"
        if code not in cresps:
            # a client reads the success bodies; an error the server no longer sends breaks none
            if str(code).startswith("2"):
                diff.out.append((rw, "removed"))
            continue
        _content(diff, _resolve(b, bresp), _resolve(c, cresps[code]), rw)


def compare_openapi_surfaces(b: dict, c: dict) -> Changes:
    """Incompatible changes between two bundled OpenAPI documents (surfaces)."""
    out: Changes = []
    diff = SchemaDiff(b, c, out)
    cpaths = c.get("paths") or {}
    for path, bitem in (b.get("paths") or {}).items():
        citem = cpaths.get(path) or {}
        for method in HTTP_METHODS:
            if method not in bitem:
                continue
            w = f"paths.{path}.{method}"
            if method not in citem:
                out.append((w, "removed"))
                continue
            _operation(diff, b, c, (bitem, bitem[method]), (citem, citem[method]), w)
    diff.compare_named(
        (b.get("components") or {}).get("schemas"),
        (c.get("components") or {}).get("schemas"),
        "components.schemas",
    )
    return out


def compare_openapi(base_root: Path, base_source: str, cur_root: Path, cur_source: str) -> Changes:
    """Incompatible changes between two OpenAPI documents, each bundled as codegen bundles it."""
    return compare_openapi_surfaces(
        openapi_surface(base_root, base_source), openapi_surface(cur_root, cur_source)
    )


# ---------------------------------------------------------------------------------------------
# Protobuf


def _descriptor_set(root: Path, source: str):
    from google.protobuf import descriptor_pb2

    src = PurePosixPath(source)
    include_root = PurePosixPath(*src.parts[:3])  # protocols/<id>/v<N>, as proto_gen compiles
    with tempfile.TemporaryDirectory(prefix="check-compat-") as tmp:
        out = Path(tmp) / "set.pb"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{root / include_root}",
                f"--descriptor_set_out={out}",
                "--include_imports",
                str(src.relative_to(include_root)),
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise SchemaError(source, "", "protoc failed: " + "\n  ".join(detail[-15:]))
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
        return fds


def _field_type(f) -> str:
    from google.protobuf import descriptor_pb2

    if f.type_name:
        return f.type_name.lstrip(".")
    return descriptor_pb2.FieldDescriptorProto.Type.Name(f.type)[len("TYPE_") :].lower()


def _field_label(f) -> str:
    from google.protobuf import descriptor_pb2

    if f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return "repeated"
    if f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED:
        return "required"
    return "optional" if f.proto3_optional else "singular"


def protobuf_surface(root: Path, source: str) -> dict:
    """Messages, enums and services of a .proto (and what it imports), by full name.

    Reserved numbers are inclusive [first, last] ranges for messages and enums alike.
    """
    fds = _descriptor_set(root, source)
    messages: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    services: dict[str, dict] = {}

    def enum(full: str, e) -> None:
        enums[full] = {
            "values": [{"name": v.name, "number": v.number} for v in e.value],
            "reserved": [[r.start, r.end] for r in e.reserved_range],  # inclusive already
        }

    def walk(prefix: str, msgs) -> None:
        for m in msgs:
            full = _join(prefix, m.name)
            messages[full] = {
                "fields": [
                    {
                        "name": f.name,
                        "number": f.number,
                        "type": _field_type(f),
                        "label": _field_label(f),
                    }
                    for f in sorted(m.field, key=lambda f: f.number)
                ],
                "reserved": [[r.start, r.end - 1] for r in m.reserved_range],  # end exclusive
            }
            for e in m.enum_type:
                enum(_join(full, e.name), e)
            walk(full, m.nested_type)

    for f in fds.file:
        if f.name.startswith("google/protobuf/"):
            continue  # well-known types belong to protobuf, not to this protocol
        walk(f.package, f.message_type)
        for e in f.enum_type:
            enum(_join(f.package, e.name), e)
        for s in f.service:
            services[_join(f.package, s.name)] = {
                "methods": [
                    {
                        "name": m.name,
                        "input": m.input_type.lstrip("."),
                        "output": m.output_type.lstrip("."),
                        "client_streaming": m.client_streaming,
                        "server_streaming": m.server_streaming,
                    }
                    for m in s.method
                ]
            }
    packages = sorted({f.package for f in fds.file if f.package})
    return canonical(
        {"packages": packages, "messages": messages, "enums": enums, "services": services}
    )


def _in(number: int, ranges: list) -> bool:
    return any(first <= number <= last for first, last in ranges)


def _messages(b: dict, c: dict, short: Callable[[str], str], out: Changes) -> None:
    for name in sorted(b["messages"]):
        bm = b["messages"][name]
        where = f"messages.{short(name)}"
        cm = c["messages"].get(name)
        if cm is None:
            continue  # on the wire a message is only where a field or method names it
        by_number = {f["number"]: f for f in cm["fields"]}
        by_name = {f["name"]: f for f in cm["fields"]}
        for bf in bm["fields"]:
            fw = f"{where}.fields.{bf['name']}"
            cf = by_number.get(bf["number"])
            if cf is None:
                if _in(bf["number"], cm["reserved"]):
                    continue  # removed the way proto3 allows: the number can never be reused
                moved = by_name.get(bf["name"])
                out.append(
                    (
                        fw,
                        f"number {bf['number']} -> {moved['number']}"
                        if moved
                        else f"removed without reserving number {bf['number']}",
                    )
                )
                continue
            if cf["name"] != bf["name"]:
                out.append((fw, f"number {bf['number']} renamed to {cf['name']}"))
            if cf["type"] != bf["type"]:
                out.append((fw, f"type {bf['type']} -> {cf['type']}"))
            if cf["label"] != bf["label"]:
                out.append((fw, f"label {bf['label']} -> {cf['label']}"))


def _proto_enums(b: dict, c: dict, short: Callable[[str], str], out: Changes) -> None:
    for name in sorted(b["enums"]):
        be = b["enums"][name]
        where = f"enums.{short(name)}"
        ce = c["enums"].get(name)
        if ce is None:
            continue  # likewise only where a field names it
        by_number = {v["number"]: v for v in ce["values"]}
        for bv in be["values"]:
            cv = by_number.get(bv["number"])
            vw = f"{where}.values.{bv['name']}"
            if cv is None:
                if not _in(bv["number"], ce["reserved"]):
                    out.append((vw, f"number {bv['number']} removed without reserving it"))
            elif cv["name"] != bv["name"]:
                out.append((vw, f"number {bv['number']} renamed to {cv['name']}"))


def _services(b: dict, c: dict, short: Callable[[str], str], out: Changes) -> None:
    def sig(m: dict) -> str:
        cs = "stream " if m["client_streaming"] else ""
        ss = "stream " if m["server_streaming"] else ""
        return f"({cs}{short(m['input'])}) returns ({ss}{short(m['output'])})"

    for name in sorted(b["services"]):
        bs = b["services"][name]
        where = f"services.{short(name)}"
        cs = c["services"].get(name)
        if cs is None:
            out.append((where, "removed"))
            continue
        methods = {m["name"]: m for m in cs["methods"]}
        for bm in bs["methods"]:
            mw = f"{where}.methods.{bm['name']}"
            cm = methods.get(bm["name"])
            if cm is None:
                out.append((mw, "removed"))
            elif sig(cm) != sig(bm):
                out.append((mw, f"{sig(bm)} -> {sig(cm)}"))


def compare_protobuf_surfaces(b: dict, c: dict) -> Changes:
    """Incompatible changes from the protobuf surface `b` to `c`."""
    packages = sorted(b["packages"], key=len, reverse=True)

    def short(name: str) -> str:
        for p in packages:
            if name.startswith(p + "."):
                return name[len(p) + 1 :]
        return name

    out: Changes = []
    _messages(b, c, short, out)
    _proto_enums(b, c, short, out)
    _services(b, c, short, out)
    return out


def compare_protobuf(base_root: Path, base_source: str, cur_root: Path, cur_source: str) -> Changes:
    """Incompatible changes between two .proto sources, compiled to descriptor sets."""
    return compare_protobuf_surfaces(
        protobuf_surface(base_root, base_source), protobuf_surface(cur_root, cur_source)
    )


# ---------------------------------------------------------------------------------------------
# One protocol version: its surface, and two surfaces compared

KINDS = ("c-abi", "json-schema", "openapi", "protobuf")


def surface(kind: str, root: Path, source: str) -> object:
    """The surface of the source `source` (repo-relative) of a protocol of `kind` under root."""
    if kind == "c-abi":
        return canonical(cabi_surface(cabi_model.load(root / source)))
    if kind == "json-schema":
        return json_schema_surface(_load_json(root / source))
    if kind == "openapi":
        return openapi_surface(root, source)
    if kind == "protobuf":
        return protobuf_surface(root, source)
    raise SchemaError(REGISTRY, "kind", f"unknown protocol kind '{kind}'")


COMPARE: dict[str, Callable[[object, object], Changes]] = {
    "c-abi": compare_cabi_surfaces,
    "json-schema": compare_json_schema_surfaces,
    "openapi": compare_openapi_surfaces,
    "protobuf": compare_protobuf_surfaces,
}


@dataclass
class Result:
    breaks: list[Break]
    compared: list[str]  # labels of the frozen (or base-live) versions compared
    notes: list[str] = field(default_factory=list)  # new versions, deprecated ones, ...


def _judge(result: Result, label: str, kind: str, cur: registry.Protocol | None) -> bool:
    """Registry-level verdict on a frozen version; True when its contents are to be compared."""
    result.compared.append(label)
    if cur is None:
        result.breaks.append(Break(label, "registry", "removed while live (deprecate it instead)"))
        return False
    if cur.status == "deprecated":
        result.notes.append(
            f"{label} is deprecated now: still compared (deprecated versions are still read)"
        )
    elif cur.status != "live":
        result.breaks.append(
            Break(label, "registry.status", f"live -> {cur.status} (only deprecated is)")
        )
    if cur.kind != kind:
        result.breaks.append(Break(label, "registry.kind", f"{kind} -> {cur.kind}"))
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Against a git ref (--base): that ref's protocols/ tree


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
    except OSError as e:
        raise CompatError(f"cannot run git: {e}") from None


def extract_protocols(root: Path, ref: str, dest: Path) -> bool:
    """Write `ref`'s protocols/ under dest; False when that commit has no protocols/ at all.

    The whole folder, not only the sources the registry names: an OpenAPI document refers to
    JSON Schemas of other protocols, and a .proto may import its neighbours.
    """
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        raise CompatError(f"{root} is not a git checkout: cannot read '{ref}'")
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit.returncode != 0:
        raise CompatError(f"'{ref}' names no commit in {root}")
    sha = commit.stdout.decode().strip()
    if _git(root, "cat-file", "-e", f"{sha}:{PROTOCOLS}").returncode != 0:
        return False
    proc = _git(root, "archive", "--format=tar", sha, PROTOCOLS)
    if proc.returncode != 0:
        raise CompatError(f"git archive {ref} {PROTOCOLS} failed: {proc.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return True


@dataclass(frozen=True)
class BaseEntry:
    id: str
    version: int
    kind: str
    status: str
    source: str

    @property
    def label(self) -> str:
        return f"{self.id} v{self.version}"


def _base_entries(base_root: Path, ref: str) -> list[BaseEntry]:
    """The base registry, read leniently: it was valid when released, by that day's rules."""
    path = base_root / REGISTRY
    if not path.is_file():
        return []
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SchemaError(f"{ref}:{REGISTRY}", "", f"not valid YAML: {e}") from None
    entries = doc.get("protocols") if isinstance(doc, dict) else None
    result = []
    for i, e in enumerate(entries or []):
        try:
            result.append(
                BaseEntry(str(e["id"]), int(e["version"]), e["kind"], e["status"], str(e["source"]))
            )
        except (KeyError, TypeError, ValueError):
            raise SchemaError(
                f"{ref}:{REGISTRY}", f"protocols[{i}]", "entry lacks id/version/kind/status/source"
            ) from None
    return result


def _base_surface(base_root: Path, ref: str, e: BaseEntry) -> object:
    try:
        return surface(e.kind, base_root, e.source)
    except SchemaError as err:
        # name the ref's file, not the temporary copy it was read from
        if err.path.startswith(str(base_root)):
            rel = Path(err.path).relative_to(base_root)
            raise SchemaError(f"{ref}:{rel}", err.where, err.message) from None
        if not Path(err.path).is_absolute():
            raise SchemaError(f"{ref}:{err.path}", err.where, err.message) from None
        raise


def compare_trees(base_root: Path, cur_root: Path, ref: str = "base") -> Result:
    """Compare every protocol version live in base_root's registry with cur_root's.

    Both are repository roots (only protocols/ is read). In-process; no git.
    """
    current = {(p.id, p.version): p for p in registry.load(cur_root, Path(REGISTRY))}
    result = Result([], [])
    for e in _base_entries(base_root, ref):
        if e.status != "live":
            continue
        cur = current.get((e.id, e.version))
        if not _judge(result, e.label, e.kind, cur):
            continue
        if e.kind not in COMPARE:
            result.breaks.append(Break(e.label, "kind", f"unknown kind '{e.kind}' at the base"))
            continue
        b = _base_surface(base_root, ref, e)
        for where, what in COMPARE[e.kind](b, surface(cur.kind, cur_root, cur.source)):
            result.breaks.append(Break(e.label, where, what))
    return result


def check(root: Path, ref: str) -> Result:
    """Compare the working tree under root with the protocols/ of the git ref `ref`."""
    with tempfile.TemporaryDirectory(prefix="check-compat-") as tmp:
        base_root = Path(tmp)
        if not extract_protocols(root, ref, base_root):
            return Result([], [])
        return compare_trees(base_root, root, ref)


# ---------------------------------------------------------------------------------------------
# Against the committed baseline

RESTORE = "restore it from git, or write one at a release with `make compat-baseline`"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Frozen:
    """One protocol version as the baseline holds it."""

    id: str
    version: int
    kind: str
    file: str  # name inside BASELINE_DIR
    surface: object

    @property
    def label(self) -> str:
        return f"{self.id} v{self.version}"


def baseline_file_name(protocol_id: str, version: int) -> str:
    return f"{protocol_id}-v{version}.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_baseline(root: Path) -> list[Frozen]:
    """Every frozen version, each file checked against the index; BaselineError otherwise."""
    bdir = root / BASELINE_DIR
    index_path = root / BASELINE_INDEX
    if not index_path.is_file():
        raise BaselineError(BASELINE_INDEX, f"missing: check-compat has no baseline ({RESTORE})")
    try:
        index = json.loads(index_path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BaselineError(BASELINE_INDEX, f"corrupt: not valid JSON ({e}); {RESTORE}") from None
    if not isinstance(index, dict) or index.get("format") != BASELINE_FORMAT:
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise BaselineError(
            BASELINE_INDEX,
            f"corrupt: format must be {BASELINE_FORMAT}, found {found!r}; {RESTORE}",
        )
    versions = index.get("versions")
    if not isinstance(versions, list):
        raise BaselineError(BASELINE_INDEX, f"corrupt: 'versions' must be a list; {RESTORE}")
    frozen: list[Frozen] = []
    seen: set[tuple[str, int]] = set()
    for i, v in enumerate(versions):
        where = f"{BASELINE_INDEX}: versions[{i}]"
        ok = (
            isinstance(v, dict)
            and isinstance(v.get("id"), str)
            and isinstance(v.get("version"), int)
            and not isinstance(v.get("version"), bool)
            and v.get("kind") in KINDS
            and isinstance(v.get("sha256"), str)
            and _SHA256.match(v["sha256"]) is not None
        )
        if not ok:
            raise BaselineError(
                where, f"corrupt: needs id, version, kind ({', '.join(KINDS)}), sha256; {RESTORE}"
            )
        name = baseline_file_name(v["id"], v["version"])
        if v.get("file") != name:
            raise BaselineError(where, f"corrupt: file must be {name!r}; {RESTORE}")
        if (v["id"], v["version"]) in seen:
            raise BaselineError(where, f"corrupt: {v['id']} v{v['version']} listed twice")
        seen.add((v["id"], v["version"]))
        rel = f"{BASELINE_DIR}/{name}"
        try:
            data = (bdir / name).read_bytes()
        except FileNotFoundError:
            raise BaselineError(rel, f"missing, but listed in index.json; {RESTORE}") from None
        if _sha256(data) != v["sha256"]:
            raise BaselineError(
                rel,
                "corrupt: its sha256 is not the one index.json records (edited by hand, "
                f"truncated or merged?); {RESTORE}",
            )
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BaselineError(rel, f"corrupt: not valid JSON ({e}); {RESTORE}") from None
        header = {"format": BASELINE_FORMAT, "id": v["id"], "version": v["version"]}
        header["kind"] = v["kind"]
        if not isinstance(doc, dict) or "surface" not in doc:
            raise BaselineError(rel, f"corrupt: no 'surface'; {RESTORE}")
        wrong = [k for k, want in header.items() if doc.get(k) != want]
        if wrong:
            raise BaselineError(rel, f"corrupt: {', '.join(wrong)} differ from index.json")
        frozen.append(Frozen(v["id"], v["version"], v["kind"], name, doc["surface"]))
    listed = {f.file for f in frozen}
    strays = sorted(p.name for p in bdir.glob("*.json") if p.name not in listed | {"index.json"})
    if strays:
        raise BaselineError(
            BASELINE_DIR, f"{', '.join(strays)}: not listed in index.json (written by hand?)"
        )
    return frozen


Surfaces = dict[tuple[str, str], object]  # (kind, source) -> surface, of one working tree


def _current(root: Path, p: registry.Protocol, cache: Surfaces | None) -> object:
    if cache is None:
        return surface(p.kind, root, p.source)
    key = (p.kind, p.source)
    if key not in cache:
        cache[key] = surface(p.kind, root, p.source)
    return cache[key]


def check_baseline(root: Path, cache: Surfaces | None = None) -> Result:
    """Compare the working tree under root with its committed baseline.

    cache: surfaces of root's sources already computed (and kept), for compat-baseline.
    """
    frozen = read_baseline(root)
    protocols = registry.load(root, Path(REGISTRY))
    current = {(p.id, p.version): p for p in protocols}
    result = Result([], [])
    for f in frozen:
        cur = current.get((f.id, f.version))
        if not _judge(result, f.label, f.kind, cur):
            continue
        try:
            changes = COMPARE[f.kind](f.surface, _current(root, cur, cache))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise BaselineError(
                f"{BASELINE_DIR}/{f.file}", f"corrupt: not a {f.kind} surface ({e!r}); {RESTORE}"
            ) from None
        result.breaks += [Break(f.label, where, what) for where, what in changes]
    frozen_keys = {(f.id, f.version) for f in frozen}
    for p in protocols:
        if p.status == "live" and (p.id, p.version) not in frozen_keys:
            result.notes.append(
                f"{p.label} is live but not in the baseline: new, frozen at the next "
                "`make compat-baseline`"
            )
    return result


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Replace path with data through a temporary file beside it, only if the bytes differ."""
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def write_baseline(root: Path, cache: Surfaces | None = None) -> tuple[list[str], list[str]]:
    """Freeze every live version of root's registry; (files written, files removed).

    Version files first, the index last: an interrupted run leaves an index whose sha256s do
    not match, which check-compat reports, never a baseline that passes by accident.
    """
    bdir = root / BASELINE_DIR
    entries = []
    files: dict[str, bytes] = {}
    for p in sorted(registry.load(root, Path(REGISTRY)), key=lambda p: (p.id, p.version)):
        if p.status != "live":
            continue
        name = baseline_file_name(p.id, p.version)
        doc = {
            "format": BASELINE_FORMAT,
            "id": p.id,
            "version": p.version,
            "kind": p.kind,
            "source": p.source,
            "surface": _current(root, p, cache),
        }
        files[name] = (dumps(doc) + "\n").encode()
        entries.append(
            {
                "id": p.id,
                "version": p.version,
                "kind": p.kind,
                "file": name,
                "sha256": _sha256(files[name]),
            }
        )
    index = {
        "format": BASELINE_FORMAT,
        "about": "The compatibility baseline of every live protocol version: written by `make "
        "compat-baseline` at a release, read by `make check-compat` (codegen/compat.py). "
        "Do not edit.",
        "versions": entries,
    }
    written = [
        f"{BASELINE_DIR}/{n}" for n, data in files.items() if _write_if_changed(bdir / n, data)
    ]
    removed = []
    for stale in sorted(bdir.glob("*.json")):
        if stale.name != "index.json" and stale.name not in files:
            stale.unlink()
            removed.append(f"{BASELINE_DIR}/{stale.name}")
    # one line per version in the index (with its sha256, wider than the surfaces' lines)
    if _write_if_changed(root / BASELINE_INDEX, (dumps(index, width=200) + "\n").encode()):
        written.append(BASELINE_INDEX)
    return written, removed


# ---------------------------------------------------------------------------------------------
# The commands


def _describe(root: Path, ref: str) -> str:
    proc = _git(root, "rev-parse", "--short", f"{ref}^{{commit}}")
    sha = proc.stdout.decode().strip() if proc.returncode == 0 else "?"
    return ref if sha == "?" or ref.startswith(sha) else f"{ref} ({sha})"


def run(root: Path, base: str | None) -> int:
    """check-compat: 0 compatible, 1 incompatible, 2 cannot compare (no or a bad baseline)."""
    try:
        if base is None:
            result = check_baseline(root)
            where = f"the baseline ({BASELINE_DIR}/)"
        else:
            result = check(root, base)
            where = _describe(root, base)
    except CompatError as e:
        print(f"check-compat: error: {e}", file=sys.stderr)
        return 2
    for note in result.notes:
        print(f"check-compat: note: {note}")
    if result.breaks:
        for b in result.breaks:
            print(b, file=sys.stderr)
        print(
            f"check-compat: {len(result.breaks)} incompatible change(s) against {where}. {FIX}",
            file=sys.stderr,
        )
        return 1
    print(
        f"check-compat: OK - {len(result.compared)} protocol version(s) of {where} "
        "are compatible with the working tree"
    )
    return 0


def run_baseline(root: Path, force: bool) -> int:
    """compat-baseline: 0 written (or already current), 1 refused (breaks), 2 unreadable."""
    cache: Surfaces = {}
    try:
        result = check_baseline(root, cache)
    except BaselineError as e:
        first = not (root / BASELINE_INDEX).exists() and not any(
            (root / BASELINE_DIR).glob("*.json")
        )
        if not (first or force):
            print(
                f"compat-baseline: error: the baseline to replace cannot be read: {e}\n"
                "Restore it from git first, or pass --force (COMPAT_FORCE=1) to freeze the "
                "working tree without comparing.",
                file=sys.stderr,
            )
            return 2
    else:
        if result.breaks and not force:
            for b in result.breaks:
                print(b, file=sys.stderr)
            print(
                f"compat-baseline: refused: {len(result.breaks)} incompatible change(s) "
                f"against the baseline it would replace. {FIX} To break a live version "
                "anyway (the release says so), pass --force (COMPAT_FORCE=1).",
                file=sys.stderr,
            )
            return 1
    written, removed = write_baseline(root, cache)
    for rel in written:
        print(f"compat-baseline: wrote {rel}")
    for rel in removed:
        print(f"compat-baseline: removed {rel} (no longer live)")
    total = len(read_baseline(root))
    state = "updated" if written or removed else "already current"
    print(
        f"compat-baseline: {state}: {total} live protocol version(s) frozen in {BASELINE_DIR}/; "
        "commit it with the release"
    )
    return 0
