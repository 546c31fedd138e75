"""A home reused by two jobs, end to end: a real `comminsight-agent` watches job A run to its
end (healthy, or with rank 2 skipping an op), then job B, another job id on the same
communicator ids (the simulator derives them from its seed), in which rank 1 skips an op. The
Agent still holds job A's regions (it retires them a minute after they end) and its reports:
job B's verdict names job B's rank 1 alone, never a process of job A, and job B's hang is an
incident of its own while job A's reports stay as they were."""

from __future__ import annotations

import dataclasses
import signal

import pytest
from agent_processes import agent_process, api_get, wait_for
from e2e_sims import E2E_ENV, e2e_sim_config
from ports import free_port
from waiting import wait_until

from comminsight.sim import run_simulation
from comminsight.sim.truth import read_ground_truth

RANK_ENV = tuple((k, v) for k, v in E2E_ENV if k != "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S")


def run_job(plugin, home, job_id: str, faults: tuple[str, ...]) -> dict[int, int]:
    """One job to its end in `home`; rank -> pid."""
    config = e2e_sim_config(plugin, home, faults)
    config = dataclasses.replace(
        config, env=(*RANK_ENV, ("COMMINSIGHT_JOB_ID", job_id)), hang_hold_s=8.0
    )
    result = run_simulation(config)
    assert not result.errors, result.errors
    return {t.rank: t.run["pid"] for t in read_ground_truth(result.run_dir)}


def named_pids(item: dict) -> set[int]:
    """Every pid a report or an incident's root names: culprits, evidence, summary."""
    rows = [*item.get("culprits", ()), *item.get("evidence", ())]
    return {r["pid"] for r in rows if "pid" in r}


@pytest.mark.parametrize("first", ["healthy", "skip:rank=2,op=5"])
def test_a_second_job_in_the_same_home_blames_only_its_own_rank(plugin, tmp_path, first):
    listen = f"127.0.0.1:{free_port()}"
    agent = agent_process(
        tmp_path, COMMINSIGHT_AGENT_LISTEN=listen, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="2"
    )
    try:
        wait_for(tmp_path / "metadata" / "agent-settings")
        a = run_job(plugin, tmp_path, "job-a", () if first == "healthy" else (first,))
        b = run_job(plugin, tmp_path, "job-b", ("skip:rank=1,op=5",))

        def hangs_of(job: str) -> list[dict]:
            items = api_get(listen, "/api/v1/hangs?status=all").json()["items"]
            return [h for h in items if h.get("job_id") == job]

        def incidents_of(job: str) -> list[dict]:
            items = api_get(listen, "/api/v1/incidents?status=all").json()["items"]
            return [i for i in items if i.get("job_id") == job]

        wait_until(
            lambda: any(named_pids(h) >= {b[1]} for h in hangs_of("job-b")),
            120,
            lambda: f"job B's report on its rank 1: {hangs_of('job-b')}",
        )
        incidents_b = wait_until(lambda: incidents_of("job-b"), 60, "job B's incident")
        hangs_b, hangs_a = hangs_of("job-b"), hangs_of("job-a")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=30)
    a_pids = set(a.values())
    for h in hangs_b:
        assert not named_pids(h) & a_pids, h["summary"]
        assert not any(f"pid {pid}" in h["summary"] for pid in a_pids), h["summary"]
        assert all(e["pid"] in b.values() for e in h["evidence"] if "pid" in e), h["summary"]
    blamed = [h for h in hangs_b if h["verdict"] != "straggler" and h["culprits"]]
    assert blamed and all([c["pid"] for c in h["culprits"]] == [b[1]] for h in blamed), [
        h["summary"] for h in blamed
    ]
    roots = [i["root"] for i in incidents_b]
    assert [[c["pid"] for c in r["culprits"]] for r in roots] == [[b[1]]], roots
    assert roots[0]["comm"]["comm_name"] == "default_pg:0" and roots[0]["op"]["index"] == 5
    # job A's own reports are still there, its own
    assert {pid for h in hangs_a for pid in named_pids(h)} <= a_pids
    if first != "healthy":
        assert any([c["pid"] for c in h["culprits"]] == [a[2]] for h in hangs_a)
