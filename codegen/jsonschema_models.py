"""JSON Schema protocols: check the schema, then datamodel-code-generator -> msgspec models.

msgspec Structs are the decoding target because the Engine must read >= 1 M log records/s on
one core (bench/decode_models.py measures it); datamodel-code-generator turns the schema into
them so no model is written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.registry import Protocol

# Pinned generator (requirements/dev.txt) + these flags = byte-stable output.
DATAMODEL_FLAGS = [
    "--output-model-type",
    "msgspec.Struct",
    "--target-python-version",
    "3.10",
    "--disable-timestamp",
    "--use-standard-collections",
    "--use-union-operator",
    "--use-schema-description",
    "--use-field-description",
    "--use-title-as-name",
    "--collapse-root-models",
    "--enum-field-as-literal",
    "none",
    "--formatters",
    "black",
    "isort",
]


def load_schema(root: Path, source: str, expected_id: str) -> dict:
    """Parse a JSON Schema source and check it is a valid 2020-12 schema with the right $id."""
    try:
        doc = json.loads((root / source).read_text())
    except FileNotFoundError:
        raise SchemaError(source, "", "source file does not exist") from None
    except json.JSONDecodeError as e:
        raise SchemaError(
            source, f"line {e.lineno} column {e.colno}", f"not valid JSON: {e.msg}"
        ) from None
    import jsonschema  # development dependency: the generator runs in the dev venv

    try:
        jsonschema.Draft202012Validator.check_schema(doc)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        raise SchemaError(source, where, f"not a valid JSON Schema 2020-12: {e.message}") from None
    if doc.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
        raise SchemaError(source, "$schema", "must be https://json-schema.org/draft/2020-12/schema")
    if doc.get("$id") != expected_id:
        raise SchemaError(source, "$id", f"must be {expected_id}")
    return doc


def protocol_urn(p: Protocol) -> str:
    return f"urn:comminsight:protocol:{p.id}:v{p.version}"


def closed_models(doc: dict) -> dict[str, dict]:
    """extra-template-data making msgspec reject unknown fields where the schema does.

    msgspec ignores unknown fields by default; `additionalProperties: false` in the schema
    must still reject them, or a typo in a template or API body would pass silently.
    """
    names: dict[str, dict] = {}

    def visit(node: object, key: str | None) -> None:
        if isinstance(node, dict):
            if node.get("additionalProperties") is False and node.get("type") == "object":
                name = node.get("title") or key
                if name:
                    names[name] = {"base_class_kwargs": {"forbid_unknown_fields": True}}
            for k, v in node.items():
                child_key = None
                if k in ("$defs", "schemas") and isinstance(v, dict):
                    for def_name, body in v.items():
                        visit(body, def_name)
                    continue
                visit(v, child_key)
        elif isinstance(node, list):
            for v in node:
                visit(v, None)

    visit(doc, doc.get("title") if isinstance(doc, dict) else None)
    return dict(sorted(names.items()))


def generate_models(ctx: Context, source: str, input_type: str, rel_out: str, doc: dict) -> None:
    out = ctx.stage / rel_out
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = ctx.stage / "extra-template-data" / (Path(rel_out).stem + ".json")
    extra.parent.mkdir(parents=True, exist_ok=True)
    extra.write_text(json.dumps(closed_models(doc), indent=1))
    ctx.run_tool(
        source,
        [
            "datamodel_code_generator",
            "--input",
            source,
            "--input-file-type",
            input_type,
            "--output",
            str(out),
            "--extra-template-data",
            str(extra),
            *DATAMODEL_FLAGS,
        ],
    )
    ctx.written.append(rel_out)


def generate(p: Protocol, ctx: Context) -> None:
    doc = load_schema(ctx.root, p.source, protocol_urn(p))
    if p.role == "config":
        from codegen import config_gen

        config_gen.generate(p, doc, ctx)
        return
    if p.role == "paths":  # a layout, not records: no model
        from codegen import path_names

        path_names.generate(p, doc, ctx)
        return
    if p.role == "metrics":  # families of an exposition, not records: no model
        from codegen import metric_specs

        metric_specs.generate(p, doc, ctx)
        return
    generate_models(
        ctx, p.source, "jsonschema", f"generated/python/comminsight_gen/models/{p.stem}.py", doc
    )
    if p.role == "log":
        from codegen import log_codec, log_fields, log_subsets

        log_fields.generate(p, doc, ctx)
        log_subsets.generate(p, doc, ctx)
        log_codec.generate(p, doc, ctx)
    elif p.role == "names":
        from codegen import record_names

        record_names.generate(p, doc, ctx)
