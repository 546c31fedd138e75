"""`comminsight steps` (from the agent) and `comminsight job-steps`: the Steps the Semantic
Engine recovered, per GPU, and the job's Steps reconciled across nodes with what disagrees.
(`steps <logs>` recovers Steps offline instead: cli.semantic.)"""

from __future__ import annotations

from rich.markup import escape

from comminsight.cli.client import answer
from comminsight.cli.node import opt, rank_ranges
from comminsight.cli.output import Output, new_table
from comminsight.human_units import bandwidth_text, duration_text, size_text, time_text
from comminsight_client import Client
from comminsight_client.api.steps import list_job_steps, list_steps
from comminsight_client.models import JobStepPage, StepPage
from comminsight_client.types import UNSET

NO_JOB = "(no job id)"


def steps_cmd(client: Client, args, out: Output) -> None:
    body: StepPage = answer(
        list_steps,
        client=client,
        rank=args.rank if args.rank is not None else UNSET,
        since_step=args.since_step,
        limit=args.limit,
    )
    if out.json:
        out.json_value(body.to_dict())
        return
    table = new_table(
        f"Step summaries: {body.total}",
        ("step", "rank", "start (UTC)", "duration", "ops", "bytes", "busbw", "anomalies"),
        right=("step", "rank", "duration", "ops", "bytes", "busbw"),
    )
    for s in body.items:
        table.add_row(
            str(s.step_index),
            str(s.global_rank),
            time_text(s.start_real_ns),
            duration_text(s.duration_ns),
            str(s.op_count),
            size_text(s.total_bytes),
            bandwidth_text(s.busbw_gbs),
            ", ".join(a.kind.value for a in s.anomalies) or "-",
        )
    out.table(table)


def job_steps_cmd(client: Client, args, out: Output) -> None:
    body: JobStepPage = answer(
        list_job_steps,
        client=client,
        job=args.job or UNSET,
        since_step=args.since_step,
        limit=args.limit,
        not_found_hint="list the jobs with `comminsight job-steps` (no --job): its answer names "
        "every job",
    )
    if out.json:
        out.json_value(body.to_dict())
        return
    out.line(
        f"job {body.job_id or NO_JOB}: {body.total} job steps from {args.since_step} "
        f"(each GPU's latest {body.window_steps_per_gpu} Steps)",
        markup=False,
    )
    others = [j for j in body.jobs if j.job_id != body.job_id]
    if others:
        out.line(
            "other jobs: " + ", ".join(f"{j.job_id or NO_JOB} ({j.gpus} GPUs)" for j in others),
            markup=False,
        )
    if body.invalid_lines:
        out.line(f"{body.invalid_lines} lines of step-summary files were not summaries")
    nodes = new_table(
        "Nodes",
        ("node", "state", "offset", "gpus", "local steps", "linked through", "votes"),
        right=("offset", "gpus", "votes"),
    )
    for n in body.nodes:
        first, last = n.first_local_step, n.last_local_step
        nodes.add_row(
            n.node_name,
            n.state.value,
            opt(n.offset),
            str(n.gpus),
            f"{first}-{last}" if first is not None else "-",
            opt(n.linked_through),
            str(n.votes),
        )
    out.table(nodes)
    steps = new_table(
        "Job steps",
        ("job step", "start (UTC)", "duration", "gpus", "global ranks", "missing"),
        right=("job step", "duration", "gpus"),
    )
    for s in body.items:
        steps.add_row(
            str(s.job_step_index),
            time_text(s.start_real_ns),
            duration_text(s.end_real_ns - s.start_real_ns),
            str(len(s.gpus)),
            rank_ranges([g.global_rank for g in s.gpus]),
            rank_ranges([g.global_rank for g in s.missing]) if s.missing else "-",
        )
    out.table(steps)
    shown = len(body.disagreements)
    out.line(f"disagreements: {body.disagreements_total}")
    for d in body.disagreements:
        out.line(f"  {d.kind.value}: {escape(d.description)}")
    if body.disagreements_total > shown:
        more = body.disagreements_total - shown
        out.line(f"  ... and {more} less serious ones the agent does not list")
