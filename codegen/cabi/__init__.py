"""C-ABI schema generator: C header, Python layout module (cffi cdef + numpy), layout dump."""

from __future__ import annotations

from codegen.cabi import model, render
from codegen.context import Context
from codegen.registry import Protocol


def generate(p: Protocol, ctx: Context) -> None:
    schema = model.load(ctx.root / p.source)
    if schema.protocol != p.id or schema.version != p.version:
        from codegen.errors import SchemaError

        raise SchemaError(
            p.source,
            "protocol",
            f"says {schema.protocol} v{schema.version} but the registry lists it as {p.label}",
        )
    header = f"{p.stem}.h"
    ctx.write(f"generated/c/include/comminsight/{header}", render.header(schema, p.source))
    ctx.write(
        f"generated/c/contract/{p.stem}_layout.c", render.layout_dump(schema, p.source, header)
    )
    ctx.write(
        f"generated/python/comminsight_gen/abi/{p.stem}.py",
        render.python_module(schema, p.source, header),
    )
