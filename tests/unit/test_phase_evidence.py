"""Where Steps begin, judged from named evidence (phase_evidence.judge_phase): confidence 0.9
or more only with evidence for the place and none against it, and a reason naming the other
place when there is evidence against."""

from __future__ import annotations

import numpy as np
from hand_built_ops import MIB, gpu_ops

from comminsight.semantic.phase_evidence import DOUBT_CONFIDENCE, judge_phase


def starts_of(step_len: int, count: int) -> np.ndarray:
    return np.arange(count + 1) * step_len


ZERO_STEP = [
    ("ReduceScatter", 0, 64 * MIB),
    ("ReduceScatter", 0, 64 * MIB),
    ("AllReduce", 0, 4),  # found-inf
    ("AllReduce", 0, 4),  # gradient norm
    ("AllGather", 0, 32 * MIB),  # the sharded update
]


def test_a_step_that_ends_with_its_optimizer_and_update_is_sure():
    # the update's gathers follow the optimizer at once; the forward (no collective in
    # ZeRO-1/2) idles before the next Step's first reduction
    g = gpu_ops(ZERO_STEP * 6, [5000, 10, 10, 10, 10] * 6)
    verdict = judge_phase(g, starts_of(5, 6), timed=True)
    assert any(s.startswith("optimizer_end") for s in verdict.supports)
    assert not verdict.doubts
    assert verdict.confidence() == 1.0
    assert verdict.reasons("rank 0") == []


def test_gathers_next_to_the_optimizer_that_idle_time_does_not_place_are_in_doubt():
    # an update's (ZeRO) or the next forward's (FSDP without resharding): alike untimed
    g = gpu_ops(ZERO_STEP * 6)
    verdict = judge_phase(g, starts_of(5, 6), timed=False)
    assert verdict.confidence() == DOUBT_CONFIDENCE
    assert "idle time does not tell" in verdict.reasons("rank 0")[0]


def test_a_step_that_begins_with_the_updates_gathers_is_in_doubt_naming_the_other_place():
    rotated = ZERO_STEP[-1:] + ZERO_STEP[:-1]  # Steps begin with the previous update
    g = gpu_ops(ZERO_STEP[:-1] + rotated * 5 + ZERO_STEP[-1:])
    verdict = judge_phase(g, np.arange(4, 4 + 5 * 6, 5), timed=False)
    assert verdict.confidence() == DOUBT_CONFIDENCE
    (reason,) = verdict.reasons("rank 0")
    assert "update before it" in reason and "may instead begin after them" in reason


def test_a_step_that_ends_with_a_broadcast_is_in_doubt():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB), ("Broadcast", 0, 4096)]
    g = gpu_ops(step * 6)
    verdict = judge_phase(g, starts_of(3, 6), timed=False)
    assert verdict.confidence() < 0.9
    assert "ends with a broadcast" in verdict.reasons("rank 0")[0]


def test_nothing_for_the_place_keeps_it_below_sure():
    # DDP's buckets alone, evenly spaced: no optimizer, no idle time standing out
    step = [("AllReduce", 0, 25 * MIB)] * 4
    g = gpu_ops(step * 6)
    verdict = judge_phase(g, starts_of(4, 6), timed=True)
    assert not verdict.supports and not verdict.doubts
    assert 0 < verdict.confidence() < 0.9
    assert "nothing shows" in verdict.reasons("rank 0")[0]


def test_idle_time_before_each_step_is_evidence_for_it():
    step = [("AllReduce", 0, 25 * MIB)] * 4
    gaps = [5000, 10, 10, 10] * 6  # the optimizer and the data loader before each Step
    g = gpu_ops(step * 6, gaps)
    verdict = judge_phase(g, starts_of(4, 6), timed=True)
    assert any(s.startswith("idle") for s in verdict.supports)
    assert verdict.confidence() == 1.0


def test_idle_time_far_longer_elsewhere_in_every_step_is_evidence_against():
    step = [("AllReduce", 0, 25 * MIB)] * 4
    gaps = [10, 10, 5000, 10] * 6  # the place taken is two ops off the idle one
    g = gpu_ops(step * 6, gaps)
    verdict = judge_phase(g, starts_of(4, 6), timed=True)
    assert verdict.confidence() == DOUBT_CONFIDENCE
    assert "idles far longer" in verdict.reasons("rank 0")[0]


def test_a_lone_scalar_ending_each_step_needs_idle_time_to_be_sure():
    # a gradient norm, or the next iteration's agreed micro-batch count (veRL): alike
    step = [("AllReduce", 0, 25 * MIB)] * 3 + [("AllReduce", 0, 8)]
    g = gpu_ops(step * 6)
    flat = judge_phase(g, starts_of(4, 6), timed=True)
    assert flat.confidence() < 0.9
    assert "lone scalar" in flat.reasons("rank 0")[0]
    told = judge_phase(gpu_ops(step * 6, [5000, 10, 10, 10] * 6), starts_of(4, 6), timed=True)
    assert told.confidence() == 1.0


def test_too_few_steps_say_nothing():
    g = gpu_ops(ZERO_STEP * 2)
    verdict = judge_phase(g, starts_of(5, 2)[:2], timed=False)
    assert not verdict.supports and not verdict.doubts
