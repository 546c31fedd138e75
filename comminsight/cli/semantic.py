"""`comminsight steps <logs>` and `comminsight trace <logs> -o trace.json`: the Semantic Engine
offline, over a directory of inspector_logs.

`steps` recovers every GPU's Steps with a progress bar (on a terminal), writes the step-summary
records (one JSON-lines file per GPU, default `<logs>/../semantics/step/offline/`), and prints
a table per rank (table, plain) or, with `--format json`, one document whose `items` are the
records themselves and `total` their count, as the agent's `steps` answers. `trace` writes a
Chrome/Perfetto trace (a track per rank and communicator, ops and Steps as slices). Problems
with the input (bad lines, bad seals, missing segments, bad template files) are printed on
stderr, each naming its file, and the rest is processed. Exit status 0, or 1 when the directory
held no segments or a place to write is refused.

Both may run as root over another user's logs: every directory they write into goes through
the home's trust walk (home_check), as the Agent's own do. A symbolic link another user made on
the way, or a directory another user owns (or may write), is refused by name before anything is
written there, so that such a user cannot choose which of root's files get written.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from comminsight.cli.options import output_format
from comminsight.cli.output import Output, error, new_table, stderr_console, terminal_progress
from comminsight_gen import home_v1_names as home_names

if TYPE_CHECKING:
    from comminsight.semantic.offline import OfflineResult


def default_out(logs: Path) -> Path:
    """Beside the logs' home, apart from the live engine's files (an agent serving that home
    would otherwise list every step twice). The way to the logs is walked first, as the home's
    is: where it passes another user's link or directory, that user would choose where the
    summaries go (a HomeError names it; --out chooses another place)."""
    from comminsight.agent.receivers.home_check import check_ancestors

    check_ancestors(logs, os.geteuid())
    return logs.resolve().parent / home_names.SEMANTICS / home_names.STEP / home_names.OFFLINE


def refused_place(e: Exception, what: str, hint: str | None = None) -> int:
    error(f"refusing to write {what}: {e}", hint)
    return 1


CHECKPOINT_DEFAULT = 100_000  # --checkpoint-every-ops when not given


def where_to_run(args) -> tuple[int, str | None]:
    """(local workers, scheduler) for `steps LOGS`: 0 and None run in this process. A
    ValueError names the options that cannot go together."""
    from comminsight.semantic.dask_cluster import auto_workers, usable_cores
    from comminsight.semantic.remote_logs import is_url

    scheduler, workers = args.scheduler, args.workers
    checkpoints = args.checkpoint_every_ops != CHECKPOINT_DEFAULT  # asked for
    remote = is_url(args.logs)
    if workers is not None and scheduler is not None:
        raise ValueError("--workers and --scheduler: a local cluster or that one, not both")
    if workers is not None and workers < 0:
        raise ValueError(f"--workers {workers}: a number of worker processes, 0 or more")
    if checkpoints and (scheduler is not None or (workers or 0) > 0):
        raise ValueError(
            "--checkpoint-every-ops: a run over workers keeps no checkpoint (it starts "
            "again); --workers 0 keeps them"
        )
    if workers is None and scheduler is None:
        if checkpoints:
            workers = 0
        else:
            workers = usable_cores() if remote else auto_workers(Path(args.logs))
    if remote and not workers and scheduler is None:
        raise ValueError(
            f"{args.logs}: logs at a URL are read by workers, each fetching one process's: "
            "--workers 1 or more, or --scheduler (or copy them into a directory)"
        )
    return workers or 0, scheduler


def _recover(
    args,
    console: Console,
    keep_ops: bool,
    out: Path | None = None,
    workers: int = 0,
    scheduler: str | None = None,
) -> OfflineResult | None:
    # the engine is imported only by the commands that run it: `comminsight --help` and the
    # agent commands start without loading it
    from comminsight.semantic.dask_cluster import ClusterError
    from comminsight.semantic.remote_logs import is_url

    remote = is_url(args.logs)
    logs = args.logs if remote else Path(args.logs)
    if remote and keep_ops:
        error(f"{args.logs}: a trace is made from a directory of logs, not from a URL")
        return None
    err = stderr_console()
    # on stderr (when it is a terminal): stdout may be a pipe that wants only the result
    with terminal_progress(
        err,
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:,.0f} ops"),
        TimeElapsedColumn(),
    ) as progress:
        task = progress.add_task(f"recovering steps from {logs}", total=None)
        try:
            result = _run(
                args, logs, keep_ops, out, workers, scheduler, lambda n: progress.advance(task, n)
            )
        except ClusterError as e:
            error(str(e))
            return None
    for problem in result.problems + result.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(problem)}", highlight=False, soft_wrap=True)
    if not result.gpus:  # (a resumed run that was already complete reads no ops: fine)
        error(f"no inspector_logs segments found in {logs}")
        return None
    if not result.ops and result.problems and not result.resumed:
        # every line refused: an answer of "0 Steps" would pass for a job that ran none
        n = len(result.gpus)
        error(
            f"no op could be read from {logs} ({n} process{'es' if n != 1 else ''}; "
            "the warnings above say why)"
        )
        return None
    return result


def _run(args, logs, keep_ops, out, workers, scheduler, on_ops) -> OfflineResult:
    from comminsight.agent.receivers.home_check import make_trusted_dirs
    from comminsight.semantic.dask_cluster import dask_client
    from comminsight.semantic.distributed_steps import recover_steps_distributed
    from comminsight.semantic.offline import recover_steps

    with dask_client(workers, scheduler) as client:
        if client is None:
            return recover_steps(
                logs,
                args.templates or "",
                on_ops=on_ops,
                keep_ops=keep_ops,
                out_dir=out,
                checkpoint_every_ops=getattr(args, "checkpoint_every_ops", 0) if out else 0,
                make_out_dir=make_trusted_dirs,
                markers=not getattr(args, "no_markers", False),
            )
        return recover_steps_distributed(
            logs,
            client,
            args.templates or "",
            out_dir=out,
            make_out_dir=make_trusted_dirs,
            on_ops=on_ops,
            keep_summaries=False,  # read back from the files as they are printed
            markers=not getattr(args, "no_markers", False),
        )


def cmd_steps_offline(args: argparse.Namespace, console: Console) -> int:
    from comminsight.agent.receivers.home_check import HomeError
    from comminsight.semantic.offline import CHECKPOINT_NAME
    from comminsight.semantic.remote_logs import is_url

    try:
        workers, scheduler = where_to_run(args)
    except ValueError as e:
        error(str(e))
        return 2
    hint = None if args.out else "choose where they go with --out"
    if not args.out and is_url(args.logs):
        error(
            f"{args.logs}: logs at a URL have no directory beside them: say where the "
            "summaries go with --out"
        )
        return 1
    try:
        out_dir = Path(args.out) if args.out else default_out(Path(args.logs))
        result = _recover(args, console, False, out_dir, workers, scheduler)
    except HomeError as e:
        return refused_place(e, "the step summaries", hint)
    if result is None:
        return 1
    out = Output(console, output_format(args))
    if out.json:
        # the records as the step-summary protocol encodes them, in one document
        encoder = msgspec.json.Encoder()
        items = [
            json.loads(encoder.encode(s)) for gpu in result.gpus for s in summaries_of(gpu, out_dir)
        ]
        out.json_value({"items": items, "total": len(items)})
        return 0
    for gpu in result.gpus:
        out.table(rank_table(gpu, summaries_of(gpu, out_dir)))
    if out.format == "table":  # repeated below the tables, where a reader of them looks
        for warning in result.warnings:
            out.line(f"warning: {warning}", markup=False)
    resumed = (
        f", resumed {result.resumed} from {out_dir / CHECKPOINT_NAME}" if result.resumed else ""
    )
    out.line(
        f"{sum(g.steps for g in result.gpus)} step summaries in {out_dir}/ "
        f"({len(result.gpus)} files, {result.ops:,} ops read{resumed})",
        markup=False,
    )
    return 0


def summaries_of(gpu, out_dir: Path) -> list:
    """A GPU's summaries: those its result holds, or, where workers wrote them and sent
    back their count (GpuResult.written), read back from its step file one GPU at a time."""
    if gpu.written is None:
        return gpu.summaries
    from comminsight.semantic.offline import read_summaries

    return read_summaries(out_dir / f"{gpu.stream}.jsonl")


def rank_table(gpu, summaries: list | None = None):
    summaries = gpu.summaries if summaries is None else summaries
    how = gpu.method or "no Step recognized: see the warning"
    columns = (
        "step",
        "start (UTC)",
        "duration ms",
        "period ms",
        "ops",
        "MiB",
        "busbw GB/s",
        "confidence",
        "anomalies",
    )
    table = new_table(
        f"rank {gpu.gpu.global_rank} ({gpu.gpu.host}, pid {gpu.gpu.pid}): "
        f"{len(summaries)} steps, {gpu.ops:,} ops, by {how}",
        columns,
        right=columns[:-1],
    )
    for s in summaries:
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
    return table


def cmd_trace(args: argparse.Namespace, console: Console) -> int:
    from comminsight.agent.receivers.home_check import HomeError
    from comminsight.semantic.trace import gpu_events, write_trace

    result = _recover(args, console, keep_ops=True)
    if result is None:
        return 1
    events = []
    for gpu in result.gpus:
        events += gpu_events(gpu.gpu, gpu.kept_ops or [], gpu.summaries)
    output = Path(args.output)
    try:
        trusted_parent(output)
    except HomeError as e:
        return refused_place(e, "the trace")
    write_trace(output, events)
    written = {
        "trace": str(args.output),
        "ranks": len(result.gpus),
        "ops": result.ops,
        "steps": sum(len(g.summaries) for g in result.gpus),
    }
    out = Output(console, output_format(args))
    if out.json:
        out.json_value(written)
    elif out.plain:
        table = new_table(None, tuple(written))
        table.add_row(*map(str, written.values()))
        out.table(table)
    else:
        out.line(
            f"trace of {written['ranks']} ranks, {written['ops']:,} ops and "
            f"{written['steps']} steps written to {args.output} "
            "(open it in https://ui.perfetto.dev or chrome://tracing)",
            markup=False,
        )
    return 0


def trusted_parent(path: Path) -> None:
    """The directory a file will be written into (atomically: a new file renamed over the
    old, so what is at its own name is replaced, never followed): the trust walk over the
    way there, and the directory made as the home's are when it is missing."""
    from comminsight.agent.receivers.home_check import check_ancestors, make_trusted_dirs

    check_ancestors(path, os.geteuid())
    parent = path.parent if path.is_absolute() else (Path.cwd() / path).parent
    if not os.path.lexists(parent):
        make_trusted_dirs(parent)
