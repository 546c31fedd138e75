# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion looks for this in the entry point)
"""`comminsight`, the command line: `command_line` (the parser; not named `main`, which
would shadow this package's `main` once imported), `help_format` and `options` (help
text and the options commands share), `local` (protocols, config, demo), `simulate` (sim),
`agent` (the parsers of the commands that ask an agent, whose code is a module per group:
`node`, `ops`, `steps`, `hangs`, `incidents`, `archive`, `meta`), `semantic` (Steps recovered
offline from logs), `client` (how a command reaches an agent) and `output` (tables, formats,
errors and progress)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    # imported on call: `comminsight.cli.output` and friends stay cheap to import alone
    from comminsight.cli.command_line import main as run

    return run(argv)
