"""`comminsight incidents`: hangs grouped by cause, the root cause first.

One line per incident says who is to blame (the root's culprits, communicator and op) and how
many reports are blocked behind it; `--tree` shows those consequences under the report each
follows from, `--id ID` one incident with its root's evidence, how its root changed, and the
culprits' Python stacks when they were captured. Lines are printed whole (soft-wrapped by the
terminal, never cut), so piping the output loses nothing.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from comminsight_client import Client
from comminsight_client.api.incidents import get_incident, list_incidents
from comminsight_client.models import IncidentStatusFilter


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--status", choices=["open", "resolved", "all"], default="open")
    p.add_argument("--tree", action="store_true", help="show each incident's consequences")
    p.add_argument("--id", default=None, help="one incident with its evidence and stacks")
    p.add_argument("--limit", type=int, default=100)


def incidents_cmd(client: Client, args, console: Console) -> None:
    from comminsight.cli_agent import answer, print_json

    if args.id:
        detail = answer(get_incident.sync_detailed(args.id, client=client)).to_dict()
        if args.json:
            print_json(console, detail)
        else:
            print_detail(console, detail)
        return
    body = answer(
        list_incidents.sync_detailed(
            client=client, status=IncidentStatusFilter(args.status), limit=args.limit
        )
    ).to_dict()
    if args.json:
        print_json(console, body)
        return
    say(console, f"[bold]Incidents ({args.status}): {body['total']}[/bold]")
    for incident in body["items"]:
        print_incident(console, incident, tree=args.tree)


def say(console: Console, text: str) -> None:
    console.print(text, soft_wrap=True, highlight=False)


def print_incident(console: Console, incident: dict, tree: bool) -> None:
    from comminsight.cli_agent import when

    root = incident["root"]
    status = incident["status"] + (
        f" ({incident['resolution']})" if incident.get("resolution") else ""
    )
    colour = "red" if incident["severity"] == "critical" and status == "open" else "bold"
    say(
        console,
        f"[{colour}]{incident['incident_id']}[/{colour}] {status}, {incident['severity']}, "
        f"opened {when(incident['opened_real_ns'])} UTC",
    )
    say(console, f"  root cause: {escape(root_line(root))}")
    say(console, f"    {escape(root['summary'])}")
    n = len(incident["consequences"])
    if not tree:
        if n:
            say(console, f"  + {n} consequence(s) blocked behind it (--tree to show them)")
        return
    for line in consequence_tree(incident):
        say(console, "  " + escape(line))


def root_line(root: dict) -> str:
    """'rank 1 (host, pid 7) on tensor_parallel:1, AllReduce seq 5: stuck_outside_nccl'."""
    who = ", ".join(culprit_label(c) for c in root.get("culprits", [])) or "no rank named"
    comm = root["comm"].get("comm_name") or root["comm"]["comm_id"]
    op = root.get("op")
    what = f", {op['func']} seq {op['seq']}" if op else ""
    return f"{who} on {comm}{what}: {root['verdict']}"


def culprit_label(c: dict) -> str:
    rank = f"rank {c['global_rank']}" if "global_rank" in c else f"comm rank {c['comm_rank']}"
    where = c.get("host") or c["node_name"]
    return f"{rank} ({where}, pid {c['pid']})" if "pid" in c else f"{rank} ({where})"


def consequence_tree(incident: dict) -> list[str]:
    """Each consequence under the report it follows from, the root at the top."""
    below: dict[str, list[dict]] = {}
    for c in incident["consequences"]:
        below.setdefault(c["follows_from"], []).append(c)
    lines = [f"{incident['root']['report_id']} (root)"]
    placed = set()

    def walk(report_id: str, prefix: str) -> None:
        children = [c for c in below.get(report_id, []) if c["report_id"] not in placed]
        for i, c in enumerate(children):
            placed.add(c["report_id"])
            last = i == len(children) - 1
            comm = c["comm"].get("comm_name") or c["comm"]["comm_id"]
            lines.append(
                f"{prefix}{'└─' if last else '├─'} {comm}: {c['verdict']} [{c['link']}] "
                f"{c['reason']}"
            )
            walk(c["report_id"], prefix + ("   " if last else "│  "))

    walk(incident["root"]["report_id"], "")
    # a consequence whose cause is no longer listed (a former root) still shows
    for c in incident["consequences"]:
        if c["report_id"] not in placed:
            comm = c["comm"].get("comm_name") or c["comm"]["comm_id"]
            lines.append(f"·  {comm}: {c['verdict']} [{c['link']}] {c['reason']}")
    return lines


def stack_lines(stack: dict) -> list[str]:
    """'rank 1 (host, pid 7) at train.py:76 in main: time.sleep(...)', then the outer frames."""
    who = f"rank {stack['rank']} ({stack['host']}, pid {stack['pid']})"
    thread = f" [{stack['thread_name']}]" if stack.get("thread_name") else ""
    if stack["status"] != "captured":
        return [f"{who}{thread}: unavailable: {stack.get('unavailable_reason', '')}"]
    frames = stack["frames"]
    if not frames:
        return [f"{who}{thread}: no Python frames"]
    out = [f"{who}{thread} at {frame_text(frames[0])}"]
    out += [f"    called from {frame_text(f)}" for f in frames[1:]]
    return out


def frame_text(f: dict) -> str:
    line = f":{f['line']}" if f.get("line") is not None else ""
    code = f": {f['code']}" if f.get("code") else ""
    return f"{f['file']}{line} in {f['function']}{code}"


def print_detail(console: Console, detail: dict) -> None:
    from comminsight.cli_agent import opt, when

    incident, reports = detail["incident"], detail["reports"]
    print_incident(console, incident, tree=True)
    for change in incident["root_changes"]:
        say(
            console,
            f"  root changed {when(change['at_real_ns'])} UTC from {change['from_report_id']}: "
            f"{escape(change['reason'])}",
        )
    if incident.get("resolution_note"):
        say(console, f"  note: {escape(incident['resolution_note'])}")
    root = next((r for r in reports if r["report_id"] == incident["root"]["report_id"]), None)
    if root is not None:
        table = Table(title="Evidence of the root, per rank")
        for column in ("rank", "global", "node", "pid", "process", "completed", "in flight"):
            table.add_column(column, overflow="fold")
        for e in root.get("evidence", []):
            inflight = e.get("inflight")
            table.add_row(
                str(e["comm_rank"]),
                opt(e.get("global_rank")),
                e["node_name"],
                opt(e.get("pid")),
                e["process_state"],
                opt((e.get("last_completed") or {}).get("seq")),
                f"{inflight['func']} {inflight['age_ms']} ms" if inflight else "-",
            )
        console.print(table)
    for c in incident["root"].get("culprits", []):
        say(console, f"  {escape(culprit_label(c))}: {escape(c['reason'])}")
    stacks = incident["stacks"]
    if not stacks:
        say(console, "Python stacks: none captured")
        return
    say(console, "Python stacks:")
    for stack in stacks:
        for line in stack_lines(stack):
            say(console, "  " + escape(line))
