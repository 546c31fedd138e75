"""The node Agent's live Semantic Engine weighs Inject's optimizer-step markers: a simulated
job that writes them (SimConfig step_markers) through the real plugin, followed by a live
Agent as it runs, is cut by its markers on every rank (recovery method `marker`), each Step on
its true first and last op; the same job without markers is cut from its ops alone."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from agent_home import ENV, hold_agent_lock
from live_agent import LiveAgent
from profiler_builds import builds
from waiting import wait_until

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


def test_the_agent_keeps_a_bounded_number_of_markers_per_process(tmp_path):
    from comminsight.agent.core.inject_names import MARKER_CLASSES, MARKERS_KEPT, InjectNames

    inject = tmp_path / "metadata" / "inject"
    inject.mkdir(parents=True)
    lines = [
        '{"schema":"comminsight.inject-metadata.v1","kind":"step","pid":7,"host":"h",'
        f'"mono_ns":{t},"real_ns":1,"rank":null,"optimizer":"Adam","index":{t}}}'
        for t in range(1, MARKERS_KEPT + 101)
    ]
    lines += [
        '{"schema":"comminsight.inject-metadata.v1","kind":"step","pid":7,"host":"h",'
        f'"mono_ns":5,"real_ns":1,"rank":null,"optimizer":"Opt{k}","index":0}}'
        for k in range(MARKER_CLASSES + 5)
    ]
    (inject / "h.7.jsonl").write_text("\n".join(lines) + "\n")
    names = InjectNames(tmp_path)
    names.refresh()
    assert names.errors == {}
    marks = names.step_markers("h", 7)
    # the class that stepped most, its newest MARKERS_KEPT
    assert len(marks) == MARKERS_KEPT and marks[0] == 101 and marks[-1] == MARKERS_KEPT + 100
    assert len(names._markers[next(iter(names._markers))]) == MARKER_CLASSES
    assert names.step_markers("h", 8) is None and names.step_markers("other", 7) is None
