"""Processes no engine checkpoint named get their live Step summaries all the same.

Job A runs while an Agent follows the home and is killed (SIGKILL) before its engine's first
checkpoint that names a process: only its start checkpoint is on disk. Job B then runs from
start to end while no Agent runs. Both jobs' processes have ended, taking their SHM regions
with them, when the next Agent starts: it must write every rank's summaries of both jobs, equal
to those of an Agent that never stopped, from their inspector logs; and they must be the
simulation's true Steps.

An Agent starting in a home no Agent followed before recovers nothing of what ran there: those
processes were never any Agent's.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest
from agent_processes import agent_process, api_get
from live_baseline import comparable, uninterrupted
from ports import free_port
from waiting import wait_until

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.step_accuracy import op_identity
from comminsight.sim.truth import read_ground_truth

RANKS = 2
# job A runs slowly enough to be caught mid-run (few ops, long Steps); job B quickly
STEPS = {"job-a": 200, "job-b": 40}
SCALE = {"job-a": 2.0, "job-b": 0.5}
# no checkpoint but the one an Agent writes as it starts
NO_CHECKPOINT = {"COMMINSIGHT_SEMANTIC_CHECKPOINT_S": "3600"}


def job(plugin: Path, home: Path, job_id: str, seed: int) -> SimConfig:
    return SimConfig(
        plugin=str(plugin),
        home=str(home),
        workload="ddp",
        ranks=RANKS,
        steps=STEPS[job_id],
        time_scale=SCALE[job_id],
        seed=seed,
        # Inject's optimizer-step markers tell DDP's Steps however loaded the machine is: idle
        # time alone, which a busy machine hides, tells them otherwise
        step_markers=True,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("COMMINSIGHT_JOB_ID", job_id)),
    )


def partial_lines(home: Path) -> int:
    return sum(
        len(p.read_bytes().splitlines())
        for p in (home / "semantics" / "step").glob("live-*.jsonl.partial")
    )


def stop(agent, sig: signal.Signals) -> str:
    agent.send_signal(sig)
    return agent.communicate(timeout=60)[1]


@pytest.mark.slow
@pytest.mark.timeout(600)  # a hang guard: two simulated jobs and two Agents on a busy machine
def test_processes_no_checkpoint_named_get_an_uninterrupted_runs_summaries(plugin, tmp_path):
    home = tmp_path / "home"
    listen = f"127.0.0.1:{free_port()}"
    agent = agent_process(home, COMMINSIGHT_AGENT_LISTEN=listen, **NO_CHECKPOINT)
    stderrs, results = [], {}
    sim = threading.Thread(
        target=lambda: results.setdefault("a", run_simulation(job(plugin, home, "job-a", 3)))
    )
    try:
        api_get(listen, "/api/v1/health")
        sim.start()
        # killed once it has written Steps of the job's processes (which no checkpoint names)
        wait_until(
            lambda: partial_lines(home) >= 3 * RANKS or not sim.is_alive(), 240, "live Steps"
        )
        assert sim.is_alive(), "job A ended before its Agent was killed"
        stderrs.append(stop(agent, signal.SIGKILL))
        sim.join(timeout=300)
        results["b"] = run_simulation(job(plugin, home, "job-b", 4))  # no Agent runs
        agent = agent_process(home, COMMINSIGHT_AGENT_LISTEN=listen, **NO_CHECKPOINT)
        api_get(listen, "/api/v1/health")
        step_dir = home / "semantics" / "step"
        wait_until(
            lambda: len(list(step_dir.glob("live-*.jsonl"))) == 2 * RANKS,
            120,
            "every rank of both jobs sealed",
        )
    finally:
        stderrs.append(stop(agent, signal.SIGTERM))
        sim.join(timeout=300)
    logs = "\n".join(f"Agent {k}:\n{err[-3000:]}" for k, err in enumerate(stderrs))
    assert agent.returncode == 0, logs
    assert "ran while no Agent checkpointed it" in stderrs[-1], logs

    by_job: dict[str, list[Path]] = {}
    for path in sorted(step_dir.glob("live-*.jsonl")):
        by_job.setdefault(json.loads(path.read_bytes().splitlines()[0])["job_id"], []).append(path)
    assert sorted(by_job) == ["job-a", "job-b"], by_job
    for name, files in by_job.items():
        result = results[name[-1]]
        assert not result.errors
        assert len(files) == RANKS, files
        expected = uninterrupted(home, files, tmp_path / f"baseline-{name}")
        truths = read_ground_truth(result.run_dir)
        for path in files:
            got = path.read_bytes().splitlines()
            want = expected[path.name]
            truth = truths[json.loads(got[0])["global_rank"]]
            assert len(got) == len(want) == len(truth.records["step"]), (path.name, logs)
            differ = [
                k
                for k, (a, b) in enumerate(zip(got, want, strict=True))
                if comparable(a) != comparable(b)
            ]
            assert not differ, (path.name, differ[:10], got[differ[0]], want[differ[0]], logs)
            ids = op_identity(truth)
            true_steps = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.records["step"]]
            steps = [
                tuple(
                    (op["comm_id"], op["func"], op["seq"]) for op in (s["first_op"], s["last_op"])
                )
                for s in map(json.loads, got)
            ]
            assert steps == true_steps, path.name
