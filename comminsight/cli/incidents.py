"""`comminsight incidents [list | show ID | resolve ID]`: hangs grouped by cause, the root
cause first.

One line per incident says who is to blame (the root's culprits, communicator and op) and how
many reports are blocked behind it; `--tree` shows those consequences under the report each
follows from, `--id ID` one incident with its root's evidence, how its root changed, and the
culprits' Python stacks when they were captured; `resolve ID` is an operator's resolution
(needs the agent's token). Lines are printed whole (soft-wrapped by the terminal, never cut),
so piping the output loses nothing.
"""

from __future__ import annotations

from rich.markup import escape

from comminsight.cli.client import answer, changing_client, known
from comminsight.cli.hangs import comm_text, evidence_table
from comminsight.cli.output import Output, new_table
from comminsight.human_units import time_text
from comminsight_client import Client
from comminsight_client.api.incidents import get_incident, list_incidents, resolve_incident
from comminsight_client.models import (
    Culprit,
    Incident,
    IncidentConsequence,
    IncidentDetail,
    IncidentList,
    IncidentRoot,
    IncidentStack,
    IncidentStackFrame,
    IncidentStackStatus,
    IncidentStatus,
    IncidentStatusFilter,
    ResolveIncidentRequest,
    Severity,
)
from comminsight_client.types import UNSET

NOT_FOUND = "list the incidents with `comminsight incidents --status all`"


def incidents_cmd(client: Client, args, out: Output) -> None:
    """`incidents` (a list) or, with --id, `incidents show`."""
    if args.id:
        show(client, args.id, out)
    else:
        list_cmd(client, args, out)


def show_cmd(client: Client, args, out: Output) -> None:
    show(client, args.incident_id, out)


def show(client: Client, incident_id: str, out: Output) -> None:
    detail: IncidentDetail = answer(
        get_incident, incident_id, client=client, not_found_hint=NOT_FOUND
    )
    if out.json:
        out.json_value(detail.to_dict())
    else:
        print_detail(out, detail)


def list_cmd(client: Client, args, out: Output) -> None:
    body: IncidentList = answer(
        list_incidents, client=client, status=IncidentStatusFilter(args.status), limit=args.limit
    )
    if out.json:
        out.json_value(body.to_dict())
        return
    if out.plain:
        out.table(incidents_table(f"Incidents ({args.status}): {body.total}", body.items))
        return
    out.line(f"[bold]Incidents ({args.status}): {body.total}[/bold]")
    for incident in body.items:
        print_incident(out, incident, tree=args.tree)


def resolve_cmd(client: Client, args, out: Output) -> None:
    body = ResolveIncidentRequest(note=args.note) if args.note is not None else UNSET
    incident: Incident = answer(
        resolve_incident,
        args.incident_id,
        client=changing_client(args),
        body=body,
        not_found_hint=NOT_FOUND,
    )
    if out.json:
        out.json_value(incident.to_dict())
        return
    if out.plain:
        out.table(incidents_table(None, [incident]))
        return
    print_incident(out, incident, tree=False)


def incidents_table(title: str | None, incidents: list[Incident]):
    """An incident a row, for --format plain (the sentences of the table format as cells)."""
    table = new_table(
        title,
        (
            "incident",
            "status",
            "severity",
            "opened (UTC)",
            "root report",
            "root cause",
            "summary",
            "blocked",
        ),
    )
    for incident in incidents:
        resolution = known(incident.resolution)
        table.add_row(
            incident.incident_id,
            incident.status.value + (f" ({resolution.value})" if resolution else ""),
            incident.severity.value,
            time_text(incident.opened_real_ns),
            incident.root.report_id,
            escape(root_line(incident.root)),
            escape(incident.root.summary),
            str(len(incident.consequences)),
        )
    return table


def print_incident(out: Output, incident: Incident, tree: bool) -> None:
    root = incident.root
    resolution = known(incident.resolution)
    status = incident.status.value + (f" ({resolution.value})" if resolution else "")
    colour = (
        "red"
        if incident.severity is Severity.CRITICAL and status == IncidentStatus.OPEN.value
        else "bold"
    )
    out.line(
        f"[{colour}]{incident.incident_id}[/{colour}] {status}, {incident.severity.value}, "
        f"opened {time_text(incident.opened_real_ns)} UTC"
    )
    out.line(f"  root cause: {escape(root_line(root))}")
    out.line(f"    {escape(root.summary)}")
    n = len(incident.consequences)
    if not tree:
        if n:
            out.line(f"  + {n} consequence(s) blocked behind it (--tree to show them)")
        return
    for line in consequence_tree(incident):
        out.line("  " + escape(line))


