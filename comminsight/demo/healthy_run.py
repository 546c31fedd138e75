"""The demo's first half: the healthy training run with a real Agent watching it; what the
Agent serves, what each rank's Profiler recorded, and the checks on both."""

from __future__ import annotations

import shutil
import statistics

import httpx
from rich.console import Console

from comminsight.cli.output import new_table
from comminsight.demo.agent_checks import agent_stopped_check, commands_check, note_errors
from comminsight.demo.agent_process import running_agent
from comminsight.demo.agent_reads import steps_served
from comminsight.demo.checklist import Checklist
from comminsight.demo.console import show
from comminsight.demo.log_checks import RunLogs, ops_logged_check, read_logs, segments_check
from comminsight.demo.sim_checks import healthy_ranks_check
from comminsight.demo.simulation import DEMO_DIR, RANKS, STEPS, simulate
from comminsight.demo.step_check import steps_check
from comminsight_gen import home_v1_names as home_names

NAME = "healthy run"


def healthy_run(console: Console, checks: Checklist) -> None:
    home = DEMO_DIR / "healthy"
    shutil.rmtree(home, ignore_errors=True)
    console.rule("1. simulated TP+PP+DP training through the Profiler, with the Agent")
    with running_agent(home, console) as agent:
        run = simulate(home, console, f"{RANKS} ranks train {STEPS} steps")
        expected = sum(len(t.of("step")) for t in run.truths)
        summaries, errors = steps_served(agent.url, expected, console)
        note_errors(console, errors, agent.log)
        statuses = [
            show(console, "status", agent.url),
            show(console, "comms", agent.url, state="all", name=None, full=False, id=None),
            show(console, "steps", agent.url, rank=0, since_step=0, limit=100, logs=None),
        ]
        metrics = httpx.get(f"{agent.url}/metrics", timeout=10, trust_env=False).text
        console.print(
            f"{agent.url}/metrics exposed {metrics.count('comminsight_ops_total{')} "
            "comminsight_ops_total series"
        )
    checks.add(healthy_ranks_check(run))
    logs = read_logs(home / home_names.INSPECTOR_LOGS)
    checks.add(segments_check(NAME, logs, RANKS))
    checks.add(ops_logged_check(NAME, logs, run))
    console.print(recorded_table(logs))
    steps = steps_check(run, summaries)
    checks.add(steps.check)
    for difference in steps.differences[:3]:
        console.print(f"[yellow]  other ops than the simulator's: {difference}[/yellow]")
    if len(steps.differences) > 3:
        console.print(f"[yellow]  and {len(steps.differences) - 3} more Steps so[/yellow]")
    checks.add(commands_check(NAME, "status, comms, steps", statuses))
    checks.add(agent_stopped_check(NAME, agent.returncode, agent.log))
    console.print(f"logs: {home / home_names.INSPECTOR_LOGS}")
    console.print(f"ground truth: {run.run_dir}")
    console.print(f"Step summaries: {home / home_names.SEMANTICS / home_names.STEP}")


def recorded_table(logs: RunLogs):
    table = new_table(
        "what the Profiler recorded, per rank",
        ("rank", "colls", "p2p", "GiB moved", "median busbw GB/s", "GPU-timed"),
        right=("rank", "colls", "p2p", "GiB moved", "median busbw GB/s", "GPU-timed"),
    )
    for rank in sorted(logs.by_rank):
        colls, p2ps = logs.ops_of(rank, True), logs.ops_of(rank, False)
        busbw = [op.busbw_gbs for op in colls if op.busbw_gbs is not None]
        moved = sum(op.size_bytes for op in colls + p2ps)
        timed = sum(op.timing_source == "kernel_gpu" for op in colls)
        table.add_row(
            str(rank),
            str(len(colls)),
            str(len(p2ps)),
            f"{moved / 2**30:.2f}",
            f"{statistics.median(busbw):.1f}" if busbw else "-",
            f"{timed}/{len(colls)}",
        )
    return table
