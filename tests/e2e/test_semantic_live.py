"""The Agent's live Semantic Engine across Agent crashes: `comminsight-agent` is SIGKILLed
(twice) while training runs and step summaries are being written, a new one starts, restores
the engines from the live checkpoint and the cut's context from the ring, and goes on. Every
rank's summaries then hold each true Step exactly once, on its true ops: none lost, none
written twice."""

from __future__ import annotations

import signal
import threading

import msgspec
import numpy as np
import pytest
from agent_processes import agent_process, api_get
from ports import free_port
from waiting import WaitTimeout, wait_until

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.step_accuracy import op_identity
from comminsight.sim.truth import read_ground_truth
from comminsight_gen.models.step_summary_v1 import StepSummary

RANKS = 8


def summary_lines(home) -> int:
    return sum(
        len(p.read_bytes().splitlines()) for p in (home / "semantics" / "step").glob("live-*")
    )


@pytest.mark.slow
@pytest.mark.timeout(600)  # a hang guard: 200 Steps of 8 ranks and three Agents, on a busy machine
def test_agent_killed_mid_run_resumes_its_engines_without_losing_or_repeating_a_step(
    plugin,
    tmp_path,
):
    env = {"COMMINSIGHT_SEMANTIC_CHECKPOINT_S": "0.2"}
    listen = f"127.0.0.1:{free_port()}"
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path),
        workload="tp-pp-dp",
        ranks=RANKS,
        steps=200,  # long enough that both kills land mid-run: summaries start ~20 steps in
        time_scale=0.5,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
    )
    agent = agent_process(tmp_path, COMMINSIGHT_AGENT_LISTEN=listen, **env)
    result, stderrs = {}, []
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    try:
        api_get(listen, "/api/v1/health")
        sim.start()
        wait_until(lambda: summary_lines(tmp_path) >= 2 * RANKS, 120, "two summaries per rank")
        assert sim.is_alive(), "the run ended before the agent could be killed mid-run"
        # killed soon after its first Steps, then again once the next Agent has written more
        # (unless the run ended first: an Agent restarted after its processes ended has no ring
        # to resume from, see test_live_cut)
        for kill in range(2):
            if kill:
                lines = summary_lines(tmp_path)
                wait_until(
                    lambda n=lines: summary_lines(tmp_path) > n or not sim.is_alive(),
                    120,
                    "the restarted Agent writes a Step",
                )
                if not sim.is_alive():
                    break
            agent.send_signal(signal.SIGKILL)
            stderrs.append(agent.communicate(timeout=30)[1])
            agent = agent_process(tmp_path, COMMINSIGHT_AGENT_LISTEN=listen, **env)
            api_get(listen, "/api/v1/health")
        sim.join(timeout=300)
        assert not result["sim"].errors
        step_dir = tmp_path / "semantics" / "step"
        try:
            sealed = wait_until(
                lambda: len(list(step_dir.glob("live-*.jsonl"))) == RANKS, 60, "every seal"
            )
        except WaitTimeout:
            sealed = False
    finally:
        agent.send_signal(signal.SIGTERM)
        stderrs.append(agent.communicate(timeout=30)[1])
        sim.join(timeout=300)
    logs = "\n".join(f"Agent {k}:\n{err[-3000:]}" for k, err in enumerate(stderrs))
    assert sealed, (
        "the engines did not seal every rank's summaries:\n"
        + "\n".join(sorted(p.name for p in step_dir.iterdir()))
        + "\n"
        + logs
    )
    assert agent.returncode == 0, logs
    assert "resumed after ring record" in stderrs[1], logs

    truths = read_ground_truth(result["sim"].run_dir)
    decoder = msgspec.json.Decoder(StepSummary)
    for path in sorted((tmp_path / "semantics" / "step").glob("live-*.jsonl")):
        summaries = [decoder.decode(line) for line in path.read_bytes().splitlines()]
        truth = truths[summaries[0].global_rank]
        ids = op_identity(truth)
        expected = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.records["step"]]
        got = [
            (
                (s.first_op.comm_id, s.first_op.func, s.first_op.seq),
                (s.last_op.comm_id, s.last_op.func, s.last_op.seq),
            )
            for s in summaries
        ]
        # each restarted Agent's cut goes on from the Steps already written (the ring still
        # holds their ops): every Step exact, none lost, none written twice
        missed = [k for k, step in enumerate(expected) if step not in set(got)]
        extra = [k for k, step in enumerate(got) if step not in set(expected)]
        assert not missed and not extra, (
            path.name,
            f"rank {summaries[0].global_rank}: {len(got)} Steps written, {len(expected)} true",
            f"missed {missed[:20]}, extra {extra[:20]}",
            f"written {got[:3]}, true {expected[:3]}",
            [(s.step_index, s.recovery.confidence, s.recovery.reasons) for s in summaries[:3]],
            logs,
        )
        assert [s.step_index for s in summaries] == list(range(len(got)))
        assert all(s.produced_by.mode.value == "live" for s in summaries)
    assert (tmp_path / "semantics" / "step" / "engine-live.checkpoint.json").exists()


