"""`python -m codegen check-compat`: live protocol versions stay compatible with the last release.

A breaking change is a new version folder; this is what holds the project to it. The base is
the newest release tag (`v[0-9]*`) reachable from HEAD, or any ref given with --base. Every
registry entry that was `live` at the base is compared, as the base's sources say, with the
working tree; one that left the registry while live is a break, one that went `deprecated` is
not (its contents are still compared: deprecated versions are still read).

- c-abi: both laid out by codegen.cabi. Records keep their size and alignment; each field keeps
  name, type, count and offset, except reserved fields (`reserved*`, `pad*`), whose bytes new
  fields may take; enums keep every value's number and label; constants their values;
  function types their signatures; the C prefix stays.
- json-schema: every property (through $ref, $defs, items, oneOf/anyOf/allOf) stays, with the
  same type(s); no new `required` entry, no removed enum value, no new or changed const, no
  new enum, additionalProperties not newly false, no oneOf/anyOf alternative removed; each
  $defs entry that is still there stays compatible (one that went is judged where it was
  used).
- openapi: both bundled as codegen bundles them; every path and method stays, no parameter is
  removed or becomes required, request and response bodies follow the json-schema rules, as
  as does each components/schemas entry still there.
- protobuf: both compiled to descriptor sets by grpc_tools.protoc. Each field number keeps its
  name, type and label, a removed one must be reserved; enum numbers keep their names (a
  removed one must be reserved); services and methods stay, with their types and streaming.
  A message or enum no field or method names any more may go: the wire never carries it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from codegen import openapi_gen, registry
from codegen.cabi import model as cabi_model
from codegen.errors import SchemaError

TAG_PATTERN = "v[0-9]*"
PROTOCOLS = "protocols"
REGISTRY = "protocols/registry.yaml"
# Fields with these names hold no data: later versions may give their bytes to new fields.
RESERVED_FIELD = re.compile(r"^_?(reserved|pad)")
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


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


Changes = list[tuple[str, str]]  # (where, what) inside one protocol version


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------------
# Base: the release's protocols/ tree, read from git


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
    except OSError as e:
        raise CompatError(f"cannot run git: {e}") from None


def release_base(root: Path) -> str | None:
    """The newest release tag reachable from HEAD, or None when there is none."""
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        raise CompatError(f"{root} is not a git checkout: no release to compare with")
    proc = _git(root, "describe", "--tags", "--match", TAG_PATTERN, "--abbrev=0", "HEAD")
    if proc.returncode != 0:
        return None  # no tag at all, or none reachable from HEAD
    return proc.stdout.decode().strip()


def extract_protocols(root: Path, ref: str, dest: Path) -> bool:
    """Write `ref`'s protocols/ under dest; False when that commit has no protocols/ at all.

    The whole folder, not only the sources the registry names: an OpenAPI document refers to
    JSON Schemas of other protocols, and a .proto may import its neighbours.
    """
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


# ---------------------------------------------------------------------------------------------
# c-abi


def _is_pointer(schema: cabi_model.AbiSchema, type_name: str) -> bool:
    return type_name in ("ptr", "cstr") or type_name in schema.function_by_name


def _field_shape(schema: cabi_model.AbiSchema, f: cabi_model.Field) -> tuple:
    return (f.type, f.count or 1, _is_pointer(schema, f.type), f.offset)


def _records(b: cabi_model.AbiSchema, c: cabi_model.AbiSchema, out: Changes) -> None:
    for br in b.records:
        where = f"{br.kind}s.{br.name}"
        cr = c.record_by_name.get(br.name)
        if cr is None:
            out.append((where, "removed"))
            continue
        if cr.kind != br.kind:
            out.append((where, f"{br.kind} -> {cr.kind}"))
            continue
        # Size kept and every named field in place: a new field can only lie in bytes the base
        # left reserved or as padding, so new fields need no check of their own.
        if cr.size != br.size:
            out.append((where, f"size {br.size} -> {cr.size}"))
        if cr.align != br.align:
            out.append((where, f"alignment {br.align} -> {cr.align}"))
        cur_fields = {f.name: f for f in cr.fields}
        base_names = {f.name for f in br.fields}
        for bf in br.fields:
            if RESERVED_FIELD.match(bf.name):
                continue
            fw = f"{where}.fields.{bf.name}"
            cf = cur_fields.get(bf.name)
            if cf is None:
                same = [
                    x.name
                    for x in cr.fields
                    if x.name not in base_names and _field_shape(c, x) == _field_shape(b, bf)
                ]
                out.append((fw, f"renamed to {same[0]}" if same else "removed"))
                continue
            if cf.type != bf.type:
                bp, cp = _is_pointer(b, bf.type), _is_pointer(c, cf.type)
                note = f" ({'pointer' if bp else 'value'} -> {'pointer' if cp else 'value'})"
                out.append((fw, f"type {bf.type} -> {cf.type}" + (note if bp != cp else "")))
            if (cf.count or 1) != (bf.count or 1):
                out.append((fw, f"count {bf.count or 1} -> {cf.count or 1}"))
            if cf.offset != bf.offset:
                out.append((fw, f"offset {bf.offset} -> {cf.offset}"))


def _enums(b: cabi_model.AbiSchema, c: cabi_model.AbiSchema, out: Changes) -> None:
    for be in b.enums:
        where = f"enums.{be.name}"
        ce = c.enum_by_name.get(be.name)
        if ce is None:
            out.append((where, "removed"))
            continue
        if ce.storage.name != be.storage.name:
            out.append((where, f"storage {be.storage.name} -> {ce.storage.name}"))
        if ce.flags != be.flags:
            out.append((where, f"flags {be.flags} -> {ce.flags}"))
        by_name = {v.name: v for v in ce.values}
        by_value = {v.value: v for v in ce.values}
        for bv in be.values:
            vw = f"{where}.values.{bv.name}"
            cv = by_name.get(bv.name)
            if cv is None:
                other = by_value.get(bv.value)
                out.append(
                    (vw, f"{bv.value} renamed to {other.name}" if other else f"{bv.value} removed")
                )
                continue
            if cv.value != bv.value:
                out.append((vw, f"value {bv.value} -> {cv.value}"))
            if cv.label != bv.label:
                out.append((vw, f"label {bv.label!r} -> {cv.label!r}"))


def _constants(b: cabi_model.AbiSchema, c: cabi_model.AbiSchema, out: Changes) -> None:
    cur = {k.name: k for k in c.constants}
    for bk in b.constants:
        where = f"constants.{bk.name}"
        ck = cur.get(bk.name)
        if ck is None:
            out.append((where, "removed"))
            continue
        if ck.value != bk.value:
            out.append((where, f"value {bk.value:#x} -> {ck.value:#x}"))
        if ck.type.name != bk.type.name:
            out.append((where, f"type {bk.type.name} -> {ck.type.name}"))


def _signature(f: cabi_model.Function) -> str:
    params = [f"{'const ' if p.const else ''}{p.type}{'*' * p.pointer}" for p in f.params]
    if f.variadic:
        params.append("...")
    return f"{f.returns}({', '.join(params)})"


def _functions(b: cabi_model.AbiSchema, c: cabi_model.AbiSchema, out: Changes) -> None:
    # Parameter names are not part of a signature; their types, order and count are.
    for bf in b.functions:
        where = f"functions.{bf.name}"
        cf = c.function_by_name.get(bf.name)
        if cf is None:
            out.append((where, "removed"))
        elif _signature(cf) != _signature(bf):
            out.append((where, f"signature {_signature(bf)} -> {_signature(cf)}"))


def compare_cabi(base: Path, current: Path) -> Changes:
    """Incompatible changes from the C-ABI schema `base` to `current` (files, laid out here)."""
    b, c = cabi_model.load(base), cabi_model.load(current)
    out: Changes = []
    if c.prefix != b.prefix:
        out.append(("prefix", f"{b.prefix} -> {c.prefix} (every C name changes)"))
    _records(b, c, out)
    _enums(b, c, out)
    _constants(b, c, out)
    _functions(b, c, out)
    return out


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


def _load_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SchemaError(path, "", "source file does not exist") from None
    except json.JSONDecodeError as e:
        raise SchemaError(path, f"line {e.lineno}", f"not valid JSON: {e.msg}") from None


def compare_json_schema(base: Path, current: Path) -> Changes:
    """Incompatible changes from the JSON Schema file `base` to `current`."""
    b, c = _load_json(base), _load_json(current)
    out: Changes = []
    diff = SchemaDiff(b, c, out)
    diff.compare(b, c, "")
    if isinstance(b, dict):
        diff.compare_named(b.get("$defs"), c.get("$defs") if isinstance(c, dict) else None, "$defs")
    return out


# ---------------------------------------------------------------------------------------------
# OpenAPI


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


def compare_openapi(base_root: Path, base_source: str, cur_root: Path, cur_source: str) -> Changes:
    """Incompatible changes between two OpenAPI documents, each bundled as codegen bundles it."""
    b = openapi_gen.bundle(base_root, base_source)
    c = openapi_gen.bundle(cur_root, cur_source)
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


@dataclass
class _ProtoIndex:
    messages: dict  # full name -> DescriptorProto
    enums: dict  # full name -> EnumDescriptorProto
    services: dict  # full name -> ServiceDescriptorProto


def _index(fds) -> _ProtoIndex:
    idx = _ProtoIndex({}, {}, {})

    def walk(prefix: str, messages) -> None:
        for m in messages:
            full = _join(prefix, m.name)
            idx.messages[full] = m
            for e in m.enum_type:
                idx.enums[_join(full, e.name)] = e
            walk(full, m.nested_type)

    for f in fds.file:
        if f.name.startswith("google/protobuf/"):
            continue  # well-known types belong to protobuf, not to this protocol
        walk(f.package, f.message_type)
        for e in f.enum_type:
            idx.enums[_join(f.package, e.name)] = e
        for s in f.service:
            idx.services[_join(f.package, s.name)] = s
    return idx


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


def _messages(b: _ProtoIndex, c: _ProtoIndex, short: Callable[[str], str], out: Changes) -> None:
    for name, bm in b.messages.items():
        where = f"messages.{short(name)}"
        cm = c.messages.get(name)
        if cm is None:
            continue  # on the wire a message is only where a field or method names it
        by_number = {f.number: f for f in cm.field}
        by_name = {f.name: f for f in cm.field}
        for bf in bm.field:
            fw = f"{where}.fields.{bf.name}"
            cf = by_number.get(bf.number)
            if cf is None:
                if any(r.start <= bf.number < r.end for r in cm.reserved_range):
                    continue  # removed the way proto3 allows: the number can never be reused
                moved = by_name.get(bf.name)
                out.append(
                    (
                        fw,
                        f"number {bf.number} -> {moved.number}"
                        if moved
                        else f"removed without reserving number {bf.number}",
                    )
                )
                continue
            if cf.name != bf.name:
                out.append((fw, f"number {bf.number} renamed to {cf.name}"))
            if _field_type(cf) != _field_type(bf):
                out.append((fw, f"type {_field_type(bf)} -> {_field_type(cf)}"))
            if _field_label(cf) != _field_label(bf):
                out.append((fw, f"label {_field_label(bf)} -> {_field_label(cf)}"))


def _proto_enums(b: _ProtoIndex, c: _ProtoIndex, short: Callable[[str], str], out: Changes) -> None:
    for name, be in b.enums.items():
        where = f"enums.{short(name)}"
        ce = c.enums.get(name)
        if ce is None:
            continue  # likewise only where a field names it
        by_number = {v.number: v for v in ce.value}
        for bv in be.value:
            cv = by_number.get(bv.number)
            vw = f"{where}.values.{bv.name}"
            if cv is None:
                # enum reserved ranges are inclusive at both ends
                if not any(r.start <= bv.number <= r.end for r in ce.reserved_range):
                    out.append((vw, f"number {bv.number} removed without reserving it"))
            elif cv.name != bv.name:
                out.append((vw, f"number {bv.number} renamed to {cv.name}"))


def _services(b: _ProtoIndex, c: _ProtoIndex, short: Callable[[str], str], out: Changes) -> None:
    def sig(m) -> str:
        cs = "stream " if m.client_streaming else ""
        ss = "stream " if m.server_streaming else ""
        req, resp = short(m.input_type.lstrip(".")), short(m.output_type.lstrip("."))
        return f"({cs}{req}) returns ({ss}{resp})"

    for name, bs in b.services.items():
        where = f"services.{short(name)}"
        cs = c.services.get(name)
        if cs is None:
            out.append((where, "removed"))
            continue
        methods = {m.name: m for m in cs.method}
        for bm in bs.method:
            mw = f"{where}.methods.{bm.name}"
            cm = methods.get(bm.name)
            if cm is None:
                out.append((mw, "removed"))
            elif sig(cm) != sig(bm):
                out.append((mw, f"{sig(bm)} -> {sig(cm)}"))


def compare_protobuf(base_root: Path, base_source: str, cur_root: Path, cur_source: str) -> Changes:
    """Incompatible changes between two .proto sources, compiled to descriptor sets."""
    bfds = _descriptor_set(base_root, base_source)
    b, c = _index(bfds), _index(_descriptor_set(cur_root, cur_source))
    packages = sorted({f.package for f in bfds.file if f.package}, key=len, reverse=True)

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


# ---------------------------------------------------------------------------------------------
# The whole registry


def _compare_entry(base_root: Path, ref: str, e: BaseEntry, cur: registry.Protocol, cur_root: Path):
    try:
        if e.kind == "c-abi":
            return compare_cabi(base_root / e.source, cur_root / cur.source)
        if e.kind == "json-schema":
            return compare_json_schema(base_root / e.source, cur_root / cur.source)
        if e.kind == "openapi":
            return compare_openapi(base_root, e.source, cur_root, cur.source)
        if e.kind == "protobuf":
            return compare_protobuf(base_root, e.source, cur_root, cur.source)
    except SchemaError as err:
        # name the release's file, not the temporary copy it was read from
        if err.path.startswith(str(base_root)):
            rel = Path(err.path).relative_to(base_root)
            raise SchemaError(f"{ref}:{rel}", err.where, err.message) from None
        raise
    return [("kind", f"unknown kind '{e.kind}' at the base")]


@dataclass
class Result:
    breaks: list[Break]
    compared: list[str]  # labels of the live base versions compared


def compare_trees(base_root: Path, cur_root: Path, ref: str = "base") -> Result:
    """Compare every protocol version live in base_root's registry with cur_root's.

    Both are repository roots (only protocols/ is read). In-process; no git.
    """
    current = {(p.id, p.version): p for p in registry.load(cur_root, Path(REGISTRY))}
    result = Result([], [])
    for e in _base_entries(base_root, ref):
        if e.status != "live":
            continue
        result.compared.append(e.label)
        cur = current.get((e.id, e.version))
        if cur is None:
            result.breaks.append(
                Break(e.label, "registry", "removed while live (deprecate it instead)")
            )
            continue
        if cur.status != "live" and cur.status != "deprecated":
            result.breaks.append(
                Break(e.label, "registry.status", f"live -> {cur.status} (only deprecated is)")
            )
        if cur.kind != e.kind:
            result.breaks.append(Break(e.label, "registry.kind", f"{e.kind} -> {cur.kind}"))
            continue
        for where, what in _compare_entry(base_root, ref, e, cur, cur_root):
            result.breaks.append(Break(e.label, where, what))
    return result


def check(root: Path, ref: str) -> Result:
    """Compare the working tree under root with the release `ref` of the same repository."""
    with tempfile.TemporaryDirectory(prefix="check-compat-") as tmp:
        base_root = Path(tmp)
        if not extract_protocols(root, ref, base_root):
            return Result([], [])
        return compare_trees(base_root, root, ref)


def _describe(root: Path, ref: str) -> str:
    proc = _git(root, "rev-parse", "--short", f"{ref}^{{commit}}")
    sha = proc.stdout.decode().strip() if proc.returncode == 0 else "?"
    return ref if sha == "?" or ref.startswith(sha) else f"{ref} ({sha})"


def run(root: Path, base: str | None) -> int:
    """The command: 0 compatible (or nothing to compare), 1 incompatible, 2 cannot compare."""
    try:
        ref = base or release_base(root)
        if ref is None:
            print(
                f"check-compat: no release tag ({TAG_PATTERN}) reachable from HEAD: "
                "nothing to compare"
            )
            return 0
        result = check(root, ref)
    except CompatError as e:
        print(f"check-compat: error: {e}", file=sys.stderr)
        return 2
    where = _describe(root, ref)
    if result.breaks:
        for b in result.breaks:
            print(b, file=sys.stderr)
        print(
            f"check-compat: {len(result.breaks)} incompatible change(s) against {where}. "
            "A live protocol version is frozen: put the change in a new version folder "
            "(protocols/<id>/v<N+1>/) and list it in protocols/registry.yaml.",
            file=sys.stderr,
        )
        return 1
    print(
        f"check-compat: OK - {len(result.compared)} protocol version(s) live at {where} "
        "are compatible with the working tree"
    )
    return 0
