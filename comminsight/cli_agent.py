"""`comminsight status | comms | inflight | hangs | incidents | steps`: the Agent's view, from
its API (`steps <logs>` and `trace <logs>` run the Semantic Engine offline: cli_semantic).

These commands talk to a running agent only through the generated `comminsight_client`
(agent-master-api v1), so they see exactly what any other API user sees. `status` against a
master shows the whole job: every node and its agent's state, the processes of each node and
the communicators that span nodes. Tables by default,
`--json` for the response bodies as the API sent them. Exit status: 0 when the agent answered,
1 when it could not be reached or answered with an error (named on stderr).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime, timezone

import httpx
from rich.console import Console
from rich.table import Table

from comminsight.cli_semantic import add_offline_arguments, cmd_steps_offline, cmd_trace
from comminsight.config import ConfigError, load_settings
from comminsight_client import Client
from comminsight_client.api.communicators import list_communicators
from comminsight_client.api.hangs import get_hang, list_hangs
from comminsight_client.api.health import get_health
from comminsight_client.api.node import get_node, list_nodes
from comminsight_client.api.ops import list_inflight_ops
from comminsight_client.api.steps import list_steps
from comminsight_client.models import (
    CommunicatorStateFilter,
    CommunicatorView,
    Error,
    HangStatusFilter,
    NodeStateFilter,
)
from comminsight_client.types import UNSET

PAGE = 1000


class AgentUnavailable(Exception):
    pass


def default_url() -> str:
    """The local agent, where COMMINSIGHT_AGENT_LISTEN says it listens."""
    try:
        listen = load_settings().agent_listen
    except ConfigError:
        listen = "127.0.0.1:19102"
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def add_agent_commands(sub: argparse._SubParsersAction) -> None:
    def command(name: str, help_text: str, func: Callable) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--url", default=None, help="agent API base URL (default: the local agent)")
        p.add_argument("--json", action="store_true", help="print the API's JSON")
        p.set_defaults(func=lambda args, console: run(func, args, console))
        return p

    command("status", "the agent's health, node and profiled processes", status)
    comms = command("comms", "communicators and their progress", comms_cmd)
    comms.add_argument("--state", choices=["active", "finalized", "all"], default="all")
    comms.add_argument("--name", default=None, help="only names containing this text")
    comms.add_argument("--full", action="store_true", help="with every rank's progress")
    inflight = command("inflight", "operations in flight now, oldest first", inflight_cmd)
    inflight.add_argument("--min-age-ms", type=int, default=0)
    inflight.add_argument("--limit", type=int, default=100)
    hangs = command("hangs", "hang reports, newest first", hangs_cmd)
    hangs.add_argument("--status", choices=["open", "resolved", "all"], default="open")
    hangs.add_argument("--id", default=None, help="one report with all its evidence")
    hangs.add_argument("--limit", type=int, default=100)
    from comminsight import cli_incidents

    incidents = command(
        "incidents", "hangs grouped by cause, the root cause first", cli_incidents.incidents_cmd
    )
    cli_incidents.add_arguments(incidents)
    steps = command(
        "steps", "step summaries: from the agent, or recovered from a directory of logs", steps_cmd
    )
    steps.add_argument(
        "logs",
        nargs="?",
        default=None,
        help="an inspector_logs directory: recover its steps offline instead of asking the agent",
    )
    steps.add_argument("--rank", type=int, default=None)
    steps.add_argument("--since-step", type=int, default=0)
    steps.add_argument("--limit", type=int, default=100)
    steps.add_argument("--out", default=None, help="offline: where to write the summaries")
    add_offline_arguments(steps)
    steps.set_defaults(
        func=lambda args, console: (
            cmd_steps_offline(args, console) if args.logs else run(steps_cmd, args, console)
        )
    )
    trace = sub.add_parser("trace", help="a Chrome/Perfetto trace of a directory of logs")
    trace.add_argument("logs", help="an inspector_logs directory")
    trace.add_argument("-o", "--output", required=True, help="trace file to write (JSON)")
    add_offline_arguments(trace)
    trace.set_defaults(func=cmd_trace)


def run(func: Callable, args: argparse.Namespace, console: Console) -> int:
    url = args.url or default_url()
    client = Client(base_url=url, timeout=httpx.Timeout(10.0))
    err = Console(stderr=True)
    try:
        func(client, args, console)
    except AgentUnavailable as e:
        err.print(f"[red]comminsight:[/red] {e}")
        return 1
    except httpx.HTTPError as e:
        err.print(f"[red]comminsight:[/red] cannot reach the agent at {url}: {e}")
        return 1
    return 0


def answer(response):
    """The parsed body of a 2xx answer; AgentUnavailable naming the API's error otherwise."""
    body = response.parsed
    if isinstance(body, Error) or not 200 <= int(response.status_code) < 300:
        if isinstance(body, Error):
            raise AgentUnavailable(
                f"agent answered {int(response.status_code)} {body.code.value}: {body.message}"
            )
        raise AgentUnavailable(
            f"agent answered {int(response.status_code)}: {response.content[:200]!r}"
        )
    return body


