"""`comminsight sim`: run the simulated NCCL from the command line (options: sim.cli_args),
with progress on a terminal, and print what the run did in the format chosen.

A bad option or simulation configuration is named on stderr (exit 2); the summary goes to
stdout, exit 0 when the run went as configured, 1 when it did not (its errors on stderr) or
when the home's trust walk refuses where its files would go (named on stderr).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

from comminsight.cli.options import output_format
from comminsight.cli.output import Output, error, new_table, terminal_progress


def cmd_sim(args: argparse.Namespace, console: Console) -> int:
    from comminsight.agent.receivers.home_check import HomeError, make_trusted_dirs
    from comminsight.sim import SimConfigError, SimProgress, run_simulation, summarize
    from comminsight.sim.cli_args import config_from_args

    progress = terminal_progress(
        console,
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[arrivals]}"),
        TextColumn("{task.fields[finished]}"),
        TimeElapsedColumn(),
    )

    try:
        config = config_from_args(args)
        # the run's files (its configuration, ground truth, rank logs) go where the home's
        # trust walk allows: run as root into a home another user controls, a link of theirs
        # must not choose which of root's files are written
        make_trusted_dirs(Path(config.out) if config.out else Path(config.home) / "sim")
        with progress:
            task = progress.add_task("preparing the run", total=None, arrivals="", finished="")

            def show(p: SimProgress) -> None:
                what = f"aborting ({p.aborting})" if p.aborting else f"{p.ranks} ranks running"
                progress.update(
                    task,
                    description=what,
                    completed=p.arrivals,
                    total=p.arrivals_planned,
                    arrivals=f"{p.arrivals:,}/{p.arrivals_planned:,} op arrivals",
                    finished=f"{p.ranks_finished}/{p.ranks} ranks finished",
                )

            result = run_simulation(config, on_progress=show)
    except SimConfigError as e:
        error(f"sim: {e}")
        return 2
    except HomeError as e:
        error(f"sim: refusing to write the run's files: {e}")
        return 1
    except OSError as e:  # the home or the output directory cannot be used
        error(f"sim: {e.filename}: {e.strerror}" if e.filename else f"sim: {e}")
        return 1
    summary = summarize(result)
    out = Output(console, output_format(args))
    if out.json:
        out.json_value(summary)
    else:
        print_summary(out, summary)
    for message in summary["errors"]:  # also in the summary (its "errors" in json)
        error(f"sim: {message}")
    return 0 if summary["ok"] else 1


def print_summary(out: Output, summary: dict) -> None:
    colour = {"completed": "green", "aborted": "yellow", "error": "red"}[summary["status"]]
    out.line(
        f"[bold]simulated NCCL[/bold] {summary['workload']} · {summary['ranks']} ranks · "
        f"ABI v{summary['abi']} · plugin {summary['plugin_name']!r} · "
        f"[{colour}]{summary['status']}[/{colour}]"
        + (f" ({summary['abort_reason']})" if summary["abort_reason"] else "")
        + f" in {summary['elapsed_s']:.2f} s"
    )
    if summary["faults"]:
        out.line("faults: " + ", ".join(summary["faults"]), markup=False)
    ranks = new_table(
        "ranks",
        ("rank", "pid", "status", "ops issued/planned", "completed", "steps"),
        right=("rank", "pid", "completed", "steps"),
    )
    for r in summary["rank_results"]:
        ranks.add_row(
            str(r["rank"]),
            str(r["pid"]),
            r["status"],
            f"{r['ops_issued']}/{r['ops_planned']}",
            str(r["ops_completed"]),
            str(r["steps_completed"]),
        )
    out.table(ranks)
    comms = new_table(
        "communicators",
        ("comm id", "name", "role", "ranks", "ops per rank", "completed (min)"),
        right=("ranks", "ops per rank", "completed (min)"),
    )
    for c in summary["communicators"]:
        comms.add_row(
            c["comm_id"],
            escape_text(c["name"]),
            c["role"],
            str(c["nranks"]),
            str(c["ops_per_rank"]),
            str(c["completed_min"]),
        )
    out.table(comms)
    out.line(f"ground truth: {summary['run_dir']}", markup=False)


def escape_text(text: str | None) -> str:
    from rich.markup import escape

    return escape(text) if text else "-"
