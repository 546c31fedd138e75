"""JSON protocols: fixtures valid against each schema decode through the generated models;
invalid fixtures are rejected by both, with errors that name the offending field."""

from __future__ import annotations

import importlib
import json
import re

import jsonschema
import msgspec
import pytest
import yaml

from contract_helpers import ROOT, protocols_of_kind, stem

FIXTURES = ROOT / "contract-tests" / "fixtures" / "json"
# Rules the schema states about field combinations (under `not` / dependentRequired) have no
# msgspec equivalent; the components enforce them in code. Everything else msgspec must reject.
SCHEMA_ONLY_KEYWORDS = {"not", "dependentRequired"}

# records only: a config file, the metrics families and a directory layout have no msgspec model
PROTOCOLS = [
    p
    for p in protocols_of_kind("json-schema")
    if p.get("role") not in ("config", "metrics", "paths")
]


def schema_and_model(p: dict):
    schema = json.loads((ROOT / p["source"]).read_text())
    module = importlib.import_module(f"comminsight_gen.models.{stem(p)}")
    return schema, getattr(module, schema["title"])


def documents(path):
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [line for line in text.splitlines() if line.strip()]
    return [text]


def cases(kind: str):
    out = []
    for p in PROTOCOLS:
        folder = FIXTURES / p["id"] / f"v{p['version']}" / kind
        files = sorted(f for f in folder.glob("*.json*"))
        assert files, f"no {kind} fixtures for {p['id']} v{p['version']}"
        out += [pytest.param(p, f, id=f"{p['id']}/{f.name}") for f in files]
    return out


def validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def all_errors(errors):
    for e in errors:
        yield e
        yield from all_errors(e.context or [])


@pytest.mark.parametrize(("p", "path"), cases("valid"))
def test_valid_fixture_validates_and_decodes(p, path):
    schema, model = schema_and_model(p)
    for doc in documents(path):
        errors = list(validator(schema).iter_errors(json.loads(doc)))
        assert not errors, [e.message for e in errors]
        msgspec.json.decode(doc, type=model)


@pytest.mark.parametrize(("p", "path"), cases("invalid"))
def test_invalid_fixture_is_rejected_naming_the_field(p, path):
    schema, model = schema_and_model(p)
    expected = yaml.safe_load((path.parent / "expected.yaml").read_text())[path.name]
    want_path, keyword = expected["error_path"], expected["keyword"]
    field = re.split(r"[.\[\]]", want_path.rstrip("]"))[-1] if want_path != "$" else None
    (doc,) = documents(path)

    errors = list(all_errors(validator(schema).iter_errors(json.loads(doc))))
    assert errors, "jsonschema accepted an invalid fixture"
    parent = want_path.rsplit(".", 1)[0] if "." in want_path else "$"
    assert any(
        e.validator == keyword
        and (
            e.json_path == want_path
            or (e.json_path == parent and field and f"'{field}'" in e.message)
        )
        for e in errors
    ), [(e.json_path, e.validator, e.message) for e in errors]

    if keyword in SCHEMA_ONLY_KEYWORDS:
        return
    with pytest.raises(msgspec.ValidationError) as e:
        msgspec.json.decode(doc, type=model)
    assert field is None or field in str(e.value), f"msgspec error does not name {field}: {e.value}"


def test_every_invalid_fixture_is_described():
    for p in PROTOCOLS:
        folder = FIXTURES / p["id"] / f"v{p['version']}" / "invalid"
        described = set(yaml.safe_load((folder / "expected.yaml").read_text()))
        present = {f.name for f in folder.glob("*.json*")}
        assert described == present, f"{folder}: expected.yaml and the files disagree"
