"""Where `comminsight` output goes and in which format: tables that never cut a value.

On a terminal, tables fit its width and fold a long cell onto more lines (never '…'). Into a
pipe or a file there is no width to fit, so tables take the width their cells need and a
value is never cut: `comminsight comms | grep` finds the whole name. Three formats:
`table` (rich tables), `plain` (tab-separated, a header line per table, for awk and cut) and
`json` (the API's bodies, exact numbers).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

FORMATS = ("table", "plain", "json")
# a width no table reaches: rich lays a table out at most this wide and crops lines there
UNBOUNDED_WIDTH = 1_000_000


def stdout_console() -> Console:
    """The terminal's width on a terminal; unbounded (COLUMNS ignored) into a pipe or file."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(width=UNBOUNDED_WIDTH)


def stderr_console() -> Console:
    return Console(stderr=True)


def new_table(title: str | None, columns: Iterable[str], right: Iterable[str] = ()) -> Table:
    """A table whose cells fold rather than end in '…' when a terminal is too narrow;
    the columns named in `right` (numbers) are right-aligned."""
    right = set(right)
    table = Table(title=title)
    for name in columns:
        table.add_column(name, overflow="fold", justify="right" if name in right else "left")
    return table


def cell_text(cell: object) -> str:
    """A cell's text without markup, on one line (a tab or newline would break plain rows)."""
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = Text.from_markup(cell).plain
    else:
        text = str(cell)
    return " ".join(text.split("\t")).replace("\n", " ")


def plain_lines(table: Table) -> list[str]:
    """'# title', the header, then one tab-separated line per row."""
    lines = [f"# {cell_text(table.title)}"] if table.title else []
    columns = [list(c.cells) for c in table.columns]
    lines.append("\t".join(cell_text(c.header) for c in table.columns))
    for row in zip(*columns, strict=True):
        lines.append("\t".join(cell_text(cell) for cell in row))
    return lines


class Output:
    """One command's output: its console and the format the user chose."""

    def __init__(self, console: Console, fmt: str = "table") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}")
        self.console = console
        self.format = fmt

    @property
    def json(self) -> bool:
        return self.format == "json"

    def table(self, table: Table) -> None:
        if self.format == "plain":
            # straight to the file: rich would expand the tabs into spaces
            self.text("\n".join(plain_lines(table)) + "\n\n")
            return
        # the title on a line of its own: as a table title rich would wrap it to the table's
        # width, cutting a long title (a URL, a timestamp) over several lines
        title, table.title = table.title, None
        if title:
            self.line(f"[bold]{title}[/bold]")
        self.console.print(table)

    def line(self, text: str = "", markup: bool = True) -> None:
        """A line printed whole: soft-wrapped by a terminal, never broken by rich."""
        self.console.print(text, markup=markup, highlight=False, soft_wrap=True)

    def text(self, text: str) -> None:
        """Verbatim text (no markup), e.g. the Prometheus exposition."""
        self.console.file.write(text)
        self.console.file.flush()

    def json_value(self, value) -> None:
        if self.console.is_terminal:
            self.console.print_json(json.dumps(value))
        else:  # no highlighting to strip, no width to wrap at: exactly what json.dumps says
            self.console.file.write(json.dumps(value, indent=2) + "\n")
            self.console.file.flush()
