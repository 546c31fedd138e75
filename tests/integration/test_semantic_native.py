"""The Semantic Engine's C core against Python references.

C may leave any line to Python, but a line it takes must give exactly what the Python
(msgspec) decoder gives: checked on real plugin logs, on the writer's layout path, and on
thousands of randomly corrupted lines. The reorder window and the shape numbering are checked
against plain Python versions of their rules.
"""

from __future__ import annotations

import bisect
import random

import msgspec
import numpy as np
import pytest
from engine_inputs import tp_pp_dp_logs
from log_files import segment_data

from comminsight.semantic import native
from comminsight.semantic.log_input import _DECODER, BAD_JSON, _float, _Header
from comminsight_gen.abi import shm_v1


# abi 7: lines that also carry user tags and kernel variants (ut/kv, user_tag/kernel_variant)
@pytest.fixture(scope="module", params=["compact", "inspector", "compact-v7", "inspector-v7"])
def segments(tmp_path_factory, request):
    form, _, v7 = request.param.partition("-")
    logs = tp_pp_dp_logs(tmp_path_factory.mktemp("native"), 4, 4, form, abi=7 if v7 else 5)
    data = [d for _, d in segment_data(logs)]
    assert data
    return data


def expected(line: bytes):
    """What the Python decoder makes of an op line, in the C row's terms; None when Python
    does not take it as a CommInsight op line (or cannot decode it)."""
    try:
        decoded = _DECODER.decode(line)
    except BAD_JSON:
        return None
    ci, h = decoded.ci, decoded.header
    if ci is not None and ci.kind in ("c", "p"):
        inspector = (decoded.header, decoded.metadata, decoded.coll_perf, decoded.p2p_perf)
        return None if any(x is not None for x in inspector) else expected_compact(ci)
    if ci is None or h is None:
        return None
    if ci.kind == "coll" and decoded.coll_perf is not None:
        p = decoded.coll_perf
        func, seq, size, exec_us, bw, timing, peer = (
            p.coll, p.coll_sn, p.coll_msg_size_bytes, p.coll_exec_time_us, p.coll_busbw_gbs,
            p.coll_timing_source, None,
        )  # fmt: skip
    elif ci.kind == "p2p" and decoded.p2p_perf is not None:
        p = decoded.p2p_perf
        func, seq, size, exec_us, bw, timing, peer = (
            p.p2p, p.p2p_sn, p.p2p_msg_size_bytes, p.p2p_exec_time_us, p.p2p_busbw_gbs,
            p.p2p_timing_source, p.p2p_peer,
        )  # fmt: skip
    else:
        return None
    none = native.NONE

    def opt(v):
        return none if v is None else v

    return {
        "kind": 0 if ci.kind == "coll" else 1,
        "header": h,
        "func": func,
        "seq": seq,
        "size": size,
        "peer": opt(peer),
        "exec_us": float(exec_us),
        "busbw": _float(bw),  # absent, null or a string ("nan"): 0
        "kernel_timing": timing == "kernel_gpu",
        "ring_seq": opt(ci.ring_seq),
        "host_start": opt(ci.host_start_mono_ns),
        "host_complete": opt(ci.host_complete_mono_ns),
        "gpu_start": opt(ci.gpu_start_globaltimer_ns),
        "gpu_stop": opt(ci.gpu_stop_globaltimer_ns),
        "datatype": _datatype(ci.datatype),
        "user_tag": _tag(ci.user_tag),
    }


INT64_MAX = (1 << 63) - 1


def _tag(tag) -> int:
    """A call's userProfilerTag as the engine keeps it: 0 for none, and for a value NCCL
    reserves (the top bit set) or no writer gives."""
    return tag if type(tag) is int and 0 < tag < 2**63 else 0


def _datatype(name: str | None) -> int:
    """The shm protocol's code of a datatype's name, 0 for none or an unknown one."""
    return int(shm_v1.DATATYPE_BY_LABEL.get(name, 0)) if name else 0


