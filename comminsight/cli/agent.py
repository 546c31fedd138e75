"""The `comminsight` commands that ask an agent, one (or a sub-command) per thing its API
offers: status, health, processes, nodes, comms, inflight, ops recent, steps, job-steps, hangs
(list, show, resolve), incidents (list, show, resolve), archive (status, flush), metrics,
openapi. (`steps <logs>` and `trace <logs>` run the Semantic Engine offline: cli.semantic.)

They talk to a running agent only through the generated `comminsight_client`
(agent-master-api v1), so they see exactly what any other API user sees. Tables by default
(every value whole, also in a pipe), `--format plain` for tab-separated lines, `--format json`
(or `--json`) for the response bodies as the API sent them. Exit status: 0 when the agent
answered, 1 when it could not be reached or answered with an error (named on stderr, with a
hint), 2 for a bad command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from comminsight.cli import archive as cli_archive
from comminsight.cli import hangs as cli_hangs
from comminsight.cli import incidents as cli_incidents
from comminsight.cli import meta as cli_meta
from comminsight.cli import node as cli_node
from comminsight.cli import ops as cli_ops
from comminsight.cli.client import add_common_options, run
from comminsight.cli.semantic import add_offline_arguments, cmd_steps_offline, cmd_trace
from comminsight.cli.steps import job_steps_cmd, steps_cmd


def bound(func: Callable):
    """argparse's func for an agent command: run it against the agent."""
    return lambda args, console: run(func, args, console)


def add_agent_commands(sub: argparse._SubParsersAction) -> None:
    def command(name: str, help_text: str, func: Callable, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, **kw)
        add_common_options(p)
        p.set_defaults(func=bound(func))
        return p

    def action(parent_sub, name: str, help_text: str, func: Callable) -> argparse.ArgumentParser:
        p = parent_sub.add_parser(name, help=help_text, description=help_text)
        add_common_options(p, nested=True)
        p.set_defaults(func=bound(func))
        return p

    command("status", "the agent's health, node and profiled processes", cli_node.status)
    command("health", "the agent's health and its Semantic Engine", cli_node.health_cmd)
    command("processes", "the profiled processes of the agent's node", cli_node.processes_cmd)
    nodes = command("nodes", "the nodes of the job and their agents (a master)", cli_node.nodes_cmd)
    nodes.add_argument(
        "--state",
        choices=["connected", "stale", "disconnected", "rejected", "all"],
        default="all",
    )

    comms = command(
        "comms", "communicators and their progress", cli_ops.comms_cmd, aliases=["communicators"]
    )
    comms.add_argument("--state", choices=["active", "finalized", "all"], default="all")
    comms.add_argument("--name", default=None, help="only names containing this text")
    comms.add_argument("--full", action="store_true", help="with every rank's progress")
    comms.add_argument("--id", default=None, help="one communicator (16 hex digits), every rank")

    inflight = command("inflight", "operations in flight now, oldest first", cli_ops.inflight_cmd)
    add_inflight_arguments(inflight)
    ops = command(
        "ops", "operations: recently completed (default) or in flight", cli_ops.recent_ops_cmd
    )
    add_recent_arguments(ops)
    ops_sub = ops.add_subparsers(dest="ops_action", metavar="{recent,inflight}")
    add_recent_arguments(
        action(
            ops_sub, "recent", "recently completed operations, newest first", cli_ops.recent_ops_cmd
        ),
        nested=True,
    )
    # `ops inflight` shares --comm-id, --rank and --limit with `ops`; --min-age-ms is its own
    ops_inflight = action(
        ops_sub, "inflight", "operations in flight now, oldest first", cli_ops.inflight_cmd
    )
    ops_inflight.add_argument("--min-age-ms", type=int, default=0)
    add_inflight_arguments(ops_inflight, nested=True, with_min_age=False)

    hangs = command("hangs", "hang reports, newest first", cli_hangs.hangs_cmd)
    add_hang_list_arguments(hangs)
    hangs.add_argument("--id", default=None, help="one report with all its evidence")
    hangs_sub = hangs.add_subparsers(dest="hangs_action", metavar="{list,show,resolve}")
    add_hang_list_arguments(
        action(hangs_sub, "list", "hang reports, newest first", cli_hangs.list_cmd), nested=True
    )
    show = action(hangs_sub, "show", "one report with all its evidence", cli_hangs.show_cmd)
    show.add_argument("report_id")
    resolve = action(
        hangs_sub,
        "resolve",
        "mark a report resolved (needs the agent's token)",
        cli_hangs.resolve_cmd,
    )
    resolve.add_argument("report_id")
    resolve.add_argument("--note", default=None, help="why, kept with the report")

    incidents = command(
        "incidents", "hangs grouped by cause, the root cause first", cli_incidents.incidents_cmd
    )
    cli_incidents.add_list_arguments(incidents)
    incidents.add_argument("--id", default=None, help="one incident with its evidence and stacks")
    incidents_sub = incidents.add_subparsers(dest="incidents_action", metavar="{list,show,resolve}")
    cli_incidents.add_list_arguments(
        action(incidents_sub, "list", "incidents, newest first", cli_incidents.list_cmd),
        nested=True,
    )
    show = action(
        incidents_sub, "show", "one incident with its evidence and stacks", cli_incidents.show_cmd
    )
    show.add_argument("incident_id")
    resolve = action(
        incidents_sub,
        "resolve",
        "mark an incident resolved (needs the agent's token)",
        cli_incidents.resolve_cmd,
    )
    resolve.add_argument("incident_id")
    resolve.add_argument("--note", default=None, help="why, kept with the incident")

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
    job_steps = command(
        "job-steps", "the job's Steps reconciled across nodes, and what disagrees", job_steps_cmd
    )
    job_steps.add_argument("--job", default=None, help="a job id (default: the latest job)")
    job_steps.add_argument("--since-step", type=int, default=0)
    job_steps.add_argument("--limit", type=int, default=20)

    archive = command(
        "archive",
        "archive status (default), or flush: upload everything sealed now",
        cli_archive.status_cmd,
    )
    archive_sub = archive.add_subparsers(dest="archive_action", metavar="{status,flush}")
    action(archive_sub, "status", "provider, backlog and local disk budget", cli_archive.status_cmd)
    flush = action(
        archive_sub,
        "flush",
        "upload every sealed file now (needs the agent's token)",
        cli_archive.flush_cmd,
    )
    flush.add_argument("--wait", action="store_true", help="until the upload pass has ended")
    flush.add_argument("--wait-s", type=float, default=300.0, help="longest wait (seconds)")

    metrics = command(
        "metrics", "the agent's Prometheus metrics, as /metrics serves them", cli_meta.metrics_cmd
    )
    metrics.add_argument("--grep", default=None, help="only metrics whose name contains this")
    command("openapi", "the agent's API description (OpenAPI 3.1, JSON)", cli_meta.openapi_cmd)

    trace = sub.add_parser("trace", help="a Chrome/Perfetto trace of a directory of logs")
    trace.add_argument("logs", help="an inspector_logs directory")
    trace.add_argument("-o", "--output", required=True, help="trace file to write (JSON)")
    add_offline_arguments(trace)
    trace.set_defaults(func=cmd_trace)


