"""`comminsight protocols`, `config` and `demo`: the commands of this machine and this build,
which need no agent. Each prints in the format chosen; errors go to stderr."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from comminsight.cli.options import output_format
from comminsight.cli.output import Output, error, new_table, stderr_console


def cmd_protocols(args: argparse.Namespace, console: Console) -> int:
    from comminsight_gen.registry import PROTOCOLS

    out = Output(console, output_format(args))
    if out.json:
        out.json_value(
            [
                {
                    "id": p.id,
                    "version": p.version,
                    "kind": p.kind,
                    "status": p.status,
                    "producer": p.producer,
                    "consumers": list(p.consumers),
                }
                for p in PROTOCOLS
            ]
        )
        return 0
    table = new_table(
        "CommInsight protocols", ("protocol", "version", "kind", "status", "producer → consumers")
    )
    for p in PROTOCOLS:
        table.add_row(
            p.id, f"v{p.version}", p.kind, p.status, f"{p.producer} → {', '.join(p.consumers)}"
        )
    out.table(table)
    return 0


def cmd_config(args: argparse.Namespace, console: Console) -> int:
    from comminsight.config import ConfigError, load_settings
    from comminsight.redaction import shown_value
    from comminsight_gen.config_v1 import KEYS

    try:
        settings = load_settings()
    except ConfigError as e:
        error(f"configuration error: {e}")
        return 2
    out = Output(console, output_format(args))
    # secrets and URL credentials hidden by the same function as everywhere else
    shown = [(key, shown_value(key, getattr(settings, key.field))) for key in KEYS]
    if out.json:
        out.json_value({key.name: {"value": v, "default": key.default} for key, v in shown})
        return 0
    table = new_table(
        "Resolved configuration (environment > file > default)", ("key", "value", "default")
    )
    for key, value in shown:
        table.add_row(key.name, escape(repr(value)), escape(repr(key.default)))
    out.table(table)
    return 0


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from comminsight.demo import DEMO_DIR, run

    fmt = output_format(args)
    if fmt == "table":
        return run(console)
    # the walk-through is for people: on stderr, so that stdout holds only the outcome
    status = run(stderr_console())
    out = Output(console, fmt)
    outcome = {"ok": status == 0, "exit_status": status, "files": str(DEMO_DIR)}
    if out.json:
        out.json_value(outcome)
    else:
        table = new_table("demo", ("ok", "exit_status", "files"))
        table.add_row(
            *(str(v).lower() if isinstance(v, bool) else str(v) for v in outcome.values())
        )
        out.table(table)
    return status