def expected_compact(ci) -> dict | None:
    """expected() of a compact op line (kinds c and p; none with a number outside int64 or a
    negative enqueue time): host and GPU times put back from their offsets, a sum outside
    int64 (or a negative one) left out; no execution time."""
    if None in (ci.c, ci.r, ci.n, ci.f, ci.s, ci.b) or (ci.h is not None and ci.h < 0):
        return None
    numbers = (ci.q, ci.r, ci.n, ci.nn, ci.s, ci.b, ci.pe, ci.h, ci.hc, ci.g0, ci.gd, ci.gr)
    if any(v is not None and not -(2**63) <= v <= INT64_MAX for v in numbers):
        return None
    none = native.NONE
    start = ci.h if ci.h is not None else 0
    complete = none
    if ci.hc is not None and 0 <= start + ci.hc <= INT64_MAX:
        complete = start + ci.hc
    gpu = ci.g0 is not None and ci.gd is not None and ci.g0 >= 0
    gpu = gpu and 0 <= ci.g0 + ci.gd <= INT64_MAX
    p2p = ci.kind == "p"
    return {
        "kind": int(p2p),
        "header": _Header(id=ci.c, rank=ci.r, n_ranks=ci.n, nnodes=ci.nn, comm_name=ci.cn),
        "func": ci.f,
        "seq": ci.s,
        "size": ci.b,
        "peer": ci.pe if p2p and ci.pe is not None else none,
        "exec_us": 0.0,
        "busbw": _float(ci.bw),
        "kernel_timing": ci.ts == "kernel_gpu",
        "ring_seq": none if ci.q is None else ci.q,
        "host_start": none if ci.h is None else ci.h,
        "host_complete": complete,
        "gpu_start": ci.g0 if gpu else none,
        "gpu_stop": ci.g0 + ci.gd if gpu else none,
        "datatype": _datatype(ci.d),
        "user_tag": _tag(ci.ut),
    }


def got(row, headers: list[bytes], funcs: list[bytes]):
    header = headers[row["header"]]
    return {
        "kind": int(row["kind"]),
        "header": msgspec.json.decode(header, type=_Header),
        "func": funcs[row["func"]].decode(),
        "seq": int(row["seq"]),
        "size": int(row["size"]),
        "peer": int(row["peer"]),
        "exec_us": float(row["exec_us"]),
        "busbw": float(row["busbw"]),
        "kernel_timing": bool(row["kernel_timing"]),
        "ring_seq": int(row["ring_seq"]),
        "host_start": int(row["host_start"]),
        "host_complete": int(row["host_complete"]),
        "gpu_start": int(row["gpu_start"]),
        "gpu_stop": int(row["gpu_stop"]),
        "datatype": int(row["datatype"]),
        "user_tag": int(row["user_tag"]),
    }


class Scanner:
    def __init__(self) -> None:
        self.headers = native.InternTable()
        self.funcs = native.InternTable()
        self.header_bytes: list[bytes] = []
        self.func_bytes: list[bytes] = []

    def scan(self, data: bytes, trusted: bool) -> list[dict]:
        """One dict per line: its value in each of ci_scan's columns."""
        lines, _ = native.scan(data, 0, self.headers, self.funcs, trusted)
        self.header_bytes += self.headers.new_entries()
        self.func_bytes += self.funcs.new_entries()
        columns = {k: v.tolist() for k, v in lines.items()}
        return [{k: v[i] for k, v in columns.items()} for i in range(len(lines))]


def check_line(scanner: Scanner, line: bytes, row, trusted: bool = False) -> bool:
    """Whether C took the line; when it did, its row must be Python's reading. In a trusted
    segment (seal checksum matched) the writer's layout path skips what it does not use, so
    a line made invalid there could be taken; the checksum rules such lines out."""
    want = expected(line)
    if row["status"] != native.LINE_OP:
        return False
    try:  # log_input sends lines whose interned header the schema refuses to Python
        msgspec.json.decode(scanner.header_bytes[row["header"]], type=_Header)
    except BAD_JSON:
        return False
    if want is None and trusted:
        return True
    assert want is not None, f"C took a line Python does not: {line!r}"
    have = got(row, scanner.header_bytes, scanner.func_bytes)
    assert have == want, line
    return True


@pytest.mark.parametrize("trusted", [False, True], ids=["walked", "writer-layout"])
def test_every_op_line_of_real_logs_reads_as_python_reads_it(segments, trusted):
    taken = ops = 0
    for data in segments:
        scanner = Scanner()
        rows = scanner.scan(data, trusted)
        lines = data.split(b"\n")[: len(rows)]
        for line, row in zip(lines, rows, strict=True):
            ops += expected(line + b"\n") is not None
            taken += check_line(scanner, line + b"\n", row)
    assert ops > 300
    assert taken == ops  # the writer's lines are all taken by C (no fallback needed)


def test_the_layout_path_and_the_walker_give_the_same_rows(segments):
    for data in segments:
        walked = Scanner().scan(data, trusted=False)
        laid = Scanner().scan(data, trusted=True)
        assert walked == laid


