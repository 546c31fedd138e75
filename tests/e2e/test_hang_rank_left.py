"""The uneven-inputs end of a DDP job, end to end: rank 1 runs out of data, destroys its
communicator (the Profiler's finalize) and its process exits cleanly, while rank 0 goes on
into the next all-reduce and waits there for ever. The simulated NCCL drives the real
Profiler plugin; a real Agent polls with a 3 s hang threshold.

The exited rank's SHM region is kept far longer than the test runs (as the Agent keeps an
ended process's region for a while to read what it left): the verdict must come from the
finalized row it shows, not from the region's retirement, and must say that the rank left,
never that it "has not initialized the communicator". Never timed: the test waits for the
incident with the project's wait helper, bounded well below the retirement time."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path

from agent_home import hold_agent_lock
from cli_in_process import run_cli
from live_agent import LiveAgent
from waiting import wait_until

from comminsight.sim import SimConfig, parse_fault, read_ground_truth, run_simulation
from comminsight.sim.board import Board
from comminsight.sim.workloads import build_plan
from comminsight_gen.models.hang_report_v1 import IncidentStatus

S = 1_000_000_000
THRESHOLD_S = 3.0
# An hour: the exited rank's region outlives the test, so only a verdict drawn from its
# finalized row can come in time (the Agent waited for the retirement: 59.7 s)
RETIRE_AFTER_NS = 3600 * S
# Bounds a wait that went wrong; far below the retirement, far above threshold + a pass
# on a loaded 2-core machine
VERDICT_DEADLINE_S = 60.0
ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "100"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", str(THRESHOLD_S)),
)


def ddp_config(plugin, home, out) -> SimConfig:
    """Two DDP ranks; rank 1 leaves before the first all-reduce of the last Step (its last
    batch done, the others still have one)."""
    base = SimConfig(
        plugin=str(plugin),
        home=str(home),
        workload="ddp",
        ranks=2,
        steps=3,
        time_scale=0.05,
        # the test aborts the run once it has its verdict; this only bounds a broken one
        hang_hold_s=VERDICT_DEADLINE_S + 60,
        env=ENV,
        out=str(out),
    )
    plan = build_plan(base)
    last_step = base.total_steps - 1
    first = next(op for op in plan.rank_ops(1) if op.step == last_step)
    fault = parse_fault(f"leave:rank=1,op={first.op_index}")
    return dataclasses.replace(base, faults=(fault,))


def rank_left_incident(live: LiveAgent):
    """The open incident whose root says a rank left, once there is one."""
    incidents = live.call(lambda: list(live.service.incidents.incidents.values()))
    return next(
        (
            i
            for i in incidents
            # by value: what the Agent writes and serves, and what a test of the bug reads
            if i.status is IncidentStatus.open and i.root.verdict.value == "rank_left"
        ),
        None,
    )


def incidents_said(live: LiveAgent) -> str:
    reports = live.call(lambda: list(live.service.hangs.reports.values()))
    return "; ".join(f"{r.verdict.value}: {r.summary}" for r in reports) or "no hang report"


def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}


def abort_run(config: SimConfig, sim: threading.Thread) -> None:
    """What the launcher does after --hang-hold: every rank stops and finalizes (once the
    launcher has made the run's board, unless the run already ended)."""
    board = Path(config.out) / "board.bin"
    wait_until(lambda: not sim.is_alive() or board.exists(), 120, "the run's board")
    if sim.is_alive():
        Board.attach(board, config.ranks, len(build_plan(config).instances)).abort()


def test_a_rank_that_finalized_and_exited_while_its_peer_waits_is_rank_left(plugin, tmp_path):
    home = tmp_path / "home"
    lock = hold_agent_lock(home)
    config = ddp_config(plugin, home, tmp_path / "run")
    leave_at = config.faults[0].op
    result = {}
    try:
        with LiveAgent(
            home, profiler_hang_timeout_s=THRESHOLD_S, agent_heartbeat_stale_ms=5000
        ) as live:
            # the premise: an ended process's region is kept; a rename must not void it
            assert hasattr(live.service, "retire_after_ns")
            live.call(setattr, live.service, "retire_after_ns", RETIRE_AFTER_NS)
            sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
            sim.start()
            try:
                incident = wait_until(
                    lambda: rank_left_incident(live),
                    VERDICT_DEADLINE_S,
                    lambda: f"an incident rooted at rank_left ({incidents_said(live)})",
                )
                # the report's first detection stays as it was found
                report = live.call(lambda: live.service.hangs.reports[incident.root.report_id])
                listed = run_cli(["incidents", "--url", live.base_url], cli_env())
                shown = run_cli(
                    ["incidents", "--id", incident.incident_id, "--json", "--url", live.base_url],
                    cli_env(),
                )
            finally:
                abort_run(config, sim)
                sim.join()
    finally:
        lock.close()
    assert not result["sim"].errors, result["sim"].errors

    root = incident.root
    assert [c.global_rank for c in root.culprits] == [1], root.summary
    reason = root.culprits[0].reason
    assert "finalized" in reason and "exited" in reason, reason
    assert f"#{leave_at}" in reason, reason
    assert "has not initialized" not in root.summary + reason
    assert root.op.index == leave_at and root.op.func == "AllReduce", root.op

    truths = {t.rank: t for t in read_ground_truth(config.out, config.ranks)}
    assert truths[1].end["status"] == "left"
    waits_from = next(o for o in truths[0].ops if o["op_index"] == leave_at)["host_start_ns"]
    # both on this machine's CLOCK_MONOTONIC
    after_s = (report.detected_mono_ns - waits_from) / S
    print(f"rank_left {after_s:.2f} s after rank 0 began to wait (threshold {THRESHOLD_S} s)")
    assert THRESHOLD_S <= after_s < VERDICT_DEADLINE_S, after_s

    assert listed.returncode == 0, listed.stderr
    assert "rank_left" in listed.stdout, listed.stdout
    detail = json.loads(shown.stdout)
    assert detail["incident"]["root"]["verdict"] == "rank_left", shown.stdout
    assert [r["verdict"] for r in detail["reports"]] == ["rank_left"], shown.stdout
