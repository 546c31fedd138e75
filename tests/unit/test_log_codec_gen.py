"""codegen's op-line encoders (codegen/log_codec.py): the real schema's compact kinds give C
encoders whose runs of required values print at once, and a property no encoder can spell is
an error naming it."""

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


def test_the_compact_kinds_get_an_encoder_each_in_the_schema_s_order():
    found = {c["kind"]: c for c in codecs(PROTOCOL, DOC)}
    assert set(found) == {"c", "p"}
    coll = found["c"]
    assert coll["key_order"] == tuple(DOC["$defs"]["CiCollCompact"]["properties"])
    # the kind tag and the first key in one literal, each value by its type
    assert coll["statements"][:4] == [
        'CI_JSON_LIT("{\\"kind\\":\\"c\\",\\"q\\":");',
        "CI_JSON_U64(v->q);",
        'CI_JSON_LIT(",\\"c\\":");',
        "CI_JSON_HEX(v->c, 16);",
    ]
    shapes = {m.key: m.shape for m in coll["members"]}
    assert shapes["hs"] == "int" and shapes["h"] == "uint" and shapes["st"] == "hex"
    assert shapes["gc"] == "flag" and shapes["bw"] == "number" and shapes["f"] == "text"


def _props(doc: dict, name: str = "CiP2pCompact") -> dict:
    return doc["$defs"][name]["properties"]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: _props(d).update(x={"type": "array"}), "no encoder for a property of type"),
        (lambda d: _props(d).update({"if": {"type": "integer"}}), "is no C member name"),
        (lambda d: _props(d).update(z={"const": "yes"}), "an optional const is a flag"),
        (lambda d: _props(d).pop("kind"), "the first property must be the kind tag"),
        (lambda d: _props(d).update(y={"$ref": "#/$defs/Nowhere"}), "unresolvable $ref"),
    ],
    ids=["array", "c-keyword", "optional-const", "no-kind", "bad-ref"],
)
def test_a_property_no_encoder_can_spell_is_refused(edit, said):
    doc = copy.deepcopy(DOC)
    edit(doc)
    with pytest.raises(SchemaError) as caught:
        codecs(PROTOCOL, doc)
    assert said in caught.value.message and caught.value.path == PROTOCOL.source
