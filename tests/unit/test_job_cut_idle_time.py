"""The job cut where idle time is the only thing that tells Steps apart: tensor parallelism
alone, whose micro-batches issue the same ops, and a loaded machine, where a few Steps start
late for reasons of its own. The sizes and idle gaps of one rank of a simulated run and of a
real one (tests/data), every rank alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from op_streams import WORLD, Stream, labels_of

from comminsight.semantic.job_cut import STARTUP

LOADED = json.loads((Path(__file__).parents[1] / "data/tp_only_loaded_machine.json").read_text())


def loaded_tp_stream(late_ms: dict[int, float] | None = None) -> Stream:
    """Tensor parallelism alone as the simulator ran it on a busy machine (the data's `what`):
    the cycle is the whole Step (its gradient-norm scalar comes once per Step) and two of
    the six Steps started far later than the rest. late_ms: Steps made to start that late."""
    s = Stream()
    per_step = LOADED["ops_per_step"]
    for i, (gap_us, size) in enumerate(zip(LOADED["gap_us"], LOADED["bytes"], strict=True)):
        s.step = STARTUP if i == 0 else (i - 1) // per_step
        starts_step = i > 0 and (i - 1) % per_step == 0
        gap_ms = (late_ms or {}).get(s.step, gap_us / 1000) if starts_step else gap_us / 1000
        s.op(LOADED["first_op"] if i == 0 else LOADED["then"], size, gap_ms=gap_ms)
    return s


def test_a_few_steps_that_start_late_are_no_larger_steps():
    """Two long gaps are one interval, no rhythm of larger Steps: every Step stays a Step."""
    streams = [loaded_tp_stream() for _ in range(2)]
    cut, labels = labels_of(streams, {WORLD: 2})
    assert cut.steps == 6, cut.reasons
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_steps_that_start_late_at_a_regular_spacing_are_still_the_cycle_s_steps():
    """Every other Step starts late: three long gaps at the cycle's own start, at a regular
    spacing, yet the gaps before the repetitions are no two clear sizes with the same number
    between (the first Step's is short); three long gaps at the repetitions' own starts are
    too few for idle time alone to group the repetitions."""
    streams = [loaded_tp_stream({1: 300, 3: 320, 5: 310}) for _ in range(2)]
    cut, labels = labels_of(streams, {WORLD: 2})
    assert cut.steps == 6, cut.reasons
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


REAL_TP = json.loads((Path(__file__).parents[1] / "data/tp2_h200_idle_gaps.json").read_text())


def real_tp_stream() -> Stream:
    """The real tensor-parallel job of the data's `what`: Steps of 4 micro-batches that issue
    the same 8 all-reduces; the cycle is the micro-batch, beginning at its backward, and
    only the long idle time before each Step's forward (optimizer, data) tells Steps apart."""
    s = Stream()
    for i, (gap_us, size) in enumerate(zip(REAL_TP["gap_us"], REAL_TP["bytes"], strict=True)):
        s.step = i // REAL_TP["ops_per_step"]
        s.op(REAL_TP["op"], size, gap_ms=gap_us / 1000)
    return s


def test_steps_of_micro_batches_are_told_apart_by_the_long_idle_gap_inside_the_cycle():
    streams = [real_tp_stream() for _ in range(2)]
    cut, labels = labels_of(streams, {WORLD: 2})
    assert cut.steps == 40, cut.reasons
    assert any("Steps of 4 repetitions told apart by idle time" in r for r in cut.reasons)
    assert cut.confidence < 0.9  # idle time alone told them
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


NVLINK_TP = json.loads(
    (Path(__file__).parents[1] / "data/tp2_h200x2_nvlink_idle_gaps.json").read_text()
)


def test_steps_whose_longest_idle_time_comes_inside_the_cycle_s_repetition():
    """The real tensor-parallel job of the data's `what` (two GPUs over NVLink): the cycle
    is a micro-batch begun at its backward's all-reduces, the longest idle time of every
    fourth comes inside it (before its forward), and the micro-batches' own idle time is a
    third of it: Steps of 4 repetitions, begun there."""
    streams = []
    for _ in range(2):
        s = Stream()
        for i, (gap_us, size) in enumerate(
            zip(NVLINK_TP["gap_us"], NVLINK_TP["bytes"], strict=True)
        ):
            s.step = i // NVLINK_TP["ops_per_step"]
            s.op(NVLINK_TP["op"], size, gap_ms=gap_us / 1000)
        streams.append(s)
    cut, labels = labels_of(streams, {WORLD: 2})
    assert cut.steps == 24, cut.reasons
    assert cut.confidence <= 0.6  # idle time alone told them, and it fits another reading
    assert any("a pause inside every few Steps" in r for r in cut.reasons), cut.reasons
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_a_pause_inside_every_fourth_step_is_named_as_the_other_reading():
    """The same job without accumulation (each repetition a Step), every fourth Step with a
    host sync between its forward and backward (loss.item() to log): its idle time inside
    the repetition looks as a Step of micro-batches does. The ops cannot tell; the cut says
    both, below 0.9."""
    rng = np.random.default_rng(7)
    streams = []
    for _ in range(2):
        s = Stream()
        s.timed = True
        for k in range(40):
            s.step = k
            for i in range(8):
                first = 27.4 if k == 0 else 12.0 * rng.uniform(0.6, 1.4)
                s.op("AllReduce", 8 << 20, gap_ms=first if i == 0 else rng.uniform(0.7, 1.4))
            for i in range(8):
                loss = 169.0 if k == 0 else rng.uniform(3, 4.8)
                if k and k % 4 == 0:
                    loss *= rng.uniform(6, 20)  # the host sync
                s.op("AllReduce", 16 << 20, gap_ms=loss if i == 0 else rng.uniform(0.8, 1.2))
        streams.append(s)
    cut, _ = labels_of(streams, {WORLD: 2})
    assert cut.confidence <= 0.6
    assert any("a pause inside every few Steps" in r for r in cut.reasons), cut.reasons
