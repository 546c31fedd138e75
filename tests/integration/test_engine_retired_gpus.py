"""The live engine forgets a GPU once its process is over for good: finished, its summaries
sealed, and its SHM file retired (removed), so no Agent can meet the process again. Without
this an Agent that runs for days keeps every process it ever saw (an engine, its tables and
its checkpoint entry: ~60 KiB each) and writes all of them into every checkpoint."""

from __future__ import annotations

import os
import time

import msgspec
from agent_home import hold_agent_lock, run_sim
from engine_inputs import COMMS, TEMPLATES, ddp_slots
from profiler_builds import builds
from waiting import wait_until

from comminsight.agent.metrics.node import NodeMetrics
from comminsight.agent.node.ingest import NodeIngest
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.recent_ops import RecentOps
from comminsight.agent.steps.engine_hook import GpuStream, PassThroughEngine
from comminsight.agent.steps.semantic_hook import CHECKPOINT_NAME, SemanticEngineHook
from comminsight.sim import SimConfig, run_simulation

STEPS = 40


def process(pid: int) -> GpuStream:
    return GpuStream("node", pid, 1_000 + pid, 0, 0)


def run_process(hook: SemanticEngineHook, gpu: GpuStream) -> None:
    """A whole process through the worker path (the worker thread is idle): ops, its end."""
    slots = ddp_slots(STEPS)
    for i in range(0, len(slots), 50):
        hook._take(gpu, "ops", (slots[i : i + 50], COMMS))
    hook._take(gpu, "finished", None)


def checkpointed_files(hook: SemanticEngineHook) -> set[str]:
    hook._save_checkpoint()
    path = hook.out_dir / CHECKPOINT_NAME
    if not path.exists():
        return set()
    return {g["output"]["file"] for g in msgspec.json.decode(path.read_bytes())["gpus"]}


def sealed(hook: SemanticEngineHook) -> list[str]:
    return sorted(p.name for p in hook.out_dir.glob("live-*.jsonl"))


def test_what_the_engine_keeps_does_not_grow_with_the_processes_it_has_seen(tmp_path):
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    kept = []
    for pid in range(100, 160):
        gpu = process(pid)
        run_process(hook, gpu)
        hook.engines.finish_ended(all_ended=True)
        hook._take(gpu, "retired", None)
        kept.append(len(hook.engines.gpus))
    assert max(kept) == 0
    assert checkpointed_files(hook) == set()
    files = sealed(hook)
    assert len(files) == 60  # every process's Steps were written and sealed first
    lines = [(hook.out_dir / f).read_bytes().count(b"\n") for f in files]
    assert min(lines) >= STEPS - 2  # the open one and the reorder window's at most
    hook.stop()


def test_a_gpu_retired_before_its_file_is_sealed_is_kept_until_it_is(tmp_path):
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    gpu, peer = process(200), GpuStream("node", 201, 1_201, 1, 1)
    peer_slots = ddp_slots(STEPS)
    peer_slots["rank"] = 1
    for i in range(0, len(peer_slots), 50):
        hook._take(peer, "ops", (peer_slots[i : i + 50], COMMS))
    run_process(hook, gpu)  # its last Steps wait for its peer on the communicator
    hook._take(gpu, "retired", None)
    assert gpu in hook.engines.gpus and not sealed(hook)
    hook._take(peer, "finished", None)
    assert gpu not in hook.engines.gpus and len(sealed(hook)) == 2
    assert peer in hook.engines.gpus  # its file is not retired yet
    hook.stop()


def test_a_gpu_not_retired_stays_in_the_checkpoint_after_it_is_sealed(tmp_path):
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    gpu = process(300)
    run_process(hook, gpu)
    hook.engines.finish_ended(all_ended=True)
    # its SHM file may still be there: an Agent started now must know it is sealed
    assert checkpointed_files(hook) == set(sealed(hook))
    hook.stop()


def test_a_process_whose_file_is_sealed_already_is_not_read_again(tmp_path):
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    gpu = process(400)
    run_process(hook, gpu)
    hook.engines.finish_ended(all_ended=True)
    hook._take(gpu, "retired", None)
    (name,) = sealed(hook)
    before = (hook.out_dir / name).read_bytes()
    hook.stop()
    # its SHM file could not be removed, and a new Agent (no checkpoint entry) meets it
    again = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    run_process(again, gpu)
    again.engines.finish_ended(all_ended=True)
    assert (again.out_dir / name).read_bytes() == before
    assert not list(again.out_dir.glob("*.partial"))
    assert again.steps_written == 0
    again._take(gpu, "retired", None)
    assert gpu not in again.engines.gpus
    again.stop()


def by_kind_and_pid(call: tuple[str, GpuStream]) -> tuple[str, int]:
    return call[0], call[1].pid


