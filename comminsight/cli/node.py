"""`comminsight status | health | processes | nodes`: the agent, its node and (on a master)
the nodes of the job.

`status` against a master shows the whole job: every node and its agent's state, the
processes of each node and the communicators that span nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.markup import escape

from comminsight.cli.client import PAGE, all_pages, answer, known
from comminsight.cli.output import Output, new_table
from comminsight.human_units import duration_text, ms_text, time_text
from comminsight_client import Client
from comminsight_client.api.communicators import list_communicators
from comminsight_client.api.health import get_health
from comminsight_client.api.node import get_node, list_nodes
from comminsight_client.models import (
    AgentMode,
    Communicator,
    CommunicatorStateFilter,
    CommunicatorView,
    Health,
    HealthStatus,
    Node,
    NodeStateFilter,
    NodeSummary,
)
from comminsight_client.types import UNSET

NODE_STATE_STYLE = {
    "local": "green",
    "connected": "green",
    "stale": "yellow",
    "disconnected": "red",
    "rejected": "red",
}


def opt(value) -> str:
    """A cell for a nullable or optional field: '-' where it is null or left out."""
    value = known(value)
    return "-" if value is None else str(value)


def yes_no(flag: bool) -> str:
    return "yes" if flag else "[red]no[/red]"


# ---- commands -----------------------------------------------------------------------------


def status(client: Client, args, out: Output) -> None:
    health: Health = answer(get_health, client=client)
    node: Node = answer(get_node, client=client)
    if health.mode is AgentMode.MASTER:
        job_status(client, args, out, health, node)
        return
    if out.json:
        out.json_value({"health": health.to_dict(), "node": node.to_dict()})
        return
    print_health(out, health)
    out.table(processes_table(node))


def health_cmd(client: Client, args, out: Output) -> None:
    health: Health = answer(get_health, client=client)
    if out.json:
        out.json_value(health.to_dict())
        return
    print_health(out, health)
    out.line(
        f"started {time_text(health.started_real_ns)} UTC; nodes current "
        f"{health.nodes_connected}/{health.nodes_total}"
    )
    engine = known(health.semantic_engine)
    if not engine:
        out.line("semantic engine: off")
        return
    out.line(
        f"semantic engine: {'running' if engine.running else '[red]stopped[/red]'}, lag "
        f"{ms_text(engine.lag_ms)}, {engine.failures_total} failures, "
        f"{engine.restarts_total} restarts"
    )
    failure = engine.last_failure
    if failure:
        out.line(
            f"  last failure {time_text(failure.failed_real_ns)} UTC, pid {failure.pid}: "
            f"{failure.reason}: {failure.message}",
            markup=False,
        )
    table = new_table(
        "Semantic engine per GPU",
        ("rank", "pid", "state", "lag", "steps written", "failures", "restarts", "retry in"),
        right=("rank", "pid", "steps written", "failures", "restarts"),
    )
    for g in engine.gpus:
        table.add_row(
            opt(g.global_rank),
            str(g.pid),
            g.state.value,
            ms_text(g.lag_ms),
            str(g.steps_written),
            str(g.failures),
            str(g.restarts),
            ms_text(g.retry_in_ms),
        )
    out.table(table)


def processes_cmd(client: Client, args, out: Output) -> None:
    node: Node = answer(get_node, client=client)
    if out.json:
        out.json_value(node.to_dict())
        return
    out.line(
        f"{node.node_name} (host {node.host}): agent pid {node.agent_pid}, home "
        f"{node.comminsight_home}",
        markup=False,
    )
    out.table(processes_table(node))


def nodes_cmd(client: Client, args, out: Output) -> None:
    nodes = list_all_nodes(client, args.state)
    if out.json:
        out.json_value([n.to_dict() for n in nodes])
        return
    out.table(nodes_table(nodes, f"Nodes: {len(nodes)}"))


# ---- tables -------------------------------------------------------------------------------


def print_health(out: Output, health: Health) -> None:
    colour = "green" if health.status is HealthStatus.OK else "yellow"
    out.line(
        f"agent {health.agent_version} on [bold]{health.node_name}[/bold] "
        f"({health.mode.value}): [{colour}]{health.status.value}[/{colour}], up "
        f"{duration_text(health.uptime_s * 1e9)}, {health.processes_alive}/"
        f"{health.processes_total} processes alive, {health.communicators_total} "
        f"communicators, {health.open_hangs} open hangs, ingest lag "
        f"{ms_text(health.ingest_lag_ms)}"
    )
    for reason in health.reasons:
        out.line(f"  • {reason}", markup=False)


def processes_table(node: Node):
    table = new_table(
        f"Profiled processes on {node.node_name}",
        (
            "rank",
            "local",
            "pid",
            "device",
            "state",
            "alive",
            "heartbeat",
            "records",
            "lost",
            "communicators",
            "process",
        ),
        right=("rank", "local", "pid", "device", "records", "lost", "communicators"),
    )
    for p in node.processes:
        table.add_row(
            opt(p.global_rank),
            opt(p.local_rank),
            str(p.pid),
            opt(p.cuda_device),
            p.ingest_state.value,
            yes_no(p.alive),
            ms_text(p.heartbeat_age_ms) + (" ago" if p.heartbeat_age_ms is not None else ""),
            str(p.records_read_total),
            str(p.records_overwritten_total),
            str(len(p.comm_ids)),
            escape(p.process_name),
        )
    return table


def list_all_nodes(client: Client, state: str = "all") -> list[NodeSummary]:
    return all_pages(list_nodes, client=client, state=NodeStateFilter(state), limit=PAGE)


def list_all_communicators(
    client: Client, state: str, name: str | None, full: bool
) -> list[Communicator]:
    return all_pages(
        list_communicators,
        client=client,
        state=CommunicatorStateFilter(state),
        name_contains=name or UNSET,
        view=CommunicatorView.FULL if full else CommunicatorView.SUMMARY,
        limit=PAGE,
    )


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5': a node of many GPUs stays one cell wide."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def nodes_table(nodes: list[NodeSummary], title: str):
    table = new_table(
        title,
        (
            "node",
            "host",
            "mode",
            "state",
            "processes",
            "global ranks",
            "last seen",
            "batch",
            "refusals",
            "last refusal",
        ),
        right=("batch", "refusals"),
    )
    for n in nodes:
        state = n.state.value
        style = NODE_STATE_STYLE.get(state, "white")
        reject = n.last_reject
        table.add_row(
            n.node_name,
            opt(n.host),
            n.mode.value,
            f"[{style}]{state}[/{style}]",
            f"{n.processes_alive}/{n.processes_total}",
            rank_ranges(n.global_ranks),
            ms_text(n.last_seen_age_ms) + (" ago" if n.last_seen_age_ms is not None else ""),
            opt(n.last_applied_batch_seq),
            str(n.rejects_total),
            escape(f"{reject.reason}: {reject.message}") if reject else "-",
        )
    return table


# ---- status of a whole job (a master) ------------------------------------------------------


@dataclass
class JobProcess:
    """A process of the job, from its node's process list or from a communicator's rank."""

    global_rank: int | None
    local_rank: int | None
    pid: int
    cuda_device: int | None
    alive: bool
    comm_ids: set[str] = field(default_factory=set)


def job_processes(node: Node, comms: list[Communicator]) -> dict[str, list[JobProcess]]:
    """Processes by node name. The API lists the processes of the master's own node (/node);
    those of other nodes appear as the ranks of their communicators (node_name, pid, rank),
    so a remote process in no communicator is only counted (NodeSummary.processes_total)."""
    # a process: its pid in its PID namespace (pods of one node share pids)
    by_node: dict[str, dict[tuple[int, int | None], JobProcess]] = {}
    for p in node.processes:
        by_node.setdefault(p.node_name, {})[p.pid, p.pid_namespace] = JobProcess(
            p.global_rank, p.local_rank, p.pid, p.cuda_device, p.alive, set(p.comm_ids)
        )
    for c in comms:
        for r in c.ranks or []:
            proc = by_node.setdefault(r.node_name, {}).setdefault(
                (r.pid, r.pid_namespace),
                JobProcess(r.global_rank, r.local_rank, r.pid, r.cuda_device, r.alive),
            )
            proc.comm_ids.add(c.comm_id)
    return {
        name: sorted(procs.values(), key=lambda p: (p.global_rank is None, p.global_rank or 0))
        for name, procs in by_node.items()
    }


def job_status(client: Client, args, out: Output, health: Health, node: Node) -> None:
    nodes = list_all_nodes(client)
    comms = list_all_communicators(client, "all", None, full=True)
    if out.json:
        out.json_value(
            {
                "health": health.to_dict(),
                "node": node.to_dict(),
                "nodes": [n.to_dict() for n in nodes],
                "communicators": [c.to_dict() for c in comms],
            }
        )
        return
    print_health(out, health)
    out.table(nodes_table(nodes, f"Nodes of the job: {len(nodes)}"))
    processes = job_processes(node, comms)
    table = new_table(
        "Processes per node",
        ("node", "rank", "local", "pid", "device", "alive", "communicators"),
        right=("rank", "local", "pid", "device", "communicators"),
    )
    unlisted = []
    for n in nodes:
        procs = processes.get(n.node_name, [])
        for p in procs:
            table.add_row(
                n.node_name,
                opt(p.global_rank),
                opt(p.local_rank),
                str(p.pid),
                opt(p.cuda_device),
                yes_no(p.alive),
                str(len(p.comm_ids)),
            )
        if n.processes_total > len(procs):
            unlisted.append(f"{n.node_name}: {n.processes_total - len(procs)}")
    out.table(table)
    if unlisted:
        out.line(
            "processes in no communicator yet, counted but not listed (only the node's own "
            f"agent lists them): {', '.join(unlisted)}",
            markup=False,
        )
    spanning = [c for c in comms if len(c.nodes) > 1]
    table = new_table(
        f"Communicators spanning nodes: {len(spanning)} of {len(comms)}",
        ("comm_id", "name", "state", "ranks seen", "nodes", "in flight", "open hangs"),
        right=("in flight", "open hangs"),
    )
    for c in spanning:
        table.add_row(
            c.comm_id,
            escape(opt(c.name)),
            c.state.value,
            f"{len(c.ranks_seen)}/{c.nranks}",
            ", ".join(c.nodes),
            str(c.ranks_inflight),
            str(len(c.open_hang_report_ids)),
        )
    out.table(table)
