"""`comminsight`: what a CommInsight agent sees (status, communicators, ops, Steps, hangs,
incidents, the archive), Steps recovered offline from logs, the simulator, the resolved
configuration and the protocols of this build. `comminsight COMMAND --help` for each."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from comminsight.cli.agent import add_agent_commands
from comminsight.cli.output import new_table, stdout_console
from comminsight.config import ConfigError, load_settings
from comminsight.redaction import shown_value
from comminsight.sim.cli_args import add_sim_arguments
from comminsight.version_text import VersionAction


def cmd_protocols(args: argparse.Namespace, console: Console) -> int:
    from comminsight_gen.registry import PROTOCOLS

    table = new_table(
        "CommInsight protocols", ("protocol", "version", "kind", "status", "producer → consumers")
    )
    for p in PROTOCOLS:
        table.add_row(
            p.id, f"v{p.version}", p.kind, p.status, f"{p.producer} → {', '.join(p.consumers)}"
        )
    console.print(table)
    return 0


def cmd_config(args: argparse.Namespace, console: Console) -> int:
    from comminsight_gen.config_v1 import KEYS

    try:
        settings = load_settings()
    except ConfigError as e:
        console.print(f"[red]configuration error:[/red] {e}")
        return 2
    table = new_table(
        "Resolved configuration (environment > file > default)", ("key", "value", "default")
    )
    for key in KEYS:
        # secrets and URL credentials hidden by the same function as everywhere else
        value = shown_value(key, getattr(settings, key.field))
        table.add_row(key.name, escape(repr(value)), escape(repr(key.default)))
    console.print(table)
    return 0


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from comminsight.demo import run

    return run(console)


def cmd_sim(args: argparse.Namespace, console: Console) -> int:
    import json

    from comminsight.sim import SimConfigError, render, run_simulation, summarize
    from comminsight.sim.cli_args import config_from_args

    try:
        summary = summarize(run_simulation(config_from_args(args)))
    except SimConfigError as e:
        console.print(f"[red]sim:[/red] {e}")
        return 2
    if args.json:
        print(json.dumps(summary))
    else:
        render(summary, console)
    return 0 if summary["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="comminsight",
        description=__doc__,
        epilog="Tables keep every value whole in a pipe; agent commands take --format "
        "plain|json. The local agent is found at COMMINSIGHT_AGENT_LISTEN; --url names another.",
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("protocols", help="list the protocols this build speaks").set_defaults(
        func=cmd_protocols
    )
    sub.add_parser("config", help="show the resolved configuration").set_defaults(func=cmd_config)
    sub.add_parser("demo", help="run the demo on an embedded default").set_defaults(func=cmd_demo)
    add_agent_commands(sub)
    sim = sub.add_parser("sim", help="drive a profiler plugin with a simulated NCCL (no GPU)")
    add_sim_arguments(sim)
    sim.set_defaults(func=cmd_sim)
    args = parser.parse_args(argv)
    return args.func(args, stdout_console())


if __name__ == "__main__":
    sys.exit(main())