def test_queued_batches_are_merged_per_gpu_in_order_without_crossing_a_loss():
    from comminsight.agent.steps.engine_hook import GpuStream
    from comminsight.agent.steps.semantic_hook import coalesce

    a = GpuStream("n", 1, 10, 0, 0)
    b = GpuStream("n", 2, 20, 1, 1)
    rec = [np.arange(k * 10, k * 10 + 3) for k in range(5)]
    items = [
        ("ops", a, (rec[0], {1: "x"})),
        ("ops", b, (rec[1], {})),
        ("ops", a, (rec[2], {2: "y"})),
        ("lost", a, 7),
        ("ops", a, (rec[3], {})),
        ("finished", b, None),
        ("ops", b, (rec[4], {})),
    ]
    out = coalesce(items)
    assert [(k, g.pid) for k, g, _ in out] == [
        ("ops", 1), ("lost", 1), ("ops", 1), ("ops", 2), ("finished", 2), ("ops", 2)
    ]  # fmt: skip
    merged = out[0][2]
    assert merged[0].tolist() == rec[0].tolist() + rec[2].tolist()
    assert merged[1] == {1: "x", 2: "y"}
    assert out[1][2] == 7 and out[2][2][0].tolist() == rec[3].tolist()


def test_without_its_c_core_the_agent_serves_on_and_says_the_engine_is_off(tmp_path, monkeypatch):
    from comminsight.agent.node.service import AgentService
    from comminsight.agent.steps.engine_hook import PassThroughEngine
    from comminsight.semantic import native
    from comminsight_gen.config_v1 import ConfigV1

    monkeypatch.setattr(native, "LIBRARY", tmp_path / "libciengine.so")  # not built
    monkeypatch.setattr(native, "_lib", None)
    settings = msgspec.convert({"home": str(tmp_path)}, ConfigV1)
    service = AgentService(settings)
    assert isinstance(service.engine, PassThroughEngine)
    health = service.health()
    assert health.status.value == "degraded"
    assert any("Semantic Engine is off" in r and "make build-engine" in r for r in health.reasons)


def test_a_gpu_whose_engine_keeps_failing_backs_off_after_a_few_restarts_and_the_others_go_on(
    tmp_path, caplog
):
    from comminsight.agent.steps.engine_hook import GpuStream
    from comminsight.agent.steps.restarts import MAX_RESTARTS
    from comminsight.agent.steps.semantic_hook import SemanticEngineHook
    from comminsight.semantic.templates import load_templates

    hook = SemanticEngineHook(tmp_path, load_templates(), checkpoint_s=60)
    bad, good = GpuStream("n", 7, 70, 0, 0), GpuStream("n", 8, 80, 1, 1)
    handled = []

    def handle(g, kind, payload):
        handled.append(g.gpu.pid)
        if g.gpu == bad:
            raise ValueError("corrupt batch")

    hook.engines.handle = handle
    try:
        for _ in range(3):
            hook.feed(bad, np.zeros(0, [("seq", "<u8")]), {})
            hook.feed(good, np.zeros(0, [("seq", "<u8")]), {})
            wait_until(hook.idle, 60, "the worker did not drain its queue")
    finally:
        hook.stop()
    assert handled.count(8) == 3
    # every failure restarts it (replaying what came since its checkpoint) until the restart
    # budget is spent; then it waits, its batches kept for the next restart
    assert handled.count(7) == MAX_RESTARTS + 1
    (status,) = [s for s in hook.gpu_status() if s.pid == 7]
    assert status.state == "backing_off" and status.restarts == MAX_RESTARTS
    assert hook.counts.failures == {"ValueError": MAX_RESTARTS + 1}
    assert hook.counts.restarts == {"ValueError": MAX_RESTARTS}
    assert sum("GPU pid 7 failed" in r.message for r in caplog.records) == MAX_RESTARTS + 1
