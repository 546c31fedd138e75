"""Counts an iteration agrees on before its forward begin its Step: HF Trainer's
num_items_in_batch (an all-gather of one int64 a rank, since transformers 4.46, by default
since 4.54), veRL's dynamic micro-batch count (an int64 all-reduce after the previous Step's
gradient norm). Scalars of other types after the gradients stay the optimizer's: the loss HF
gathers to log (one float), Megatron's update-successful flag (int32) before its gradient
norm. Synthetic DDP-style op streams, every rank alike, with and without host timing."""

from __future__ import annotations

import pytest
from op_streams import WORLD, Stream, labels_of

from comminsight.semantic.job_ops import CommIds
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
    ops = [
        (MAX_MICRO, True),  # a count
        (NUM_ITEMS, True),  # a count gathered
        (UPDATE_OK, False),  # a flag
        (GRAD_NORM, False),
        (LOG_LOSS, False),  # one float gathered
        (("AllReduce", 8 << 20, I64), False),  # no scalar
        (("AllGather", 16, BYTES), False),  # two numbers a rank
        (("Broadcast", 8, BYTES), False),  # a broadcast begins an iteration by rules of its own
        (("AllGather", 8, BYTES), False),  # all_gather_object: the sizes, then the objects
        (("AllGather", 400, BYTES), False),
    ]
    for (func, size, dtype), _ in ops:
        s.op(func, size, datatype=dtype)
    g = s.gpu(CommIds(), 0, {WORLD: 4})
    assert counts(g).tolist() == [want for _, want in ops]


def fsdp_steps(steps: int, begin, end, optimizer_ms: float, first_slow: bool = False) -> Stream:
    """FSDP: each Step's `begin` ops, four layers gathered forward and backward with their
    gradients reduce-scattered, the norm, then `end` ops after an optimizer of
    `optimizer_ms` (on the host with CPU offload: the GPU idles all that time)."""
    s = Stream()
    s.timed = True
    s.op("AllReduce", 4, datatype=F32)  # a start-up barrier
    for step in range(steps):
        s.step = step
        for k, (func, size, dtype) in enumerate(begin):
            s.op(func, size, gap_ms=6 if k == 0 else 0.1, datatype=dtype)
        for k in range(4):
            gap = (6 if not begin else 0.3) if k == 0 else 0.3
            s.op("AllGather", 40 << 20, gap_ms=gap, datatype=BYTES)
        for k in range(4):
            slow = 40 if first_slow and step == 0 and k == 0 else 1.5
            s.op("AllGather", 40 << 20, gap_ms=slow, datatype=BYTES)
            s.op("ReduceScatter", 80 << 20, gap_ms=0.2, datatype=F32)
        s.op(*GRAD_NORM[:2], gap_ms=1, datatype=GRAD_NORM[2])
        for k, (func, size, dtype) in enumerate(end):
            s.op(func, size, gap_ms=optimizer_ms if k == 0 else 0.1, datatype=dtype)
    return s


TOKENS_LOGGED = ("AllReduce", 8, I64)  # torchtitan's tokens seen, summed for the log
OBJECT_SIZES, OBJECTS = ("AllGather", 8, BYTES), ("AllGather", 400, BYTES)  # all_gather_object


@pytest.mark.parametrize(
    "end", [[TOKENS_LOGGED], [OBJECT_SIZES, OBJECTS]], ids=["tokens-logged", "object-gather"]
)
def test_bookkeeping_after_an_optimizer_on_the_host_is_never_taken_for_sure_as_a_step_start(end):
    """With the optimizer on the host, the GPU idles longest before what the loop does after
    it (counting tokens for the log, gathering objects): idle time there does not place a
    Step's start, and a count there may be either Step's."""
    streams = [fsdp_steps(8, [], end, optimizer_ms=25) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    exact = all(
        label.tolist() == stream.truth().tolist()
        for stream, label in zip(streams, labels, strict=True)
    )
    assert exact or cut.confidence < 0.9, cut.reasons


def test_the_first_step_begins_with_its_count_though_it_looks_like_the_start_up():
    """HF Trainer on FSDP: the first Step's count gathered right after the start-up's
    barrier, its first backward slow (torch.compile)."""
    streams = [fsdp_steps(8, [NUM_ITEMS], [], optimizer_ms=0.5, first_slow=True) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()
