"""inspector-log: the lean msgspec subsets that the fast readers decode, from the schema.

The generated full model (`models/inspector_log_v1.py`) decodes and checks every field of a
line; the Semantic Engine reads millions of lines and decodes only the few fields it uses,
into small Structs that ignore the rest (msgspec skips unknown keys without building them).
Those Structs used to be written by hand. Here only the *choice* is written: which fields of
which schema objects each reader needs, and how absent they may be. Every name and every type
comes from the schema, so a renamed or retyped field fails generation (or the reader's
tests) instead of being silently misread.

A subset may be laxer than the schema (a field the schema requires may be optional here:
NVIDIA's older Inspector versions omit some), never stricter: a field is `REQ` only where the
schema requires it. The C scanner (comminsight/semantic/native/engine_core.c) accepts the
same: what it cannot read it leaves to these Structs, and contract-tests check that both read
every fixture line as the full model does.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.registry import Protocol
from codegen.templating import render


@dataclass(frozen=True)
class Field:
    presence: str  # "required" | "optional" (T | None = None) | "default" (T = value)
    default: object = None
    # the schema's integer read as a number: the C scanner takes a fraction there too, and
    # a reader of foreign logs should not refuse a line for writing 61.0
    as_number: bool = False


REQ = Field("required")
OPT = Field("optional")


def default(value: object, as_number: bool = False) -> Field:
    return Field("default", value, as_number)


# Struct keys: "Line" is the whole line (the schema's root), "Ci" the `ci` object with the
# fields of all its kinds in one Struct (it is a tagged union in the schema; the readers test
# `kind` themselves), any other key the $defs entry of that name. A field that holds an object
# names the Struct of the same subset that decodes it.
SUBSETS: dict[str, dict] = {
    # comminsight/semantic/log_input.py: every line the C scanner leaves to Python (and the
    # first and last lines of a segment: clock anchor, seal)
    "Engine": {
        "doc": "what the Semantic Engine's offline reader decodes of a line",
        "structs": {
            "Header": {
                "id": REQ,
                "rank": REQ,
                "n_ranks": REQ,
                "nnodes": OPT,
                "comm_name": OPT,
            },
            "CollEventTraceTs": {"coll_start_ts": OPT, "coll_stop_ts": OPT},
            "CollPerf": {
                "coll": REQ,
                "coll_sn": REQ,
                "coll_msg_size_bytes": REQ,
                "coll_exec_time_us": default(0.0, as_number=True),
                "coll_busbw_gbs": OPT,
                "coll_timing_source": OPT,
                "event_trace_ts": OPT,
            },
            "P2pPerf": {
                "p2p": REQ,
                "p2p_sn": REQ,
                "p2p_msg_size_bytes": REQ,
                "p2p_peer": OPT,
                "p2p_exec_time_us": default(0.0, as_number=True),
                "p2p_busbw_gbs": OPT,
                "p2p_timing_source": OPT,
            },
            "ProcessIdentity": {
                "host": REQ,
                "pid": REQ,
                "start_real_ns": REQ,
                "global_rank": OPT,
                "local_rank": OPT,
            },
            "ClockAnchor": {"mono_ns": REQ, "real_ns": REQ},
            "Ci": {
                "kind": REQ,
                "ring_seq": OPT,
                "segment_index": OPT,
                "process": OPT,
                "clock": OPT,
                "host_start_mono_ns": OPT,
                "host_complete_mono_ns": OPT,
                "gpu_start_globaltimer_ns": OPT,
                "gpu_stop_globaltimer_ns": OPT,
                "group_id": OPT,
                "datatype": OPT,
                "user_tag": OPT,
                "lost_count": OPT,
                "record_count": OPT,
                "byte_count": OPT,
                "crc32": OPT,
                "first_ring_seq": OPT,
                "last_ring_seq": OPT,
                # the compact op line (kinds c and p): every key the engine reads
                "q": OPT,
                "c": OPT,
                "cn": OPT,
                "r": OPT,
                "n": OPT,
                "nn": OPT,
                "f": OPT,
                "s": OPT,
                "b": OPT,
                "pe": OPT,
                "ts": OPT,
                "bw": OPT,
                "h": OPT,
                "hc": OPT,
                "g0": OPT,
                "gd": OPT,
                "gr": OPT,
                "d": OPT,
                "ut": OPT,
            },
            "Metadata": {"dump_timestamp_us": default(0), "hostname": OPT, "pid": OPT},
            "Line": {
                "header": OPT,
                "metadata": OPT,
                "coll_perf": OPT,
                "p2p_perf": OPT,
                "ci": OPT,
            },
        },
    },
    # comminsight/semantic/process_gpus.py: which communicator members (and GPUs) a process
    # has, from its segment_start, comm_init and seal lines
    "Members": {
        "doc": "what telling a process's GPUs apart decodes of a line",
        "structs": {
            "CommIdentity": {"comm_id": REQ, "comm_rank": REQ, "nranks": REQ, "cuda_device": OPT},
            "ProcessIdentity": {"host": REQ, "pid": REQ, "global_rank": OPT, "local_rank": OPT},
            "Ci": {
                "kind": REQ,
                "comm": OPT,
                "communicators": OPT,
                "process": OPT,
                "op_count": OPT,
                "ring_record_count": OPT,
            },
            "Line": {"ci": OPT},
        },
    },
}

_SCALARS = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}


class _Subset:
    def __init__(self, source: str, doc: dict, name: str, structs: dict[str, dict]) -> None:
        self.source, self.doc, self.name, self.structs = source, doc, name, structs
        self.defs: dict = doc.get("$defs", {})

    def struct_name(self, key: str) -> str:
        return f"{self.name}{key}"

    def where(self, key: str, field: str | None = None) -> str:
        where = f"codegen/log_subsets.py SUBSETS[{self.name}][{key}]"
        return where + (f".{field}" if field else "")

    def objects(self, key: str) -> list[dict]:
        """The schema object(s) a Struct key decodes: the union's kinds for Ci."""
        if key == "Line":
            return [self.doc]
        if key == "Ci":
            return [self._deref(b) for b in self.doc["properties"]["ci"]["oneOf"]]
        if key not in self.defs:
            raise SchemaError(self.source, "$defs", f"no '{key}' ({self.where(key)})")
        return [self.defs[key]]

    def _deref(self, node: dict) -> dict:
        ref = node.get("$ref")
        return self.defs[ref.rsplit("/", 1)[-1]] if ref else node

    def type_of(self, node: dict, key: str, field: str) -> list[str]:
        """The Python types a schema node allows, in the schema's order."""
        if "$ref" in node:
            target = node["$ref"].rsplit("/", 1)[-1]
            body = self.defs[target]
            if body.get("type") == "object":
                if target not in self.structs:
                    raise SchemaError(
                        self.source,
                        f"$defs.{target}",
                        f"{self.where(key, field)} holds it, but the subset has no '{target}'",
                    )
                return [self.struct_name(target)]
            return self.type_of(body, key, field)
        if key == "Line" and field == "ci":
            if "Ci" not in self.structs:
                raise SchemaError(self.source, "properties.ci", f"{self.where(key, field)}: no Ci")
            return [self.struct_name("Ci")]
        for combinator in ("oneOf", "anyOf"):
            if combinator in node:
                out: list[str] = []
                for member in node[combinator]:
                    out += [t for t in self.type_of(member, key, field) if t not in out]
                return out
        if "const" in node:
            return [_value_type(node["const"])]
        if "enum" in node:
            out = []
            for value in node["enum"]:
                if _value_type(value) not in out:
                    out.append(_value_type(value))
            return out
        kind = node.get("type")
        if kind == "array":
            return [f"list[{' | '.join(self.type_of(node['items'], key, field))}]"]
        if kind in _SCALARS:
            return [_SCALARS[kind]]
        raise SchemaError(self.source, f"{key}.{field}", f"no Python type for {node}")

    def field_line(self, key: str, field: str, spec: Field) -> dict:
        objects = self.objects(key)
        having = [o for o in objects if field in o.get("properties", {})]
        if not having:
            raise SchemaError(self.source, key, f"{self.where(key, field)}: no such property")
        types = None
        for o in having:
            t = self.type_of(o["properties"][field], key, field)
            if types is not None and t != types:
                raise SchemaError(
                    self.source, f"{key}.{field}", f"its kinds type it differently: {types}, {t}"
                )
            types = t
        if spec.as_number:
            if types != ["int"]:
                raise SchemaError(self.source, f"{key}.{field}", "as_number on a non-integer")
            types = ["float"]
        if spec.presence == "required":
            # never stricter than the schema: required here only where every kind requires it
            if any(field not in o.get("required", ()) for o in objects):
                raise SchemaError(
                    self.source,
                    f"{key}.{field}",
                    f"{self.where(key, field)} is REQ but the schema does not require it",
                )
            annotation = " | ".join(types)
        elif spec.presence == "optional":
            annotation = " | ".join(types) + " | None = None"
        else:
            if _value_type(spec.default) not in types:
                raise SchemaError(self.source, f"{key}.{field}", f"default {spec.default!r}")
            annotation = f"{' | '.join(types)} = {spec.default!r}"
        return {"name": field, "annotation": annotation, "required": spec.presence == "required"}

    def render_structs(self) -> list[dict]:
        out = []
        for key, fields in self.structs.items():
            lines = [self.field_line(key, f, spec) for f, spec in fields.items()]
            flags = [f["required"] for f in lines]
            if flags != sorted(flags, reverse=True):
                raise SchemaError(self.source, key, f"{self.where(key)}: REQ fields come first")
            if key == "Line":
                title = "A whole line."
            elif key == "Ci":
                title = "The `ci` object: the fields of every kind that has them, in one Struct."
            else:
                title = f"{key}: the fields of it that this reader uses."
            out.append({"name": self.struct_name(key), "title": title, "fields": lines})
        return out


def _value_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    raise TypeError(value)


def _ordered(subset: _Subset, structs: list[dict]) -> list[dict]:
    """Structs after the Structs their fields hold (readable top-down; decoding does not
    care)."""
    by_name = {s["name"]: s for s in structs}
    done: list[dict] = []

    def visit(s: dict) -> None:
        if s in done:
            return
        for f in s["fields"]:
            for name in by_name:
                if name in f["annotation"].replace("[", " ").replace("]", " ").split():
                    visit(by_name[name])
        done.append(s)

    for s in structs:
        visit(s)
    return done


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    subsets = []
    for name, spec in SUBSETS.items():
        subset = _Subset(p.source, doc, name, spec["structs"])
        subsets.append(
            {"name": name, "doc": spec["doc"], "structs": _ordered(subset, subset.render_structs())}
        )
    ctx.write(
        f"generated/python/comminsight_gen/models/{p.stem}_lean.py",
        render(
            "log_subsets.py.j2",
            {"source": p.source, "version": p.version, "subsets": subsets},
        ),
    )
