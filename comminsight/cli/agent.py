"""The `comminsight` commands that ask an agent, one (or a sub-command) per thing its API
offers: status, health, processes, nodes, comms, inflight, ops recent, steps, job-steps, hangs
(list, show, resolve), incidents (list, show, resolve), archive (status, flush), metrics,
openapi; and `steps <logs>` and `trace <logs>`, which run the Semantic Engine offline
(cli.semantic) instead.

This module only builds their parsers. A command's code (`node`, `ops`, `steps`, `hangs`,
`incidents`, `archive`, `meta`, `semantic`) is imported when the command runs: the generated
client it needs is slow to import, and the parser is built for every `--help` and for every
press of TAB under shell completion.

The agent commands talk to a running agent only through the generated `comminsight_client`
(agent-master-api v1), so they see exactly what any other API user sees. Exit status: 0 when
the agent answered, 1 when it could not be reached or answered with an error (named on stderr,
with a hint), 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from comminsight.cli.help_format import examples, paragraph
from comminsight.cli.options import add_agent_options, add_format_options, keep_given

AGENT_EXIT = (
    "exit status: 0 answered; 1 agent unreachable or an error answer; 2 a bad\ncommand line"
)


def command_code(target: str) -> Callable:
    """'module:function' of comminsight.cli, imported when called."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(f"comminsight.cli.{module}"), name)


def asks_agent(target: str) -> Callable:
    """argparse's func for an agent command: run `target` against the agent."""

    def call(args: argparse.Namespace, console) -> int:
        from comminsight.cli.client import run

        return run(command_code(target), args, console)

    return call


