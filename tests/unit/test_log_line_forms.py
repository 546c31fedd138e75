"""The two forms of an op line (COMMINSIGHT_PROFILER_LOG_FORMAT: compact, inspector) carry the
same facts: made from the same SHM slots by the Agent's line maker (what a dead process's
recovery writes, key for key the Profiler's writer), each form reads back into the same slot
(log_records: the Steps recovered from logs are the ring's) and into the same engine op
(log_input: C scanner and Python), and the compact form is the smaller.

Slots are drawn at random over every field the lines carry, edge values included: each
function and timing source, roots and peers absent or present, no completion, no GPU span,
a clock read out of order (host stop before the enqueue, a GPU span that ends before it
starts), a GPU start tick of 0, graph capture, forced completion,
names with quotes and non-ASCII characters; the function and peer of a real op (a collective
is no Send, a Send always has its peer)."""

from __future__ import annotations

import json
import random

import msgspec
import numpy as np
import pytest

from comminsight.agent.receivers.inspector_lines import ProcessLines
from comminsight.agent.steps.log_records import _row
from comminsight.semantic import native
from comminsight.semantic.log_input import _DECODER, _op
from comminsight.semantic.positions import LogPosition
from comminsight.shm_reader import COMM, HEADER, SLOT
from comminsight_gen.abi import shm_v1
from comminsight_gen.inspector_log_v1_codec import BY_KIND, KEY_ORDER, O, in_order
from comminsight_gen.models.inspector_log_v1 import InspectorLogRecord

FULL = msgspec.json.Decoder(InspectorLogRecord)
NAMES = [b"", b"default_pg:0", b'pp "stage" 1', "tp:\u00e9\u4e2d".encode(), b"x" * 127]
P2P_FUNCS = [shm_v1.Func.SEND, shm_v1.Func.RECV]
COLL_FUNCS = [f for f in shm_v1.Func if f not in (shm_v1.Func.UNKNOWN, *P2P_FUNCS)]


def process(rng: random.Random, comms: int = 4) -> ProcessLines:
    header = np.zeros(1, HEADER)[0]
    header["hostname"], header["pid"] = b"node-a", 4242
    header["start_mono_ns"], header["start_real_ns"] = 1000, 1795985227154207755
    header["plugin_version"] = 0x000100
    table = np.zeros(comms, COMM)
    for i, c in enumerate(table):
        c["state"] = shm_v1.CommState.ACTIVE
        c["comm_id"] = rng.getrandbits(64)
        c["rank"], c["nranks"], c["nnodes"] = i % 3, 4 + i, 1 + i % 2
        c["name"] = NAMES[i % len(NAMES)]
    return ProcessLines(header, table)


def random_slot(rng: random.Random, lines: ProcessLines, seq: int):
    s = np.zeros(1, SLOT)[0]
    s["seq"] = seq
    coll = rng.random() < 0.7
    s["kind"] = shm_v1.RecordKind.COLL if coll else shm_v1.RecordKind.P2P
    s["comm_index"] = rng.randrange(len(lines.comms))
    e = lines.comms[int(s["comm_index"])]
    s["comm_id"], s["rank"], s["nranks"] = e["comm_id"], e["rank"], e["nranks"]
    s["func"] = rng.choice(COLL_FUNCS if coll else P2P_FUNCS)
    s["peer"] = rng.randrange(int(e["nranks"]))  # a send's or receive's peer, or a root
    if coll and rng.random() < 0.5:
        s["peer"] = shm_v1.NO_RANK
    s["op_seq"], s["comm_op_index"] = rng.randrange(1 << 40), rng.randrange(1 << 40)
    s["count"], s["bytes"] = rng.randrange(1 << 34), rng.randrange(1 << 36)
    s["datatype"] = rng.choice(list(shm_v1.Datatype))
    s["algo"], s["proto"] = rng.choice(list(shm_v1.Algo)), rng.choice(list(shm_v1.Proto))
    s["n_channels"], s["n_warps"] = rng.randrange(256), rng.randrange(256)
    s["stream"] = rng.choice([0, rng.getrandbits(48)])
    s["tid"] = rng.choice([0, rng.randrange(1 << 22)])
    s["group_id"] = rng.choice([0, rng.randrange(1, 1 << 20)])
    start = rng.randrange(1 << 50)
    s["host_start_mono_ns"] = start
    s["host_stop_mono_ns"] = start + rng.randrange(-1000, 100_000)  # out of order at times
    s["complete_mono_ns"] = rng.choice([0, start + rng.randrange(1 << 30)])
    s["timing_source"] = rng.choice(list(shm_v1.TimingSource))
    if s["timing_source"] == shm_v1.TimingSource.KERNEL_GPU:  # GPU clock reads out of order too
        s["gpu_start_ticks"] = rng.choice([0, rng.randrange(1 << 20, 1 << 62)])
        s["gpu_end_ticks"] = max(0, int(s["gpu_start_ticks"]) + rng.randrange(-1000, 1 << 32))
    s["kernel_ch_count"] = rng.randrange(256)
    s["flags"] = rng.choice([0, 1, 2, 3]) & (
        shm_v1.SlotFlags.GRAPH_CAPTURED | shm_v1.SlotFlags.FORCED_COMPLETE
    )
    # ABI v7: a call's tag (up to 2^64 - 1), a kernel variant's name (escapes, non-ASCII,
    # the field's full 31 bytes), a symmetric kernel
    s["user_tag"] = rng.choice([0, rng.randrange(1, 1 << 20), (1 << 64) - 1])
    variant = rng.choice(["", "AllReduce_Sum_bf16_RING_LL128", 'q"uo\\te', "ñame", "x" * 31])
    s["kernel_variant"] = variant.encode() if coll else b""
    if coll and rng.random() < 0.2:
        s["flags"] |= shm_v1.SlotFlags.SYM_COLL
    return s


