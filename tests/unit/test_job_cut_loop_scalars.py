"""The job cut where a training loop's own collectives sit at a Step's edges: a loss
averaged across data parallelism after every micro-batch's forward (Megatron-LM up to core
0.5), which follows the gradient reductions as an optimizer's scalar would; and a loss logged
every second Step, which makes the op cycle two Steps long; and what is not so (metrics after
every micro-batch, norms computed on the host). Synthetic op streams, every rank alike."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from op_streams import TP, WORLD, Stream, labels_of

from comminsight.semantic.cycle import Cycle
from comminsight.semantic.local_cycle import cycle_halves

BUCKETS = [1_048_576] + [26_214_400] * 6 + [877_824]


def loss_per_micro_stream(
    steps: int, micros: int, forward_ms: float, backward_ms: float, optimizer_ms: float
) -> Stream:
    """DDP with accumulation (no_sync until the last micro-batch), each micro-batch's loss
    all-reduced (fp32, one element) after its forward, no gradient clipping."""
    s = Stream()
    s.timed = True
    s.op("Broadcast", 262_144_000)  # the module's states from rank 0
    for step in range(steps):
        s.step = step
        for micro in range(micros):
            # the GPU idles for the forward (after the optimizer and data loading for the
            # first), and for the backward of the micro-batch before (no reduction then)
            idle = forward_ms + (optimizer_ms if micro == 0 else backward_ms)
            s.op("AllReduce", 4, gap_ms=idle)
        for size in BUCKETS:
            s.op("AllReduce", size, gap_ms=backward_ms / len(BUCKETS))
    return s


@pytest.mark.parametrize(
    "micros,forward_ms,backward_ms,optimizer_ms",
    [(4, 4.0, 8.0, 3.0), (8, 2.0, 4.0, 10.0), (2, 5.0, 10.0, 1.0)],
    ids=["accum4", "accum8_slow_optimizer", "accum2"],
)
def test_a_loss_averaged_per_micro_batch_begins_the_step(
    micros, forward_ms, backward_ms, optimizer_ms
):
    streams = [
        loss_per_micro_stream(6, micros, forward_ms, backward_ms, optimizer_ms) for _ in range(4)
    ]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 6
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()
    assert cut.confidence < 0.9  # no optimizer collective shows where the Step ends


def host_optimizer_stream(
    steps: int,
    reduce: str,
    forward_ms: float,
    flag_ms: float | None,
    norm_ms: tuple,
    adam_ms: float,
) -> Stream:
    """Gradient buckets reduced (`reduce`) after `forward_ms`, a found-inf flag after
    `flag_ms` (None: no flag), each parameter group's norm after its `norm_ms`, then the
    updated partitions gathered `adam_ms` after the last norm: an optimizer with work on the
    host between its collectives."""
    s = Stream()
    s.timed = True
    s.op("Broadcast", 262_144_000)
    for step in range(steps):
        s.step = step
        for k, size in enumerate(BUCKETS):
            s.op(reduce, size, gap_ms=forward_ms if k == 0 else 0.05)
        if flag_ms is not None:
            s.op("AllReduce", 1, gap_ms=flag_ms)
        for gap in norm_ms:
            s.op("AllReduce", 4, gap_ms=gap)
        for k in range(4):
            s.op("AllGather", 5_167_888, gap_ms=adam_ms if k == 0 else 0.05)
    return s


def test_two_norms_after_a_long_host_step_still_end_the_step():
    """The control: a found-inf flag, then after a long host step two gradient norms of the
    same key, the second right after the first (DeepSpeed's legacy ZeRO-1 with its update
    on the host). They are the optimizer's, not a per-micro-batch loss: the Step ends with
    them."""
    streams = [host_optimizer_stream(6, "Reduce", 80.0, 0.05, (60.0, 0.05), 0.05) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 6
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_a_cycle_of_two_steps_logged_every_second_one_halves():
    """HF Trainer's loss gathered every second Step (logging_steps=2) makes the cycle two
    Steps long; the Step's own cycle is its repeated half. Two micro-batches of tensor
    parallelism, the optimizer's scalars their extras, stay one Step."""
    # keys: 0 a bucket's all-reduce, 1 another, 2 the logged loss (a gather), 3 a scalar
    # reduction (an optimizer's norm), 4 a tensor-parallel all-reduce; all of one group
    keys = element_keys(
        reductions=[True, True, False, False, True], scalars=[False, False, False, True, False]
    )
    ddp = Cycle((0, 1, 1, 0, 1, 1, 2))
    assert [c.keys for c in cycle_halves(ddp, keys)] == [(0, 1, 1)]
    micro_batches = Cycle((4, 4, 4, 4, 4, 4, 3))
    assert cycle_halves(micro_batches, keys) == []
    # ZeRO-2 reducing each micro-batch's gradients, then the loop's metrics; the clipped
    # norm once a Step: the extras reduce, the halves are micro-batches
    zero2 = Cycle((0, 1, 3, 3, 0, 1, 3, 3, 3))
    assert cycle_halves(zero2, keys) == []


