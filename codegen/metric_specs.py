"""Prometheus metrics (role `metrics`): the families the Agent serves, each with its type, HELP
text and labels, as a Python module the Agent builds its families from and a Markdown table
the README carries, so a metric's name, type, help and labels exist once: in the schema.

The schema is an object whose properties are the families, by the name a query uses (a
counter's ends in `_total`); each is an object with `type` (a const: counter, gauge or
histogram) and `labels` (an object whose properties are the family's own labels, after the
label groups of `$defs` it takes through `allOf`, in order). `x-levels` on a label or a group
reference names the metrics levels (COMMINSIGHT_AGENT_METRICS_LEVEL) it is present at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.registry import Protocol
from codegen.templating import render

TYPES = ("counter", "gauge", "histogram")
LEVELS = ("job", "rank")
_NAME = re.compile(r"^comminsight_[a-z][a-z0-9_]*[a-z0-9]$")
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what the exposition itself adds: a histogram's bucket bound and a family's derived samples
_RESERVED_LABELS = {"le", "quantile"}
_DERIVED = ("_bucket", "_sum", "_count", "_created")


@dataclass(frozen=True)
class Label:
    name: str
    levels: tuple[str, ...]
    description: str
    group: str  # the $defs group it comes from, "" for a family's own


@dataclass(frozen=True)
class Metric:
    exposed: str  # what a query names: comminsight_ops_total
    family: str  # the family's name in OpenMetrics (a counter's without _total)
    type: str
    help: str
    labels: tuple[Label, ...]

    @property
    def constant(self) -> str:
        return self.exposed.removeprefix("comminsight_").upper()


def _levels(source: str, where: str, node: dict) -> tuple[str, ...]:
    levels = node.get("x-levels", list(LEVELS))
    if not isinstance(levels, list) or not levels or not set(levels) <= set(LEVELS):
        raise SchemaError(source, f"{where}.x-levels", f"must be a non-empty list of {LEVELS}")
    return tuple(lv for lv in LEVELS if lv in levels)


def _own_labels(source: str, where: str, node: dict, levels: tuple[str, ...], group: str):
    props = node.get("properties", {})
    if not isinstance(props, dict):
        raise SchemaError(source, f"{where}.properties", "must be an object of labels")
    out = []
    for name, spec in props.items():
        at = f"{where}.properties.{name}"
        if not _LABEL.match(name) or name.startswith("__") or name in _RESERVED_LABELS:
            raise SchemaError(source, at, "not a label name Prometheus allows for a family")
        if not isinstance(spec, dict) or spec.get("type") != "string":
            raise SchemaError(source, at, "a label is a string")
        if not spec.get("description"):
            raise SchemaError(source, at, "a label needs a description")
        mine = _levels(source, at, spec)
        out.append(
            Label(name, tuple(lv for lv in levels if lv in mine), spec["description"], group)
        )
    return out


def _labels(source: str, where: str, node: object, defs: dict) -> tuple[Label, ...]:
    if not isinstance(node, dict) or node.get("type") != "object":
        raise SchemaError(source, where, "labels must be an object")
    if node.get("additionalProperties") is not False:
        raise SchemaError(source, f"{where}.additionalProperties", "must be false")
    out: list[Label] = []
    for i, ref in enumerate(node.get("allOf", [])):
        at = f"{where}.allOf[{i}]"
        target = ref.get("$ref", "") if isinstance(ref, dict) else ""
        group = target.removeprefix("#/$defs/")
        if not target.startswith("#/$defs/") or group not in defs:
            raise SchemaError(source, at, "must be a $ref to a label group of $defs")
        out += _own_labels(source, f"$defs.{group}", defs[group], _levels(source, at, ref), group)
    out += _own_labels(source, where, node, LEVELS, "")
    names = [label.name for label in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SchemaError(source, where, f"label(s) {twice} more than once")
    return tuple(out)


def metrics(p: Protocol, doc: dict) -> list[Metric]:
    """The families of the schema, checked, in the schema's order."""
    if doc.get("additionalProperties") is not False:
        raise SchemaError(p.source, "additionalProperties", "must be false")
    defs = doc.get("$defs", {})
    out = []
    for exposed, spec in doc.get("properties", {}).items():
        where = f"properties.{exposed}"
        if not _NAME.match(exposed) or exposed.endswith(_DERIVED):
            raise SchemaError(
                p.source,
                where,
                "not a family name (comminsight_..., no suffix the exposition derives)",
            )
        if not isinstance(spec, dict) or not spec.get("description"):
            raise SchemaError(p.source, where, "a family needs a description (its HELP)")
        props = spec.get("properties", {})
        kind = props.get("type", {}).get("const") if isinstance(props, dict) else None
        if kind not in TYPES:
            raise SchemaError(p.source, f"{where}.properties.type", f"a const, one of {TYPES}")
        if (kind == "counter") != exposed.endswith("_total"):
            raise SchemaError(
                p.source, where, "a counter's name, and only a counter's, ends in _total"
            )
        labels = _labels(p.source, f"{where}.properties.labels", props.get("labels"), defs)
        family = exposed.removesuffix("_total") if kind == "counter" else exposed
        out.append(Metric(exposed, family, kind, spec["description"], labels))
    if not out:
        raise SchemaError(p.source, "properties", "no family")
    return out


def _groups(p: Protocol, doc: dict) -> dict[str, list[Label]]:
    """Each label group of $defs, its labels in order."""
    return {
        g: _own_labels(p.source, f"$defs.{g}", spec, LEVELS, g)
        for g, spec in doc.get("$defs", {}).items()
    }


def _label_cell(m: Metric) -> str:
    """Labels for the README: a group by its name, a label present at level rank alone
    marked so."""
    parts, seen = [], set()
    for label in m.labels:
        where = "" if label.levels == LEVELS else f" ({', '.join(label.levels)})"
        if label.group:
            if label.group in seen:
                continue
            seen.add(label.group)
            parts.append(f"*{label.group}*{where}")
        else:
            parts.append(f"`{label.name}`{where}")
    return ", ".join(parts)


def _own_label_rows(families: list[Metric]) -> list[tuple[str, list[str], str]]:
    """(label, the families it is theirs in, its description) of every label no group holds,
    one row per distinct description."""
    rows: dict[tuple[str, str], list[str]] = {}
    for m in families:
        for label in m.labels:
            if not label.group:
                rows.setdefault((label.name, label.description), []).append(m.exposed)
    return [(name, where, text) for (name, text), where in rows.items()]


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    families = metrics(p, doc)
    groups = _groups(p, doc)
    view = {
        "source": p.source,
        "title": doc.get("title", p.id),
        "version": p.version,
        "metrics": families,
        "groups": groups,
        "group_names": {g: tuple(label.name for label in ls) for g, ls in groups.items()},
        "cells": {m.exposed: _label_cell(m) for m in families},
        "own_labels": _own_label_rows(families),
        "levels": LEVELS,
    }
    ctx.write(f"generated/python/comminsight_gen/{p.stem}.py", render("metrics.py.j2", view))
    ctx.write(f"generated/docs/{p.stem}.md", render("metrics.md.j2", view))
