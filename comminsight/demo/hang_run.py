"""The demo's second half: the same training with rank 1 skipping an all-reduce. The other
ranks hang, each one's Profiler watchdog writes hang evidence, and the Agent diagnoses the
hang across the ranks; the checks compare its verdict with the fault that was injected."""

from __future__ import annotations

import shutil

from rich.console import Console
from rich.markup import escape

from comminsight.cli.client import known
from comminsight.cli.output import new_table
from comminsight.demo.agent_checks import agent_stopped_check, commands_check, note_errors
from comminsight.demo.agent_process import running_agent
from comminsight.demo.agent_reads import Diagnosis, diagnosis_served
from comminsight.demo.checklist import Checklist
from comminsight.demo.console import show
from comminsight.demo.log_checks import (
    RunLogs,
    hang_evidence_check,
    ops_logged_check,
    read_logs,
    segments_check,
)
from comminsight.demo.sim_checks import hang_ranks_check, injected_fault
from comminsight.demo.simulation import DEMO_DIR, FAULT, RANKS, simulate
from comminsight.demo.verdict_check import (
    global_ranks,
    hang_incidents,
    passed_waits,
    root_text,
    verdict_check,
)
from comminsight_client.models import Severity
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.inspector_log_v1 import CiHangEvidence

NAME = "hang run"


def hang_run(console: Console, checks: Checklist) -> None:
    home = DEMO_DIR / "hang"
    shutil.rmtree(home, ignore_errors=True)
    console.rule("2. the same run, rank 1 skips its 6th tensor-parallel all-reduce")
    with running_agent(home, console) as agent:
        run = simulate(home, console, f"{RANKS} ranks, rank 1 skips an all-reduce", (FAULT,))
        diagnosis = diagnosis_served(agent.url, console)
        note_errors(console, diagnosis.errors, agent.log)
        statuses = show_diagnosis(console, agent.url, diagnosis)
    fault = injected_fault(run)
    checks.add(hang_ranks_check(run, fault))
    logs = read_logs(home / home_names.INSPECTOR_LOGS)
    checks.add(segments_check(NAME, logs, RANKS))
    checks.add(ops_logged_check(NAME, logs, run))
    console.print(evidence_table(logs))
    if fault is not None:
        checks.add(hang_evidence_check(NAME, logs, fault, run))
    if not diagnosis.settled:
        console.print(
            "[yellow]the Agent had not resolved every hang report when the demo stopped "
            "waiting: its diagnosis is judged as it stood[/yellow]"
        )
    ranks = global_ranks(run)
    checks.add(verdict_check(fault, diagnosis.incidents, diagnosis.reports, ranks))
    for incident in passed_waits(diagnosis.incidents):
        console.print(
            f"[yellow]besides: {escape(root_text(incident, ranks))}, {incident.severity.value}, "
            "is a wait whose op then completed (resolved op_completed), not the hang: no "
            "verdict on the fault[/yellow]"
        )
    checks.add(commands_check(NAME, "incidents", statuses))
    checks.add(agent_stopped_check(NAME, agent.returncode, agent.log))
    console.print(f"logs: {home / home_names.INSPECTOR_LOGS}")
    console.print(f"ground truth: {run.run_dir}")
    console.print(f"hang reports and incidents: {home / home_names.METADATA}")


def show_diagnosis(console: Console, url: str, diagnosis: Diagnosis) -> list[int]:
    """The counts as the API served them, then `comminsight incidents --tree` and the most
    severe incident in full; the exit status of each command shown."""
    live = [i for i in diagnosis.incidents if known(i.merged_into) is None]
    console.print(
        f"the Agent wrote {len(diagnosis.reports)} hang reports, grouped into "
        f"{len(live)} incident(s):"
    )
    hangs = hang_incidents(diagnosis.incidents)
    statuses = [show(console, "incidents", url, status="all", tree=True, id=None, limit=10)]
    if hangs or live:
        order = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
        worst = min(hangs or live, key=lambda i: order.get(i.severity, 3))
        statuses.append(
            show(
                console, "incidents", url, status="all", tree=False, id=worst.incident_id, limit=10
            )
        )
    return statuses


def evidence_table(logs: RunLogs):
    table = new_table(
        "hang evidence written by each rank's Profiler watchdog",
        ("rank", "communicator", "op", "seq", "waited", "channels started"),
        right=("rank", "seq", "waited", "channels started"),
    )
    for rank in sorted(logs.by_rank):
        for record in logs.records_of(rank, CiHangEvidence):
            h = record.ci
            table.add_row(
                str(rank),
                escape(h.comm_name or h.comm_id),
                h.func,
                str(h.seq),
                f"{h.age_ns / 1e9:.1f} s",
                f"{h.channels_started}/{h.n_channels}",
            )
    return table
