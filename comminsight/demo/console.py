"""Where the demo prints: a terminal as it is; a pipe or a file at a bounded width, so that
`make demo > log` is a log a person can read (tables fit, no line runs for pages) whatever
width the `comminsight` commands would take there."""

from __future__ import annotations

import argparse
import io
import os
import textwrap

from rich.console import Console

from comminsight.cli import client as cli_client
from comminsight.cli import hangs as cli_hangs
from comminsight.cli import incidents as cli_incidents
from comminsight.cli import node as cli_node
from comminsight.cli import ops as cli_ops
from comminsight.cli import steps as cli_steps

# when COLUMNS does not say: a log's width, wide enough for the Agent's tables of processes
# and communicators to stay readable
DEFAULT_WIDTH = 120
MIN_WIDTH, MAX_WIDTH = 40, 200  # a log stays readable in an editor however COLUMNS is set

COMMANDS = {
    "status": cli_node.status,
    "comms": cli_ops.comms_cmd,
    "hangs": cli_hangs.hangs_cmd,
    "incidents": cli_incidents.incidents_cmd,
    "steps": cli_steps.steps_cmd,
}


def piped_width(environ: os._Environ | dict = os.environ) -> int:
    """COLUMNS when it is a number, else DEFAULT_WIDTH; kept within 40..200."""
    try:
        width = int(environ.get("COLUMNS", ""))
    except ValueError:
        width = DEFAULT_WIDTH
    return min(max(width, MIN_WIDTH), MAX_WIDTH)


def demo_console(console: Console) -> Console:
    """`console` on a terminal; into a pipe or a file, a console on the same file at
    piped_width() (the caller's may be as wide as a table wants)."""
    if console.is_terminal:
        return console
    return Console(file=console.file, width=piped_width(), highlight=False)


def fold(line: str, width: int) -> list[str]:
    """`line` as lines of at most `width` characters, continued under its own indent plus
    four spaces; nothing dropped."""
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    more = indent + "    "
    if len(more) >= width // 2:
        more = "    "
    return textwrap.wrap(
        line,
        width,
        subsequent_indent=more,
        break_long_words=True,
        break_on_hyphens=False,
        replace_whitespace=False,
        drop_whitespace=True,
    ) or [line[:width]]


def show(console: Console, command: str, url: str, **options) -> int:
    """What `comminsight <command> --url URL` prints (its exit status). Into a pipe or a file
    its output is folded to the console's width: the commands print a hang's summary whole on
    one line, for a terminal to wrap."""
    flags = "".join(
        f" --{k}" if v is True else f" --{k} {v}"
        for k, v in options.items()
        if k in ("tree", "id") and v not in (None, False)
    )
    console.print(f"[dim]$ comminsight {command}{flags} --url {url}[/dim]")
    args = argparse.Namespace(url=url, json=False, format="table", token=None, **options)
    if console.is_terminal:
        return cli_client.run(COMMANDS[command], args, console)
    capture = Console(file=io.StringIO(), width=console.width, color_system=None)
    status = cli_client.run(COMMANDS[command], args, capture)
    for line in capture.file.getvalue().splitlines():
        for part in fold(line.rstrip(), console.width):
            console.out(part, highlight=False)
    return status
