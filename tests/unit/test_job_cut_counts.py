"""Counts an iteration agrees on before its forward begin its Step: HF Trainer's
num_items_in_batch (an all-gather of one int64 a rank, since transformers 4.46, by default
since 4.54), veRL's dynamic micro-batch count (an int64 all-reduce after the previous Step's
gradient norm). Scalars of other types after the gradients stay the optimizer's: the loss HF
gathers to log (one float), Megatron's update-successful flag (int32) before its gradient
norm. Synthetic DDP-style op streams, every rank alike, with and without host timing."""

from __future__ import annotations

import numpy as np
import pytest
from op_streams import WORLD, Stream, labels_of

from comminsight.semantic.local_cycle import counts
from comminsight_gen.abi.shm_v1 import Datatype

BUCKETS = [1 << 20] + [25 << 20] * 6 + [900_000]
F32, I32, I64 = int(Datatype.FLOAT32), int(Datatype.INT32), int(Datatype.INT64)
# NCCL hands every all-gather over as bytes
BYTES = int(Datatype.INT8)


def ddp_steps(steps: int, begin, end, timed: bool) -> Stream:
    """DDP: the model broadcast, then each Step's `begin` ops, its gradient buckets and its
    `end` ops (each a list of (func, bytes, datatype))."""
    s = Stream()
    s.timed = timed
    s.op("Broadcast", 250 << 20, datatype=BYTES)
    for step in range(steps):
        s.step = step
        for k, (func, size, dtype) in enumerate(begin):
            s.op(func, size, gap_ms=8 if k == 0 else 0.1, datatype=dtype)
        for k, size in enumerate(BUCKETS):
            s.op("AllReduce", size, gap_ms=20 if k == 0 and not begin else 2, datatype=F32)
        for func, size, dtype in end:
            s.op(func, size, gap_ms=0.2, datatype=dtype)
    return s


NUM_ITEMS = ("AllGather", 8, BYTES)
LOG_LOSS = ("AllGather", 4, BYTES)
MAX_MICRO = ("AllReduce", 8, I64)
GRAD_NORM = ("AllReduce", 4, F32)
UPDATE_OK = ("AllReduce", 4, I32)


@pytest.mark.parametrize(
    "begin, end",
    [
        ([NUM_ITEMS], []),  # HF Trainer, token-averaged loss
        ([NUM_ITEMS], [LOG_LOSS]),  # ... and the loss logged every Step
        ([MAX_MICRO], [GRAD_NORM]),  # veRL's actor: dynamic batches, clipped gradients
        ([MAX_MICRO], []),  # ... without clipping
        ([], [UPDATE_OK, GRAD_NORM]),  # Megatron: update-successful flag, then the norm
        ([], [LOG_LOSS]),  # HF Trainer without token averaging, the loss logged every Step
    ],
    ids=["hf-num-items", "hf-num-items-log", "verl", "verl-no-clip", "megatron-flag", "hf-log"],
)
@pytest.mark.parametrize("timed", [True, False], ids=["timed", "untimed"])
def test_counts_begin_their_step_and_other_scalars_end_theirs(begin, end, timed):
    streams = [ddp_steps(8, begin, end, timed) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_counts_are_int64_reductions_and_gathers_of_one_int64_a_rank():
    s = Stream()
    for func, size, dtype in [
        MAX_MICRO,  # a count
        NUM_ITEMS,  # a count gathered
        LOG_LOSS,  # one float gathered
        UPDATE_OK,  # a flag
        GRAD_NORM,
        ("AllReduce", 8 << 20, I64),  # no scalar
        ("AllGather", 16, BYTES),  # two numbers a rank
        ("Broadcast", 8, BYTES),  # a broadcast begins an iteration by rules of its own
    ]:
        s.op(func, size, datatype=dtype)
    from comminsight.semantic.job_ops import CommIds

    g = s.gpu(CommIds(), 0, {WORLD: 4})
    assert counts(g).tolist() == [True, True, False, False, False, False, False, False]
    assert np.array_equal(counts(g), counts(g))