def print_json(console: Console, value) -> None:
    console.print_json(json.dumps(value))


def when(real_ns: int | None) -> str:
    if not real_ns:
        return "-"
    return datetime.fromtimestamp(real_ns / 1e9, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def opt(value) -> str:
    return "-" if value is None or value is UNSET else str(value)


# ---- commands -----------------------------------------------------------------------------


def status(client: Client, args, console: Console) -> None:
    health = answer(get_health.sync_detailed(client=client)).to_dict()
    node = answer(get_node.sync_detailed(client=client)).to_dict()
    if health["mode"] == "master":
        job_status(client, args, console, health, node)
        return
    if args.json:
        print_json(console, {"health": health, "node": node})
        return
    print_health(console, health)
    print_processes(console, node)


def print_health(console: Console, health: dict) -> None:
    colour = "green" if health["status"] == "ok" else "yellow"
    console.print(
        f"agent {health['agent_version']} on [bold]{health['node_name']}[/bold] "
        f"({health['mode']}): [{colour}]{health['status']}[/{colour}], up "
        f"{health['uptime_s']:.0f} s, {health['processes_alive']}/{health['processes_total']} "
        f"processes alive, {health['communicators_total']} communicators, "
        f"{health['open_hangs']} open hangs, ingest lag "
        f"{opt(health['ingest_lag_ms'] and round(health['ingest_lag_ms'], 1))} ms"
    )
    for reason in health["reasons"]:
        console.print(f"  [yellow]•[/yellow] {reason}")


def print_processes(console: Console, node: dict) -> None:
    table = Table(title=f"Profiled processes on {node['node_name']}")
    for column in (
        "rank",
        "local",
        "pid",
        "device",
        "state",
        "alive",
        "records",
        "lost",
        "communicators",
    ):
        table.add_column(column)
    for p in node["processes"]:
        table.add_row(
            opt(p["global_rank"]),
            opt(p["local_rank"]),
            str(p["pid"]),
            opt(p["cuda_device"]),
            p["ingest_state"],
            "yes" if p["alive"] else "[red]no[/red]",
            str(p["records_read_total"]),
            str(p["records_overwritten_total"]),
            str(len(p["comm_ids"])),
        )
    console.print(table)


def all_pages(fetch: Callable) -> list[dict]:
    """Every item of a paged list endpoint; `fetch(cursor)` gets one page."""
    items, cursor = [], UNSET
    while True:
        page = answer(fetch(cursor)).to_dict()
        items.extend(page["items"])
        if not page["next_cursor"]:
            return items
        cursor = page["next_cursor"]


def list_all_communicators(client: Client, state: str, name: str | None, full: bool) -> list:
    return all_pages(
        lambda cursor: list_communicators.sync_detailed(
            client=client,
            state=CommunicatorStateFilter(state),
            name_contains=name or UNSET,
            view=CommunicatorView.FULL if full else CommunicatorView.SUMMARY,
            limit=PAGE,
            cursor=cursor,
        )
    )


# ---- status of a whole job (a master) ------------------------------------------------------

NODE_STATE_STYLE = {
    "local": "green",
    "connected": "green",
    "stale": "yellow",
    "disconnected": "red",
    "rejected": "red",
}


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5': a node of many GPUs stays one cell wide."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def job_processes(node: dict, comms: list[dict]) -> dict[str, list[dict]]:
    """Processes by node name. The API lists the processes of the master's own node (/node);
    those of other nodes appear as the ranks of their communicators (node_name, pid, rank),
    so a remote process in no communicator is only counted (NodeSummary.processes_total)."""
    by_node: dict[str, dict[int, dict]] = {}
    for p in node["processes"]:
        by_node.setdefault(p["node_name"], {})[p["pid"]] = {
            "global_rank": p["global_rank"],
            "local_rank": p["local_rank"],
            "pid": p["pid"],
            "cuda_device": p["cuda_device"],
            "alive": p["alive"],
            "comm_ids": set(p["comm_ids"]),
        }
    for c in comms:
        for r in c["ranks"] or []:
            proc = by_node.setdefault(r["node_name"], {}).setdefault(
                r["pid"],
                {
                    "global_rank": r["global_rank"],
                    "local_rank": r["local_rank"],
                    "pid": r["pid"],
                    "cuda_device": r["cuda_device"],
                    "alive": r["alive"],
                    "comm_ids": set(),
                },
            )
            proc["comm_ids"].add(c["comm_id"])
    return {
        name: sorted(
            procs.values(), key=lambda p: (p["global_rank"] is None, p["global_rank"] or 0)
        )
        for name, procs in by_node.items()
    }


def job_status(client: Client, args, console: Console, health: dict, node: dict) -> None:
    nodes = all_pages(
        lambda cursor: list_nodes.sync_detailed(
            client=client, state=NodeStateFilter.ALL, limit=PAGE, cursor=cursor
        )
    )
    comms = list_all_communicators(client, "all", None, full=True)
    if args.json:
        print_json(
            console, {"health": health, "node": node, "nodes": nodes, "communicators": comms}
        )
        return
    print_health(console, health)
    table = Table(title=f"Nodes of the job: {len(nodes)}")
    for column in (
        "node",
        "host",
        "mode",
        "state",
        "processes",
        "global ranks",
        "last seen (ms)",
        "batch",
        "refusals",
        "last refusal",
    ):
        table.add_column(column)
    for n in nodes:
        style = NODE_STATE_STYLE.get(n["state"], "white")
        reject = n["last_reject"]
        table.add_row(
            n["node_name"],
            opt(n["host"]),
            n["mode"],
            f"[{style}]{n['state']}[/{style}]",
            f"{n['processes_alive']}/{n['processes_total']}",
            rank_ranges(n["global_ranks"]),
            opt(n["last_seen_age_ms"]),
            opt(n["last_applied_batch_seq"]),
            str(n["rejects_total"]),
            f"{reject['reason']}: {reject['message']}" if reject else "-",
        )
    console.print(table)
    processes = job_processes(node, comms)
    table = Table(title="Processes per node")
    for column in ("node", "rank", "local", "pid", "device", "alive", "communicators"):
        table.add_column(column)
    unlisted = []
    for n in nodes:
        procs = processes.get(n["node_name"], [])
        for p in procs:
            table.add_row(
                n["node_name"],
                opt(p["global_rank"]),
                opt(p["local_rank"]),
                str(p["pid"]),
                opt(p["cuda_device"]),
                "yes" if p["alive"] else "[red]no[/red]",
                str(len(p["comm_ids"])),
            )
        if n["processes_total"] > len(procs):
            unlisted.append(f"{n['node_name']}: {n['processes_total'] - len(procs)}")
    console.print(table)
    if unlisted:
        console.print(
            "processes in no communicator yet, counted but not listed (only the node's own "
            f"agent lists them): {', '.join(unlisted)}"
        )
    spanning = [c for c in comms if len(c["nodes"]) > 1]
    table = Table(title=f"Communicators spanning nodes: {len(spanning)} of {len(comms)}")
    for column in ("comm_id", "name", "state", "ranks seen", "nodes", "in flight", "open hangs"):
        table.add_column(column)
    for c in spanning:
        table.add_row(
            c["comm_id"],
            opt(c["name"]),
            c["state"],
            f"{len(c['ranks_seen'])}/{c['nranks']}",
            ", ".join(c["nodes"]),
            str(c["ranks_inflight"]),
            str(len(c["open_hang_report_ids"])),
        )
    console.print(table)


def comms_cmd(client: Client, args, console: Console) -> None:
    items = list_all_communicators(client, args.state, args.name, args.full)
    if args.json:
        print_json(console, items)
        return
    table = Table(title="Communicators")
    for column in (
        "comm_id",
        "name",
        "state",
        "ranks seen",
        "ops",
        "bytes",
        "in flight",
        "oldest (ms)",
        "open hangs",
    ):
        table.add_column(column)
    for c in items:
        table.add_row(
            c["comm_id"],
            opt(c["name"]),
            c["state"],
            f"{len(c['ranks_seen'])}/{c['nranks']}",
            str(c["ops_completed_total"]),
            str(c["bytes_completed_total"]),
            str(c["ranks_inflight"]),
            opt(c["oldest_inflight_age_ms"]),
            str(len(c["open_hang_report_ids"])),
        )
    console.print(table)
    if args.full:
        for c in items:
            ranks = Table(title=f"{c['comm_id']} {opt(c['name'])}: ranks")
            for column in (
                "rank",
                "global",
                "pid",
                "enqueued",
                "started",
                "completed",
                "in flight",
                "oldest op",
                "alive",
            ):
                ranks.add_column(column)
            for r in c["ranks"] or []:
                coll = r["progress"]["collectives"]
                oldest = r["progress"]["oldest_inflight"]
                ranks.add_row(
                    str(r["comm_rank"]),
                    opt(r["global_rank"]),
                    str(r["pid"]),
                    opt(coll["last_enqueued_seq"]),
                    opt(coll["last_gpu_started_seq"]),
                    opt(coll["last_completed_seq"]),
                    str(r["progress"]["inflight_count"]),
                    f"{oldest['func']} {oldest['age_ms']} ms" if oldest else "-",
                    "yes" if r["alive"] else "[red]no[/red]",
                )
            console.print(ranks)


def inflight_cmd(client: Client, args, console: Console) -> None:
    body = answer(
        list_inflight_ops.sync_detailed(client=client, min_age_ms=args.min_age_ms, limit=args.limit)
    ).to_dict()
    if args.json:
        print_json(console, body)
        return
    table = Table(title=f"In flight: {body['total']} (as of {when(body['as_of_real_ns'])} UTC)")
    for column in (
        "age (ms)",
        "comm_id",
        "rank",
        "global",
        "op",
        "seq",
        "bytes",
        "state",
        "channels",
        "queued",
        "flagged",
    ):
        table.add_column(column)
    for op in body["items"]:
        table.add_row(
            str(op["age_ms"]),
            op["comm_id"],
            str(op["comm_rank"]),
            opt(op["global_rank"]),
            op["func"],
            str(op["seq"]),
            str(op["size_bytes"]),
            op["state"],
            f"{op['channels_completed']}/{op['channels_started']}/{opt(op['n_channels'])}",
            str(op["inflight_count"]),
            "[red]yes[/red]" if op["hang_flagged"] else "no",
        )
    console.print(table)


def hangs_cmd(client: Client, args, console: Console) -> None:
    if args.id:
        report = answer(get_hang.sync_detailed(args.id, client=client)).to_dict()
        if args.json:
            print_json(console, report)
            return
        console.print(
            f"[bold]{report['report_id']}[/bold] {report['verdict']} "
            f"({report['severity']}, {report['status']})"
        )
        console.print(report["summary"])
        table = Table(title="Evidence per rank")
        for column in ("rank", "global", "node", "pid", "process", "completed", "in flight"):
            table.add_column(column)
        for e in report.get("evidence", []):
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
        return
    body = answer(
        list_hangs.sync_detailed(
            client=client, status=HangStatusFilter(args.status), limit=args.limit
        )
    ).to_dict()
    if args.json:
        print_json(console, body)
        return
    table = Table(title=f"Hang reports ({args.status}): {body['total']}")
    for column in ("#", "detected (UTC)", "verdict", "comm", "culprits", "status"):
        table.add_column(column)
    for n, r in enumerate(body["items"], 1):
        table.add_row(
            str(n),
            when(r["detected_real_ns"]),
            f"{r['verdict']} ({r['severity']})",
            r["comm"].get("comm_name") or r["comm"]["comm_id"],
            ", ".join(str(c["comm_rank"]) for c in r["culprits"]) or "-",
            r["status"] + (f" ({r['resolution']})" if r.get("resolution") else ""),
        )
    console.print(table)
    for n, r in enumerate(body["items"], 1):  # summaries are sentences: below, not in cells
        console.print(f"{n}. [bold]{r['report_id']}[/bold]: {r['summary']}")


def steps_cmd(client: Client, args, console: Console) -> None:
    body = answer(
        list_steps.sync_detailed(
            client=client,
            rank=args.rank if args.rank is not None else UNSET,
            since_step=args.since_step,
            limit=args.limit,
        )
    ).to_dict()
    if args.json:
        print_json(console, body)
        return
    table = Table(title=f"Step summaries: {body['total']}")
    for column in (
        "step",
        "rank",
        "start (UTC)",
        "duration (ms)",
        "ops",
        "bytes",
        "busbw GB/s",
        "anomalies",
    ):
        table.add_column(column)
    for s in body["items"]:
        table.add_row(
            str(s["step_index"]),
            str(s["global_rank"]),
            when(s["start_real_ns"]),
            f"{s['duration_ns'] / 1e6:.2f}",
            str(s["op_count"]),
            str(s["total_bytes"]),
            opt(s.get("busbw_gbs")),
            ", ".join(a["kind"] for a in s.get("anomalies", [])) or "-",
        )
    console.print(table)
