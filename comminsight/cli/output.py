"""Where `comminsight` output goes and in which format.

The table format (for people) fits the terminal, or COLUMNS in a pipe or file (80 when it is
unset: rich's rule): a long cell folds onto more lines and a sentence (a hang's summary)
wraps, so a value is never cut or ended with '…', but it may span lines. Scripts that need
each value whole on one line take `--format plain` (tab-separated, a header line per table,
sentences unwrapped; for awk and cut) or `--format json` (exact values, one document). Errors
and hints go to stderr (`error`), whole, never between the lines of stdout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from rich.console import Console
from rich.progress import Progress, ProgressColumn
from rich.table import Table
from rich.text import Text

from comminsight.cli.options import FORMATS


def stdout_console() -> Console:
    """The terminal's width on a terminal; COLUMNS, else 80, in a pipe or a file."""
    return Console()


def stderr_console() -> Console:
    return Console(stderr=True)


def error(message: str, hint: str | None = None) -> None:
    """'comminsight: MESSAGE' (and '  hint: HINT') on stderr, whole: no markup, no wrapping."""
    err = stderr_console()
    err.print(f"comminsight: {message}", markup=False, highlight=False, soft_wrap=True)
    if hint:
        err.print(f"  hint: {hint}", markup=False, highlight=False, soft_wrap=True)


def terminal_progress(console: Console, *columns: str | ProgressColumn) -> Progress:
    """A rich Progress drawn on `console` only when it is a terminal, and erased when done:
    into a pipe or a file it draws nothing (no bars in a log, nothing between JSON lines).
    Print through the same console while it runs, so the bar stays below the output."""
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def new_table(title: str | None, columns: Iterable[str], right: Iterable[str] = ()) -> Table:
    """A table whose cells fold rather than end in '…' when the width is too small;
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

    @property
    def plain(self) -> bool:
        return self.format == "plain"

    def table(self, table: Table) -> None:
        if self.plain:
            # straight to the file: rich would expand the tabs into spaces
            self.text("\n".join(plain_lines(table)) + "\n\n")
            return
        # the title above the table, wrapped (at spaces, else folded) to the output's width:
        # as a table title rich would wrap it to the table's own width, often much narrower
        title, table.title = table.title, None
        if title:
            self.console.print(f"[bold]{title}[/bold]", highlight=False, overflow="fold")
        self.console.print(table)

    def line(self, text: str = "", markup: bool = True) -> None:
        """A sentence: wrapped at spaces (a longer word folded) to the output's width; in
        plain format whole on one line, without styles (also on a terminal)."""
        if self.plain:
            self.text((Text.from_markup(text).plain if markup else text) + "\n")
            return
        self.console.print(text, markup=markup, highlight=False, overflow="fold")

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
