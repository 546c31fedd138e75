"""Checks on the demo's Agent itself: the `comminsight` commands the demo shows answered,
and the Agent stopped cleanly; and the errors it answered with while the demo waited."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from comminsight.demo.checklist import Check


def commands_check(run_name: str, commands: str, statuses: list[int]) -> Check:
    label = f"{run_name}: `comminsight {commands}` answered from the Agent"
    failed = sum(s != 0 for s in statuses)
    if failed:
        return Check(label, False, f"{failed} of {len(statuses)} failed (their error above)")
    return Check(label, True, f"all {len(statuses)} exited 0")


def agent_stopped_check(run_name: str, returncode: int | None, log: Path) -> Check:
    label = f"{run_name}: comminsight-agent exited 0 when stopped"
    if returncode != 0:
        return Check(label, False, f"it exited with status {returncode}; see {log}")
    return Check(label, True, "SIGTERM, exit status 0")


def note_errors(console: Console, errors: list[str], log: Path) -> None:
    """Error answers the demo retried while it waited for the Agent: said, not hidden (the
    read that followed is what the checks judge)."""
    if errors:
        console.print(
            f"[yellow]the Agent answered {len(errors)} read(s) with an error while the demo "
            f"waited (retried); the first: {escape(errors[0])}; see {log}[/yellow]",
            highlight=False,
        )