def add_inflight_arguments(
    p: argparse.ArgumentParser, nested: bool = False, with_min_age: bool = True
) -> None:
    d = _defaults(nested)
    if with_min_age:
        p.add_argument("--min-age-ms", type=int, default=d(0))
    p.add_argument("--comm-id", default=d(None), help="only this communicator (16 hex digits)")
    p.add_argument("--rank", type=int, default=d(None), help="only this global rank")
    p.add_argument("--limit", type=int, default=d(100))


def add_recent_arguments(p: argparse.ArgumentParser, nested: bool = False) -> None:
    d = _defaults(nested)
    p.add_argument("--comm-id", default=d(None), help="only this communicator (16 hex digits)")
    p.add_argument("--rank", type=int, default=d(None), help="only this global rank")
    p.add_argument(
        "--func", dest="func_name", default=d(None), help="only this NCCL function, e.g. AllReduce"
    )
    p.add_argument("--limit", type=int, default=d(100))


def add_hang_list_arguments(p: argparse.ArgumentParser, nested: bool = False) -> None:
    d = _defaults(nested)
    p.add_argument("--status", choices=["open", "resolved", "all"], default=d("open"))
    p.add_argument("--comm-id", default=d(None), help="only this communicator (16 hex digits)")
    p.add_argument("--limit", type=int, default=d(100))


def _defaults(nested: bool) -> Callable:
    """On a sub-command an option keeps what was given before it (`hangs --status all list`)."""
    return (lambda value: argparse.SUPPRESS) if nested else (lambda value: value)
