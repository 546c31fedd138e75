"""inspector-log v1: every reader reads every kind of line alike.

Four readers decode the Profiler's lines: the full generated model (comminsight/log_segments.py,
the Agent's log recovery), the engine's lean subset and the GPU-split subset (generated from the
schema by codegen/log_subsets.py: comminsight/semantic/log_input.py, process_gpus.py) and the
engine's C scanner (comminsight/semantic/native/engine_core.c, through its cffi binding), which
takes the op lines it can read and leaves the rest to the lean subset. On every valid fixture
line (one or more of every kind the schema defines, NVIDIA's own op lines among them, and a
segment in the writer's exact byte layout, which the scanner reads by that layout) each must
give what the full model gives; and a segment read through the engine (C where it takes a
line, Python elsewhere) must give the same ops as Python alone.
"""

from __future__ import annotations

import json
import shutil
from enum import Enum
from pathlib import Path

import msgspec
import msgspec.inspect as mi
import pytest

from comminsight.semantic import native
from comminsight.semantic.log_input import _DECODER, _float, _op, _ring_seq, read_gpu_logs
from comminsight.semantic.positions import LogPosition
from comminsight_gen.abi import shm_v1
from comminsight_gen.inspector_log_v1_fields import V
from comminsight_gen.models import inspector_log_v1 as full_model
from comminsight_gen.models.inspector_log_v1_lean import EngineHeader, EngineLine, MembersLine

from contract_helpers import ROOT

VALID = ROOT / "contract-tests" / "fixtures" / "json" / "inspector-log" / "v1" / "valid"
# the writer's own layout, sealed: the scanner's layout path reads it (the Inspector form;
# a compact segment, which the scanner walks, beside it)
WRITER_SEGMENT = VALID / "writer-segment.jsonl"
WRITER_SEGMENTS = (WRITER_SEGMENT, VALID / "writer-segment-compact.jsonl")
SCHEMA = json.loads((ROOT / "protocols/inspector-log/v1/inspector-log.schema.json").read_text())
FULL = msgspec.json.Decoder(full_model.InspectorLogRecord)


def fixture_lines() -> list[tuple[str, bytes]]:
    """(name, one line without its newline) for every line of every valid fixture; a JSON
    document spread over lines is put on one, as a writer would."""
    out = []
    for path in sorted(VALID.glob("*.json*")):
        if path.suffix == ".jsonl":
            for i, line in enumerate(path.read_bytes().splitlines(), 1):
                if line.strip():
                    out.append((f"{path.name}:{i}", line))
        else:
            doc = json.loads(path.read_text())
            out.append((path.name, json.dumps(doc, separators=(",", ":")).encode()))
    return out


LINES = fixture_lines()
IDS = [name for name, _ in LINES]


def _kind(record) -> str:
    if record.ci is not msgspec.UNSET and record.ci is not None:
        return type(record.ci).__struct_config__.tag
    return "nvidia " + ("coll" if record.coll_perf is not msgspec.UNSET else "p2p")


def test_the_fixtures_hold_every_kind_of_line():
    kinds = {_kind(FULL.decode(line)) for _, line in LINES}
    schema_kinds = set(SCHEMA["properties"]["ci"]["discriminator"]["mapping"])
    assert schema_kinds | {"nvidia coll", "nvidia p2p"} <= kinds
    writer_kinds = {
        _kind(FULL.decode(line))
        for segment in WRITER_SEGMENTS
        for line in segment.read_bytes().splitlines()
    }
    assert schema_kinds <= writer_kinds  # the writer's layout of every kind, too


def _defaults(struct_type) -> dict:
    return {f.name: f.default for f in mi.type_info(struct_type).fields if not f.required}