MUTATIONS = b'"\\{}[],:0123456789.-+eE tfnul\x00\x1f\x7f\x80\xff'


def mutate(rng: random.Random, line: bytes) -> bytes:
    b = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b))
        what = rng.random()
        if what < 0.4:
            b[i] = rng.choice(MUTATIONS)
        elif what < 0.7:
            del b[i]
        else:
            b.insert(i, rng.choice(MUTATIONS))
    return bytes(b).replace(b"\n", b" ")


@pytest.mark.parametrize("trusted", [False, True], ids=["walked", "writer-layout"])
def test_corrupted_lines_are_taken_only_when_python_reads_them_the_same(segments, trusted):
    """A corrupted line in a segment whose seal matched cannot happen (the checksum would not
    match); even so, wherever Python reads such a line the layout path reads it the same."""
    rng = random.Random(20261130)
    ops = [line for data in segments for line in data.split(b"\n") if expected(line) is not None]
    taken = refused = 0
    for _ in range(4000):
        line = mutate(rng, rng.choice(ops))
        scanner = Scanner()
        rows = scanner.scan(line + b"\n", trusted)
        assert len(rows) == 1
        if check_line(scanner, line + b"\n", rows[0], trusted):
            taken += 1
        else:
            refused += 1
    assert taken > 100 and refused > 1000  # both outcomes were exercised


def test_a_trusted_line_with_a_spaced_optional_key_reads_as_python_reads_it(segments):
    """Where the writer's layout is read (a sealed segment), an optional key written otherwise
    than the writer writes it (JSON allows a space around it) is read as Python reads it, or
    left to Python: never taken as absent (a fuzz case read user_tag 0 where Python read 4)."""
    checked = 0
    for key in (b"group_id", b"user_tag"):
        plain = b',"%s":' % key
        lines = [ln for d in segments for ln in d.split(b"\n") if plain in ln and expected(ln)]
        for spaced in (b', "%s":', b',"%s" :', b',"%s": '):
            for original in lines[:3]:
                line = original.replace(plain, spaced % key, 1) + b"\n"
                assert expected(line) is not None, "Python reads the spaced line"
                scanner = Scanner()
                (row,) = scanner.scan(line, trusted=True)
                check_line(scanner, line, row, trusted=True)
                checked += 1
    if not checked:
        pytest.skip("compact lines spell their keys short: no layout path reads these keys")


def test_the_writers_op_lines_are_read_by_the_generated_decoders(segments):
    """In a sealed segment both forms' op lines go through the decoders generated from the
    schema, not the walker: a raw control byte in a string the engine steps over (the
    metadata's host name; a compact line's algorithm) is invalid JSON, which the walker and
    Python refuse, and which the writer's layout path never looks at. (The seal's checksum
    keeps such a line out of a sealed segment; here it only shows which path read it.)"""
    read = 0
    for data in segments:
        for line in data.split(b"\n"):
            want = expected(line)
            if want is None:
                continue
            for key in (b'"hostname":"', b',"a":"'):
                if key in line:
                    break
            else:
                continue
            variant = line.replace(key, key + b"\x01", 1) + b"\n"
            assert expected(variant) is None  # not JSON
            (walked,) = Scanner().scan(variant, trusted=False)
            assert walked["status"] != native.LINE_OP
            scanner = Scanner()
            (laid,) = scanner.scan(variant, trusted=True)
            assert laid["status"] == native.LINE_OP, line
            assert got(laid, scanner.header_bytes, scanner.func_bytes) == want
            read += 1
            if read >= 200:
                return
    assert read, "no op line with a string the engine steps over"


@pytest.mark.parametrize(
    "name",
    [b"a}b", b"a},b", b'a},\\"b', b"a\\\\}", b'\\"},\\"metadata\\":{', b"}}"],
    ids=["brace", "brace-comma", "brace-comma-quote", "backslash-brace", "forged-key", "braces"],
)
def test_a_communicator_name_that_looks_like_json_structure_reads_as_python_reads_it(
    segments, name
):
    """The header (and a compact line's name) is stepped over in a sealed segment: braces,
    commas and escaped quotes inside the name end nothing."""
    for data in segments:
        for line in data.split(b"\n"):
            for key in (b'"comm_name":"', b'"cn":"'):
                at = line.find(key)
                if at < 0 or expected(line) is None:
                    continue
                start = at + len(key)
                end = line.index(b'"', start)
                variant = line[:start] + name + line[end:] + b"\n"
                assert expected(variant) is not None, variant
                scanner = Scanner()
                (row,) = scanner.scan(variant, trusted=True)
                assert check_line(scanner, variant, row, trusted=True)
                return
    pytest.fail("no op line names its communicator")