def element_keys(reductions, scalars, gathers=None, comms=None) -> SimpleNamespace:
    """Per element key what cycle_halves reads of Elements: a gradient reduction, a scalar
    reduction, a parameter gather, its communicator."""
    n = len(reductions)
    comm = np.array(comms if comms is not None else [0] * n, np.int64)
    return SimpleNamespace(
        reductions=np.array(reductions),
        small=np.array(scalars),
        gathers=np.array(gathers if gathers is not None else [False] * n),
        comm_func=comm << 8,
    )


def test_two_steps_whose_extras_are_a_barrier_on_a_group_of_its_own_halve():
    """Megatron's log interval every second Step: a world barrier, then the timers'
    all-gather. Each Step reduce-scatters its gradients on the data-parallel group, then a
    scalar (the norm, on a group of its own), then all-gathers the updated parameters there.
    Without the update, or with the barrier on the gradients' group, the halves may be
    micro-batches (a norm once a Step), and stay whole."""
    # keys: 0 a tensor-parallel all-reduce (group 1), 1 a gradient reduce-scatter (group
    # 2), 2 the norm (group 3), 3 the parameters' all-gather (group 2), 4 a world barrier
    # (group 0), 5 the timers' all-gather (group 0), 6 a barrier on the gradients' group
    keys = element_keys(
        reductions=[True, True, False, False, False, False, False],
        scalars=[False, False, True, False, True, False, True],
        gathers=[False, False, False, True, False, False, False],
        comms=[1, 2, 3, 2, 0, 0, 2],
    )
    step = (4, 0, 0, 1, 2, 3)
    megatron = Cycle(step + step + (4, 5))
    assert [c.keys for c in cycle_halves(megatron, keys)] == [step]
    no_update = tuple(k for k in step if k != 3)
    assert cycle_halves(Cycle(no_update + no_update + (4, 5)), keys) == []
    gradient_group = (6, 0, 0, 1, 2, 3)
    assert cycle_halves(Cycle(gradient_group + gradient_group + (6, 5)), keys) == []


def zero2_metrics_stream(
    buckets: int, metrics: int, micros: int = 2, norm_bytes: int = 4, timed: bool = True
) -> Stream:
    """DeepSpeed ZeRO-2 with accumulation: every micro-batch reduce-scatters its gradient
    buckets, then the loop all-reduces its metrics a key at a time (OpenRLHF's status, fp32);
    the clipped gradient norm comes once a Step, before the last micro-batch's metrics."""
    s = Stream()
    s.timed = timed
    s.op("Broadcast", 262_144_000)
    for step in range(8):
        s.step = step
        for micro in range(micros):
            for k in range(buckets):
                s.op("ReduceScatter", 10_000_000, gap_ms=12.0 if k == 0 else 0.5)
            if micro == micros - 1:
                s.op("AllReduce", norm_bytes, gap_ms=0.4)
            for _ in range(metrics):
                s.op("AllReduce", 4, gap_ms=0.2)
    return s


