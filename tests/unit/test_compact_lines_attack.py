"""Compact op lines (inspector-log kinds c and p) that a hostile or damaged log can hold,
against the engine's two readers: the C scanner may take a line only when Python reads it
the same way, and no line, whatever its numbers, stops the reading of a log (a line Python
cannot read is named and left out, as any other)."""

from __future__ import annotations

import msgspec
import pytest

from comminsight.semantic import native
from comminsight.semantic.log_input import _DECODER, BAD_JSON, GpuLog, _Header

LINE = (
    b'{"ci":{"kind":"c","q":2,"c":"7445270f57fef2f7","cn":"default_pg:0","r":0,"n":8,"nn":1,'
    b'"f":"AllReduce","s":0,"i":0,"e":1,"b":4,"d":"ncclFloat32","a":"RING","pt":"LL","ch":1,'
    b'"w":16,"gr":1,"t":1760,"ts":"kernel_gpu","bw":0.000000,"h":20495051473068,"hs":13556,'
    b'"hc":19268149,"g0":1796581466981604005,"gd":15712975,"cc":1}}'
)
INT64_MAX = (1 << 63) - 1


def with_value(line: bytes, key: str, value: str) -> bytes:
    k = f'"{key}":'.encode()
    i = line.index(k) + len(k)
    j = i
    while line[j : j + 1] not in (b",", b"}"):
        j += 1
    return line[:i] + value.encode() + line[j:]


@pytest.mark.parametrize(
    "extra",
    ['"header":{"id":1}', '"header":{}', '"header":{"id":"0x1","rank":"x","n_ranks":2}'],
)
@pytest.mark.parametrize("trusted", [False, True], ids=["walked", "writer-layout"])
def test_a_compact_line_python_refuses_for_its_header_is_not_taken_by_c(extra, trusted):
    """A compact line carries no header; one that does, with a header the schema refuses,
    is refused by Python (msgspec decodes the whole line): C must leave it to Python too
    rather than read the compact keys and skip the header unchecked."""
    line = LINE[:-1] + b"," + extra.encode() + b"}\n"
    with pytest.raises(BAD_JSON):
        _DECODER.decode(line)
    headers, funcs = native.InternTable(), native.InternTable()
    rows, _ = native.scan(line, 0, headers, funcs, trusted)
    if rows["status"][0] == native.LINE_OP:  # log_input refuses a header the schema does not
        header = headers.new_entries()[int(rows["header"][0])]
        with pytest.raises(BAD_JSON):
            msgspec.json.decode(header, type=_Header)


@pytest.mark.parametrize(
    "values",
    [
        {"h": str(INT64_MAX + 1)},
        {"h": str((1 << 64) - 1)},
        # h + hc is an int64, hc alone is not: the host span (no GPU timing) is hc
        {"ts": '"collective_cpu"', "h": "-1", "hc": str(INT64_MAX + 1)},
        {"q": str(INT64_MAX + 1)},
        {"s": str(INT64_MAX + 1)},
        {"b": str((1 << 64) - 1)},
        {"gr": str(INT64_MAX + 1)},
    ],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items() if k != "ts"),
)
def test_a_compact_line_with_a_number_past_int64_does_not_stop_the_reading(tmp_path, values):
    line = LINE
    for key, value in values.items():
        line = with_value(line, key, value)
    good = with_value(LINE, "q", "3")
    segment = tmp_path / "ci-vm-1-2-000000.jsonl.partial"
    segment.write_bytes(line + b"\n" + good + b"\n")
    log = GpuLog("ci-vm-1-2", [segment])
    ops = list(log.ops())  # no OverflowError
    assert 3 in [op.ring_seq for op in ops]  # the lines after it are read
