"""The Semantic Engine's Steps from Inject's optimizer-step markers: simulated jobs of the
accuracy suite that write markers (SimConfig step_markers) through the real plugin, recovered
offline and live, scored against the simulator's ground truth; the markers left unread; and
damaged marker files beside good ones."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from profiler_builds import builds

from comminsight.semantic.live_replay import replay_live
from comminsight.semantic.offline import OfflineResult, recover_steps
from comminsight.semantic.step_markers import MAX_LINE_BYTES
from comminsight.sim.step_accuracy import SUITE, score, simulate_case
from comminsight.sim.truth import RankTruth

BY_NAME = {c.name: c for c in SUITE}
# families whose Steps the markers confirm: DDP (and its skipped fp16 updates, which have no
# marker), FSDP2, ZeRO-1 and ZeRO-3, Megatron 3D, a 1F1B pipeline, RL's several optimizer
# steps per rollout
CASES = [
    "ddp",
    "ddp_dynamic_accum_skipped",
    "fsdp2",
    "zero1",
    "zero3",
    "megatron_3d",
    "pp_1f1b_m4",
    "rl",
]


def simulate_with_markers(name: str, home: Path) -> list[RankTruth]:
    case = BY_NAME[name]
    case = dataclasses.replace(case, config={**case.config, "step_markers": True})
    return simulate_case(case, str(builds()["plain"].path), home, comm_names=False)


def methods(result: OfflineResult) -> Counter:
    return Counter(s.recovery.method.value for g in result.gpus for s in g.summaries)


def assert_exact_by_markers(truths: list[RankTruth], result: OfflineResult) -> None:
    s = score(truths, result)
    assert s.exact_fraction == 1.0, s.first_wrong
    assert s.wrong == 0, s.first_wrong
    assert set(methods(result)) == {"marker"}, methods(result)


def marker_files(home: Path) -> list[Path]:
    return sorted((home / "metadata" / "inject").glob("*.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_markers_place_every_step_offline_and_live(tmp_path, name):
    truths = simulate_with_markers(name, tmp_path)
    assert marker_files(tmp_path), "the simulation wrote no markers"
    logs = tmp_path / "inspector_logs"
    offline = recover_steps(logs)
    assert offline.problems == []
    assert_exact_by_markers(truths, offline)
    live = replay_live(logs)
    assert_exact_by_markers(truths, live)
    # left unread, the Steps come from the ops alone
    without = recover_steps(logs, markers=False)
    assert set(methods(without)) == {"job"}, methods(without)


def test_a_skipped_update_leaves_a_step_without_a_marker(tmp_path):
    """The fp16 case's overflow Steps issue their collectives but never step the optimizer:
    fewer markers than Steps, and the op cycle tells the Steps the markers do not."""
    truths = simulate_with_markers("ddp_dynamic_accum_skipped", tmp_path)
    steps_of_rank0 = len(truths[0].records["step"])
    for path in marker_files(tmp_path):
        marks = [x for x in path.read_text().splitlines() if '"kind":"step"' in x]
        assert 3 <= len(marks) < steps_of_rank0


# ---------------------------------------------------------------------------- damaged input


@pytest.fixture(scope="module")
def ddp_home(tmp_path_factory) -> tuple[Path, list[RankTruth]]:
    """One DDP job with markers, simulated once; each test damages a copy of it."""
    home = tmp_path_factory.mktemp("ddp-markers")
    return home, simulate_with_markers("ddp", home)


@pytest.fixture
def ddp_copy(ddp_home, tmp_path) -> tuple[Path, list[RankTruth]]:
    home, truths = ddp_home
    copy = tmp_path / "home"
    for part in ("inspector_logs", "metadata/inject"):  # what the engine reads, no FIFOs
        shutil.copytree(home / part, copy / part, symlinks=True)
    return copy, truths


def step_line(path: Path, mono_ns: int, optimizer: str, index: int) -> str:
    """A `step` line of the process whose file `path` is."""
    first = json.loads(path.read_text().splitlines()[0])
    record = dict(
        schema=first["schema"],
        kind="step",
        pid=first["pid"],
        host=first["host"],
        mono_ns=mono_ns,
        real_ns=first["real_ns"],
        rank=None,
        optimizer=optimizer,
        index=index,
    )
    return json.dumps(record, separators=(",", ":")) + "\n"


def step_times(path: Path) -> list[int]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [x["mono_ns"] for x in lines if x["kind"] == "step"]


def insert_after_first_marker(path: Path, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if '"kind":"step"' in x) + 1
    path.write_text("".join(lines[:at]) + text + "".join(lines[at:]))


@pytest.mark.slow
def test_a_corrupted_line_is_named_and_the_other_markers_count(ddp_copy):
    home, truths = ddp_copy
    damaged = marker_files(home)[0]
    insert_after_first_marker(damaged, '{"kind":"step","mono_ns":12,"optim\n')
    result = recover_steps(home / "inspector_logs")
    named = [p for p in result.problems if damaged.name in p]
    assert len(named) == 1 and "line 3" in named[0], result.problems
    assert_exact_by_markers(truths, result)
    live = replay_live(home / "inspector_logs")
    assert any(damaged.name in p for p in live.problems)
    assert_exact_by_markers(truths, live)


@pytest.mark.slow
def test_a_line_too_long_does_not_count_and_the_other_markers_do(ddp_copy):
    home, truths = ddp_copy
    damaged = marker_files(home)[0]
    times = step_times(damaged)
    # a marker between two real ones, were it read: the Step there would split in two
    between = (times[1] + times[2]) // 2
    insert_after_first_marker(damaged, step_line(damaged, between, "A" * MAX_LINE_BYTES, 99))
    result = recover_steps(home / "inspector_logs")
    assert_exact_by_markers(truths, result)


@pytest.mark.slow
def test_a_line_too_long_is_named(ddp_copy):
    home, _ = ddp_copy
    damaged = marker_files(home)[0]
    insert_after_first_marker(damaged, step_line(damaged, 1, "A" * MAX_LINE_BYTES, 99))
    result = recover_steps(home / "inspector_logs")
    assert any(damaged.name in p for p in result.problems), result.problems


@pytest.mark.slow
def test_a_fifo_and_a_symlink_are_named_and_the_other_files_count(ddp_copy, tmp_path):
    home, truths = ddp_copy
    inject = home / "metadata" / "inject"
    real = marker_files(home)[0]
    os.mkfifo(inject / "vm.1.jsonl")  # no writer: reading it must not block
    outside = tmp_path / "outside.jsonl"
    outside.write_text(real.read_text().replace(f'"pid":{real.stem.split(".")[-1]}', '"pid":2'))
    (inject / "vm.2.jsonl").symlink_to(outside)
    result = recover_steps(home / "inspector_logs")
    assert any("vm.1.jsonl" in p and "not a regular file" in p for p in result.problems)
    assert any("vm.2.jsonl" in p and "cannot open" in p for p in result.problems)
    assert_exact_by_markers(truths, result)
    live = replay_live(home / "inspector_logs")
    assert sum(("vm.1.jsonl" in p or "vm.2.jsonl" in p) for p in live.problems) == 2
    assert_exact_by_markers(truths, live)


@pytest.mark.slow
def test_another_optimizers_fewer_markers_are_left_aside(ddp_copy):
    """A second optimizer class in each process (a GAN's discriminator, an MoE router's own)
    steps less often, at times that are no Step boundary: the class that stepped most often
    marks the Steps."""
    home, truths = ddp_copy
    for path in marker_files(home):
        times = step_times(path)
        # mid-Step, so that a marker read from this class would cut Steps where they are not
        odd = [(a + b) // 2 for a, b in zip(times[:-1], times[1:], strict=True)][: len(times) // 2]
        with path.open("a") as f:
            for k, t in enumerate(odd):
                f.write(step_line(path, t, "Discriminator", k))
    result = recover_steps(home / "inspector_logs")
    assert result.problems == []
    assert_exact_by_markers(truths, result)
