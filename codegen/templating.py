"""jinja2 environment shared by every generator (templates under codegen/templates/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    undefined=jinja2.StrictUndefined,  # a typo in a template is an error, not an empty string
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)


def _wrap_text(text: str, width: int = 84) -> list[str]:
    """A long string as pieces of at most about width characters, each ending after a space,
    for a generated Python literal that stays within the line length (adjacent literals join
    back into the string, every space kept)."""
    pieces, current = [], ""
    for word in re.findall(r"\S*\s*", text):  # a word with the spaces after it
        if current and len(_pyrepr(current + word)) > width:
            pieces.append(current)
            current = word
        else:
            current += word
    return [*pieces, current]


def _pyrepr(value: object) -> str:
    """A Python literal as the formatter writes it: strings in double quotes (a JSON string is a
    valid Python one), tuples and lists of them alike."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple):
        inner = ", ".join(_pyrepr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_pyrepr(v) for v in value) + "]"
    return repr(value)


def _pyrepr_dict(value: dict) -> str:
    return "{" + ", ".join(f"{_pyrepr(k)}: {_pyrepr(v)}" for k, v in value.items()) + "}"


_ENV.filters["pyrepr"] = _pyrepr
_ENV.filters["pyrepr_dict"] = _pyrepr_dict
_ENV.filters["wrap_text"] = _wrap_text


def render(template: str, context: dict) -> str:
    return _ENV.get_template(template).render(**context)
