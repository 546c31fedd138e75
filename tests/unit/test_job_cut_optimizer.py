"""The job cut where Steps are told by their optimizers rather than by one repeating cycle:
ZeRO-3's warm-up Steps (every module gathered while the trace is recorded, then the trace
checked) before its steady prefetching ones, and RL training whose generation issues a
data-dependent number of ops on its own communicators between the trainer's iterations of
several PPO updates. Synthetic op streams, every rank alike."""

from __future__ import annotations

import numpy as np
import pytest
from op_streams import TP, WORLD, Stream, labels_of

from comminsight.semantic.local_cycle import after_last_update, after_optimizer, optimizer_run

# ---- ZeRO-3 ----------------------------------------------------------------------------

MODULES = [12_800_000, 400] + [640_000] * 4 + [400] + [1_750_567] * 3 + [400]
MODULES = MODULES[:2] + MODULES[2:] * 4 + [12_800_000]  # embedding, 4 layers, lm head
PREFETCH = [12_800_000, 13_874_435, 13_874_435, 16_301_534]
PERSISTENT = 3_600  # the norms, gathered back after each update


def zero3_stream(overflows: list[bool], flag_bytes: int = 1, eval_on_start: bool = False) -> Stream:
    """`flag_bytes`: the found-inf flag's size (4: a float, as the gradient norms are);
    `eval_on_start`: an evaluation before training (forwards, then its loss gathered)."""
    s = Stream()
    for size in MODULES:  # zero.Init
        s.op("Broadcast", 2 * size)
    for _ in range(3):
        s.op("AllReduce", 4)
    for size in MODULES:  # create_reduce_and_remove_grad_hooks
        s.op("AllGather", 2 * size)
    if eval_on_start:
        s.op("Broadcast", 8, gap_ms=30)
        for size in MODULES:
            s.op("AllGather", 2 * size, gap_ms=0.5)
        s.op("AllGather", 64, gap_ms=1)  # the evaluation's losses
    persistent_gathered = False
    for step, overflow in enumerate(overflows):
        s.step = step
        if step == 0:  # the trace is recorded: every module gathered, forward and backward
            s.op("Broadcast", 8, gap_ms=0.05)
            for k, size in enumerate(MODULES + MODULES[::-1]):
                s.op("AllGather", 2 * size, gap_ms=40 if k == 0 else 0.5)
        else:
            if step == 1:  # the recorded trace checked against rank 0's
                for k in range(6):
                    s.op("Broadcast", 8 if k % 2 == 0 else 624, gap_ms=40 if k == 0 else 1)
            for k, size in enumerate(PREFETCH):
                less = PERSISTENT // 4 if persistent_gathered and k else 0
                s.op("AllGather", 2 * (size - less), gap_ms=3 if k == 0 else 0.1)
        s.op("ReduceScatter", 113_700_808, gap_ms=12)
        s.op("AllReduce", flag_bytes)  # the overflow flag
        persistent_gathered = not overflow
        if not overflow:
            s.op("AllReduce", 4, gap_ms=3)  # a gradient norm per parameter group
            s.op("AllReduce", 4)
            s.op("AllGather", 2 * PERSISTENT)
    return s


