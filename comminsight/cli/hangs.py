"""`comminsight hangs [list | show ID | resolve ID]`: hang reports, newest first, one report
with its evidence per rank, and an operator's resolution (needs the agent's token).

Report summaries are sentences: printed whole below the table, never cut into a cell.
"""

from __future__ import annotations

from rich.markup import escape

from comminsight.cli.client import answer, changing_client
from comminsight.cli.node import opt
from comminsight.cli.output import Output, new_table
from comminsight.human_units import ms_text, time_text
from comminsight_client import Client
from comminsight_client.api.hangs import get_hang, list_hangs, resolve_hang
from comminsight_client.models import HangStatusFilter, ResolveHangRequest
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
    body = answer(
        list_hangs,
        client=client,
        status=HangStatusFilter(args.status),
        comm_id=args.comm_id or UNSET,
        limit=args.limit,
    ).to_dict()
    if out.json:
        out.json_value(body)
        return
    table = new_table(
        f"Hang reports ({args.status}): {body['total']}",
        ("#", "report", "detected (UTC)", "verdict", "comm", "culprits", "status"),
        right=("#",),
    )
    for n, r in enumerate(body["items"], 1):
        table.add_row(
            str(n),
            r["report_id"],
            time_text(r["detected_real_ns"]),
            f"{r['verdict']} ({r['severity']})",
            escape(r["comm"].get("comm_name") or r["comm"]["comm_id"]),
            ", ".join(str(c["comm_rank"]) for c in r["culprits"]) or "-",
            status_text(r),
        )
    out.table(table)
    for n, r in enumerate(body["items"], 1):
        out.line(f"{n}. [bold]{r['report_id']}[/bold]: {escape(r['summary'])}")


def show(client: Client, report_id: str, out: Output) -> None:
    report = answer(get_hang, report_id, client=client, not_found_hint=NOT_FOUND).to_dict()
    if out.json:
        out.json_value(report)
        return
    print_report(out, report)


def resolve_cmd(client: Client, args, out: Output) -> None:
    body = ResolveHangRequest(note=args.note) if args.note is not None else UNSET
    report = answer(
        resolve_hang,
        args.report_id,
        client=changing_client(args),
        body=body,
        not_found_hint=NOT_FOUND,
    ).to_dict()
    if out.json:
        out.json_value(report)
        return
    out.line(f"resolved {report['report_id']}: {status_text(report)}", markup=False)


def status_text(r: dict) -> str:
    text = r["status"] + (f" ({r['resolution']})" if r.get("resolution") else "")
    if r.get("resolved_real_ns"):
        text += f" at {time_text(r['resolved_real_ns'])} UTC"
    return text


def print_report(out: Output, report: dict) -> None:
    out.line(
        f"[bold]{report['report_id']}[/bold] {report['verdict']} "
        f"({report['severity']}, {status_text(report)}), detected "
        f"{time_text(report['detected_real_ns'])} UTC after {ms_text(report['threshold_ms'])}"
    )
    out.line(report["summary"], markup=False)
    if report.get("resolution_note"):
        out.line(f"note: {report['resolution_note']}", markup=False)
    out.table(evidence_table("Evidence per rank", report))


def evidence_table(title: str, report: dict):
    """A hang report's evidence, a row per rank (also an incident's root's)."""
    table = new_table(
        title,
        ("rank", "global", "node", "pid", "process", "completed", "in flight"),
        right=("rank", "global", "pid", "completed"),
    )
    for e in report.get("evidence", []):
        inflight = e.get("inflight")
        table.add_row(
            str(e["comm_rank"]),
            opt(e.get("global_rank")),
            e["node_name"],
            opt(e.get("pid")),
            e["process_state"],
            opt((e.get("last_completed") or {}).get("seq")),
            f"{inflight['func']} {ms_text(inflight['age_ms'])}" if inflight else "-",
        )
    return table
