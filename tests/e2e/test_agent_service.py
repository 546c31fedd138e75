"""The Agent's poll loop end to end: simulated NCCL -> real plugin -> SHM and FIFO ->
AgentService (metrics, diagnosis, hang reports on disk)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
from agent_processes import agent_process, api_get, wait_for
from e2e_sims import E2E_THRESHOLD_S, HEALTHY_THRESHOLD_S, e2e_sim_config
from ports import free_port
from waiting import wait_until

from comminsight.agent.hangs.store import HangStore
from comminsight.agent.node.service import IDLE_POLL_INTERVAL_S, AgentService
from comminsight.sim import run_simulation
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models.hang_report_v1 import Verdict

ROOT = Path(__file__).resolve().parents[2]


def run_service_during_sim(plugin_path, home, faults, steps: int = 2, threshold_s=E2E_THRESHOLD_S):
    (home / "metadata").mkdir(parents=True, exist_ok=True)
    lock = open(home / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held for the run
    fcntl.flock(lock, fcntl.LOCK_EX)  # as the Agent does: producers leave their files to it
    settings = msgspec.convert(
        {
            "home": str(home),
            "agent_poll_interval_ms": 100,
            "agent_heartbeat_stale_ms": 1000,
            "profiler_hang_timeout_s": threshold_s,
        },
        ConfigV1,
    )
    service = AgentService(settings)
    config = e2e_sim_config(plugin_path, home, faults, steps, threshold_s=threshold_s)

    async def main():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        result = {}

        def simulate():
            result["sim"] = run_simulation(config)
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=simulate).start()
        await service.run(stop)
        return result["sim"]

    sim = asyncio.run(main())
    lock.close()
    assert not sim.errors, sim.errors
    return service


def test_a_dead_rank_is_reported_on_disk_with_fifo_events_and_metrics(plugin, tmp_path):
    service = run_service_during_sim(plugin, tmp_path, ("die:rank=2,op=5",))
    died = [r for r in service.hangs.reports.values() if r.verdict is Verdict.process_died]
    assert died, [r.summary for r in service.hangs.reports.values()]
    assert [c.comm_rank for c in died[0].culprits] == [2]
    # on disk, as a restarted agent would find it
    again = HangStore(tmp_path)
    again.load()
    assert again.reports == service.hangs.reports and again.errors == {}
    # the surviving ranks' watchdogs flagged the op they waited on, through the FIFO
    suspected = [e for e in service.hang_events if e.event_type == "hang_suspected"]
    assert suspected and {e.rank for e in suspected} <= {0, 1, 3}
    assert service.fifo.stats.rejected == service.fifo.stats.bytes_discarded == 0
    text = service.metrics.render().decode()
    assert "comminsight_ops_total{" in text
    assert service.passes >= 3


def test_a_healthy_run_leaves_no_report(plugin, tmp_path):
    # judged with a threshold a loaded machine's scheduling delays do not reach
    service = run_service_during_sim(plugin, tmp_path, (), threshold_s=HEALTHY_THRESHOLD_S)
    # no hang; a rank the loaded machine starves of the CPU may truly join late (straggler)
    reports = service.hangs.reports.values()
    assert [r.summary for r in reports if r.verdict is not Verdict.straggler] == []
    assert [e for e in service.hang_events if e.event_type == "hang_suspected"] == []


def test_the_agent_command_reports_a_dead_rank_and_stops_on_sigterm(plugin, tmp_path):
    listen = f"127.0.0.1:{free_port()}"
    agent = agent_process(tmp_path, COMMINSIGHT_AGENT_LISTEN=listen)
    try:
        wait_for(tmp_path / "fifos" / "hang-events.fifo")  # it holds the lock and the FIFO
        assert api_get(listen, "/api/v1/health").json()["processes_total"] == 0
        second = agent_process(tmp_path)
        assert second.wait(timeout=30) == 1 and "another agent holds" in second.stderr.read()
        config = e2e_sim_config(plugin, tmp_path, ("die:rank=2,op=5",))
        assert not run_simulation(config).errors

        def hang_verdicts() -> set[str]:
            hangs = api_get(listen, "/api/v1/hangs?status=all").json()["items"]
            return {h["verdict"] for h in hangs}

        # the agent's passes after the run
        wait_until(
            lambda: "process_died" in hang_verdicts(),
            60,
            lambda: f"process_died in {hang_verdicts()}",
        )
        # the communicator's series, whatever process labels come before its comm label
        ops = re.compile(r'^comminsight_ops_total\{[^}]*comm="default_pg:0"', re.M)

        def metrics_with_the_ops() -> str | None:
            text = api_get(listen, "/metrics").text
            return text if ops.search(text) else None

        metrics = wait_until(metrics_with_the_ops, 60, "the communicator's ops on /metrics")
        assert "# TYPE comminsight_hangs_open gauge" in metrics
    finally:
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0, stderr
    store = HangStore(tmp_path)
    store.load()
    verdicts = {r.verdict for r in store.reports.values()}
    assert Verdict.process_died in verdicts, stderr
    assert f"Agent Master API and /metrics on http://{listen}" in stderr


def test_the_agent_command_names_an_address_it_cannot_listen_on(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        agent = agent_process(tmp_path, COMMINSIGHT_AGENT_LISTEN=listen)
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 1
    assert f"cannot listen on {listen} (COMMINSIGHT_AGENT_LISTEN)" in stderr


def test_the_agent_command_names_a_bad_setting(tmp_path):
    agent = agent_process(tmp_path, COMMINSIGHT_AGENT_POLL_INTERVAL_MS="0")
    _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 2 and "COMMINSIGHT_AGENT_POLL_INTERVAL_MS" in stderr


def test_a_sleeper_is_reported_then_resolved_when_it_rejoins(plugin, tmp_path):
    # enough steps after the sleep that passes see the communicator live again before finalize
    faults = ("sleep:rank=0,op=5,seconds=2",)
    service = run_service_during_sim(plugin, tmp_path, faults, steps=100)
    reports = list(service.hangs.reports.values())
    assert reports, "no report"
    stuck = [r for r in reports if r.verdict is Verdict.stuck_outside_nccl]
    assert stuck and [c.comm_rank for c in stuck[0].culprits] == [0]
    assert all(r.status.value == "resolved" for r in reports), [r.summary for r in reports]
    assert stuck[0].resolved_mono_ns > stuck[0].detected_mono_ns
    # The hang ends when the op completes. On a loaded machine the sleeper's heartbeat can lag
    # past its staleness limit mid-hang, and another verdict then stands for the communicator
    # (the stuck report superseded): the report that stood last is the one the op resolved.
    same_comm = sorted(
        (r for r in reports if r.comm.comm_id == stuck[0].comm.comm_id),
        key=lambda r: r.detected_mono_ns,
    )
    assert same_comm[-1].resolution.value == "op_completed", [r.summary for r in same_comm]
    assert all(r.resolution.value == "superseded" for r in same_comm[:-1]), same_comm
    again = HangStore(tmp_path)
    again.load()
    assert again.reports[stuck[0].report_id].status.value == "resolved"  # written, not only kept


def test_the_agent_passes_at_its_interval_while_a_process_runs_and_seldom_when_none_does(
    plugin, tmp_path
):
    """A node between jobs (or after hundreds of short-lived processes, all ended and their
    records safe) has nothing for a pass to find but a region that appears, which waits in
    shms/ with its records: the Agent passes every IDLE_POLL_INTERVAL_S then, and at its
    configured interval again as soon as a process publishes."""
    home = tmp_path / "home"
    (home / "metadata").mkdir(parents=True)
    lock = open(home / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held for the test
    fcntl.flock(lock, fcntl.LOCK_EX)  # as the Agent does: the region stays for it to retire
    settings = msgspec.convert({"home": str(home), "agent_poll_interval_ms": 20}, ConfigV1)
    service = AgentService(settings)
    assert service.poll_interval_s() == IDLE_POLL_INTERVAL_S  # nothing to follow yet

    release = tmp_path / "release"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "PYTHONPATH": str(ROOT / "tests"),
        "SCENARIO_OPS": "4",
        "SCENARIO_HOLD_FILE": str(release),
    }
    job = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "hostile_scenarios.py"), "train", str(plugin)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def followed() -> bool:
            service.poll_once()
            return bool(service.producers.producers)

        wait_until(followed, 120, "the process's region")
        assert service.poll_interval_s() == 0.02
    finally:
        release.touch()
        out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err

    def all_released() -> bool:
        service.poll_once()
        return all(p.released for p in service.producers.producers.values())

    wait_until(all_released, 120, "the ended process's region released")
    assert service.producers.producers  # still remembered, for diagnosis
    assert service.poll_interval_s() == IDLE_POLL_INTERVAL_S
    service.producers.close()
    lock.close()
