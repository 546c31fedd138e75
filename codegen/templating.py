"""jinja2 environment shared by every generator (templates under codegen/templates/)."""

from __future__ import annotations

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


def render(template: str, context: dict) -> str:
    return _ENV.get_template(template).render(**context)
