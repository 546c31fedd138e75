"""`comminsight hangs [list | show ID | resolve ID]`: hang reports, newest first, one report
with its evidence per rank, and an operator's resolution (needs the agent's token).

Report summaries are sentences: printed whole below the table, never cut into a cell.
"""

from __future__ import annotations

from rich.markup import escape

from comminsight.cli.client import answer, changing_client, known
from comminsight.cli.node import opt
from comminsight.cli.output import Output, new_table
from comminsight.human_units import ms_text, time_text
from comminsight_client import Client
from comminsight_client.api.hangs import get_hang, list_hangs, resolve_hang
from comminsight_client.models import (
    CommRef,
    HangReport,
    HangReportList,
    HangStatusFilter,
    ResolveHangRequest,
)
from comminsight_client.types import UNSET

NOT_FOUND = "list the reports with `comminsight hangs --status all`"


def hangs_cmd(client: Client, args, out: Output) -> None:
    """`hangs` (a list) or, with --id, `hangs show`."""
    if args.id:
        show(client, args.id, out)
    else:
        list_cmd(client, args, out)


def show_cmd(client: Client, args, out: Output) -> None:
    show(client, args.report_id, out)


def list_cmd(client: Client, args, out: Output) -> None:
    body: HangReportList = answer(
        list_hangs,
        client=client,
        status=HangStatusFilter(args.status),
        comm_id=args.comm_id or UNSET,
        limit=args.limit,
    )
    if out.json:
        out.json_value(body.to_dict())
        return
    table = new_table(
        f"Hang reports ({args.status}): {body.total}",
        ("#", "report", "detected (UTC)", "verdict", "comm", "culprits", "status"),
        right=("#",),
    )
    for n, r in enumerate(body.items, 1):
        table.add_row(
            str(n),
            r.report_id,
            time_text(r.detected_real_ns),
            f"{r.verdict.value} ({r.severity.value})",
            escape(comm_text(r.comm)),
            ", ".join(str(c.comm_rank) for c in r.culprits) or "-",
            status_text(r),
        )
    out.table(table)
    for n, r in enumerate(body.items, 1):
        out.line(f"{n}. [bold]{r.report_id}[/bold]: {escape(r.summary)}")


def show(client: Client, report_id: str, out: Output) -> None:
    report: HangReport = answer(get_hang, report_id, client=client, not_found_hint=NOT_FOUND)
    if out.json:
        out.json_value(report.to_dict())
        return
    print_report(out, report)


def resolve_cmd(client: Client, args, out: Output) -> None:
    body = ResolveHangRequest(note=args.note) if args.note is not None else UNSET
    report: HangReport = answer(
        resolve_hang,
        args.report_id,
        client=changing_client(args),
        body=body,
        not_found_hint=NOT_FOUND,
    )
    if out.json:
        out.json_value(report.to_dict())
        return
    if out.plain:
        table = new_table(None, ("report", "status"))
        table.add_row(report.report_id, escape(status_text(report)))
        out.table(table)
        return
    out.line(f"resolved {report.report_id}: {status_text(report)}", markup=False)


def comm_text(comm: CommRef) -> str:
    """A communicator as people name it: its name, else its id."""
    return known(comm.comm_name) or comm.comm_id


def status_text(r: HangReport) -> str:
    """'resolved (fixed) at <time> UTC': a report's status."""
    resolution = known(r.resolution)
    text = r.status.value + (f" ({resolution.value})" if resolution else "")
    resolved_real_ns = known(r.resolved_real_ns)
    if resolved_real_ns:
        text += f" at {time_text(resolved_real_ns)} UTC"
    return text


def print_report(out: Output, report: HangReport) -> None:
    out.line(
        f"[bold]{report.report_id}[/bold] {report.verdict.value} "
        f"({report.severity.value}, {status_text(report)}), detected "
        f"{time_text(report.detected_real_ns)} UTC after {ms_text(report.threshold_ms)}"
    )
    out.line(report.summary, markup=False)
    note = known(report.resolution_note)
    if note:
        out.line(f"note: {note}", markup=False)
    out.table(evidence_table("Evidence per rank", report))


def evidence_table(title: str, report: HangReport):
    """A hang report's evidence, a row per rank (also an incident's root's)."""
    table = new_table(
        title,
        ("rank", "global", "node", "pid", "process", "completed", "in flight"),
        right=("rank", "global", "pid", "completed"),
    )
    for e in report.evidence:
        inflight = known(e.inflight)
        last_completed = known(e.last_completed)
        table.add_row(
            str(e.comm_rank),
            opt(e.global_rank),
            e.node_name,
            opt(e.pid),
            e.process_state.value,
            opt(last_completed.seq if last_completed else None),
            f"{inflight.func} {ms_text(inflight.age_ms)}" if inflight else "-",
        )
    return table
