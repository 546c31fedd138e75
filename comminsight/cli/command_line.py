"""`comminsight`: what a CommInsight agent sees (status, communicators, ops, Steps, hangs,
incidents, the archive), Steps recovered offline from logs, the simulator, the resolved
configuration and the protocols of this build. `comminsight COMMAND --help` for each."""

from __future__ import annotations

import argparse
import os
import sys

from comminsight.cli.agent import add_agent_commands, command_code
from comminsight.cli.help_format import CommandParser, examples, paragraph
from comminsight.cli.options import add_format_options
from comminsight.sim.cli_args import add_sim_arguments
from comminsight.version_text import VersionAction

STDOUT_CLOSED = 128 + 13  # 128 + SIGPIPE, as the shell reports a tool SIGPIPE ended

EPILOG = """\
output: every command takes --format table|plain|json (default table). The
table format fits the terminal, or COLUMNS in a pipe or file (80 when unset):
a long cell folds onto more lines and a sentence wraps; nothing is cut. For
whole values in scripts use --format plain (tab-separated, one row a line) or
--format json (one JSON document). Results go to stdout, errors and hints to
stderr. Progress is drawn only on a terminal.

exit status: 0 success; 1 the work failed (agent unreachable or refusing, a
failed run); 2 a bad command line or configuration; 141 stdout was closed
early (`| head`).

the local agent is found at COMMINSIGHT_AGENT_LISTEN; --url names another.

shell completion (bash, zsh), e.g. in ~/.bashrc:
  eval "$(register-python-argcomplete comminsight)"

""" + examples(
    "comminsight status",
    "comminsight hangs --format json | jq '.items[0].summary'",
    "comminsight steps var/demo/healthy/inspector_logs --format plain",
    "COLUMNS=120 comminsight comms > comms.txt",
)


def local_command(sub, name: str, help_text: str, target: str, epilog: str, **kw):
    """A command that needs no agent; `target` is 'module:function' of comminsight.cli,
    imported when the command runs."""
    p = sub.add_parser(name, help=help_text, description=paragraph(help_text), epilog=epilog, **kw)
    add_format_options(p)
    p.set_defaults(func=lambda args, console: command_code(target)(args, console))
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="comminsight", description=paragraph(__doc__), epilog=EPILOG)
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    local_command(
        sub,
        "protocols",
        "list the protocols this build speaks",
        "local:cmd_protocols",
        examples("comminsight protocols", "comminsight protocols --format json"),
    )
    local_command(
        sub,
        "config",
        "show the resolved configuration (environment > file > default), secrets hidden",
        "local:cmd_config",
        "exit status: 0 shown; 2 a configuration value is bad (named on stderr)\n\n"
        + examples(
            "comminsight config",
            "COMMINSIGHT_CONF=./my.conf comminsight config --format plain",
            "comminsight config --format json | jq -r '.COMMINSIGHT_HOME.value'",
        ),
    )
    local_command(
        sub,
        "demo",
        "run the demo on an embedded default (simulated ranks, the Profiler and an Agent)",
        "local:cmd_demo",
        "The walk-through is for people: with --format plain or json it goes to\n"
        "stderr and stdout gets only the outcome (exit status, where the files are).\n\n"
        "exit status: 0 every part behaved as expected; 1 otherwise\n\n"
        + examples("comminsight demo", "comminsight demo --format json 2>demo.log"),
    )
    add_agent_commands(sub)
    sim = local_command(
        sub,
        "sim",
        "drive a profiler plugin with a simulated NCCL (no GPU)",
        "simulate:cmd_sim",
        "exit status: 0 the run went as configured (a hang a fault asked for\n"
        "included); 1 a rank failed or the run timed out; 2 a bad option or\n"
        "simulation configuration\n\n"
        + examples(
            "comminsight sim --home /tmp/ci-home",
            "comminsight sim --workload fsdp --ranks 4 --steps 5 --home /tmp/ci-home",
            "comminsight sim --ranks 4 --fault skip:rank=1,op=3 --home /tmp/h --json",
        ),
    )
    add_sim_arguments(sim)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell asks for completions: answer and exit
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)  # --help, --version, a bad command line: exit here
    from comminsight.cli.output import stdout_console

    try:
        return args.func(args, stdout_console())
    except BrokenPipeError:  # `| head` has what it wanted: end as a tool killed by SIGPIPE
        # (and no second error when Python flushes stdout at exit)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return STDOUT_CLOSED


if __name__ == "__main__":
    sys.exit(main())
