"""`comminsight demo` from start to end: both runs, where their files are, and the checklist
of what was verified; the exit status says whether every check held."""

from __future__ import annotations

from rich.console import Console

from comminsight.cli.client import AgentUnavailable
from comminsight.cli.output import stderr_console
from comminsight.demo.agent_process import AgentDidNotStart
from comminsight.demo.checklist import Check, Checklist
from comminsight.demo.console import demo_console
from comminsight.demo.hang_run import hang_run
from comminsight.demo.healthy_run import healthy_run
from comminsight.demo.simulation import DEMO_DIR, PLUGIN
from comminsight_gen import home_v1_names as home_names

# what a demo home holds once a run is over, and what it is
KEPT = (
    (home_names.INSPECTOR_LOGS, "the Profiler's sealed logs"),
    (f"{home_names.SEMANTICS}/{home_names.STEP}", "Step summaries"),
    (f"{home_names.METADATA}/{home_names.HANGS}", "hang reports"),
    (f"{home_names.METADATA}/{home_names.INCIDENTS}", "the reports grouped by cause"),
    (home_names.ARCHIVES, "what the Agent archived"),
    ("sim", "the simulator's ground truth, per rank"),
    ("agent.log", "the Agent's log"),
)


def run(console: Console) -> int:
    console = demo_console(console)
    if not PLUGIN.exists():
        stderr_console().print(
            f"[red]{PLUGIN} is missing: run `make build-profiler` (make demo does)[/red]"
        )
        return 2
    checks = Checklist(console)
    for name, half in (("healthy run", healthy_run), ("hang run", hang_run)):
        try:
            half(console, checks)
        except (AgentDidNotStart, AgentUnavailable) as e:
            checks.add(Check(f"{name}: the Agent started and answered", False, str(e)))
    console.rule()
    show_kept_files(console)
    checks.print_summary()
    if checks.failed and not console.is_terminal:
        # stdout may be a file nobody reads now: say it where the person who ran it looks
        labels = "; ".join(c.label for c in checks.failed)
        stderr_console().print(
            f"[bold red]comminsight demo: {len(checks.failed)} check(s) failed:[/bold red] "
            f"{labels}",
            highlight=False,
            soft_wrap=True,  # one line, whole: a person or a script reads it in a log
        )
    return 1 if checks.failed else 0


def show_kept_files(console: Console) -> None:
    console.print(f"Everything stays under {DEMO_DIR} (healthy/ and hang/):")
    for path, what in KEPT:
        runs = [r for r in ("healthy", "hang") if (DEMO_DIR / r / path).exists()]
        if runs:
            console.print(f"  {path}: {what} ({', '.join(runs)})")
    console.print(
        "Run `comminsight steps <dir>/inspector_logs` or `comminsight trace "
        "<dir>/inspector_logs -o trace.json` on them (README: Recovering steps from logs)."
    )