def add_agent_commands(sub: argparse._SubParsersAction) -> None:
    def command(name: str, help_text: str, target: str, *lines: str, exit_text=AGENT_EXIT, **kw):
        p = sub.add_parser(
            name,
            help=help_text,
            description=paragraph(help_text),
            epilog=f"{exit_text}\n\n{examples(*lines)}",
            **kw,
        )
        add_agent_options(p)
        p.set_defaults(func=asks_agent(target))
        return p

    def action(parent_sub, name: str, help_text: str, target: str, *lines: str):
        p = parent_sub.add_parser(
            name, help=help_text, description=paragraph(help_text), epilog=examples(*lines)
        )
        add_agent_options(p, nested=True)
        p.set_defaults(func=asks_agent(target))
        return p

    command(
        "status",
        "the agent's health, node and profiled processes (on a master: the whole job)",
        "node:status",
        "comminsight status",
        "comminsight status --url http://node7:19102 --format json",
    )
    command(
        "health",
        "the agent's health and its Semantic Engine",
        "node:health_cmd",
        "comminsight health",
    )
    command(
        "processes",
        "the profiled processes of the agent's node",
        "node:processes_cmd",
        "comminsight processes --format plain | cut -f3",
    )
    nodes = command(
        "nodes",
        "the nodes of the job and their agents (a master)",
        "node:nodes_cmd",
        "comminsight nodes --state stale",
    )
    nodes.add_argument(
        "--state",
        choices=["connected", "stale", "disconnected", "rejected", "all"],
        default="all",
        help="only nodes in this state",
    )

    comms = command(
        "comms",
        "communicators and their progress",
        "ops:comms_cmd",
        "comminsight comms --name tensor_parallel",
        "comminsight comms --id 7f3a09c1d2e4b5a6",
        aliases=["communicators"],
    )
    comms.add_argument(
        "--state", choices=["active", "finalized", "all"], default="all", help="only these"
    )
    comms.add_argument(
        "--name", default=None, help="only names containing this text (default: every name)"
    )
    comms.add_argument("--full", action="store_true", help="with every rank's progress")
    comms.add_argument(
        "--id",
        default=None,
        help="one communicator (16 hex digits), every rank (default: list them all)",
    )

    inflight = command(
        "inflight",
        "operations in flight now, oldest first",
        "ops:inflight_cmd",
        "comminsight inflight --min-age-ms 5000",
    )
    add_inflight_arguments(inflight)
    ops = command(
        "ops",
        "operations: recently completed (default) or in flight",
        "ops:recent_ops_cmd",
        "comminsight ops --func AllReduce --limit 20",
        "comminsight ops inflight --rank 3",
    )
    add_recent_arguments(ops)
    ops_sub = ops.add_subparsers(dest="ops_action", metavar="{recent,inflight}")
    add_recent_arguments(
        action(
            ops_sub,
            "recent",
            "recently completed operations, newest first",
            "ops:recent_ops_cmd",
            "comminsight ops recent --rank 0 --limit 10",
        ),
        nested=True,
    )
    ops_inflight = action(
        ops_sub,
        "inflight",
        "operations in flight now, oldest first",
        "ops:inflight_cmd",
        "comminsight ops inflight --min-age-ms 1000",
    )
    # `ops inflight` shares --comm-id, --rank and --limit with `ops`; --min-age-ms is its own
    ops_inflight.add_argument(
        "--min-age-ms", type=int, default=0, help="only ops in flight at least this long"
    )
    add_inflight_arguments(ops_inflight, nested=True, with_min_age=False)

    hangs = command(
        "hangs",
        "hang reports, newest first",
        "hangs:hangs_cmd",
        "comminsight hangs --status all",
        "comminsight hangs show hang-0001 --format json",
    )
    add_hang_list_arguments(hangs)
    hangs.add_argument(
        "--id", default=None, help="one report with all its evidence (default: list them)"
    )
    hangs_sub = hangs.add_subparsers(dest="hangs_action", metavar="{list,show,resolve}")
    add_hang_list_arguments(
        action(
            hangs_sub,
            "list",
            "hang reports, newest first",
            "hangs:list_cmd",
            "comminsight hangs list --status resolved",
        ),
        nested=True,
    )
    show = action(
        hangs_sub,
        "show",
        "one report with all its evidence",
        "hangs:show_cmd",
        "comminsight hangs show REPORT_ID",
    )
    show.add_argument("report_id", help="the report's id, as `comminsight hangs` lists it")
    resolve = action(
        hangs_sub,
        "resolve",
        "mark a report resolved (needs the agent's token)",
        "hangs:resolve_cmd",
        'comminsight hangs resolve REPORT_ID --note "restarted rank 3" --token "$TOKEN"',
    )
    resolve.add_argument("report_id", help="the report's id, as `comminsight hangs` lists it")
    resolve.add_argument(
        "--note", default=None, help="why, kept with the report (default: no note)"
    )

    incidents = command(
        "incidents",
        "hangs grouped by cause, the root cause first",
        "incidents:incidents_cmd",
        "comminsight incidents --tree",
        "comminsight incidents show INCIDENT_ID",
    )
    add_incident_list_arguments(incidents)
    incidents.add_argument(
        "--id",
        default=None,
        help="one incident with its evidence and stacks (default: list them)",
    )
    incidents_sub = incidents.add_subparsers(dest="incidents_action", metavar="{list,show,resolve}")
    add_incident_list_arguments(
        action(
            incidents_sub,
            "list",
            "incidents, newest first",
            "incidents:list_cmd",
            "comminsight incidents list --status all --tree",
        ),
        nested=True,
    )
    show = action(
        incidents_sub,
        "show",
        "one incident with its evidence and stacks",
        "incidents:show_cmd",
        "comminsight incidents show INCIDENT_ID",
    )
    show.add_argument("incident_id", help="the incident's id, as `comminsight incidents` lists it")
    resolve = action(
        incidents_sub,
        "resolve",
        "mark an incident resolved (needs the agent's token)",
        "incidents:resolve_cmd",
        'comminsight incidents resolve INCIDENT_ID --note "new NIC" --token "$TOKEN"',
    )
    resolve.add_argument(
        "incident_id", help="the incident's id, as `comminsight incidents` lists it"
    )
    resolve.add_argument(
        "--note", default=None, help="why, kept with the incident (default: no note)"
    )

    steps = command(
        "steps",
        "step summaries: from the agent, or recovered from a directory of logs",
        "steps:steps_cmd",
        "comminsight steps --rank 0",
        "comminsight steps var/demo/healthy/inspector_logs --format plain",
        "comminsight steps ./inspector_logs --format json | jq '.items[0]'",
        exit_text="Asking the agent takes the agent: options; recovering from LOGS the\n"
        "offline: ones.\n\nexit status: 0 answered or recovered; 1 agent unreachable or an\n"
        "error answer, or no segments in LOGS; 2 a bad command line (an option of\n"
        "the other way included)",
    )
    steps.add_argument(
        "logs",
        nargs="?",
        default=None,
        help="an inspector_logs directory: recover its steps offline instead of asking the "
        "agent (default: ask the agent)",
    )
    steps.add_argument(
        "--rank", type=int, default=None, help="agent: only this global rank (default: every rank)"
    )
    steps.add_argument("--since-step", type=int, default=0, help="agent: from this step index")
    steps.add_argument("--limit", type=int, default=100, help="agent: at most this many steps")
    steps.add_argument(
        "--out",
        default=None,
        help="offline: where to write the summaries (default: <logs>/../semantics/step/offline)",
    )
    add_offline_arguments(steps)
    steps.add_argument(
        "--no-markers",
        action="store_true",
        help="offline: leave Inject's optimizer-step markers (metadata/inject/ beside LOGS) "
        "unread: Steps from the ops alone (default: markers place Steps where there are any)",
    )
    steps.add_argument(
        "--workers",
        type=int,
        default=None,
        help="offline: recover over a local Dask cluster of this many worker processes; 0: in "
        "this process alone, with checkpoints (default: one per core for a job of several "
        "processes and 256 MiB of logs or more, else 0)",
    )
    steps.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="offline: recover over the Dask cluster of this scheduler (tcp://host:8786, or "
        "its scheduler file), whose workers see LOGS and --out at the same paths "
        "(default: --workers decides)",
    )

    steps.set_defaults(func=steps_func)
    job_steps = command(
        "job-steps",
        "the job's Steps reconciled across nodes, and what disagrees",
        "steps:job_steps_cmd",
        "comminsight job-steps --url http://master:19102",
        "comminsight job-steps --job JOB_ID --since-step 100",
    )
    job_steps.add_argument("--job", default=None, help="a job id (default: the latest job)")
    job_steps.add_argument("--since-step", type=int, default=0, help="from this job step index")
    job_steps.add_argument("--limit", type=int, default=20, help="at most this many job steps")

    archive = command(
        "archive",
        "archive status (default), or flush: upload everything sealed now",
        "archive:status_cmd",
        "comminsight archive",
        'comminsight archive flush --wait --token "$TOKEN"',
    )
    archive_sub = archive.add_subparsers(dest="archive_action", metavar="{status,flush}")
    action(
        archive_sub,
        "status",
        "provider, backlog and local disk budget",
        "archive:status_cmd",
        "comminsight archive status --format json",
    )
    flush = action(
        archive_sub,
        "flush",
        "upload every sealed file now (needs the agent's token)",
        "archive:flush_cmd",
        'comminsight archive flush --token "$TOKEN"',
        'comminsight archive flush --wait --wait-s 60 --token "$TOKEN"',
    )
    flush.add_argument(
        "--wait",
        action="store_true",
        help="until the upload pass has ended, with progress on a terminal",
    )
    flush.add_argument("--wait-s", type=float, default=300.0, help="longest wait (seconds)")

    metrics = command(
        "metrics",
        "the agent's Prometheus metrics: as /metrics serves them (table), a sample a line "
        "(plain) or a list of samples (json)",
        "meta:metrics_cmd",
        "comminsight metrics --grep comminsight_ops_total",
        "comminsight metrics --format json",
    )
    metrics.add_argument(
        "--grep",
        default=None,
        help="only metrics whose name contains this (default: every metric)",
    )
    command(
        "openapi",
        "the agent's API: its operations (table, plain) or its OpenAPI 3.1 document (json)",
        "meta:openapi_cmd",
        "comminsight openapi",
        "comminsight openapi --format json > agent-api.json",
    )

    trace = sub.add_parser(
        "trace",
        help="a Chrome/Perfetto trace of a directory of logs",
        description=paragraph(
            "Recover the Steps of a directory of inspector_logs offline and write a "
            "Chrome/Perfetto trace: a track per rank and communicator, ops and Steps as slices."
        ),
        epilog="exit status: 0 written; 1 no segments in the directory; 2 a bad command\nline\n\n"
        + examples(
            "comminsight trace var/demo/healthy/inspector_logs -o trace.json",
            "comminsight trace ./inspector_logs -o trace.json --format json",
        ),
    )
    trace.add_argument("logs", help="an inspector_logs directory")
    trace.add_argument("-o", "--output", required=True, help="trace file to write (JSON); required")
    add_template_argument(trace)
    add_format_options(trace)
    trace.set_defaults(func=lambda args, console: command_code("semantic:cmd_trace")(args, console))


