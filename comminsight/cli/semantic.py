"""`comminsight steps <logs>` and `comminsight trace <logs> -o trace.json`: the Semantic Engine
offline, over a directory of inspector_logs.

`steps` recovers every GPU's Steps with a progress bar, writes the step-summary records (one
JSON-lines file per GPU, default `<logs>/../semantics/step/offline/`), and prints a table per rank,
or with `--json` the records themselves as JSON lines. `trace` writes a Chrome/Perfetto trace
(a track per rank and communicator, ops and Steps as slices). Problems with the input (bad
lines, bad seals, missing segments, bad template files) are printed on stderr, each naming its
file, and the rest is processed. Exit status 0, or 1 when the directory held no segments.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from comminsight.semantic.offline import OfflineResult


def default_out(logs: Path) -> Path:
    """Beside the logs' home, apart from the live engine's files (an agent serving that home
    would otherwise list every step twice)."""
    return logs.resolve().parent / "semantics" / "step" / "offline"


def _recover(
    args, console: Console, keep_ops: bool, out: Path | None = None
) -> OfflineResult | None:
    # the engine is imported only by the commands that run it: `comminsight --help` and the
    # agent commands start without loading it
    from comminsight.semantic.offline import recover_steps

    logs = Path(args.logs)
    err = Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:,.0f} ops"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as progress:
        task = progress.add_task(f"recovering steps from {logs}", total=None)
        result = recover_steps(
            logs,
            args.templates or "",
            on_ops=lambda n: progress.advance(task, n),
            keep_ops=keep_ops,
            out_dir=out,
            checkpoint_every_ops=getattr(args, "checkpoint_every_ops", 0) if out else 0,
        )
    for problem in result.problems + result.warnings:
        err.print(f"[yellow]warning:[/yellow] {problem}", highlight=False, soft_wrap=True)
    if not result.gpus:  # (a resumed run that was already complete reads no ops: fine)
        err.print(f"[red]comminsight:[/red] no inspector_logs segments found in {logs}")
        return None
    return result


def cmd_steps_offline(args: argparse.Namespace, console: Console) -> int:
    from comminsight.semantic.offline import CHECKPOINT_NAME

    out = Path(args.out) if args.out else default_out(Path(args.logs))
    result = _recover(args, console, keep_ops=False, out=out)
    if result is None:
        return 1
    if args.json:
        encoder = msgspec.json.Encoder()
        try:
            for gpu in result.gpus:
                for s in gpu.summaries:
                    sys.stdout.write(encoder.encode(s).decode() + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush error at exit
        return 0
    for gpu in result.gpus:
        print_rank_table(console, gpu)
    for warning in result.warnings:
        console.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    resumed = f", resumed {result.resumed} from {out / CHECKPOINT_NAME}" if result.resumed else ""
    console.print(
        f"{sum(len(g.summaries) for g in result.gpus)} step summaries in {out}/ "
        f"({len(result.gpus)} files, {result.ops:,} ops read{resumed})"
    )
    return 0


def print_rank_table(console: Console, gpu) -> None:
    how = gpu.method or "no Step recognized: see the warning"
    table = Table(
        title=f"rank {gpu.gpu.global_rank} ({gpu.gpu.host}, pid {gpu.gpu.pid}): "
        f"{len(gpu.summaries)} steps, {gpu.ops:,} ops, by {how}"
    )
    for column in (
        "step",
        "start (UTC)",
        "duration ms",
        "period ms",
        "ops",
        "MiB",
        "busbw GB/s",
        "confidence",
        "anomalies",
    ):
        table.add_column(column, justify="right" if column != "anomalies" else "left")
    for s in gpu.summaries:
        start = datetime.fromtimestamp(s.start_real_ns / 1e9, tz=timezone.utc)
        period = s.period_ns if isinstance(s.period_ns, int) else None
        table.add_row(
            f"{s.step_index}{'*' if s.warmup else ''}",
            start.strftime("%H:%M:%S.%f")[:-3],
            f"{s.duration_ns / 1e6:.2f}",
            f"{period / 1e6:.2f}" if period is not None else "-",
            str(s.op_count),
            f"{s.total_bytes / 2**20:.1f}",
            f"{s.busbw_gbs:.1f}",
            f"{s.recovery.confidence:.2f}",
            ", ".join(a.kind.value for a in s.anomalies) or "-",
        )
    console.print(table)


def cmd_trace(args: argparse.Namespace, console: Console) -> int:
    from comminsight.semantic.trace import gpu_events, write_trace

    result = _recover(args, console, keep_ops=True)
    if result is None:
        return 1
    events = []
    for gpu in result.gpus:
        events += gpu_events(gpu.gpu, gpu.kept_ops or [], gpu.summaries)
    write_trace(args.output, events)
    console.print(
        f"trace of {len(result.gpus)} ranks, {result.ops:,} ops and "
        f"{sum(len(g.summaries) for g in result.gpus)} steps written to {args.output} "
        "(open it in https://ui.perfetto.dev or chrome://tracing)"
    )
    return 0


def add_offline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint-every-ops",
        type=int,
        default=100_000,
        help="checkpoint the engines this often (ops); a killed run resumes from it",
    )
    p.add_argument(
        "--templates",
        default=None,
        help="extra template directories, colon-separated (added to the built-in ones)",
    )
