"""What the demo verified: each statement it makes about a run is a Check, decided by
comparing data (the simulator's ground truth, the sealed logs, the Agent's API), printed as
it is made, and listed again at the end. The demo's exit status is whether all held."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape

PASS = "✓"
FAIL = "✗"


@dataclass(frozen=True)
class Check:
    label: str  # what was checked, short: the line of the closing checklist
    ok: bool
    detail: str  # the numbers behind it, or what was found instead

    @property
    def mark(self) -> str:
        return PASS if self.ok else FAIL


@dataclass
class Checklist:
    console: Console
    checks: list[Check] = field(default_factory=list)

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        style = "green" if check.ok else "bold red"
        verdict = "" if check.ok else " [bold red](NOT verified)[/bold red]"
        self.console.print(
            f"[{style}]{check.mark}[/{style}] {escape(check.label)}{verdict}: "
            f"{escape(check.detail)}",
            highlight=False,
        )
        return check

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def print_summary(self) -> None:
        self.console.rule("what the demo verified")
        for check in self.checks:
            style = "green" if check.ok else "bold red"
            self.console.print(
                f"[{style}]{check.mark}[/{style}] {escape(check.label)}", highlight=False
            )
        total, failed = len(self.checks), len(self.failed)
        if failed:
            self.console.print(
                f"[bold red]{failed} of {total} checks failed: the demo's run did not show "
                "what it should (details above)[/bold red]",
                highlight=False,
            )
        else:
            self.console.print(f"[green]all {total} checks passed[/green]", highlight=False)
