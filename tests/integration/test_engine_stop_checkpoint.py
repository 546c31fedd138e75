"""An Agent stopped (SIGTERM) while its engine's worker is in the middle of a pass, on a
machine too loaded for the pass to end within stop()'s wait, leaves a checkpoint that matches
its summary files: the Agent started again from what is on disk writes the Steps an Agent
that never stopped writes, none lost and none written twice.

The worker is held, deterministically, at the point where the node's cut has placed Steps
(the engines' state has moved past them) and their summaries are not yet written. A
checkpoint taken there from outside the worker pairs the engines' new state with the files'
old length: the next Agent resumes after Steps that no file holds.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from engine_inputs import BUCKETS, COMMS, GPU, TEMPLATES, ddp_slots
from waiting import wait_until

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.semantic_hook import SemanticEngineHook

PEER = GpuStream("node", 4343, 1_000, 1, 1)
STEPS = 120
HELD_AT_STEP = 70  # the worker is held in the pass that takes the ops of this Step on


def rank_slots(rank: int) -> np.ndarray:
    slots = ddp_slots(STEPS)
    slots["rank"] = rank
    return slots


SLOTS = {GPU: rank_slots(0), PEER: rank_slots(1)}


def cutting_hook(home) -> SemanticEngineHook:
    """A hook whose cut places Steps from the first ops on, every 8 Steps of ops or so."""
    hook = SemanticEngineHook(home, TEMPLATES, checkpoint_s=3600)
    hook.live_cut.first_ops, hook.live_cut.min_new_ops = 0, 40
    return hook


def take(hook: SemanticEngineHook, first_step: int, end_step: int) -> None:
    """The GPUs' ops of Steps [first_step, end_step), in turns, two Steps at a time, on the
    caller's thread (the worker is idle)."""
    for k in range(first_step, end_step, 2):
        for gpu, s in SLOTS.items():
            ops = s[k * len(BUCKETS) : min(k + 2, end_step) * len(BUCKETS)]
            hook._take(gpu, "ops", (ops, COMMS))


def finish(hook: SemanticEngineHook) -> dict[str, list[dict]]:
    for gpu in SLOTS:
        hook._take(gpu, "finished", None)
    hook.stop()
    return {p.name: [comparable(line) for line in p.read_bytes().splitlines()] for p in files(hook)}


def files(hook: SemanticEngineHook) -> list:
    return sorted(hook.out_dir.glob("live-*.jsonl"))


def comparable(line: bytes) -> dict:
    """A summary without what says how sure the cut that placed it was: it names how far each
    GPU's ops had come when the cut ran, which two Agents that never stop differ in too."""
    summary = json.loads(line)
    summary["recovery"].pop("confidence")
    summary["recovery"].pop("reasons", None)
    return summary


class HeldWorker:
    """Holds the worker thread at its first summary write from now on, after the cut that
    placed those Steps; lets it go on when released."""

    def __init__(self, hook: SemanticEngineHook, monkeypatch) -> None:
        self.held = threading.Event()
        self.release = threading.Event()
        write = hook.disk.write

        def held_write(g, summaries):
            if (
                summaries
                and threading.current_thread() is hook.worker.thread
                and not self.held.is_set()
            ):
                self.held.set()
                self.release.wait()
            write(g, summaries)

        monkeypatch.setattr(hook.disk, "write", held_write)


@pytest.mark.parametrize("worker_ends", [False, True], ids=["process_exits", "worker_ends"])
def test_an_agent_stopped_while_its_worker_is_busy_restarts_without_losing_a_step(
    tmp_path, monkeypatch, worker_ends
):
    """worker_ends: the held pass ends before the next Agent starts (it then checkpoints
    itself); otherwise the next Agent starts while it is still held, as when the stopped
    Agent's process exits with its worker mid-pass."""
    expected = cutting_hook(tmp_path / "uninterrupted")
    take(expected, 0, STEPS)
    want = finish(expected)
    assert [len(v) for v in want.values()] == [STEPS, STEPS]

    first = cutting_hook(tmp_path / "home")
    take(first, 0, 40)
    first._save_checkpoint()  # the last checkpoint before the stop
    take(first, 40, HELD_AT_STEP)
    worker = HeldWorker(first, monkeypatch)
    for gpu, s in SLOTS.items():  # through the worker, as the Agent's ingest hands them
        first.feed(gpu, s[HELD_AT_STEP * len(BUCKETS) : (HELD_AT_STEP + 30) * len(BUCKETS)], COMMS)
    wait_until(worker.held.is_set, 60, "the worker did not reach its summary write")
    first.stop(timeout_s=0.01)  # it cannot end its pass: it is held
    assert first.running
    if worker_ends:
        worker.release.set()
        wait_until(lambda: not first.running, 60, "the worker did not end")

    second = cutting_hook(tmp_path / "home")
    take(second, 0, STEPS)  # each ring read again from its oldest record
    assert second.restored == 2
    got = finish(second)
    worker.release.set()  # only now: its files are the second Agent's
    wait_until(lambda: not first.running, 60, "the worker did not end")
    assert got.keys() == want.keys()
    for name in want:
        steps = [s["step_index"] for s in got[name]]
        assert steps == list(range(STEPS)), name
        differ = [k for k, (a, b) in enumerate(zip(got[name], want[name], strict=True)) if a != b]
        assert not differ, (name, differ[:5], got[name][differ[0]], want[name][differ[0]])
