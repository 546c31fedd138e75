"""codegen's line encoders (codegen/log_codec.py): the real schema gives an encoder for every
object of a line, in the schema's key order, literal text joined, and a property no encoder
can spell is an error naming it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from codegen.errors import SchemaError
from codegen.log_codec import codecs
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