# the options of one way of `steps` and their defaults: given to the other way, they are refused
STEPS_AGENT_ONLY = {
    "--rank": None,
    "--since-step": 0,
    "--limit": 100,
    "--url": None,
    "--token": None,
}
STEPS_OFFLINE_ONLY = {
    "--out": None,
    "--checkpoint-every-ops": 100_000,
    "--templates": None,
    "--workers": None,
    "--scheduler": None,
}


def steps_func(args: argparse.Namespace, console) -> int:
    """`steps LOGS` recovers offline, `steps` asks the agent; an option of the other way is an
    error rather than silently ignored."""
    from comminsight.cli.output import error

    offline = bool(args.logs)
    for option, default in (STEPS_AGENT_ONLY if offline else STEPS_OFFLINE_ONLY).items():
        if getattr(args, option[2:].replace("-", "_")) != default:
            if offline:
                error(f"{option} asks the agent; it does not apply to a directory of logs")
            else:
                error(f"{option} applies to a directory of logs (steps LOGS), not to the agent")
            return 2
    if offline:
        return command_code("semantic:cmd_steps_offline")(args, console)
    return asks_agent("steps:steps_cmd")(args, console)


def add_offline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint-every-ops",
        type=int,
        default=100_000,
        help="offline: checkpoint the engines this often (ops); a killed run resumes from it "
        "(in this process alone: a run over workers starts again)",
    )
    add_template_argument(p)


