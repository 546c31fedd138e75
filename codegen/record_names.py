"""Records written without a model (role `names`): every JSON property name (F) and string
constant (V: const values, enum members) of the schema as a module of plain string constants,
so a writer that builds its dicts by hand spells each key and value as the schema does.

The module is the standard library only, with no import at all: Inject's dependency-free wheel
ships it and imports it in the training process, where start-up cost matters.
"""

from __future__ import annotations

from codegen.context import Context
from codegen.errors import SchemaError
from codegen.log_fields import _const_values, _macro_part, _property_names
from codegen.registry import Protocol
from codegen.templating import render


def _names(items: set[str], source: str, what: str) -> list[dict]:
    by_name: dict[str, str] = {}
    for item in sorted(items):
        name = _macro_part(item)
        if not name or not name[0].isalpha():
            raise SchemaError(source, item, f"{what} '{item}' has no Python name")
        if name in by_name:
            raise SchemaError(
                source, item, f"'{item}' and '{by_name[name]}' map to the same name {name}"
            )
        by_name[name] = item
    return [{"name": n, "value": v} for n, v in by_name.items()]


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    names: set[str] = set()
    values: set[str] = set()
    _property_names(doc, names)
    _const_values(doc, values)
    schema = doc.get("properties", {}).get("schema", {}).get("const")
    if not isinstance(schema, str):
        raise SchemaError(
            p.source, "properties.schema.const", "role 'names' needs a string schema constant"
        )
    ctx.write(
        f"generated/python/comminsight_gen/{p.stem}_names.py",
        render(
            "record_names.py.j2",
            {
                "source": p.source,
                "id": p.id,
                "version": p.version,
                "schema_id": doc["$id"],
                "schema": schema,
                "fields": _names(names, p.source, "property"),
                "values": _names(values, p.source, "constant"),
            },
        ),
    )
