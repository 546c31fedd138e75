"""The live Semantic Engine runs as long as training runs: a long input fed batch by batch
neither recurses nor makes the hook hold more than its settings allow, and an exception out of
a GPU's engine is reported (health, metrics) and the engine restarts from its checkpoint with
no Step lost or written twice.

The input is a synthetic DDP job (four gradient buckets and a loss all-reduce per Step) as op
slots (shm v1), handed to the hook's worker path directly from the test thread: the worker
thread is left idle (checkpoints an hour apart), so every batch reaches the engine alone and
in order, as batches do when training is slow and the Agent polls often.
"""

from __future__ import annotations

import gc
import sys
import threading
import types

import msgspec
import numpy as np
import pytest
from engine_inputs import (
    BUCKETS,
    COMMS,
    GPU,
    TEMPLATES,
    UNSETTLED,
    UNSETTLED_SHORT,
    batches,
    ddp_slots,
)
from waiting import wait_until

from comminsight.agent.steps.replay import DEFAULT_MAX_RECORDS, ReplayLog
from comminsight.agent.steps.restarts import RestartBudget
from comminsight.agent.steps.semantic_hook import SemanticEngineHook
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.live_cut import FIRST_OPS, MIN_NEW_OPS
from comminsight.semantic.op_batch import MAX_LAZY_DEPTH, LazyColumns, OpBatch
from comminsight.semantic.ops import WINDOW
from comminsight.semantic.shm_input import CommInfo
from comminsight_gen.abi import shm_v1
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models.step_summary_v1 import AnomalyKind, StepSummary


def new_hook(home, **kwargs) -> SemanticEngineHook:
    return SemanticEngineHook(home, TEMPLATES, checkpoint_s=3600, **kwargs)


def take(hook: SemanticEngineHook, slots: np.ndarray, size: int = 1) -> None:
    """Hand the slots to the worker path, `size` at a time (the worker thread is idle)."""
    for part in batches(slots, size):
        hook._take(GPU, "ops", (part, COMMS))


def finish(hook: SemanticEngineHook) -> bytes:
    hook._take(GPU, "finished", None)
    hook.stop()
    (sealed,) = hook.out_dir.glob("live-*.jsonl")
    return sealed.read_bytes()


def frames() -> int:
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


# ---- a long input --------------------------------------------------------------------------


# A long input is one that crosses, many times over, every bound that decides which batches
# the engine keeps, joins or drops: the node's cut (every MIN_NEW_OPS new ops, or a sixteenth
# of its context), the cut's context (trimmed past max_context ops) and the replay log (its
# oldest entries dropped past replay_max records: no checkpoint comes here). At the defaults
# that takes 100,000 batches, one at a time: minutes of CPU. With those bounds 4 to 16 times
# smaller, 12,000 batches cross them as often (measured: 87 cuts, 69 context trims, 7,904
# records dropped from the replay log; 100,000 batches at the defaults: 72, 30 and 34,464).
SMALL_CUT = dict(min_new_ops=128, max_context=2048)