def agree(lean, full, where: str) -> None:
    """Every field of the lean Struct `lean` holds what the full model's `full` holds (an
    absent field: the lean default)."""
    defaults = _defaults(type(lean))
    for name in lean.__struct_fields__:
        got = getattr(lean, name)
        want = getattr(full, name, msgspec.UNSET)
        config = type(full).__struct_config__
        if name == config.tag_field:  # a tagged union's tag (ci.kind) is no attribute
            want = config.tag
        at = f"{where}.{name}"
        if want is msgspec.UNSET:
            assert name in defaults, f"{at}: required by the subset, absent in the line"
            assert got == defaults[name], f"{at}: absent, but the subset read {got!r}"
        elif isinstance(got, msgspec.Struct):
            agree(got, want, at)
        elif isinstance(got, list):
            assert len(got) == len(want), at
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                agree(g, w, f"{at}[{i}]")
        else:
            want = want.value if isinstance(want, Enum) else want
            assert got == want and isinstance(got, str) == isinstance(want, str), (
                f"{at}: subset {got!r}, full model {want!r}"
            )


@pytest.mark.parametrize("line", [line for _, line in LINES], ids=IDS)
def test_the_generated_subsets_read_what_the_full_model_reads(line):
    full = FULL.decode(line)
    agree(msgspec.json.decode(line, type=EngineLine), full, "engine")
    agree(msgspec.json.decode(line, type=MembersLine), full, "members")
    assert _DECODER.decode(line) == msgspec.json.decode(line, type=EngineLine)


def _present(value):
    return native.NONE if value is msgspec.UNSET or value is None else value


def _datatype(name) -> int:
    """The shm protocol's code of a datatype name (0: none, or one it has no code for)."""
    if name is msgspec.UNSET or not name:
        return 0
    return int(shm_v1.DATATYPE_BY_LABEL.get(name, shm_v1.Datatype.UNKNOWN))


def c_row_of_full_model(full) -> dict | None:
    """What the C scanner must put in its row for a line, from the full model's reading; None
    for a line the scanner leaves to Python (not a CommInsight op line)."""
    ci = full.ci
    if isinstance(ci, full_model.CiCollCompact | full_model.CiP2pCompact):
        return c_row_of_compact(ci)
    if ci is msgspec.UNSET or ci is None or full.header is msgspec.UNSET:
        return None
    if isinstance(ci, full_model.CiColl) and full.coll_perf is not msgspec.UNSET:
        p = full.coll_perf
        func, seq, size, exec_us, bw, timing, peer, kind = (
            p.coll, p.coll_sn, p.coll_msg_size_bytes, p.coll_exec_time_us, p.coll_busbw_gbs,
            p.coll_timing_source, msgspec.UNSET, 0,
        )  # fmt: skip
    elif isinstance(ci, full_model.CiP2p) and full.p2p_perf is not msgspec.UNSET:
        p = full.p2p_perf
        func, seq, size, exec_us, bw, timing, peer, kind = (
            p.p2p, p.p2p_sn, p.p2p_msg_size_bytes, p.p2p_exec_time_us, p.p2p_busbw_gbs,
            p.p2p_timing_source, p.p2p_peer, 1,
        )  # fmt: skip
    else:
        return None
    group = ci.group_id
    return {
        "kind": kind,
        "header": (full.header.id, full.header.rank, full.header.n_ranks, full.header.nnodes),
        "func": func,
        "seq": seq,
        "size": size,
        "peer": _present(peer),
        "exec_us": float(exec_us),
        "busbw": _float(bw),
        "kernel_timing": timing == "kernel_gpu",
        "ring_seq": ci.ring_seq,
        "host_start": ci.host_start_mono_ns,
        "host_complete": _present(ci.host_complete_mono_ns),
        "gpu_start": _present(ci.gpu_start_globaltimer_ns),
        "gpu_stop": _present(ci.gpu_stop_globaltimer_ns),
        "group_id": 0 if group is msgspec.UNSET else group,
        "datatype": _datatype(ci.datatype),
        "user_tag": _tag(ci.user_tag),
    }