def root_line(root: IncidentRoot) -> str:
    """'rank 1 (host, pid 7) on tensor_parallel:1, AllReduce seq 5: stuck_outside_nccl'."""
    who = ", ".join(culprit_label(c) for c in root.culprits) or "no rank named"
    op = known(root.op)
    what = f", {op.func} seq {op.seq}" if op else ""
    return f"{who} on {comm_text(root.comm)}{what}: {root.verdict.value}"


def culprit_label(c: Culprit) -> str:
    global_rank, pid = known(c.global_rank), known(c.pid)
    rank = f"rank {global_rank}" if global_rank is not None else f"comm rank {c.comm_rank}"
    where = known(c.host) or c.node_name
    return f"{rank} ({where}, pid {pid})" if pid is not None else f"{rank} ({where})"


def consequence_tree(incident: Incident) -> list[str]:
    """Each consequence under the report it follows from, the root at the top."""
    below: dict[str, list[IncidentConsequence]] = {}
    for c in incident.consequences:
        below.setdefault(c.follows_from, []).append(c)
    lines = [f"{incident.root.report_id} (root)"]
    placed = set()

    def walk(report_id: str, prefix: str) -> None:
        children = [c for c in below.get(report_id, []) if c.report_id not in placed]
        for i, c in enumerate(children):
            placed.add(c.report_id)
            last = i == len(children) - 1
            lines.append(
                f"{prefix}{'└─' if last else '├─'} {comm_text(c.comm)}: {c.verdict.value} "
                f"[{c.link.value}] {c.reason}"
            )
            walk(c.report_id, prefix + ("   " if last else "│  "))

    walk(incident.root.report_id, "")
    # a consequence whose cause is no longer listed (a former root) still shows
    for c in incident.consequences:
        if c.report_id not in placed:
            lines.append(f"·  {comm_text(c.comm)}: {c.verdict.value} [{c.link.value}] {c.reason}")
    return lines


def stack_lines(stack: IncidentStack) -> list[str]:
    """'rank 1 (host, pid 7) at train.py:76 in main: time.sleep(...)', then the outer frames."""
    who = f"rank {stack.rank} ({stack.host}, pid {stack.pid})"
    thread_name = known(stack.thread_name)
    thread = f" [{thread_name}]" if thread_name else ""
    if stack.status is not IncidentStackStatus.CAPTURED:
        return [f"{who}{thread}: unavailable: {known(stack.unavailable_reason) or ''}"]
    frames = stack.frames
    if not frames:
        return [f"{who}{thread}: no Python frames"]
    out = [f"{who}{thread} at {frame_text(frames[0])}"]
    out += [f"    called from {frame_text(f)}" for f in frames[1:]]
    return out


def frame_text(f: IncidentStackFrame) -> str:
    line_no, code_text = known(f.line), known(f.code)
    line = f":{line_no}" if line_no is not None else ""
    code = f": {code_text}" if code_text else ""
    return f"{f.file}{line} in {f.function}{code}"


def print_detail(out: Output, detail: IncidentDetail) -> None:
    incident, reports = detail.incident, detail.reports
    print_incident(out, incident, tree=True)
    for change in incident.root_changes:
        out.line(
            f"  root changed {time_text(change.at_real_ns)} UTC from "
            f"{change.from_report_id}: {escape(change.reason)}"
        )
    note = known(incident.resolution_note)
    if note:
        out.line(f"  note: {escape(note)}")
    root = next((r for r in reports if r.report_id == incident.root.report_id), None)
    if root is not None:
        out.table(evidence_table("Evidence of the root, per rank", root))
    for c in incident.root.culprits:
        out.line(f"  {escape(culprit_label(c))}: {escape(c.reason)}")
    stacks = incident.stacks
    if not stacks:
        out.line("Python stacks: none captured")
        return
    out.line("Python stacks:")
    for stack in stacks:
        for line in stack_lines(stack):
            out.line("  " + escape(line))
