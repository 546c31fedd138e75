"""Keep the README's generated tables (protocols, configuration keys) equal to their sources."""

from __future__ import annotations

import re
from pathlib import Path

from codegen.errors import SchemaError

# marker name -> generated file whose content goes between the markers
SECTIONS = {
    "protocols": "generated/docs/protocols.md",
    "config": "generated/docs/config_v1.md",
    "metrics": "generated/docs/metrics_v1.md",
}


def refreshed(root: Path, generated_root: Path | None = None) -> tuple[str, str] | None:
    """(README.md as it is, as it should be) with the tables read from generated_root's
    generated/ (default: root's); None when there is no README.md."""
    path = root / "README.md"
    if not path.exists():
        return None
    text = new = path.read_text()
    for name, rel in SECTIONS.items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pattern.search(new):
            raise SchemaError("README.md", name, f"missing the markers {begin} ... {end}")
        body = ((generated_root or root) / rel).read_text().strip()
        replacement = f"{begin}\n{body}\n{end}"
        new = pattern.sub(lambda _m, r=replacement: r, new)
    return text, new


def refresh(root: Path) -> bool:
    """Rewrite the README's tables from generated/; only when they changed (True then)."""
    texts = refreshed(root)
    if texts is None or texts[0] == texts[1]:
        return False
    (root / "README.md").write_text(texts[1])
    return True