def c_row_of_compact(ci) -> dict:
    """The row of a compact op line (kinds c and p): host and GPU times put back from their
    offsets, no execution time."""
    p2p = isinstance(ci, full_model.CiP2pCompact)
    gpu = ci.g0 is not msgspec.UNSET
    return {
        "kind": int(p2p),
        "header": (ci.c, ci.r, ci.n, ci.nn),
        "func": ci.f,
        "seq": ci.s,
        "size": ci.b,
        "peer": _present(ci.pe) if p2p else native.NONE,
        "exec_us": 0.0,
        "busbw": _float(ci.bw if ci.bw is not msgspec.UNSET else 0.0),
        "kernel_timing": ci.ts.value == "kernel_gpu",
        "ring_seq": ci.q,
        "host_start": ci.h,
        "host_complete": native.NONE if ci.hc is msgspec.UNSET else ci.h + ci.hc,
        "gpu_start": ci.g0 if gpu else native.NONE,
        "gpu_stop": ci.g0 + ci.gd if gpu else native.NONE,
        "group_id": 0 if ci.gr is msgspec.UNSET else ci.gr,
        "datatype": _datatype(ci.d),
        "user_tag": _tag(ci.ut),
    }


def _tag(tag) -> int:
    """A call's userProfilerTag as the engine keeps it: none (0) where the line has none or
    NCCL reserves the value (its top bit set)."""
    return tag if isinstance(tag, int) and 0 < tag < 2**63 else 0


def scanned(data: bytes, trusted: bool) -> list[dict]:
    headers, funcs = native.InternTable(), native.InternTable()
    rows, rest = native.scan(data, 0, headers, funcs, trusted)
    assert rest == len(data)
    header_bytes, func_bytes = headers.new_entries(), funcs.new_entries()
    out = []
    for i in range(len(rows)):
        if rows["status"][i] != native.LINE_OP:
            out.append(None)
            continue
        h = msgspec.json.decode(header_bytes[rows["header"][i]], type=EngineHeader)
        row = {k: rows[k][i].item() for k in native.LINE_COLUMNS}
        row["header"] = (h.id, h.rank, h.n_ranks, h.nnodes)
        row["func"] = func_bytes[rows["func"][i]].decode()
        row["kernel_timing"] = bool(row["kernel_timing"])
        for k in ("start", "end", "status"):
            del row[k]
        out.append(row)
    return out


@pytest.mark.parametrize("trusted", [False, True], ids=["walker", "layout"])
@pytest.mark.parametrize("line", [line for _, line in LINES], ids=IDS)
def test_the_c_scanner_reads_what_the_full_model_reads(line, trusted):
    want = c_row_of_full_model(FULL.decode(line))
    (got,) = scanned(line + b"\n", trusted)
    # C takes every CommInsight op line of the fixtures, and no other line
    assert got == want


def test_the_c_scanner_reads_the_writers_segment_by_its_layout_as_by_walking_it():
    data = WRITER_SEGMENT.read_bytes()
    walked, laid_out = scanned(data, False), scanned(data, True)
    assert walked == laid_out
    assert sum(r is not None for r in laid_out) == 4  # its op lines


def _python_ops(path: Path) -> list:
    """The ops of one segment as Python alone reads them (the engine's `_op` on every line),
    with the segment's clock anchor and GPU clock offset as the reader computes them."""
    data = path.read_bytes()
    first = _DECODER.decode(data[: data.find(b"\n")]).ci
    anchor = (first.clock.mono_ns, first.clock.real_ns) if first.kind == V.SEGMENT_START else (0, 0)
    rows, _ = native.scan(data, 0, native.InternTable(), native.InternTable(), False)
    offset = native.gpu_offset(rows, (rows["status"] == native.LINE_OP).nonzero()[0])
    ops, start, lost = [], 0, 0
    for i, line in enumerate(data.splitlines(keepends=True)):
        decoded = _DECODER.decode(line)
        end = start + len(line)
        ci = decoded.ci
        if ci is not None and ci.kind == V.SEAL:
            break
        if ci is not None and ci.kind == V.GAP:
            lost += ci.lost_count  # records lost count on the op after them
        position = LogPosition(path.name, 0, start, i, _ring_seq(ci), end)
        op = _op(decoded, anchor, position, offset)
        if op is not None:
            op.lost_before, lost = lost, 0
            ops.append(op)
        start = end
    return ops


