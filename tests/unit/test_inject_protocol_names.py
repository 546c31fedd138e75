"""Inject's hand-built records spell their keys and values through the names generated from
their schemas (inject-metadata v1, python-stack v1): the names cover every property and
constant of each schema, so a schema change reaches the writer; the modules import nothing
(Inject's dependency-free wheel ships them); the writers spell no key by hand."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from comminsight.inject import metadata, stack_dump
from comminsight_gen import inject_metadata_v1_names, python_stack_v1_names

ROOT = Path(__file__).resolve().parents[2]
CASES = [
    ("inject-metadata", inject_metadata_v1_names, metadata),
    ("python-stack", python_stack_v1_names, stack_dump),
]
WRITERS = ["metadata", "stack_dump", "stack_signal", "step_markers", "torch_adapter"]


def _schema(protocol: str) -> dict:
    return json.loads((ROOT / f"protocols/{protocol}/v1/{protocol}.schema.json").read_text())


def _walk(node: object, properties: set[str], constants: set[str]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            properties.update(node["properties"])
        if isinstance(node.get("const"), str):
            constants.add(node["const"])
        constants.update(v for v in node.get("enum", []) if isinstance(v, str))
        for value in node.values():
            _walk(value, properties, constants)
    elif isinstance(node, list):
        for value in node:
            _walk(value, properties, constants)


def _table(cls: type) -> dict[str, str]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_")}


@pytest.mark.parametrize(("protocol", "names", "writer"), CASES)
def test_names_cover_every_property_and_constant(protocol, names, writer):
    doc = _schema(protocol)
    properties: set[str] = set()
    constants: set[str] = set()
    _walk(doc, properties, constants)
    fields, values = _table(names.F), _table(names.V)
    assert set(fields.values()) == properties
    assert set(values.values()) == constants
    for table in (fields, values):  # the Python name is the value, upper case
        for name, value in table.items():
            assert name == re.sub(r"[^A-Za-z0-9]+", "_", value).strip("_").upper()
    assert names.SCHEMA == doc["properties"]["schema"]["const"] == writer.SCHEMA
    assert names.SCHEMA_ID == doc["$id"]
    assert names.PROTOCOL_VERSION == 1
    assert writer.names is names  # the writer's spelling is the generated one


@pytest.mark.parametrize(("protocol", "names", "writer"), CASES)
def test_names_modules_import_nothing(protocol, names, writer):
    tree = ast.parse(Path(names.__file__).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


@pytest.mark.parametrize("module", WRITERS)
def test_writers_spell_no_record_key_by_hand(module):
    """No string literal as a dict key, an item key or a keyword of a `.write(...)` call that
    is a property of either schema: those go through F (and `.write`'s kind through V)."""
    properties: set[str] = set()
    constants: set[str] = set()
    for protocol, _, _ in CASES:
        _walk(_schema(protocol), properties, constants)
    tree = ast.parse((ROOT / f"comminsight/inject/{module}.py").read_text())
    found = []
    for node in ast.walk(tree):
        keys: list[ast.AST] = []
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "write":
            found += [kw.arg for kw in node.keywords if kw.arg in properties]
            keys = node.args[:1]
        found += [
            k.value
            for k in keys
            if isinstance(k, ast.Constant) and k.value in properties | constants
        ]
    assert found == []


def test_inject_wheel_ships_the_names():
    """build-inject copies the generated modules beside the package (as config_file_v1), or
    the wheel's writers fall back to comminsight_gen, which the training environment lacks."""
    makefile = (ROOT / "Makefile").read_text()
    for names in (inject_metadata_v1_names, python_stack_v1_names):
        rel = Path(names.__file__).resolve().relative_to(ROOT).as_posix()
        assert rel in makefile, f"Makefile's build-inject does not ship {rel}"


def test_startup_copies_of_the_config_names_match_the_generated_ones():
    """startup.py runs at every interpreter start and imports nothing of its own: its copies of
    the disable key and the true spellings must stay those of config_file_v1."""
    from comminsight.inject import settings, startup
    from comminsight_gen import config_file_v1

    assert startup.DISABLE == config_file_v1.K.INJECT_DISABLE == settings.DISABLE
    assert frozenset(startup._TRUE) == config_file_v1.TRUE
    tree = ast.parse(Path(startup.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [alias.name for n in top for alias in n.names] == ["os", "sys"]


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"kind": {"enum": ["a"]}}, "needs a string schema constant"),
        (
            {"schema": {"const": "x.v1"}, "a-b": {"type": "string"}, "a_b": {"type": "string"}},
            "map to the same name A_B",
        ),
    ],
)
def test_codegen_refuses_a_schema_it_cannot_name(tmp_path, properties, message):
    from codegen import record_names
    from codegen.context import Context
    from codegen.errors import SchemaError
    from codegen.registry import Protocol

    p = Protocol(
        "x", 1, "json-schema", "names", "live", "inject", ("agent",), "t", "x/v1/x.json", ()
    )
    doc = {"$id": "urn:comminsight:protocol:x:v1", "properties": properties}
    with pytest.raises(SchemaError, match=message):
        record_names.generate(p, doc, Context(root=tmp_path, stage=tmp_path))
