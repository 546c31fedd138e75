"""codegen's reading of the metrics protocol (codegen/metric_specs.py): the real schema gives
every family with its labels in order, and a schema that would serve a page Prometheus
refuses or reads otherwise is an error naming the family."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from codegen.errors import SchemaError
from codegen.metric_specs import metrics
from codegen.registry import load

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = next(p for p in load(ROOT, Path("protocols/registry.yaml")) if p.id == "metrics")
DOC = json.loads((ROOT / PROTOCOL.source).read_text())


def test_the_real_schema_gives_each_family_its_labels_per_level():
    by_name = {m.exposed: m for m in metrics(PROTOCOL, DOC)}
    ops = by_name["comminsight_ops_total"]
    assert ops.family == "comminsight_ops" and ops.type == "counter"
    job = [label.name for label in ops.labels if "job" in label.levels]
    rank = [label.name for label in ops.labels if "rank" in label.levels]
    assert job == [
        "job_id",
        "step_id",
        "array_index",
        "host",
        "node",
        "namespace",
        "comm",
        "op_type",
    ]
    assert rank[:6] == job[:6] and rank[6:9] == ["pod", "container", "rank"]
    assert rank[-2:] == ["comm", "op_type"] and len(rank) == 15
    latency = by_name["comminsight_op_latency_seconds"]
    assert [label.levels for label in latency.labels if label.name == "comm"] == [("rank",)]


def _family(doc: dict, name: str) -> dict:
    return doc["properties"][name]


def _rename(doc: dict, old: str, new: str) -> None:
    doc["properties"] = {(new if k == old else k): v for k, v in doc["properties"].items()}


def _edit_counter_without_total(doc):
    _rename(doc, "comminsight_ops_total", "comminsight_ops")


def _edit_gauge_with_total(doc):
    _family(doc, "comminsight_agent_producers")["properties"]["type"]["const"] = "counter"


def _edit_unknown_type(doc):
    _family(doc, "comminsight_agent_producers")["properties"]["type"]["const"] = "summary"


def _edit_derived_suffix(doc):
    _rename(doc, "comminsight_agent_producers", "comminsight_agent_producers_count")


def _edit_reserved_label(doc):
    labels = _family(doc, "comminsight_hangs_open")["properties"]["labels"]["properties"]
    labels["le"] = {"type": "string", "description": "x"}


def _edit_label_twice(doc):
    labels = _family(doc, "comminsight_ops_total")["properties"]["labels"]["properties"]
    labels["host"] = {"type": "string", "description": "again"}


def _edit_unknown_group(doc):
    labels = _family(doc, "comminsight_ops_total")["properties"]["labels"]
    labels["allOf"][0]["$ref"] = "#/$defs/no_such_group"


def _edit_unknown_level(doc):
    labels = _family(doc, "comminsight_ops_total")["properties"]["labels"]
    labels["allOf"][1]["x-levels"] = ["node"]


def _edit_no_help(doc):
    del _family(doc, "comminsight_agent_producers")["description"]


def _edit_open_labels(doc):
    del _family(doc, "comminsight_hangs_open")["properties"]["labels"]["additionalProperties"]


@pytest.mark.parametrize(
    ("edit", "where", "said"),
    [
        (_edit_counter_without_total, "comminsight_ops", "ends in _total"),
        (_edit_gauge_with_total, "comminsight_agent_producers", "ends in _total"),
        (_edit_unknown_type, "comminsight_agent_producers.properties.type", "one of"),
        (_edit_derived_suffix, "comminsight_agent_producers_count", "not a family name"),
        (_edit_reserved_label, "labels.properties.le", "not a label name"),
        (_edit_label_twice, "comminsight_ops_total.properties.labels", "more than once"),
        (_edit_unknown_group, "allOf[0]", "label group"),
        (_edit_unknown_level, "allOf[1].x-levels", "non-empty list"),
        (_edit_no_help, "comminsight_agent_producers", "HELP"),
        (_edit_open_labels, "additionalProperties", "must be false"),
    ],
    ids=lambda v: v.__name__.removeprefix("_edit_") if callable(v) else None,
)
def test_a_family_prometheus_would_read_otherwise_is_refused(edit, where, said):
    doc = copy.deepcopy(DOC)
    edit(doc)
    with pytest.raises(SchemaError) as caught:
        metrics(PROTOCOL, doc)
    assert where in caught.value.where and said in caught.value.message, str(caught.value)
    assert caught.value.path == PROTOCOL.source


def test_the_generated_specs_carry_the_schema_s_help_text_whole():
    """The generated module splits a long HELP into adjacent literals: joined back, each is
    the schema's description, every space kept."""
    from comminsight_gen import metrics_v1

    for name, spec in DOC["properties"].items():
        assert metrics_v1.METRICS[name].help == spec["description"], name


@pytest.mark.parametrize(
    "text", ["", " leading", "trailing ", "two  spaces " * 20, "x" * 200, "a\tb " * 50]
)
def test_wrapped_text_joins_back_to_itself(text):
    from codegen.templating import _wrap_text

    pieces = _wrap_text(text, width=30)
    assert "".join(pieces) == text
    assert all(len(repr(p)) <= 32 or " " not in p.strip() for p in pieces)
