"""Request parameters of the Agent Master API, checked against the protocol document itself.

The bundled OpenAPI document (generated from `protocols/agent-master-api`) is the one
definition of every path and query parameter: its name, whether it is required, its schema
(pattern, bounds, enum) and its default. `OperationParams` reads those for one operationId and
turns the raw strings of a request into typed values, or into `ParamError` naming each bad
parameter. The server therefore cannot drift from the protocol: a new bound in the YAML is
enforced after `make generate` with no code change.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT_URI = "urn:comminsight:agent-master-api:v1"
_INTEGER = re.compile(r"^-?[0-9]{1,20}$")
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")


@dataclass(frozen=True)
class Problem:
    """One bad parameter: where it is (path, query, header, body), its name, what is wrong."""

    location: str
    name: str
    reason: str


class ParamError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p.location} {p.name}: {p.reason}" for p in problems))


@cache
def openapi_document() -> dict:
    """The bundled document, as served at /openapi.json."""
    text = (
        resources.files("comminsight_gen.openapi")
        .joinpath("agent_master_api_v1.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


@cache
def _registry() -> Registry:
    resource = Resource.from_contents(openapi_document(), default_specification=DRAFT202012)
    return Registry().with_resource(DOCUMENT_URI, resource)


def _pointer(*parts: str) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass(frozen=True)
class Param:
    name: str
    location: str  # "path" or "query"
    required: bool
    json_type: str  # "integer", "number", "boolean" or "string": how to read the raw text
    default: Any
    validator: Draft202012Validator

    def convert(self, raw: str) -> Any:
        """The typed value of the raw text, or ValueError saying why it is not one."""
        if self.json_type == "integer":
            if not _INTEGER.match(raw):
                raise ValueError(f"must be an integer, got {raw[:64]!r}")
            return int(raw)
        if self.json_type == "number":
            if not _NUMBER.match(raw):
                raise ValueError(f"must be a number, got {raw[:64]!r}")
            return float(raw)
        if self.json_type == "boolean":
            if raw not in ("true", "false"):
                raise ValueError(f"must be true or false, got {raw[:64]!r}")
            return raw == "true"
        return raw


def _resolved(schema: dict) -> dict:
    """Follow $ref chains to the schema that says the type."""
    resolver = _registry().resolver(DOCUMENT_URI)
    while "$ref" in schema:
        schema = resolver.lookup(DOCUMENT_URI + schema["$ref"]).contents
    return schema


def _param(entry: dict, pointer: str) -> Param:
    if "$ref" in entry:
        pointer = entry["$ref"]
        entry = _resolved(entry)
    schema = _resolved(entry["schema"])
    json_type = schema.get("type", "string")
    validator = Draft202012Validator(
        {"$ref": f"{DOCUMENT_URI}#{pointer.lstrip('#')}/schema"}, registry=_registry()
    )
    return Param(
        name=entry["name"],
        location=entry["in"],
        required=bool(entry.get("required", False)),
        json_type=json_type if isinstance(json_type, str) else "string",
        default=schema.get("default"),
        validator=validator,
    )


class OperationParams:
    """The parameters of one operation (by operationId) and their parsing."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        self.path, self.method, operation = _find_operation(operation_id)
        base = "/" + _pointer("paths", self.path, self.method, "parameters")
        self.params = [
            _param(entry, f"{base}/{i}") for i, entry in enumerate(operation.get("parameters", []))
        ]
        self.secured = any("bearerAuth" in s for s in operation.get("security", []))

    def parse(self, path_values: Mapping[str, str], query: Mapping[str, str]) -> dict[str, Any]:
        """Typed values by name (defaults filled in, None for an absent optional parameter
        without one); ParamError names every parameter that is wrong."""
        values: dict[str, Any] = {}
        problems = []
        for p in self.params:
            source = path_values if p.location == "path" else query
            raws = (
                source.getall(p.name, [])
                if hasattr(source, "getall")
                else ([source[p.name]] if p.name in source else [])
            )
            if len(raws) > 1:
                problems.append(Problem(p.location, p.name, "given more than once"))
                continue
            if not raws:
                if p.required:
                    problems.append(Problem(p.location, p.name, "is required"))
                values[p.name] = p.default
                continue
            try:
                value = p.convert(raws[0])
            except ValueError as e:
                problems.append(Problem(p.location, p.name, str(e)))
                continue
            error = next(iter(p.validator.iter_errors(value)), None)
            if error is not None:
                problems.append(Problem(p.location, p.name, error.message[:1024]))
                continue
            values[p.name] = value
        if problems:
            raise ParamError(problems)
        return values


def _find_operation(operation_id: str) -> tuple[str, str, dict]:
    for path, item in openapi_document()["paths"].items():
        for method, operation in item.items():
            if isinstance(operation, dict) and operation.get("operationId") == operation_id:
                return path, method, operation
    raise KeyError(f"operationId {operation_id!r} is not in the agent-master-api document")
