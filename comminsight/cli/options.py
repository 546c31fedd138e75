"""The options many `comminsight` commands share: the output format (every command), and how
an agent is reached (the agent commands). argparse only, like the parser that uses them.

`nested`: the options of a sub-command (`hangs resolve`) default to argparse.SUPPRESS, so that
one given before the sub-command (`hangs --format json resolve ID`) is not reset by the
sub-command's own default; their help states the default in words.
"""

from __future__ import annotations

import argparse

FORMATS = ("table", "plain", "json")


def keep_given(nested: bool):
    """The default to declare: the value itself, or SUPPRESS on a sub-command."""
    return (lambda value: argparse.SUPPRESS) if nested else (lambda value: value)


def add_format_options(p: argparse.ArgumentParser, nested: bool = False) -> None:
    default = keep_given(nested)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=default("table"),
        help="table: for people, fitted to the terminal or COLUMNS; plain: tab-separated "
        "lines, a header per table, every value whole; json: one JSON document on stdout "
        "(default: table)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="same as --format json (default: off)",
    )


def add_agent_options(p: argparse.ArgumentParser, nested: bool = False) -> None:
    """--url, --token, --format/--json: what every command that asks an agent takes."""
    default = keep_given(nested)
    p.add_argument(
        "--url",
        default=default(None),
        metavar="URL",
        help="the agent's API base URL, e.g. http://node7:19102 (default: the local agent, on "
        "its socket <home>/agent.sock when it answers there, else where "
        "COMMINSIGHT_AGENT_LISTEN says)",
    )
    add_format_options(p, nested)
    p.add_argument(
        "--token",
        default=default(None),
        metavar="TOKEN",
        help="bearer token for changes (resolve, flush), and for reads of an agent over TCP "
        "that needs it (COMMINSIGHT_AGENT_READ_AUTH=token) (default: COMMINSIGHT_AGENT_TOKEN, "
        "sent with reads to the local agent only)",
    )


def output_format(args: argparse.Namespace) -> str:
    """The format chosen: --json, else --format (table when the command has neither)."""
    return "json" if getattr(args, "json", False) else getattr(args, "format", "table")