@pytest.mark.timeout(600)  # a hang guard: a loaded machine feeds a batch several times slower
@pytest.mark.parametrize(
    "n_batches, cut, replay_max",
    [
        (4_000, {}, DEFAULT_MAX_RECORDS),
        pytest.param(12_000, SMALL_CUT, 4096, marks=pytest.mark.slow),
    ],
    ids=["4k", "12k-small-bounds"],
)
def test_a_long_input_fed_one_small_batch_at_a_time_never_recurses(
    tmp_path, n_batches, cut, replay_max
):
    hook = new_hook(tmp_path, replay_max=replay_max)
    for name, value in cut.items():
        setattr(hook.live_cut, name, value)
    slots = ddp_slots(n_batches // len(BUCKETS))
    limit = sys.getrecursionlimit()
    # room for this test's own frames and the engine's calls, none for a column read that
    # goes back through every batch fed
    sys.setrecursionlimit(frames() + 120)
    try:
        take(hook, slots)
        g = hook.engines.gpus[GPU]
        crossed = (hook.live_cut.stats.contexts_trimmed, g.replay.dropped)  # a checkpoint resets
        hook._save_checkpoint()  # reads the unplaced ops' positions: their rarest columns
        for batch in (g.engine.held, g.engine.pending):
            if batch is not None:
                assert batch.depth <= MAX_LAZY_DEPTH
                batch.make_concrete()  # every column, however deep it was made
    finally:
        sys.setrecursionlimit(limit)
    assert not hook.counts.failures
    if cut:  # a long input: it crossed the context's bound and the replay log's
        assert all(crossed), crossed
    steps = n_batches // len(BUCKETS)
    # all but the Steps whose ops the reorder window or the node's cut still hold, and the
    # open one
    assert steps - UNSETTLED // len(BUCKETS) - 1 <= hook.steps_written < steps


def _lazy_objects(hook: SemanticEngineHook) -> int:
    """The batches and lazy columns `hook` holds (reachable from it: a thread another test
    left behind may hold batches of its own for a moment)."""
    seen, todo, count = {id(hook)}, [hook], 0
    while todo:
        o = todo.pop()
        count += isinstance(o, (OpBatch, LazyColumns))
        for r in gc.get_referents(o):
            if id(r) not in seen and not isinstance(r, (type, types.ModuleType)):
                seen.add(id(r))
                todo.append(r)
    return count


def test_what_the_hook_holds_does_not_grow_with_the_input(tmp_path):
    hook = new_hook(tmp_path, replay_max=500)
    slots = ddp_slots(1_200)
    take(hook, slots[:1_000])
    first = _lazy_objects(hook)
    take(hook, slots[1_000:])
    assert _lazy_objects(hook) <= first + 2 * MAX_LAZY_DEPTH  # batches kept: a bounded chain
    held = hook.held()
    assert held.engine_ops <= UNSETTLED
    assert held.replay_records <= 500  # the replay log's bound, though never checkpointed
    hook.stop()


def test_while_no_step_settles_what_waits_for_the_cut_is_bounded_and_so_are_its_batches(tmp_path):
    hook = new_hook(tmp_path)
    hook.live_cut.max_held = 1_000
    rng = np.random.default_rng(0)
    slots = ddp_slots(1_000)
    # every op another function on another communicator: nothing repeats, no Step settles
    slots["func"] = rng.choice(
        [shm_v1.Func.ALL_REDUCE, shm_v1.Func.BROADCAST, shm_v1.Func.ALL_GATHER], len(slots)
    )
    slots["comm_id"] = rng.integers(1, 1 << 40, len(slots))
    comms = {int(c): CommInfo(None, 1) for c in np.unique(slots["comm_id"])}
    for part in batches(slots[:2_000], 1):
        hook._take(GPU, "ops", (part, comms))
    first = _lazy_objects(hook)
    for part in batches(slots[2_000:], 1):
        hook._take(GPU, "ops", (part, comms))
    g = hook.engines.gpus[GPU]
    assert hook.steps_written == 0
    assert hook.live_cut.stats.ops_unsettled > 0  # placed in no Step, and counted
    from comminsight.agent.steps.health import engine_health

    _, reasons = engine_health(hook)
    assert any("ops placed in no Step" in r for r in reasons), reasons
    assert hook.held().engine_ops <= WINDOW + 1_000 + MIN_NEW_OPS
    assert g.engine.pending.depth <= MAX_LAZY_DEPTH
    assert _lazy_objects(hook) <= first + 2 * MAX_LAZY_DEPTH
    hook.stop()


# ---- failures ------------------------------------------------------------------------------


def reference(tmp_path, slots: np.ndarray) -> bytes:
    hook = new_hook(tmp_path / "reference")
    take(hook, slots, size=7)
    return finish(hook)


def fail_next_feed(hook: SemanticEngineHook, error: Exception) -> None:
    """The GPU's engine raises on its next batch (a restarted engine is a new object)."""
    engine = hook.engines.gpus[GPU].engine

    def feed(batch):
        raise error

    engine.feed = feed


def test_an_engine_failure_is_reported_and_it_resumes_from_its_checkpoint_losing_no_step(
    tmp_path,
):
    from comminsight.agent.node.service import AgentService

    slots = ddp_slots(300)
    expected = reference(tmp_path, slots)
    hook = new_hook(tmp_path / "live")
    take(hook, slots[:600], size=7)
    hook._save_checkpoint()
    take(hook, slots[600:1_000], size=7)  # Steps written after the checkpoint: rewritten
    fail_next_feed(hook, RuntimeError("injected"))
    take(hook, slots[1_000:1_007], size=7)

    service = AgentService(msgspec.convert({"home": str(tmp_path / "live")}, ConfigV1), hook)
    health = service.health()
    assert health.status.value == "degraded"
    assert any("failed" in r and "RuntimeError: injected" in r for r in health.reasons)
    engine = health.semantic_engine
    assert engine.running and engine.failures_total == 1 and engine.restarts_total == 1
    assert engine.last_failure.reason == "RuntimeError" and engine.last_failure.pid == GPU.pid
    (gpu,) = engine.gpus
    assert (gpu.state.value, gpu.failures, gpu.restarts) == ("running", 1, 1)
    service.poll_once()
    text = service.metrics.render().decode()
    assert 'comminsight_semantic_engine_failures_total{reason="RuntimeError"} 1.0' in text
    assert 'comminsight_semantic_engine_restarts_total{reason="RuntimeError"} 1.0' in text
    assert "comminsight_semantic_engine_lag_seconds" in text

    take(hook, slots[1_007:], size=7)
    assert finish(hook) == expected  # every Step once, in order, byte for byte
    service.producers.close()


def test_a_failure_before_the_first_checkpoint_restarts_from_the_first_op(tmp_path):
    slots = ddp_slots(100)
    expected = reference(tmp_path, slots)
    hook = new_hook(tmp_path / "live")
    take(hook, slots[:300], size=7)
    fail_next_feed(hook, ValueError("injected"))
    take(hook, slots[300:], size=7)
    assert hook.counts.restarts == {"ValueError": 1}
    assert finish(hook) == expected


def test_a_batch_that_fails_again_after_the_restart_is_skipped_as_lost_and_steps_go_on(
    tmp_path, monkeypatch
):
    slots = ddp_slots(200)
    poison = 503  # the ring seq of an op whose batch always makes the engine fail
    real_feed = GpuEngine.feed

    def feed(self, batch):
        if poison in batch["ring_seq"]:
            raise IndexError("poison")
        return real_feed(self, batch)

    monkeypatch.setattr(GpuEngine, "feed", feed)
    hook = new_hook(tmp_path)
    take(hook, slots[:400], size=5)
    hook._save_checkpoint()
    take(hook, slots[400:], size=5)
    assert hook.counts.failures == {"IndexError": 2}  # the batch, then its replay
    assert hook.counts.restarts == {"IndexError": 2}
    summaries = [msgspec.json.decode(line, type=StepSummary) for line in finish(hook).splitlines()]
    assert [s.step_index for s in summaries] == list(range(len(summaries)))
    lost = [a.value for s in summaries for a in s.anomalies if a.kind is AnomalyKind.records_lost]
    assert lost == [5]  # the poisoned batch, in the Step that went on after it
    assert summaries[-1].last_op.seq >= len(slots) - len(BUCKETS)  # went on to the end


def test_a_gpu_that_backs_off_keeps_its_ops_and_restarts_later_losing_no_step(tmp_path):
    slots = ddp_slots(200)
    expected = reference(tmp_path, slots)
    hook = new_hook(tmp_path / "live")
    take(hook, slots[:400], size=7)
    hook._save_checkpoint()
    g = hook.engines.gpus[GPU]
    g.budget = RestartBudget(max_restarts=0, window_s=30.0)  # no restart for now
    fail_next_feed(hook, RuntimeError("injected"))
    take(hook, slots[400:700], size=7)
    (status,) = hook.gpu_status()
    assert status.state == "backing_off" and status.restarts == 0
    assert 0 < status.retry_in_s <= 30.0
    assert g.replay.records >= 300  # what came meanwhile waits for the restart
    g.budget = RestartBudget(max_restarts=1, window_s=30.0)
    hook.restarts.retry_due(g.retry_at)
    (status,) = hook.gpu_status()
    assert status.state == "running" and status.restarts == 1
    take(hook, slots[700:], size=7)
    assert finish(hook) == expected


def test_the_worker_thread_outlives_a_failure_outside_any_gpu(tmp_path, monkeypatch):
    from comminsight.agent.steps import semantic_hook

    real = semantic_hook.coalesce
    calls = []

    def coalesce(items):
        calls.append(len(items))
        if len(calls) == 1:
            raise KeyError("worker bug")
        return real(items)

    monkeypatch.setattr(semantic_hook, "coalesce", coalesce)
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    hook.live_cut.interval_s = 0.1  # no more ops come: the Steps settle by the clock
    slots = ddp_slots(2 * FIRST_OPS // len(BUCKETS))  # past the cut's first placement
    hook.feed(GPU, slots[:10], COMMS)
    wait_until(hook.idle, 60, "the worker did not drain its queue")
    hook.feed(GPU, slots[10:], COMMS)
    wait_until(lambda: hook.steps_written > 0, 60, "no Step settled")
    assert hook.running
    assert hook.counts.failures == {"KeyError": 1} and hook.counts.last_pid is None
    from comminsight.agent.steps.health import engine_health

    model, reasons = engine_health(hook)
    assert model.failures_total == 1 and model.last_failure is None
    assert any("worker failed" in r and "worker bug" in r for r in reasons)
    hook.stop()


def test_the_engine_lag_is_how_far_placed_ops_trail_ingested_ones(tmp_path):
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    slots = ddp_slots(2 * FIRST_OPS // len(BUCKETS))  # past the cut's first placement
    for part in batches(slots, 25):
        hook.feed(GPU, part, COMMS)
        wait_until(hook.idle, 60, "the worker did not drain its queue")
    lag = hook.lag_ns()
    newest = int(slots["complete_mono_ns"][-1])
    # the reorder window and the node's cut keep the newest ops unplaced: the lag is their
    # span, at most
    assert lag is not None
    assert 0 < lag <= newest - int(slots["complete_mono_ns"][-UNSETTLED_SHORT - 1])
    gate = threading.Event()
    real_feed = hook.engines.gpus[GPU].engine.feed

    def slow_feed(batch):  # the worker stuck on a batch: ingest goes on, placing does not
        gate.wait(10)
        return real_feed(batch)

    hook.engines.gpus[GPU].engine.feed = slow_feed
    more = ddp_slots(len(slots) + 100)[len(slots) :]
    hook.feed(GPU, more[:5], COMMS)
    hook.feed(GPU, more[5:], COMMS)
    assert hook.lag_ns() >= int(more["complete_mono_ns"][-1]) - newest
    gate.set()
    wait_until(hook.idle, 60, "the worker did not drain its queue")
    hook.stop()


# ---- the parts -----------------------------------------------------------------------------


def _entry(log: ReplayLog, first: int, n: int):
    slots = ddp_slots(20)[first - 1 : first - 1 + n]
    return log.add("ops", (slots, COMMS))


def test_the_replay_log_keeps_what_a_checkpoint_does_not_cover_within_its_bound():
    log = ReplayLog(max_records=10)
    _entry(log, 1, 4)
    log.add("lost", 3)
    _entry(log, 5, 4)
    _entry(log, 9, 4)  # over the bound: the oldest entry goes
    assert log.records == 8 and log.dropped == 4
    assert [e.kind for e in log.entries] == ["lost", "ops", "ops"]
    log.trim(7)  # the loss went to op 5, placed: it goes too; ops 5 and 6 are placed
    assert log.dropped == 0
    assert [e.kind for e in log.entries] == ["ops", "ops"]
    assert log.entries[0].payload[0]["seq"].tolist() == [7, 8]
    assert log.records == 6
    log.add("lost", 2)
    _entry(log, 13, 2)
    log.trim(13)  # the loss goes to op 13, not yet placed: it stays
    assert [e.kind for e in log.entries] == ["lost", "ops"]
    (entry,) = [e for e in log.entries if e.kind == "ops"]
    assert log.discard(entry) == 2 and (entry.kind, entry.payload) == ("lost", 2)
    assert log.records == 0


def test_restarts_are_limited_per_window():
    budget = RestartBudget(max_restarts=2, window_s=60.0)
    assert budget.take(0.0) and budget.take(1.0)
    assert not budget.take(2.0)
    assert budget.next_at(2.0) == 60.0
    assert budget.take(60.0)  # the first one left the window
    assert budget.take(61.0)  # and so did the second
    assert not budget.take(62.0) and budget.next_at(62.0) == 120.0


# ---- end to end ----------------------------------------------------------------------------


def test_a_live_agent_reports_an_engine_failure_and_loses_no_step_of_a_simulated_job(
    plugin,
    tmp_path,
    monkeypatch,
):
    """The real plugin, SHM and Agent: one GPU's engine raises once, mid-run."""
    from live_agent import LiveAgent

    from comminsight.sim import SimConfig, run_simulation
    from comminsight.sim.step_accuracy import op_identity
    from comminsight.sim.truth import read_ground_truth

    real_feed = GpuEngine.feed
    failed = []

    def feed(self, batch):
        if not failed and self.gpu.global_rank == 1 and self.steps_emitted >= 5:
            failed.append(self.steps_emitted)
            raise RuntimeError("injected")
        return real_feed(self, batch)

    monkeypatch.setattr(GpuEngine, "feed", feed)
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        steps=200,  # past the template selection (512 ops) with Steps to spare
        time_scale=0.2,
        step_markers=True,  # DDP's Steps told however loaded the machine (idle time is not)
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
    )
    with LiveAgent(tmp_path, semantic_checkpoint_s=0.2) as agent:
        result = run_simulation(config)
        assert not result.errors
        step_dir = tmp_path / "semantics" / "step"
        wait_until(lambda: len(list(step_dir.glob("live-*.jsonl"))) == 2, 60, "not sealed")
        health = agent.call(agent.service.health)
    assert failed, "the injected failure never happened"
    engine = health.semantic_engine
    assert (engine.failures_total, engine.restarts_total) == (1, 1)
    assert engine.last_failure.message == "RuntimeError: injected"
    truths = read_ground_truth(result.run_dir)
    for path in sorted(step_dir.glob("live-*.jsonl")):
        summaries = [
            msgspec.json.decode(line, type=StepSummary) for line in path.read_bytes().splitlines()
        ]
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
        assert got == expected, path.name
        assert [s.step_index for s in summaries] == list(range(len(expected)))
