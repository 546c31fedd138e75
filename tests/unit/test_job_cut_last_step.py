"""Where the job cut ends a run's last Step: the update gathers of a sharded optimizer after
its last gradient reduction belong to it (ZeRO-2's legacy all-gather with overflow steps
that skip the update, so the gathers are off the op cycle), and what comes after the Steps
(a final barrier, an evaluation's loss reductions) is the tail, not the last Step's.
Synthetic op streams, every rank alike."""

from __future__ import annotations

import numpy as np
from op_streams import WORLD, Stream

from comminsight.semantic.job_cut import TAIL, cut_job
from comminsight.semantic.job_ops import CommIds, JobOps
from comminsight_gen.abi.shm_v1 import Datatype

F32 = int(Datatype.FLOAT32)
BUCKETS = [102_400_000, 90_512_260, 96_990_928, 62_499_996, 102_400_000]
GATHER = 14_212_600  # each rank's shard of the updated parameters


def cut_of(streams: list[Stream]):
    comms = CommIds()
    gpus = [s.gpu(comms, r, {WORLD: len(streams)}) for r, s in enumerate(streams)]
    return cut_job(JobOps(gpus, comms))


def zero2_stream(micro: list[int], overflow: list[bool]) -> Stream:
    """DeepSpeed ZeRO-2 with the legacy all-gather: per Step, each micro-batch's bucket
    all-reduces, the overflow flag, and, where the update ran, the gradient norm and four
    all-gathers of the updated shards."""
    s = Stream()
    s.timed = True
    s.op("Broadcast", 400_000_000)
    for step, (m, skipped) in enumerate(zip(micro, overflow, strict=True)):
        s.step = step
        for _ in range(m):
            for j, size in enumerate(BUCKETS):
                s.op("AllReduce", size, gap_ms=20 if j == 0 else 2, datatype=F32)
        s.op("AllReduce", 1, gap_ms=0.2)
        if not skipped:
            s.op("AllReduce", 4, gap_ms=0.2, datatype=F32)
            for _ in range(4):
                s.op("AllGather", GATHER, gap_ms=0.3)
    return s


def test_the_last_steps_update_gathers_are_its_own_where_overflow_steps_skip_them():
    micro = [1, 1, 2, 2, 1, 2, 2]
    overflow = [True, False, True, False, False, True, False]
    streams = [zero2_stream(micro, overflow) for _ in range(2)]
    cut = cut_of(streams)
    for rank_cut, s in zip(cut.ranks, streams, strict=True):
        truth = s.truth()
        assert (rank_cut.label == truth).all(), np.flatnonzero(rank_cut.label != truth)
        assert not (rank_cut.label == TAIL).any()


def ddp_stream(tail_scalars: int) -> Stream:
    """DDP with the loss (or the gradient norm) all-reduced each Step, then `tail_scalars`
    scalar all-reduces after the last Step: an evaluation's losses and a final barrier."""
    s = Stream()
    s.timed = True
    s.op("Broadcast", 250 << 20)
    for step in range(12):
        s.step = step
        for k, size in enumerate([1 << 20] + [25 << 20] * 6 + [900_000]):
            s.op("AllReduce", size, gap_ms=20 if k == 0 else 2, datatype=F32)
        s.op("AllReduce", 4, gap_ms=0.2, datatype=F32)
    s.step = TAIL
    for _ in range(tail_scalars):
        s.op("AllReduce", 4, gap_ms=5, datatype=F32)
    return s


def test_scalars_after_the_last_step_are_the_tail():
    for tail in (1, 2, 4):
        streams = [ddp_stream(tail) for _ in range(2)]
        cut = cut_of(streams)
        for rank_cut, s in zip(cut.ranks, streams, strict=True):
            truth = s.truth()
            assert (rank_cut.label == truth).all(), (tail, np.flatnonzero(rank_cut.label != truth))