def add_template_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--templates",
        default=None,
        help="offline: extra template directories, colon-separated, added to the built-in ones "
        "(default: the built-in ones only)",
    )


def add_inflight_arguments(
    p: argparse.ArgumentParser, nested: bool = False, with_min_age: bool = True
) -> None:
    d = keep_given(nested)
    if with_min_age:
        p.add_argument(
            "--min-age-ms",
            type=int,
            default=d(0),
            help="only ops in flight at least this long (default: 0)",
        )
    p.add_argument(
        "--comm-id",
        default=d(None),
        help="only this communicator (16 hex digits) (default: every communicator)",
    )
    p.add_argument(
        "--rank", type=int, default=d(None), help="only this global rank (default: every rank)"
    )
    p.add_argument("--limit", type=int, default=d(100), help="at most this many (default: 100)")


def add_recent_arguments(p: argparse.ArgumentParser, nested: bool = False) -> None:
    d = keep_given(nested)
    p.add_argument(
        "--comm-id",
        default=d(None),
        help="only this communicator (16 hex digits) (default: every communicator)",
    )
    p.add_argument(
        "--rank", type=int, default=d(None), help="only this global rank (default: every rank)"
    )
    p.add_argument(
        "--func",
        dest="func_name",
        default=d(None),
        help="only this NCCL function, e.g. AllReduce (default: every function)",
    )
    p.add_argument("--limit", type=int, default=d(100), help="at most this many (default: 100)")


def add_hang_list_arguments(p: argparse.ArgumentParser, nested: bool = False) -> None:
    d = keep_given(nested)
    p.add_argument(
        "--status",
        choices=["open", "resolved", "all"],
        default=d("open"),
        help="only reports in this state (default: open)",
    )
    p.add_argument(
        "--comm-id",
        default=d(None),
        help="only this communicator (16 hex digits) (default: every communicator)",
    )
    p.add_argument("--limit", type=int, default=d(100), help="at most this many (default: 100)")


def add_incident_list_arguments(p: argparse.ArgumentParser, nested: bool = False) -> None:
    d = keep_given(nested)
    p.add_argument(
        "--status",
        choices=["open", "resolved", "all"],
        default=d("open"),
        help="only incidents in this state (default: open)",
    )
    p.add_argument(
        "--tree",
        action="store_true",
        default=d(False),
        help="show each incident's consequences (default: off)",
    )
    p.add_argument("--limit", type=int, default=d(100), help="at most this many (default: 100)")
