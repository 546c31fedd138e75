"""The node Agent's live Semantic Engine weighs Inject's optimizer-step markers: a simulated
job that writes them (SimConfig step_markers) through the real plugin, followed by a live
Agent as it runs, is cut by its markers on every rank (recovery method `marker`), each Step on
its true first and last op; the same job without markers is cut from its ops alone."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from agent_home import ENV, hold_agent_lock
from live_agent import LiveAgent
from profiler_builds import builds
from waiting import wait_until

from comminsight.agent.receivers import step_marker_store as store
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.semantic.offline import read_summaries
from comminsight.sim import SimConfig, read_ground_truth, run_simulation
from comminsight.sim.step_accuracy import SUITE, score

BY_NAME = {c.name: c for c in SUITE}


def run_followed(home: Path, name: str, markers: bool):
    """The case simulated while a live Agent follows its home; its truths and every rank's
    live summaries, by global rank."""
    case = BY_NAME[name]
    lock = hold_agent_lock(home)
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        time_scale=case.time_scale,
        env=ENV,
        comm_names=False,
        **{**case.config, "step_markers": markers},
    )
    result = {}
    with LiveAgent(home) as live:
        sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
        sim.start()
        sim.join(timeout=300)
        assert not result["sim"].errors, result["sim"].errors
        ranks = config.ranks
        step_dir = home / "semantics" / "step"
        wait_until(
            lambda: len(list(step_dir.glob("live-*.jsonl"))) == ranks,
            120,
            "every rank's live summaries sealed",
        )
        assert live.service.inject_names.errors == {}
    lock.close()
    truths = read_ground_truth(result["sim"].run_dir)
    gpus = []
    for path in sorted(step_dir.glob("live-*.jsonl")):
        summaries = read_summaries(path)
        assert summaries, path
        rank = summaries[0].global_rank
        gpus.append(SimpleNamespace(gpu=SimpleNamespace(global_rank=rank), summaries=summaries))
    return truths, SimpleNamespace(gpus=gpus)


def methods(result) -> Counter:
    return Counter(s.recovery.method.value for g in result.gpus for s in g.summaries)


@pytest.mark.parametrize("name", ["ddp", "zero1"])
def test_the_live_agent_cuts_steps_by_the_markers(tmp_path, name):
    truths, result = run_followed(tmp_path, name, markers=True)
    s = score(truths, result)
    assert s.exact_fraction == 1.0 and s.wrong == 0, s.first_wrong
    assert set(methods(result)) == {"marker"}, methods(result)


def test_without_markers_the_live_agent_cuts_steps_from_the_ops(tmp_path):
    truths, result = run_followed(tmp_path, "ddp", markers=False)
    assert score(truths, result).wrong_confident == 0
    assert "marker" not in methods(result), methods(result)


def step_line(pid: int, t: int, optimizer: str) -> str:
    record = {
        "schema": "comminsight.inject-metadata.v1",
        "kind": "step",
        "pid": pid,
        "host": "h",
        "mono_ns": t,
        "real_ns": 1,
        "rank": None,
        "optimizer": optimizer,
        "index": 0,
    }
    return json.dumps(record, separators=(",", ":"))


def test_the_agent_keeps_a_bounded_number_of_markers(tmp_path):
    inject = tmp_path / "metadata" / "inject"
    inject.mkdir(parents=True)
    names = InjectNames(tmp_path)
    # more processes than are kept, one marker each
    many = [step_line(100 + p, 1, "SGD") for p in range(store.MARKER_PROCESSES + 10)]
    (inject / "h.many.jsonl").write_text("\n".join(many) + "\n")
    names.refresh()
    assert len(names._markers) == store.MARKER_PROCESSES
    assert names.step_markers("h", 100) is None  # the least recent let go
    # AdamW steps every Step, Adam (a second model's) every fourth: far more lines of each
    # than are kept, and more classes than are kept
    lines = []
    for t in range(1, 4 * store.MARKERS_KEPT + 1):
        lines.append(step_line(7, t, "AdamW"))
        if t % 4 == 0:
            lines.append(step_line(7, t, "Adam"))
    lines += [step_line(7, 5, f"Opt{k}") for k in range(store.MARKER_CLASSES + 5)]
    (inject / "h.7.jsonl").write_text("\n".join(lines) + "\n")
    names.refresh()
    assert names.errors == {}
    # the class that stepped most, its newest MARKERS_KEPT, though both classes hold as many
    marks = names.step_markers("h", 7)
    assert np.array_equal(marks, np.arange(3 * store.MARKERS_KEPT + 1, 4 * store.MARKERS_KEPT + 1))
    assert len(names._markers) == store.MARKER_PROCESSES
    assert names.step_markers("h", 8) is None and names.step_markers("other", 7) is None


def test_a_user_flooding_processes_lets_go_of_their_own_markers_only():
    markers = store.StepMarkerStore()
    markers.add("alice", ("alice", 1), "AdamW", 10)
    for p in range(store.MARKER_PROCESSES + 50):
        markers.add("mallory", ("mallory", p), "SGD", 1)
    assert markers.owned("mallory") == store.MARKER_PROCESSES
    assert list(markers.markers(("alice", 1))) == [10]