def test_the_engine_reads_a_segment_as_python_alone_reads_it(tmp_path):
    """The writer's segments (sealed: C's layout path for the Inspector form, its walker for
    the compact form) and every other fixture line in one open segment (C's walker, and
    Python for what C leaves): op for op, field for field."""
    sealed = tmp_path / "ci-host-1-1-000000.jsonl"
    shutil.copyfile(WRITER_SEGMENT, sealed)
    compact = tmp_path / "ci-host-3-3-000000.jsonl"
    shutil.copyfile(WRITER_SEGMENTS[1], compact)
    others = tmp_path / "ci-host-2-2-000000.jsonl.partial"
    first = WRITER_SEGMENT.read_bytes().splitlines()[0]  # a segment_start: the clock anchor
    rest = [line for name, line in LINES if not name.startswith(WRITER_SEGMENT.name + ":")]
    ops_lines = [line for line in rest if c_row_of_full_model(FULL.decode(line)) is not None]
    nvidia = [line for line in rest if FULL.decode(line).ci is msgspec.UNSET]
    others.write_bytes(b"".join(line + b"\n" for line in [first, *ops_lines, *nvidia]))
    logs, problems = read_gpu_logs(tmp_path)
    assert not problems
    for path in (sealed, compact, others):
        (log,) = [g for g in logs if g.segments == [path]]
        engine = list(log.ops())
        python = _python_ops(path)
        assert len(engine) == len(python) > 0
        for a, b in zip(engine, python, strict=True):
            assert a == b


# The hand-written readers and writers of the protocol: they take every name from the
# generated modules.
SPELLERS = [
    "comminsight/semantic/log_input.py",
    "comminsight/semantic/process_gpus.py",
    "comminsight/agent/receivers/inspector_lines.py",
    "comminsight/agent/receivers/log_recovery.py",
]


def _schema_words() -> tuple[set[str], set[str]]:
    names, values = set(), set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                names.update(node["properties"])
            if isinstance(node.get("const"), str):
                values.add(node["const"])
            values.update(v for v in node.get("enum", ()) if isinstance(v, str))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(SCHEMA)
    return names, values


def spelled_by_hand(source: str) -> list[str]:
    """Places where code spells one of the schema's names or kinds: a dict key, a key stored
    into a dict, a keyword of dict()/update(), an operand of a comparison, or JSON text with
    the name as a key. (SHM record fields read by subscript share some names: reads are not
    spellings of this protocol.)"""
    import ast

    names, values = _schema_words()
    words = names | values
    found = []

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            v = node.value
            return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        return None

    def flag(node, why: str) -> None:
        found.append(f"line {node.lineno}: {why} {ast.unparse(node)}")

    tree = ast.parse(source)
    reads = {  # what subscripts read (SHM record fields, numpy columns)
        id(leaf)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
        for leaf in ast.walk(node.slice)
    }
    for node in ast.walk(tree):
        if id(node) in reads:
            continue
        if isinstance(node, ast.Dict):
            for k in node.keys:
                if k is not None and text(k) in words:
                    flag(k, "dict key")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if text(node.slice) in words:
                flag(node, "stored key")
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "update") or (
                isinstance(func, ast.Name) and func.id == "dict"
            ):
                for kw in node.keywords:
                    if kw.arg in names:
                        flag(node, f"keyword {kw.arg} of")
        elif isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                for leaf in ast.walk(operand):
                    if id(leaf) not in reads and text(leaf) in words:
                        flag(leaf, "compared with")
        t = text(node)
        if t is not None and any(f'{n}":' in t for n in names if len(n) > 2):
            flag(node, "JSON text")
    return found


@pytest.mark.parametrize("path", SPELLERS)
def test_no_reader_or_writer_spells_a_name_of_the_protocol(path):
    assert spelled_by_hand((ROOT / path).read_text()) == []


def test_the_spelling_check_finds_hand_written_names():
    assert len(spelled_by_hand('d = {"ring_seq": 1}\nd["kind"] = 2\nif k == "seal": pass')) == 3
    assert spelled_by_hand("x.update(comm_rank=1)\nn = b'kind\":\"comm_init'") != []
    assert spelled_by_hand('r["comm_id"] + h["rank"]') == []  # SHM fields read: not ours
