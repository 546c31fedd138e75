"""protocols/registry.yaml: the list of every protocol, checked before anything is generated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from codegen.errors import SchemaError

KINDS = ("c-abi", "json-schema", "openapi", "protobuf")
STATUSES = ("live", "draft", "deprecated")
# json-schema protocols with extra, role-specific outputs; names: records a writer builds by
# hand (Inject) get a standard-library module of their property names and constants; paths: a
# directory layout (objects are directories) gets its entry names for C and Python, no model;
# metrics: the Prometheus families a component serves (objects are families) get their specs
# for Python and a table for the README, no model
ROLES = ("config", "log", "metrics", "names", "paths")
_KEYS = {
    "id",
    "version",
    "kind",
    "role",
    "status",
    "producer",
    "consumers",
    "description",
    "source",
    "outputs",
}


@dataclass(frozen=True)
class Protocol:
    id: str
    version: int
    kind: str
    role: str | None
    status: str
    producer: str
    consumers: tuple[str, ...]
    description: str
    source: str  # repo-relative path
    outputs: tuple[str, ...]  # repo-relative files, or directories ending in "/"

    @property
    def label(self) -> str:
        return f"{self.id} v{self.version}"

    @property
    def stem(self) -> str:
        """Python/C file stem: shm v1 -> shm_v1."""
        return f"{self.id.replace('-', '_')}_v{self.version}"


def load(root: Path, path: Path) -> list[Protocol]:
    """Load and check the registry; sources must exist. Raises SchemaError."""
    rel = path.relative_to(root) if path.is_absolute() else path
    try:
        doc = yaml.safe_load((root / rel).read_text())
    except FileNotFoundError:
        raise SchemaError(rel, "", "registry file does not exist") from None
    except yaml.YAMLError as e:
        raise SchemaError(rel, "", f"not valid YAML: {e}") from None
    if not isinstance(doc, dict) or doc.get("registry_version") != 1:
        raise SchemaError(rel, "registry_version", "must be 1")
    entries = doc.get("protocols")
    if not isinstance(entries, list) or not entries:
        raise SchemaError(rel, "protocols", "must be a non-empty list")
    result: list[Protocol] = []
    seen: set[tuple[str, int]] = set()
    for i, e in enumerate(entries):
        where = f"protocols[{i}]"
        if not isinstance(e, dict):
            raise SchemaError(rel, where, "must be a mapping")
        unknown = sorted(set(e) - _KEYS)
        if unknown:
            raise SchemaError(rel, where, f"unknown key(s) {unknown}")
        for key in (
            "id",
            "version",
            "kind",
            "status",
            "source",
            "outputs",
            "description",
            "producer",
            "consumers",
        ):
            if key not in e:
                raise SchemaError(rel, where, f"missing required key '{key}'")
        where = f"protocols[{e['id']} v{e['version']}]"
        if not isinstance(e["version"], int) or e["version"] < 1:
            raise SchemaError(rel, f"{where}.version", "must be an integer >= 1")
        if e["kind"] not in KINDS:
            raise SchemaError(
                rel,
                f"{where}.kind",
                f"unknown protocol kind '{e['kind']}'; known: {', '.join(KINDS)}",
            )
        if e["status"] not in STATUSES:
            raise SchemaError(
                rel,
                f"{where}.status",
                f"unknown status '{e['status']}'; known: {', '.join(STATUSES)}",
            )
        role = e.get("role")
        if role is not None and (role not in ROLES or e["kind"] != "json-schema"):
            raise SchemaError(
                rel, f"{where}.role", f"unknown role '{role}' (json-schema protocols only: {ROLES})"
            )
        if (e["id"], e["version"]) in seen:
            raise SchemaError(rel, where, "duplicate protocol id and version")
        seen.add((e["id"], e["version"]))
        if not (root / e["source"]).is_file():
            raise SchemaError(rel, f"{where}.source", f"missing source file {e['source']}")
        if f"/v{e['version']}/" not in e["source"]:
            raise SchemaError(
                rel, f"{where}.source", f"source must live in a v{e['version']}/ folder"
            )
        outputs = e["outputs"]
        if not isinstance(outputs, list) or not all(
            isinstance(o, str) and o.startswith("generated/") for o in outputs
        ):
            raise SchemaError(rel, f"{where}.outputs", "must be a list of paths under generated/")
        result.append(
            Protocol(
                id=e["id"],
                version=e["version"],
                kind=e["kind"],
                role=role,
                status=e["status"],
                producer=str(e["producer"]),
                consumers=tuple(e["consumers"]),
                description=str(e["description"]),
                source=e["source"],
                outputs=tuple(outputs),
            )
        )
    return result