def test_lines_with_spaces_escapes_or_other_key_orders_fall_back_to_the_walker(segments):
    line = next(
        line
        for data in segments
        for line in data.split(b"\n")
        if (e := expected(line)) is not None and e["kind"] == 0
    )
    if b'"ci":{"kind":"c",' in line:  # the compact form
        variants = [
            line.replace(b'":', b'": '),
            line.replace(b'"ci":{"kind":"c",', b'"ci":{"x":1,"kind":"c",', 1),
            line.replace(b'"s":', b'"extra":[1,{"a":"\\"}"}],"s":', 1),
        ]
    else:
        variants = [
            line.replace(b'":', b'": '),  # whitespace: not the writer's layout, still JSON
            line.replace(b'"ci":{"kind":"coll",', b'"ci":{"schema_version":1,"kind":"coll",', 1),
            line.replace(b'"coll_sn":', b'"extra":[1,{"a":"\\"}"}],"coll_sn":', 1),
        ]
    for variant in variants:
        assert variant != line
        for trusted in (False, True):
            scanner = Scanner()
            rows = scanner.scan(variant + b"\n", trusted)
            assert check_line(scanner, variant + b"\n", rows[0])  # taken: Python's values


@pytest.mark.parametrize(
    "name",
    [b"ncclBfloat16", b"ncclInt64", b"ncclFloat128", b"", rb"ncclInt\u0036\u0034", b"x" * 4096],
    ids=["known", "a-count", "unknown", "empty", "escaped", "huge"],
)
def test_an_op_lines_datatype_reads_as_python_reads_it_whatever_it_names(segments, name):
    """A datatype the shm protocol has no code for (a newer NCCL's, none, a huge string)
    reads as 0, and one spelled with escapes as Python decodes it: C takes only the lines it
    reads as Python does, in both forms."""
    line = next(
        line
        for data in segments
        for line in data.split(b"\n")
        if (e := expected(line)) is not None and e["kind"] == 0
    )
    key = b'"d":"' if b'"ci":{"kind":"c",' in line else b'"datatype":"'
    at = line.index(key) + len(key)
    variant = line[:at] + name + line[line.index(b'"', at) :]
    want = expected(variant + b"\n")
    assert want is not None
    assert want["datatype"] == (
        int(shm_v1.Datatype.INT64) if b"\\u" in name else _datatype(name.decode())
    )
    for trusted in (False, True):
        scanner = Scanner()
        rows = scanner.scan(variant + b"\n", trusted)
        taken = rows[0]["status"] == native.LINE_OP
        # the walker takes every plain name; an escape is Python's to decode
        assert taken or trusted or b"\\u" in name
        if taken:
            assert check_line(scanner, variant + b"\n", rows[0])


