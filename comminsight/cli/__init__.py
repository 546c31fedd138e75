"""`comminsight`, the command line: `main` (the parser and the local commands), `agent` (the
commands that ask an agent, one module per group: `node`, `ops`, `steps`, `hangs`,
`incidents`, `archive`, `meta`), `semantic` (Steps recovered offline from logs), `client` (how
a command reaches an agent) and `output` (tables and formats)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    # imported on call: `comminsight.cli.output` and friends stay cheap to import alone
    from comminsight.cli.main import main as run

    return run(argv)
