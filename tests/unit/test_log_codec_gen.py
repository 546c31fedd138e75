"""codegen's line encoders and decoders (codegen/log_codec.py): the real schema gives an
encoder for every object of a line, in the schema's key order, literal text joined, and a
property no encoder can spell is an error naming it; the op line's decoder reads the line's
keys in the schema's order, each object by its own decoder, and a key with none is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from codegen.errors import SchemaError
from codegen.log_codec import DECODE_DEFS, codecs, line_decoder
from codegen.registry import load

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = next(p for p in load(ROOT, Path("protocols/registry.yaml")) if p.id == "inspector-log")
DOC = json.loads((ROOT / PROTOCOL.source).read_text())


def test_each_object_of_a_line_gets_an_encoder_in_the_schema_s_order():
    found = {c["name"]: c for c in codecs(PROTOCOL, DOC)}
    assert list(found)[-1] == "InspectorLogRecord"  # the line itself, after what it holds
    assert {c["kind"] for c in found.values()} == {
        None,
        "coll",
        "p2p",
        "c",
        "p",
        "comm_init",
        "comm_finalize",
        "gap",
        "hang_evidence",
        "segment_start",
        "seal",
    }  # every kind of line
    line = found["InspectorLogRecord"]
    assert line["key_order"] == ("header", "metadata", "coll_perf", "p2p_perf", "ci")
    alternatives = [m.name for m in line["members"] if m.key == "ci"]
    assert alternatives[:2] == ["ci_coll", "ci_p2p"] and len(alternatives) == 10  # every kind
    assert "event_trace_sn" not in found["CollPerf"]["key_order"]  # NVIDIA's, never written
    header = {m.key: m for m in found["Header"]["members"]}
    assert (header["id"].hex_prefix, header["id"].hex_digits) == ("0x", 1)
    coll = found["CiCollCompact"]
    assert coll["key_order"] == tuple(DOC["$defs"]["CiCollCompact"]["properties"])
    # the kind tag and the first key in one literal, each value by its type
    assert coll["statements"][:4] == [
        'CI_JSON_LIT("{\\"kind\\":\\"c\\",\\"q\\":");',
        "CI_JSON_I64(v->q);",
        'CI_JSON_LIT(",\\"c\\":");',
        'CI_JSON_HEX(v->c, "", 16);',
    ]
    # written signed (a -1 a writer was handed reads as -1, which a reader refuses), unsigned
    # only where the schema lets the value pass INT64_MAX (a user tag)
    types = {m.key: m.c_type for m in coll["members"]}
    assert types["r"] == types["b"] == types["h"] == "int64_t" and types["ut"] == "uint64_t"
    shapes = {m.key: m.shape for m in coll["members"]}
    assert shapes["hs"] == "int" and shapes["h"] == "uint" and shapes["st"] == "hex"
    assert shapes["gc"] == "flag" and shapes["bw"] == "number" and shapes["f"] == "text"


def _props(doc: dict, name: str = "CiP2pCompact") -> dict:
    return doc["$defs"][name]["properties"]


def _required_object_without_encoder(doc: dict) -> None:
    _props(doc)["o"] = {"type": "object", "properties": {}}
    doc["$defs"]["CiP2pCompact"]["required"].append("o")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: _props(d).update(x={"type": "null"}), "no encoder for a property of type"),
        (lambda d: _props(d).update(x={"type": "array"}), "an array of objects an encoder"),
        (lambda d: _props(d).update({"if": {"type": "integer"}}), "is no C member name"),
        (lambda d: _props(d).update(z={"const": "yes"}), "an optional const is a flag"),
        (_required_object_without_encoder, "a required object no encoder writes"),
        (
            lambda d: d["$defs"]["CollPerf"]["properties"]["coll_busbw_gbs"]["anyOf"].append(
                {"const": "inf"}
            ),
            "a number or one const text alone",
        ),
        (lambda d: _props(d).update(y={"$ref": "#/$defs/Nowhere"}), "unresolvable $ref"),
    ],
    ids=[
        "null",
        "array",
        "c-keyword",
        "optional-const",
        "bad-ref",
        "object-without-encoder",
        "two-texts-for-a-number",
    ],
)
def test_a_property_no_encoder_can_spell_is_refused(edit, said):
    doc = copy.deepcopy(DOC)
    edit(doc)
    with pytest.raises(SchemaError) as caught:
        codecs(PROTOCOL, doc)
    assert said in caught.value.message and caught.value.path == PROTOCOL.source


PREFIX = "ci_inspector_log_v1"


def test_the_line_decoder_reads_the_line_s_keys_in_the_schema_s_order():
    d = line_decoder(codecs(PROTOCOL, DOC, PREFIX), PREFIX, PROTOCOL.source)
    keys = [m.key for m in d["single"]]
    assert keys == ["header", "metadata", "coll_perf", "p2p_perf"] == list(DOC["properties"])[:4]
    # the ci oneOf: every alternative that has a decoder, each told apart by a macro, the
    # compact kinds (the default form) tried first
    alternatives = [ref["$ref"].rsplit("/", 1)[1] for ref in DOC["properties"]["ci"]["oneOf"]]
    took = [target for _, _, target in d["took"]]
    assert set(took) == {a for a in alternatives if a in DECODE_DEFS}
    assert took == ["CiCollCompact", "CiP2pCompact", "CiColl", "CiP2p"]
    assert [value for _, value, _ in d["took"]] == [1, 2, 3, 4]  # 0 is "no ci"
    body = "\n".join(d["take"])
    found = [body.index(f'CI_TRY(",\\"{key}\\":")') for key in [*keys, "ci"]]
    assert found == sorted(found)  # each key tried after the one before it
    assert 'CI_TRY("\\"header\\":")' in body  # a first key has no comma before it
    assert "CI_SKIP_OBJECT();" in body  # an object the reader wants nothing of


def test_a_line_key_no_decoder_reads_is_refused():
    doc = copy.deepcopy(DOC)
    doc["properties"]["clock"] = {"$ref": "#/$defs/ClockAnchor"}  # encoded, never decoded
    with pytest.raises(SchemaError) as caught:
        line_decoder(codecs(PROTOCOL, doc, PREFIX), PREFIX, PROTOCOL.source)
    assert "['clock'] have no decoder" in caught.value.message
