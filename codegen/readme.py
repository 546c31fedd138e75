"""Keep the README's generated tables (protocols, configuration keys) equal to their sources."""

from __future__ import annotations

import re
from pathlib import Path

from codegen.errors import SchemaError

# marker name -> generated file whose content goes between the markers
SECTIONS = {
    "protocols": "generated/docs/protocols.md",
    "config": "generated/docs/config_v1.md",
}


def refresh(root: Path) -> None:
    path = root / "README.md"
    if not path.exists():
        return
    text = path.read_text()
    for name, rel in SECTIONS.items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SchemaError("README.md", name, f"missing the markers {begin} ... {end}")
        body = (root / rel).read_text().strip()
        replacement = f"{begin}\n{body}\n{end}"
        text = pattern.sub(lambda _m, r=replacement: r, text)
    path.write_text(text)