@pytest.mark.parametrize("buckets,metrics", [(8, 2), (16, 5), (24, 2)])
def test_metrics_after_every_micro_batch_do_not_halve_the_step(buckets, metrics):
    streams = [zero2_metrics_stream(buckets, metrics) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


@pytest.mark.parametrize("norm_ms,adam_ms", [(15, 5), (30, 5), (30, 80)])
@pytest.mark.parametrize("flag", [True, False])
def test_norms_computed_on_the_host_stay_the_optimizer_s(norm_ms, adam_ms, flag):
    """ZeRO-Offload: each parameter group's norm after as long a host computation as a
    micro-batch's forward might take, then the update's gathers: the Step still ends with
    them (no loss averaged per micro-batch: no gradient reduction follows them soon)."""
    flag_ms = 5.0 if flag else None
    streams = [
        host_optimizer_stream(8, "ReduceScatter", 40.0, flag_ms, (norm_ms, norm_ms), adam_ms)
        for _ in range(4)
    ]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


@pytest.mark.parametrize("micros", [2, 4])
@pytest.mark.parametrize("timed", [True, False])
def test_micro_batches_that_each_look_like_a_step_group_by_the_norm_every_kth_holds(micros, timed):
    """Each micro-batch reduces its gradients and then one metric, as a Step would end with
    its optimizer's norm; the clipped norm (8 bytes here: a float64) comes once a Step,
    off the cycle, before the last micro-batch's metric: Steps of `micros` repetitions."""
    streams = [zero2_metrics_stream(4, 1, micros, norm_bytes=8, timed=timed) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()
    if micros > 2:  # (two repetitions: the cycle learnt is the Step's own, norm and all)
        assert cut.confidence < 0.9
        assert any("clipped norm" in r for r in cut.reasons)


@pytest.mark.parametrize("metrics", [1, 3])
def test_a_scalar_more_of_the_metrics_key_every_kth_repetition_is_in_doubt(metrics):
    """The norm of the metrics' key, once a Step: as well a barrier after every k-th Step.
    Whatever the cut, it is not sure."""
    streams = [zero2_metrics_stream(4, metrics, 4, timed=False) for _ in range(4)]
    cut, _ = labels_of(streams, {WORLD: 4})
    assert cut.confidence < 0.9


def sequence_parallel_stream(reduce_scatter_ms: float, all_gather_ms: float) -> Stream:
    """Tensor parallelism alone with sequence parallelism, accumulation 2: each layer a
    reduce-scatter and an all-gather on the tensor-parallel group, and once a Step the
    clipped norm on a group of its own; the host's idle time does not group the layers."""
    s = Stream()
    s.timed = True
    s.op("Broadcast", 16384, comm=TP)
    for step in range(6):
        s.step = step
        for _ in range(2 * 20):
            s.op("ReduceScatter", 1_835_008, gap_ms=reduce_scatter_ms, comm=TP)
            s.op("AllGather", 1_835_008, gap_ms=all_gather_ms, comm=TP)
        s.op("AllReduce", 4, gap_ms=0.5, comm=WORLD)
    return s


@pytest.mark.parametrize("reduce_scatter_ms,all_gather_ms", [(1.0, 0.1), (2.0, 0.2), (0.5, 0.3)])
def test_layers_taken_for_steps_are_never_sure(reduce_scatter_ms, all_gather_ms):
    """Where idle time does not group a tensor-parallel job's layers into Steps, each layer
    may be cut as a Step, the GPU idling longest before each (a Step was 2 ops here, at
    confidence 1.0): far more Steps than the GPU's scalar reductions, none of which they
    hold, leave that in doubt."""
    streams = [sequence_parallel_stream(reduce_scatter_ms, all_gather_ms) for _ in range(2)]
    cut, labels = labels_of(streams, {WORLD: 2, TP: 2})
    exact = all(
        label.tolist() == stream.truth().tolist()
        for stream, label in zip(streams, labels, strict=True)
    )
    assert exact or cut.confidence < 0.9, cut.reasons


DP, GRAD_STATS, DP_LOSS = "00000000000000c3", "00000000000000d4", "00000000000000e5"
EMBEDDING = "00000000000000f6"


def timers_stream(
    steps: int,
    log_every: int,
    timed: bool,
    layers: int = 6,
    barriers: bool = True,
    embedding: bool = False,
) -> Stream:
    """Megatron-LM with level-1 timers (a world barrier as each phase starts: the forward,
    the gradients' synchronisation, the optimizer and its parts) and the distributed
    optimizer, tensor parallelism of two: the batch broadcast within the tensor-parallel
    group, the layers' all-reduces, the gradients reduce-scattered and the parameters
    all-gathered on the data-parallel group, the norm on a group of its own, the loss
    averaged on another; every `log_every`-th Step the interval timer's barrier and the
    timers' all-gather. Without `barriers`, level-1 timers are off: no barrier at all. With
    `embedding` (the first and last pipeline stages), the embedding's weights all-reduced at
    start-up on its group, and its gradients (twice the bytes, fp32) after the others."""
    s = Stream()
    s.timed = timed
    # start-up as Megatron-LM's: a barrier and the seeds' check, no states broadcast
    s.op("AllReduce", 4)
    s.op("AllReduce", 8, gap_ms=20.0)
    if embedding:
        s.op("AllReduce", 45_187_072, gap_ms=5.0, comm=EMBEDDING)
    s.op("AllReduce", 4, gap_ms=5.0)  # train(): 'interval-time' starts, with a barrier
    barrier = s.op if barriers else (lambda *args, **kwargs: None)
    for step in range(steps):
        s.step = step
        # (the first iteration after data loading and the model's set-up)
        barrier("AllReduce", 4, gap_ms=2.0 if step else 30.0)  # 'forward-backward'
        s.op("Broadcast", 16_384, gap_ms=2.5, comm=TP)
        s.op("Broadcast", 8_192, comm=TP)
        for _ in range(2 * layers):
            s.op("AllReduce", 3_670_016, gap_ms=1.5, comm=TP)
        barrier("AllReduce", 4, gap_ms=6.0)  # 'all-grads-sync'
        s.op("ReduceScatter", 62_500_096, comm=DP)
        s.op("ReduceScatter", 45_187_072, comm=DP)
        if embedding:
            barrier("AllReduce", 4, gap_ms=1.0)  # 'embedding-grads-all-reduce'
            s.op("AllReduce", 90_374_144, gap_ms=1.5, comm=EMBEDDING)
        for _ in range(3):  # 'optimizer', its copy and unscale
            barrier("AllReduce", 4, gap_ms=3.0)
        s.op("AllReduce", 4, gap_ms=2.0, comm=GRAD_STATS)  # the norm
        for _ in range(3):  # clip, inner step, copy to the model
            barrier("AllReduce", 4, gap_ms=3.0)
        s.op("AllGather", 31_250_048, gap_ms=3.0, comm=DP)
        s.op("AllGather", 22_593_536, comm=DP)
        s.op("AllReduce", 4, gap_ms=0.5, comm=DP_LOSS)  # the loss averaged
        s.op("AllReduce", 4, gap_ms=4.0, comm=DP_LOSS)
        if (step + 1) % log_every == 0:
            s.op("AllReduce", 4, gap_ms=1.5)  # 'interval-time'
            s.op("AllGather", 96, gap_ms=2.0)  # the timers of every rank
    return s


@pytest.mark.parametrize("embedding", [False, True], ids=["middle_stage", "embedding_stage"])
@pytest.mark.parametrize("timed", [True, False], ids=["timed", "untimed"])
@pytest.mark.parametrize("log_every", [1, 2])
def test_a_barrier_that_opens_the_forward_begins_the_step(timed, log_every, embedding):
    streams = [timers_stream(8, log_every, timed, embedding=embedding) for _ in range(4)]
    nranks = {WORLD: 4, TP: 2, DP: 2, GRAD_STATS: 4, DP_LOSS: 2, EMBEDDING: 2}
    cut, labels = labels_of(streams, nranks)
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


@pytest.mark.parametrize("timed", [True, False], ids=["timed", "untimed"])
def test_the_loss_averaged_before_the_next_batch_stays_with_its_step(timed):
    """Without level-1 timers the op before the batch's broadcast is the loss averaged
    across data parallelism, twice a Step on a group of its own: the Step it ends."""
    streams = [timers_stream(8, 1, timed, barriers=False) for _ in range(4)]
    nranks = {WORLD: 4, TP: 2, DP: 2, GRAD_STATS: 4, DP_LOSS: 2}
    cut, labels = labels_of(streams, nranks)
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def metrics_then_sync_stream(steps: int, micros: int, grads: str = WORLD) -> Stream:
    """RL training (OpenRLHF-like, data parallelism over the world): the new weights
    broadcast to the rollout engine begin an iteration; each micro-batch reduce-scatters its
    gradients (on `grads`: DeepSpeed reduces them on a clone of the world group, a
    communicator of its own) and all-reduces three metrics a key at a time on the world, the
    last one's clipped norm too. The metrics before the next sync are this Step's: they come
    in runs, each followed by the next micro-batch's gradients alone."""
    s = Stream()
    s.timed = True
    s.op("Broadcast", 262_144_000)
    for step in range(steps):
        s.step = step
        for _ in range(4):
            s.op("Broadcast", 50_000_000, gap_ms=20.0 if _ == 0 else 0.5, comm=TP)
        for micro in range(micros):
            for k in range(4):
                s.op("ReduceScatter", 10_000_000, gap_ms=12.0 if k == 0 else 0.5, comm=grads)
            if micro == micros - 1:
                s.op("AllReduce", 4, gap_ms=0.4, comm=grads)
            for _ in range(3):
                s.op("AllReduce", 4, gap_ms=0.2)
    return s


@pytest.mark.parametrize("micros", [3, 4])
@pytest.mark.parametrize("grads", [WORLD, DP], ids=["world", "clone_of_world"])
def test_metrics_before_a_sync_stay_with_their_step(grads, micros):
    streams = [metrics_then_sync_stream(8, micros, grads) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4, TP: 4, DP: 4})
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()
