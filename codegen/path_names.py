"""A directory layout (role `paths`): every entry name of the schema, whose object properties
are a directory's entries, as a C header (`CI_<ID>_V<N>_<NAME>`) and as a module of plain
string constants with no import at all (Inject's dependency-free wheel ships it), so that
neither language spells a path of the layout by hand."""

from __future__ import annotations

from codegen.context import Context
from codegen.log_fields import _macro_part, _property_names
from codegen.record_names import _names
from codegen.registry import Protocol
from codegen.templating import render


def generate(p: Protocol, doc: dict, ctx: Context) -> None:
    entries: set[str] = set()
    _property_names(doc, entries)
    names = _names(entries, p.source, "entry")
    prefix = f"CI_{_macro_part(p.id)}_V{p.version}"
    view = {
        "source": p.source,
        "id": p.id,
        "version": p.version,
        "title": doc.get("title", p.id),
        "guard": f"COMMINSIGHT_{_macro_part(p.id)}_V{p.version}_H",
        "prefix": prefix,
        "names": names,
        "header": f"{p.stem}.h",
    }
    ctx.write(f"generated/c/include/comminsight/{p.stem}.h", render("path_names.h.j2", view))
    ctx.write(
        f"generated/python/comminsight_gen/{p.stem}_names.py", render("path_names.py.j2", view)
    )
