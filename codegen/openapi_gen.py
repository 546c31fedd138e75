"""OpenAPI protocols: bundle external JSON Schema refs, then server models and the client.

The step-summary and hang-report bodies are defined once, in their own JSON Schema protocols;
the API spec refers to those files. Generators (and /openapi.json readers) want one
self-contained document, so codegen bundles: every external file becomes
components/schemas entries and its refs are rewritten to point there.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path, PurePosixPath

import yaml

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.jsonschema_models import generate_models
from codegen.registry import Protocol

CLIENT_PACKAGE = "comminsight_client"


def _rewrite_refs(node: object, fn) -> object:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out[k] = fn(v) if k == "$ref" and isinstance(v, str) else _rewrite_refs(v, fn)
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, fn) for v in node]
    return node


def bundle(root: Path, source: str) -> dict:
    spec_path = root / source
    try:
        spec = yaml.safe_load(spec_path.read_text())
    except FileNotFoundError:
        raise SchemaError(source, "", "source file does not exist") from None
    except yaml.YAMLError as e:
        raise SchemaError(source, "", f"not valid YAML: {e}") from None
    if not isinstance(spec, dict) or not str(spec.get("openapi", "")).startswith("3.1"):
        raise SchemaError(source, "openapi", "must be an OpenAPI 3.1.x document")
    imported_schemas: dict[str, dict] = {}  # component name -> schema, from external files
    imported: dict[str, str] = {}  # external file (repo-relative) -> component name of its root

    def add(name: str, body: dict, origin: str) -> None:
        if name in imported_schemas and imported_schemas[name] != body:
            raise SchemaError(
                source,
                f"components.schemas.{name}",
                f"name clash between schemas bundled from {origin} and another file",
            )
        imported_schemas[name] = body

    def import_file(rel: str) -> str:
        if rel in imported:
            return imported[rel]
        try:
            doc = json.loads((root / rel).read_text())
        except FileNotFoundError:
            raise SchemaError(source, "$ref", f"referenced file {rel} does not exist") from None
        except json.JSONDecodeError as e:
            raise SchemaError(rel, f"line {e.lineno}", f"not valid JSON: {e.msg}") from None
        title = doc.get("title")
        if not isinstance(title, str) or not title:
            raise SchemaError(rel, "title", "a schema referenced by the API needs a title")
        imported[rel] = title

        def local(ref: str) -> str:
            if ref == "#":
                return f"#/components/schemas/{title}"
            if ref.startswith("#/$defs/"):
                return f"#/components/schemas/{ref[len('#/$defs/') :]}"
            raise SchemaError(rel, "$ref", f"unsupported reference {ref!r} in a bundled schema")

        doc = _rewrite_refs(doc, local)
        for def_name, body in (doc.pop("$defs", None) or {}).items():
            add(def_name, body, rel)
        for key in ("$schema", "$id"):
            doc.pop(key, None)
        add(title, doc, rel)
        return title

    spec_dir = PurePosixPath(source).parent

    def external(ref: str) -> str:
        if ref.startswith("#"):
            return ref
        file_part, _, fragment = ref.partition("#")
        rel = str(_normalize(spec_dir / file_part))
        title = import_file(rel)
        if not fragment:
            return f"#/components/schemas/{title}"
        if fragment.startswith("/$defs/"):
            return f"#/components/schemas/{fragment[len('/$defs/') :]}"
        raise SchemaError(source, "$ref", f"unsupported reference {ref!r}")

    bundled = _rewrite_refs(copy.deepcopy(spec), external)
    schemas = bundled.setdefault("components", {}).setdefault("schemas", {})
    for name, body in imported_schemas.items():
        if name in schemas and schemas[name] != body:
            raise SchemaError(
                source,
                f"components.schemas.{name}",
                "defined in the spec and in a bundled schema file, differently",
            )
        schemas[name] = body
    bundled["components"]["schemas"] = dict(sorted(schemas.items()))
    return bundled


def _normalize(path: PurePosixPath) -> PurePosixPath:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            parts.pop()
        elif part != ".":
            parts.append(part)
    return PurePosixPath(*parts)


def generate(p: Protocol, ctx: Context) -> None:
    bundled = bundle(ctx.root, p.source)
    rel_json = f"generated/python/comminsight_gen/openapi/{p.stem}.json"
    ctx.write(rel_json, json.dumps(bundled, indent=2, ensure_ascii=False) + "\n")
    generate_models(
        ctx,
        str(ctx.stage / rel_json),
        "openapi",
        f"generated/python/comminsight_gen/models/{p.stem}.py",
        bundled,
    )
    out = ctx.stage / "generated/python" / CLIENT_PACKAGE
    _client(ctx, p.source, ctx.stage / rel_json, out)
    ctx.collect(f"generated/python/{CLIENT_PACKAGE}")


def _client(ctx: Context, source: str, spec: Path, out: Path) -> None:
    config = ctx.root / "codegen" / "openapi-client.yaml"
    tool = Path(sys.executable).parent / "openapi-python-client"
    proc = subprocess.run(
        [
            str(tool),
            "generate",
            "--path",
            str(spec),
            "--meta",
            "none",
            "--output-path",
            str(out),
            "--config",
            str(config),
            "--overwrite",
            "--fail-on-warning",
        ],
        cwd=ctx.root,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        detail = (proc.stdout + proc.stderr).strip().splitlines()
        raise SchemaError(source, "", "openapi-python-client failed: " + "\n  ".join(detail[-20:]))