def test_zero3_traced_and_checking_steps_are_warm_up_steps_ended_by_their_optimizer():
    overflows = [True, True, True, False, False, True, False, False]
    streams = [zero3_stream(overflows) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == len(overflows)
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


@pytest.mark.parametrize(
    "overflows", ["TTTFFFFF", "TTFFFFFF", "TTTFFTFF"], ids=["three", "two", "three_and_one"]
)
@pytest.mark.parametrize("flag_bytes", [1, 4])
def test_warm_up_steps_whose_updates_were_skipped_end_at_their_flag(overflows, flag_bytes):
    """A skipped update's Step ends at its found-inf flag alone, a shorter run than the
    steady Steps' flag and norms, though the flag be a float like the norms."""
    skipped = [c == "T" for c in overflows]
    streams = [zero3_stream(skipped, flag_bytes) for _ in range(4)]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == len(skipped)
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_an_evaluation_before_training_stays_in_the_start_up():
    """HF Trainer's eval_on_start: the modules gathered for the evaluation's forwards, then
    its losses gathered, before the first Step, which gathers them again."""
    streams = [
        zero3_stream([True, True, True, False, False, True, False, False], eval_on_start=True)
        for _ in range(4)
    ]
    cut, labels = labels_of(streams, {WORLD: 4})
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_gathers_after_the_flag_whatever_the_update_did_begin_the_next_step():
    """ZeRO-1/2 gather the updated partitions only after the norms (skipped updates leave
    both out); ZeRO-3 fetches the next forward's parameters after the flag alone as after
    the norms and the persistent parameters."""
    small = np.array([False, True, True, False, False, False])
    comm_func = np.array([1, 2, 2, 3, 3, 3])  # RS, AR, AR, AG...
    gathers = np.array([False, False, False, True, True, True])
    # keys: 0 RS, 1 flag, 2 norm, 3 forward gather, 4 its neighbour, 5 persistent gather
    cyc = np.array([0, 1, 3, 4])
    zero3 = np.array([0, 1, 3, 4, 0, 1, 2, 2, 5, 3, 4, 0, 1, 3, 4, 0, 1, 2, 2, 5, 3, 4])
    assert after_optimizer(cyc, small, comm_func, gathers, zero3).tolist() == [3, 4, 0, 1]
    # every gather after the norms, every time: the update's own
    update = np.array([0, 1, 2, 3, 4])
    zero1 = np.array([0, 1, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    assert after_optimizer(update, small, comm_func, gathers, zero1).tolist() == [0, 1, 2, 3, 4]


def test_a_sharded_update_without_scalars_ends_the_step_it_finishes():
    """Megatron's distributed optimizer (or ZeRO-1/2) with no gradient-norm or found-inf
    reduction: the data-parallel reduce-scatter of the gradients, then at once the
    all-gather of the updated parameters, end `optimizer.step()`: the cycle begins after
    them, whichever idle time the sampled run found longer."""
    comm = 1 << 8
    # keys: 0 tensor-parallel all-reduce (comm 1), 1 pipeline send/recv, 2 data-parallel
    # reduce-scatter (comm 2), 3 its all-gather (comm 2)
    comm_func = np.array([comm | 1, 3 * comm, 2 * comm | 2, 2 * comm | 3])
    small = np.zeros(4, bool)
    gathers = np.array([False, False, False, True])
    reductions = np.array([True, False, True, False])
    for rotation in range(5):
        cyc = np.roll(np.array([0, 0, 1, 0, 0, 2, 3]), -rotation)
        got = after_optimizer(cyc, small, comm_func, gathers, None, reductions)
        assert got.tolist() == [0, 0, 1, 0, 0, 2, 3], rotation
    # parameters gathered and gradients reduced layer by layer on one communicator (FSDP,
    # ZeRO-3, sequence parallelism): no update to tell the phase by, the rotation stays
    fsdp = np.array([3, 0, 3, 0, 2, 3, 2])
    fsdp_comm_func = np.array([comm | 1, 3 * comm, 2 * comm | 2, 2 * comm | 3])
    got = after_optimizer(fsdp, small, fsdp_comm_func, gathers, None, reductions)
    assert got.tolist() == fsdp.tolist()


# ---- RL --------------------------------------------------------------------------------

LAYERS = 4
WEIGHTS = [7_168_000] + [200_704] * (4 * LAYERS)
FSDP_GATHERS = [28_672_448] + [5_208_332] * LAYERS


def rl_stream(
    rank: int,
    iterations: int,
    updates: int,
    seed: int = 0,
    dynamic: bool = False,
    barrier_every: int = 0,
) -> Stream:
    """veRL's hybrid engine, two ranks per rollout TP group: each iteration syncs the
    weights to the engine, generates a data-dependent number of tokens (per TP group),
    computes log-probs, then takes `updates` PPO optimizer Steps; `dynamic`: each update
    agrees on its number of micro-batches (an all-reduce of the count) and runs that many;
    `barrier_every`: an evaluation barrier ends every so many Steps."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 30, size=(iterations, 2))
    micro_batches = rng.integers(1, 4, size=iterations * updates) if dynamic else None
    s = Stream()
    s.op("AllReduce", 4)
    for size in WEIGHTS:
        s.op("Broadcast", 4 * size)
    tp = TP + str(rank // 2)
    s.op("AllReduce", 4, comm=tp)
    step = 0
    for it in range(iterations):
        for k in range(updates):
            s.step = step
            if k == 0:
                for size in WEIGHTS:  # full tensors for the rollout engine
                    s.op("AllGather", size, gap_ms=2 if size == WEIGHTS[0] else 0.05)
                for _ in range(int(lengths[it, rank // 2])):
                    for _ in range(1 + 2 * LAYERS):
                        s.op("AllReduce", 2 * 16 * 1024, comm=tp)
                    s.op("AllGather", 64_000, comm=tp)
                s.op("AllGather", 4)  # reduce_timing
                s.op("AllReduce", 4)
                for _ in range(2):  # old and reference log-probs
                    for size in FSDP_GATHERS:
                        s.op("AllGather", size)
            micros = 1
            if micro_batches is not None:
                s.op("AllReduce", 8, gap_ms=3 if k else 0.05)
                micros = int(micro_batches[step])
            for _ in range(micros):
                for size in FSDP_GATHERS:  # forward
                    s.op("AllGather", size, gap_ms=3 if size == FSDP_GATHERS[0] and k else 0.05)
                for size in FSDP_GATHERS[::-1]:  # backward
                    s.op("AllGather", size)
                    s.op("ReduceScatter", 2 * size)
            s.op("AllReduce", 4, gap_ms=20)  # the clipped gradient norm
            if barrier_every and step % barrier_every == barrier_every - 1:
                s.op("AllReduce", 4, gap_ms=2)
            step += 1
    return s


def test_rl_steps_follow_the_ppo_updates_between_data_dependent_generations():
    streams = [rl_stream(rank, iterations=4, updates=2) for rank in range(4)]
    nranks = {WORLD: 4, TP + "0": 2, TP + "1": 2}
    cut, labels = labels_of(streams, nranks)
    assert cut.steps == 8
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()
    assert cut.confidence < 0.9
    assert any("one communicator" in r for r in cut.reasons)


@pytest.mark.parametrize("updates,every", [(2, 3), (2, 2), (3, 3), (4, 2), (4, 4)])
def test_rl_steps_with_an_evaluation_barrier_after_some_updates(updates, every):
    """The barrier is a 4-byte all-reduce, as the gradient norm is: the updates it follows
    end with a longer run of that key, and still every update ends a Step."""
    streams = [
        rl_stream(rank, iterations=4, updates=updates, barrier_every=every) for rank in range(4)
    ]
    nranks = {WORLD: 4, TP + "0": 2, TP + "1": 2}
    cut, labels = labels_of(streams, nranks)
    assert cut.steps == 4 * updates
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_rl_run_that_stops_inside_an_iteration():
    streams = [rl_stream(rank, iterations=3, updates=3, seed=1) for rank in range(4)]
    for s in streams:  # the run ends after the last iteration's first update
        last = max(np.flatnonzero(s.truth() == 6))
        del s.ops[last + 1 :]
    nranks = {WORLD: 4, TP + "0": 2, TP + "1": 2}
    cut, labels = labels_of(streams, nranks)
    assert cut.steps == 7
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_rl_updates_of_varying_micro_batches_are_cut_at_their_optimizers():
    """Dynamic batch sizes leave no cycle, not even on the trainer's communicator: each
    Step still ends with its gradient norm, less surely."""
    streams = [rl_stream(rank, iterations=3, updates=2, dynamic=True) for rank in range(4)]
    nranks = {WORLD: 4, TP + "0": 2, TP + "1": 2}
    cut, labels = labels_of(streams, nranks)
    assert cut.steps == 6
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()
    assert cut.confidence < 0.9


def test_a_cycle_of_several_updates_begins_after_the_last():
    # keys: 0 weight gather, 1 log-prob gather, 2 forward gather, 3 reduce-scatter, 4 norm
    small = np.array([False, False, False, False, True])
    reductions = np.array([False, False, False, True, False])
    cyc = np.array([2, 3, 4, 0, 1, 2, 3, 4])
    rotated, ends = after_last_update(cyc, small, reductions)
    assert rotated.tolist() == [0, 1, 2, 3, 4, 2, 3, 4]
    assert ends == [4, 7]
    assert after_last_update(np.array([0, 1, 2]), small, reductions)[1] == []


def test_a_last_weight_sync_that_trains_nothing_is_no_step():
    """Weights synced to a rollout engine right after each iteration's update (OpenRLHF,
    veRL's checkpoint engine) begin the next iteration; the one after the run's last update
    feeds no iteration: it is no Step. An evaluation after the last Step (off the cycle)
    stays that Step's."""
    streams = []
    for _ in range(2):
        s = Stream()
        s.timed = True
        s.op("AllReduce", 4)  # a start-up barrier
        for step in range(6):
            s.step = step
            for k in range(3 if step else 0):  # the weights, to the engine (loaded at first)
                s.op("Broadcast", 64 << 20, gap_ms=30 if k == 0 else 0.2, comm=TP)
            for k in range(4):  # the experience's forward, then training
                s.op("AllGather", 40 << 20, gap_ms=0.3 if k or step else 30)
            for _layer in range(4):
                s.op("AllGather", 40 << 20, gap_ms=1.5)
                s.op("ReduceScatter", 80 << 20, gap_ms=0.2)
            s.op("AllReduce", 4, gap_ms=1)  # the gradient norm
        s.step = -1
        for k in range(3):
            s.op("Broadcast", 64 << 20, gap_ms=30 if k == 0 else 0.2, comm=TP)
        streams.append(s)
    cut, labels = labels_of(streams, {WORLD: 2, TP: 2})
    assert cut.steps == 6
    for stream, label in zip(streams, labels, strict=True):
        assert label.tolist() == stream.truth().tolist()


def test_metrics_reduced_after_every_micro_batch_do_not_end_steps():
    """OpenRLHF with accumulation: FSDP reduces each micro-batch's gradients, and the loop
    all-reduces its status metrics (a key at a time, one key) after every micro-batch; the
    micro-batch that ends accumulation adds the clipped gradient norm, of that key. Only
    the longer runs end Steps; an evaluation barrier now and then lengthens one of them."""
    assert optimizer_run([9, 10, 9, 10]) == 10
    assert optimizer_run([11, 9, 10, 9]) == 10
    assert optimizer_run([10, 10, 10]) == 0  # PPO updates, each alike: every run ends one
    assert optimizer_run([10, 9]) == 0  # one longer run: the last update's barrier, say
    assert optimizer_run([2, 20, 2, 20]) == 0  # no optimizer's few norms apart
    # keys: 0 experience gather, 1 forward gather, 2 reduce-scatter, 3 scalar (status, norm)
    small = np.array([False, False, False, True])
    reductions = np.array([False, False, True, False])
    micro = [1, 2] + [3] * 3
    last_micro = [1, 2] + [3] * 4
    cyc = np.array([0] + micro + last_micro + micro + last_micro)
    rotated, ends = after_last_update(cyc, small, reductions)
    assert rotated.tolist() == cyc.tolist()
    assert ends == [len(micro) + len(last_micro), len(cyc) - 1]