def both_forms(rng: random.Random, count: int):
    lines = process(rng)
    out = []
    for seq in range(1, count + 1):
        slot = random_slot(rng, lines, seq)
        lines.compact = True
        compact = lines.record(slot, seq, 0)
        lines.compact = False
        inspector = lines.record(slot, seq, 0)
        out.append((compact, inspector))
    return out


@pytest.fixture(scope="module")
def pairs():
    return both_forms(random.Random(20261206), 3000)


def test_both_forms_are_valid_lines_of_their_kind(pairs):
    for compact, inspector in pairs:
        c, i = FULL.decode(compact), FULL.decode(inspector)
        assert type(c.ci).__struct_config__.tag in ("c", "p")
        assert type(i.ci).__struct_config__.tag in ("coll", "p2p")
        assert c.header is msgspec.UNSET and c.coll_perf is msgspec.UNSET  # ci alone


def test_both_forms_have_the_schema_s_keys_in_its_order(pairs):
    """The Agent's lines follow the key order generated from the schema, object by object,
    the order the Profiler's generated C encoders write (integration/test_compact_line_keys)."""
    objects = {
        "header": O.HEADER,
        "metadata": O.METADATA,
        "coll_perf": O.COLL_PERF,
        "p2p_perf": O.P2P_PERF,
    }

    def check(name: str, pairs: list, line: bytes) -> None:
        order, known, required = KEY_ORDER[name]
        keys = [k for k, _ in pairs]
        assert set(keys) <= known and required <= set(keys), (name, line)
        assert keys == [k for k in order if k in keys], (name, line)
        for key, value in pairs:
            if key == "ci":
                check(BY_KIND[dict(value)["kind"]], value, line)
            elif key in objects:
                check(objects[key], value, line)

    for compact, inspector in pairs:
        for line in (compact, inspector):
            check(O.INSPECTOR_LOG_RECORD, json.loads(line, object_pairs_hook=list), line)


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"kind": "x"}, "no encoder for an op line of kind 'x'"),
        ({"kind": "p", "rt": 1}, "CiP2pCompact has no key ['rt']"),
        ({"kind": "c", "q": 1}, "CiCollCompact needs key ['a', 'b'"),
    ],
    ids=["unknown-kind", "a-key-of-the-other-kind", "required-missing"],
)
def test_values_the_schema_does_not_have_are_refused(values, said):
    with pytest.raises(ValueError) as caught:
        in_order(values)
    assert said in str(caught.value)


def test_both_forms_read_back_into_the_same_slot(pairs):
    for compact, inspector in pairs:
        assert _row(FULL.decode(compact)) == _row(FULL.decode(inspector)), compact


def test_both_forms_give_the_engine_the_same_op_but_for_the_execution_time(pairs):
    """The compact form has no execution time: where the op has no GPU span the engine
    takes the host span (as it does for a ring slot), where the Inspector form's exec time
    stood; everything else is the same."""
    position = LogPosition("s", 0, 0, 0, None, 0)
    for compact, inspector in pairs:
        c = _op(_DECODER.decode(compact), (0, 0), position)
        i = _op(_DECODER.decode(inspector), (0, 0), position)
        assert c is not None and i is not None
        ci = FULL.decode(compact).ci
        gpu_timed = ci.ts.value == "kernel_gpu" and ci.g0 and ci.gd >= 0
        if not gpu_timed:
            for name in ("duration_ns", "start_ns", "start_mono_ns", "start_real_ns"):
                setattr(c, name, getattr(i, name))
        c.position = i.position = None
        assert c == i, compact


def test_the_c_scanner_takes_every_compact_line_as_python_reads_it(pairs):
    """Every line but those with non-ASCII bytes (a name: C leaves UTF-8 to Python)."""
    data = b"".join(compact for compact, _ in pairs)
    headers, funcs = native.InternTable(), native.InternTable()
    rows, rest = native.scan(data, 0, headers, funcs, False)
    assert rest == len(data)
    ascii_only = [compact.isascii() for compact, _ in pairs]
    assert (rows["status"] == native.LINE_OP).tolist() == ascii_only
    assert 0 < sum(ascii_only) < len(pairs)
    header_bytes, func_bytes = headers.new_entries(), funcs.new_entries()
    for i, (compact, _) in enumerate(pairs):
        row = {name: rows[name][i] for name in native.LINE_COLUMNS}
        if row["status"] != native.LINE_OP:
            continue
        op = _op(_DECODER.decode(compact), (0, 0), LogPosition("s", 0, 0, 0, None, 0))
        h = msgspec.json.decode(header_bytes[row["header"]])
        assert (h["id"], h["rank"], h["n_ranks"]) == (op.comm_id, op.comm_rank, op.comm_nranks)
        assert h.get("comm_name") == op.comm_name
        assert func_bytes[row["func"]].decode() == op.func
        assert (int(row["seq"]), int(row["size"])) == (op.seq, op.size_bytes)
        assert int(row["ring_seq"]) == op.ring_seq
        assert int(row["host_start"]) == op.issue_ns
        assert float(row["busbw"]) == op.busbw_gbs
        assert int(row["datatype"]) == op.datatype


def test_the_compact_form_is_the_smaller(pairs):
    compact = sum(len(c) for c, _ in pairs) / len(pairs)
    inspector = sum(len(i) for _, i in pairs) / len(pairs)
    assert compact < 0.6 * inspector  # random slots: large numbers, long names