class ReorderReference:
    """The reorder rule in plain Python: sorted by (issue, arrival); each op past the window
    releases the smallest."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.held: list[tuple[int, int]] = []

    def push(self, issue: int, arrival: int) -> list[int]:
        bisect.insort(self.held, (issue, arrival))
        if len(self.held) > self.window:
            return [self.held.pop(0)[1]]
        return []


def test_reorder_releases_as_the_rule_says_across_batches():
    rng = np.random.default_rng(7)
    window = 16
    ref = ReorderReference(window)
    issue = np.cumsum(rng.integers(0, 5, 3000)) + rng.integers(-40, 40, 3000)
    arrival = np.arange(3000)
    expected_out = [a for i, a in zip(issue.tolist(), arrival.tolist(), strict=True)
                    for a in ref.push(i, a)]  # fmt: skip
    got_out: list[int] = []
    held = np.empty(0, np.int64)
    for lo in range(0, 3000, 700):  # batches, the held ops carried over
        idx = np.concatenate((held, arrival[lo : lo + 700]))
        released, keep = native.reorder(issue[idx], arrival[idx], len(held), window)
        got_out += idx[released].tolist()
        held = idx[keep]
    assert got_out == expected_out
    assert sorted(held.tolist()) == sorted(a for _, a in ref.held)


def test_shapes_number_distinct_ops_in_order_of_first_appearance():
    rng = np.random.default_rng(3)
    n = 5000
    cols = [rng.integers(0, k, n) for k in (3, 4, 5, 2)]
    cols[2] = np.where(cols[2] == 0, native.NONE, cols[2])  # peers: some absent
    first, shape = native.shapes(*cols)
    numbers: dict[tuple, int] = {}
    for i, key in enumerate(zip(*(c.tolist() for c in cols), strict=True)):
        k = numbers.setdefault(key, len(numbers))
        assert shape[i] == k
        if k == len(numbers) - 1 and i == first[k]:
            pass
    assert len(first) == len(numbers)
    for k, i in enumerate(first.tolist()):
        assert numbers[tuple(int(c[i]) for c in cols)] == k


def test_window_medians_are_statistics_median():
    import statistics

    rng = np.random.default_rng(11)
    series = np.concatenate((rng.integers(0, 10**12, 300), rng.integers(0, 5, 100))).astype(float)
    series[::7] = series[3]  # ties
    ends = rng.integers(1, len(series), 500)
    starts = np.maximum(0, ends - rng.integers(1, 60, 500))
    got = native.window_medians(series, starts, ends)
    for s, e, m in zip(starts.tolist(), ends.tolist(), got.tolist(), strict=True):
        assert m == statistics.median(series[s:e].tolist())
    with pytest.raises(ValueError, match="4096"):
        native.window_medians(series, np.array([5]), np.array([5]))


def test_longest_runs_per_period_are_the_first_longest():
    rng = np.random.default_rng(5)
    cycle = rng.integers(0, 6, 7)
    codes = np.concatenate((rng.integers(0, 9, 20), np.tile(cycle, 30), rng.integers(0, 9, 15)))
    codes[100] = 99  # an extra op breaks one repetition
    periods = np.arange(1, 60)
    runs, starts = native.longest_runs(codes, periods)
    n = len(codes)
    for p, run, start in zip(periods.tolist(), runs.tolist(), starts.tolist(), strict=True):
        best, best_end, cur = 0, 0, 0
        for i in range(n):
            cur = cur + 1 if i + p < n and codes[i + p] == codes[i] else 0
            if cur > best:
                best, best_end = cur, i
        assert (run, start) == (best, best_end - best + 1), p
    assert runs[6] > runs[5]  # the true period repeats furthest


def test_window_medians_of_a_sliding_window_are_statistics_median():
    """History windows slide forward Step by Step (the kept-sorted path), filling up first."""
    import statistics

    rng = np.random.default_rng(12)
    series = rng.integers(0, 20, 600).astype(float)  # many ties
    ends = np.arange(1, 601)
    starts = np.maximum(0, ends - 50)
    keep = rng.random(600) < 0.7  # Steps that ask skip some
    got = native.window_medians(series, starts[keep], ends[keep])
    for s, e, m in zip(starts[keep].tolist(), ends[keep].tolist(), got.tolist(), strict=True):
        assert m == statistics.median(series[s:e].tolist())


@pytest.mark.parametrize(
    "tag",
    [b"0", b"7", b"9223372036854775807", b"9223372036854775808", b"18446744073709551615",
     b"18446744073709551616", b"-1", b"1.5", b"007", b"null"],
    ids=["zero", "small", "int64-max", "reserved-low", "reserved-max", "past-64-bits",
         "negative", "fraction", "leading-zeros", "null"],
)  # fmt: skip
def test_an_op_lines_user_tag_reads_as_python_reads_it_whatever_it_holds(segments, tag):
    """A call's tag (ABI v7) in either form: C takes the line only where it reads the tag as
    Python does (NCCL's reserved values, the top bit set, are no tag), else leaves it."""
    line = next(
        line
        for data in segments
        for line in data.split(b"\n")
        if b'"ut"' not in line
        and b'"user_tag"' not in line
        and (b',"gr":' in line or b',"group_id":' in line)
        and (e := expected(line)) is not None
        and e["kind"] == 0
    )
    compact = b',"gr":' in line
    at = line.index(b',"gr":' if compact else b',"group_id":')
    end = line.index(b",", at + 1)
    variant = line[:end] + (b',"ut":' if compact else b',"user_tag":') + tag + line[end:] + b"\n"
    want = expected(variant)
    for trusted in (False, True):
        scanner = Scanner()
        rows = scanner.scan(variant, trusted)
        taken = check_line(scanner, variant, rows[0], trusted)
        if tag in (b"0", b"7", b"9223372036854775808", b"18446744073709551615"):
            assert want is not None and taken, (trusted, variant)
            assert rows[0]["user_tag"] == (7 if tag == b"7" else 0)
