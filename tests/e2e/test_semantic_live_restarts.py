"""Live Step summaries across Agent restarts equal an uninterrupted run's.

A simulated job runs while `comminsight-agent` is stopped and started again several times,
SIGKILL and SIGTERM mixed at seeded points of the run, the last stop landing while the job
ends (its processes exit while no Agent runs, and their Profilers remove their SHM regions:
the ring records after the checkpoint are then only in their inspector logs). Every rank's
summaries must then be the ones the live engine writes when it never stops, given the same
records: the baseline is the Agent's own engine (SemanticEngineHook) run in this process over
each rank's records, read back from its logs as the ring held them (log_records).

Compared byte for byte, except `recovery.confidence` and `recovery.reasons`: they describe
the cut that placed the Step, which names how far each rank's ops had come when it ran, so
they differ between two Agents that never stop as well (the poll that reads each ring, not a
restart, decides it). Every rank's Steps must also be the simulation's true Steps.
"""

from __future__ import annotations

import json
import random
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

RANKS = 4
STEPS = 600
SEED = 7
# a stop lands once the Agents have written this many summaries per rank (seeded within the
# run's first tenth), each with its signal; the last one while the run ends
STOPS = 3


def summary_lines(home: Path) -> int:
    return sum(
        len(p.read_bytes().splitlines()) for p in (home / "semantics" / "step").glob("live-*")
    )


def stop_points(rng: random.Random) -> list[tuple[int, signal.Signals]]:
    steps = sorted(rng.sample(range(5, STEPS // 10), STOPS))
    kinds = [signal.SIGKILL, signal.SIGTERM] + [rng.choice([signal.SIGKILL, signal.SIGTERM])]
    rng.shuffle(kinds)
    return list(zip(steps, kinds, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(600)  # a hang guard: a simulated job and four Agents on a busy machine
def test_live_summaries_across_killed_and_stopped_agents_are_an_uninterrupted_runs(
    plugin, tmp_path
):
    home = tmp_path / "home"
    env = {"COMMINSIGHT_SEMANTIC_CHECKPOINT_S": "2"}
    listen = f"127.0.0.1:{free_port()}"
    config = SimConfig(
        plugin=str(plugin),
        home=str(home),
        workload="ddp",
        ranks=RANKS,
        steps=STEPS,
        time_scale=0.5,
        seed=SEED,
        # Inject's optimizer-step markers tell DDP's Steps however loaded the machine is: idle
        # time alone, which a busy machine hides, tells them otherwise
        step_markers=True,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
    )
    stops = stop_points(random.Random(SEED))
    agent = agent_process(home, COMMINSIGHT_AGENT_LISTEN=listen, **env)
    result, stderrs = {}, []
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    try:
        api_get(listen, "/api/v1/health")
        sim.start()
        for k, (steps, sig) in enumerate(stops):
            wait_until(
                lambda n=steps: summary_lines(home) >= n * RANKS or not sim.is_alive(),
                240,
                f"{steps} Steps per rank",
            )
            assert sim.is_alive(), (
                f"the run ended before stop {k} ({sig.name} at {steps} Steps a rank): "
                f"{summary_lines(home)} summaries, stops {stops}\n" + "\n".join(stderrs)[-3000:]
            )
            agent.send_signal(sig)
            stderrs.append(agent.communicate(timeout=60)[1])
            if k == len(stops) - 1:
                sim.join(timeout=300)  # the job ends while no Agent runs
            agent = agent_process(home, COMMINSIGHT_AGENT_LISTEN=listen, **env)
            api_get(listen, "/api/v1/health")
        sim.join(timeout=300)
        assert not result["sim"].errors
        step_dir = home / "semantics" / "step"
        wait_until(
            lambda: len(list(step_dir.glob("live-*.jsonl"))) == RANKS, 120, "every rank sealed"
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        stderrs.append(agent.communicate(timeout=60)[1])
        sim.join(timeout=300)
    logs = "\n".join(f"Agent {k}:\n{err[-3000:]}" for k, err in enumerate(stderrs))
    assert agent.returncode == 0, logs

    files = sorted(step_dir.glob("live-*.jsonl"))
    expected = uninterrupted(home, files, tmp_path / "baseline")
    truths = read_ground_truth(result["sim"].run_dir)
    for path in files:
        got = path.read_bytes().splitlines()
        want = expected[path.name]
        rank = json.loads(got[0])["global_rank"]
        truth = truths[rank]
        assert len(got) == len(want) == len(truth.records["step"]), (path.name, logs)
        pairs = enumerate(zip(got, want, strict=True))
        differ = [k for k, (a, b) in pairs if comparable(a) != comparable(b)]
        assert not differ, (path.name, differ[:10], got[differ[0]], want[differ[0]], logs)
        ids = op_identity(truth)
        true_steps = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.records["step"]]
        steps = [
            tuple((op["comm_id"], op["func"], op["seq"]) for op in (s["first_op"], s["last_op"]))
            for s in map(json.loads, got)
        ]
        assert steps == true_steps, path.name