class Recording(PassThroughEngine):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, GpuStream]] = []

    def finished(self, gpu: GpuStream) -> None:
        super().finished(gpu)
        self.calls.append(("finished", gpu))

    def retired(self, gpu: GpuStream) -> None:
        self.calls.append(("retired", gpu))

    def present(self, shm_files: set[str]) -> None:
        pass


def test_ingest_tells_the_engine_of_each_gpu_whose_shm_file_it_retired(tmp_path):
    lock = hold_agent_lock(tmp_path)
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        steps=2,
        time_scale=0.01,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50")),
    )
    assert not run_simulation(config).errors
    engine = Recording()
    producers = ProducerSet(tmp_path)
    ingest = NodeIngest(producers, NodeMetrics(), RecentOps(16), engine, "node")

    # the processes have exited: read, then finished (the Agent keeps a retired process's
    # file for a while: process_died needs it), then retired
    def both_finished() -> bool:  # once their heartbeats say they are gone
        ingest.run_pass(time.monotonic_ns(), retire_after_ns=3600 * 10**9)
        return len(engine.calls) == 2

    wait_until(both_finished, 60, lambda: f"both processes finished (calls: {engine.calls})")
    assert [c[0] for c in engine.calls] == ["finished", "finished"]
    ingest.run_pass(time.monotonic_ns(), retire_after_ns=0)
    assert producers.counters.producers_retired == 2
    fed = set(engine.records_by_gpu)
    assert len(fed) == 2
    expected = [("finished", g) for g in fed] + [("retired", g) for g in fed]
    assert sorted(engine.calls, key=by_kind_and_pid) == sorted(expected, key=by_kind_and_pid)
    for gpu in fed:  # each GPU is finished before it is retired, once
        assert engine.calls.index(("finished", gpu)) < engine.calls.index(("retired", gpu))
    assert ingest._finished == {}
    lock.close()


def open_summary_files(out_dir) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += target.startswith(str(out_dir))
    return n


def test_ended_gpus_waiting_for_their_peers_hold_no_descriptor(tmp_path):
    """A churning node's ended processes wait for peers that never come: their summary files
    are closed meanwhile, and written whole once the cut places their last Steps."""
    hook = SemanticEngineHook(tmp_path, TEMPLATES, checkpoint_s=3600)
    hook._take(process(99), "ops", (ddp_slots(STEPS)[:50], COMMS))  # a peer still running
    for pid in range(100, 160):
        run_process(hook, process(pid))
    assert not sealed(hook)  # they wait for the running peer
    assert open_summary_files(hook.out_dir) == 1  # the running peer's
    hook._save_checkpoint()  # a checkpoint opens none of them for good
    assert open_summary_files(hook.out_dir) == 1
    hook.engines.finish_ended(all_ended=True)
    files = sealed(hook)
    assert len(files) == 60
    lines = [(hook.out_dir / f).read_bytes().count(b"\n") for f in files]
    assert min(lines) >= STEPS - 2
    assert open_summary_files(hook.out_dir) == 1  # the running peer's
    hook.stop()


def test_a_process_forgotten_in_the_pass_that_read_its_last_records_is_finished_first(
    tmp_path, monkeypatch
):
    """Past the ended processes remembered, the oldest are forgotten in the pass that
    released them, before the loop that tells the engine of ended processes sees them: they
    are told finished, then retired, all the same. Before, their GPUs stayed open for ever:
    a churning node kept hundreds of Step files unsealed."""
    import comminsight.agent.receivers.producers as producers_module

    monkeypatch.setattr(producers_module, "MAX_ENDED_REMEMBERED", 0)
    lock = hold_agent_lock(tmp_path)
    run_sim(tmp_path, ranks=2)
    engine = Recording()
    producers = ProducerSet(tmp_path)
    ingest = NodeIngest(producers, NodeMetrics(), RecentOps(16), engine, "node")
    ingest.run_pass(time.monotonic_ns(), retire_after_ns=3600 * 10**9)  # ended: read
    assert producers.counters.producers_retired == 0 and engine.calls == []
    ingest.run_pass(time.monotonic_ns(), retire_after_ns=3600 * 10**9)  # released, forgotten
    assert producers.counters.producers_retired == 2
    fed = set(engine.records_by_gpu)
    assert len(fed) == 2
    expected = [("finished", g) for g in fed] + [("retired", g) for g in fed]
    assert sorted(engine.calls, key=by_kind_and_pid) == sorted(expected, key=by_kind_and_pid)
    for gpu in fed:
        assert engine.calls.index(("finished", gpu)) < engine.calls.index(("retired", gpu))
    assert ingest._finished == {}
    producers.close()
    lock.close()
