"""One hang threshold per job, end to end: a real `comminsight-agent` started with
COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=2 and a simulated job in its home.

- The ranks are started without the key: their watchdogs follow the Agent's 2 s (their
  hang evidence says so, not their own default of 300 s), health finds every process agreeing,
  and the rank that skipped an op is diagnosed while the job still holds the hang.
- The ranks have the key in their own environment (30 s): they keep it, health says that
  they differ, which processes watch with which value and that the verdicts use the Agent's
  2 s, and the verdict comes by the Agent's 2 s all the same.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading

from agent_processes import agent_process, api_get, cli, wait_for
from e2e_sims import E2E_ENV, e2e_sim_config
from log_files import segment_data
from ports import free_port
from waiting import wait_until

from comminsight.sim import run_simulation
from comminsight.sim.truth import read_ground_truth

AGENT_THRESHOLD_S = "2"
# the job holds its hang this long: well past the Agent's 2 s, for its verdict and the ranks'
# watchdogs to see it (then it aborts)
HANG_HOLD_S = 10.0
RANK_ENV = tuple((k, v) for k, v in E2E_ENV if k != "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S")


def job(plugin, home, rank_env=()):
    config = e2e_sim_config(plugin, home, ("skip:rank=1,op=5",))
    return dataclasses.replace(config, env=(*RANK_ENV, *rank_env), hang_hold_s=HANG_HOLD_S)


class AgentAndJob:
    """The Agent with its 2 s, then the job in a thread; the API between."""

    def __init__(self, plugin, home, rank_env=()):
        self.home = home
        self.listen = f"127.0.0.1:{free_port()}"
        self.agent = agent_process(
            home,
            COMMINSIGHT_AGENT_LISTEN=self.listen,
            COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=AGENT_THRESHOLD_S,
        )
        self.config = job(plugin, home, rank_env)
        self.result = {}
        self.sim = threading.Thread(
            target=lambda: self.result.setdefault("sim", run_simulation(self.config))
        )

    def __enter__(self):
        wait_for(self.home / "metadata" / "agent-settings")  # published before the job starts
        api_get(self.listen, "/api/v1/health")
        self.sim.start()
        return self

    def __exit__(self, *exc):
        self.sim.join()
        self.agent.send_signal(signal.SIGTERM)
        self.stderr = self.agent.communicate(timeout=30)[1]

    def get(self, path: str):
        return api_get(self.listen, path).json()

    def health_of_all_ranks(self) -> dict:
        """Health once every rank's watchdog is judged (it had heartbeats since publication)."""

        def judged():
            h = self.get("/api/v1/health")
            t = h["hang_threshold"]
            return h if t["processes_agreeing"] + t["processes_differing"] == 4 else None

        return wait_until(judged, 120, "health judging the four ranks' thresholds")

    def report_on_rank_1(self) -> dict:
        def found():
            for h in self.get("/api/v1/hangs?status=all")["items"]:
                if [c.get("global_rank") for c in h["culprits"]] == [1]:
                    return h
            return None

        return wait_until(found, 120, "a hang report naming rank 1")

    def pids(self) -> dict[int, int]:
        """rank -> pid, from the job's ground truth (once it ended)."""
        run_dir = self.result["sim"].run_dir
        return {t.rank: t.run["pid"] for t in read_ground_truth(run_dir)}


def hang_evidence_thresholds(home) -> set[int]:
    """threshold_ns of every hang_evidence line the ranks' watchdogs wrote."""
    out = set()
    for _, data in segment_data(home / "inspector_logs"):
        for line in data.decode(errors="replace").splitlines():
            if '"hang_evidence"' in line:
                out.add(json.loads(line)["ci"]["threshold_ns"])
    return out


def test_ranks_without_a_threshold_follow_the_agents_and_the_skip_is_diagnosed(plugin, tmp_path):
    with AgentAndJob(plugin, tmp_path) as run:
        health = run.health_of_all_ranks()
        report = run.report_on_rank_1()
    assert not run.result["sim"].errors, run.result["sim"].errors
    threshold = health["hang_threshold"]
    assert threshold["verdict_threshold_ms"] == 2000 and threshold["published"]
    assert (threshold["processes_agreeing"], threshold["processes_differing"]) == (4, 0)
    assert threshold["differing"] == []
    assert not [r for r in health["reasons"] if "hang threshold" in r]
    assert report["verdict"] == "stuck_outside_nccl" and report["threshold_ms"] == 2000
    assert [c["pid"] for c in report["culprits"]] == [run.pids()[1]]
    # the ranks' watchdogs flagged the stuck op by the Agent's 2 s, not their own 300 s
    assert hang_evidence_thresholds(tmp_path) == {2_000_000_000}
    # the Agent withdrew its value when it stopped: a later job's ranks are on their own
    assert run.agent.returncode == 0, run.stderr
    assert not (tmp_path / "metadata" / "agent-settings").exists()


def test_ranks_with_their_own_threshold_keep_it_and_health_says_the_verdict_uses_the_agents(
    plugin, tmp_path
):
    rank_env = (("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "30"),)
    with AgentAndJob(plugin, tmp_path, rank_env) as run:
        health = run.health_of_all_ranks()
        status = cli("status", url=f"http://{run.listen}")
        report = run.report_on_rank_1()
    pids = run.pids()
    threshold = health["hang_threshold"]
    assert threshold["verdict_threshold_ms"] == 2000
    assert (threshold["processes_agreeing"], threshold["processes_differing"]) == (0, 4)
    assert sorted(d["pid"] for d in threshold["differing"]) == sorted(pids.values())
    for d in threshold["differing"]:
        assert d["global_rank"] == {pid: rank for rank, pid in pids.items()}[d["pid"]]
        assert (d["watchdog_threshold_ms"], d["source"]) == (30_000, "environment")
        assert (d["own_threshold_ms"], d["own_source"]) == (30_000, "environment")
    assert health["status"] == "degraded"
    (said,) = [r for r in health["reasons"] if r.startswith("hang threshold")]
    assert "verdicts use the Agent's 2 s" in said
    assert "30 s set in the process's own environment, kept over the Agent's" in said
    for rank, pid in pids.items():
        assert f"pid {pid} (rank {rank})" in said
    # and `comminsight status` says it
    assert status.returncode == 0, status.stderr
    assert "hang threshold: verdicts use the Agent's 2 s" in status.stdout, status.stdout
    # the verdict is the Agent's, by its 2 s
    assert report["verdict"] == "stuck_outside_nccl" and report["threshold_ms"] == 2000
    assert [c["pid"] for c in report["culprits"]] == [pids[1]]
