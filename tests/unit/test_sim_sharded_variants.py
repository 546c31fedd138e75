"""The sharded-optimizer variants' plans carry what DeepSpeed ZeRO-1/2 and Megatron-LM's
distributed optimizer issue (no processes: plans only)."""

from __future__ import annotations

import pytest

from comminsight.sim.accuracy_variants.sharded_optimizer import CASES
from comminsight.sim.config import SimConfig
from comminsight.sim.plan import Issue, StepBegin, StepEnd
from comminsight.sim.workloads import build_plan
from comminsight.sim.workloads.loss_scale import deepspeed_overflows, megatron_overflows


def plan(**config):
    return build_plan(SimConfig(plugin="x", home="/tmp", **config))


def steps_of(p, rank):
    """step -> its ops, and every op issued between a Step's begin and end belongs to it."""
    steps, current = {}, None
    for action in p.programs[rank]:
        if isinstance(action, StepBegin):
            current = action.step
            steps[current] = []
        elif isinstance(action, StepEnd):
            current = None
        elif isinstance(action, Issue):
            assert action.op.step == current, action.op
            if current is not None:
                steps[current].append(action.op)
    return steps


def funcs(ops, phase):
    return [(o.func, o.count) for o in ops if o.phase == phase]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_case_builds_and_brackets_its_ops(case):
    p = plan(**case.config)
    for rank in range(p.world):
        steps = steps_of(p, rank)
        assert len(steps) == 1 + case.config["steps"]


ZERO1 = dict(workload="zero", ranks=4, steps=8, zero_stage=1, layers=4, seed=0)


def test_zero1_overflow_steps_skip_norm_and_gathers():
    p = plan(**ZERO1, variants=("overflow_spikes", "single_param_group"))
    overflows = deepspeed_overflows(0, 9, 1000, spike_rate=0.25)
    assert any(overflows) and not all(overflows)
    for step, ops in steps_of(p, 0).items():
        gathers = funcs(ops, "param_allgather")
        assert ops[-1 if overflows[step] else -3].phase == "overflow_check"
        # one group: one norm all-reduce, one all-gather, ending the Step
        assert gathers == ([] if overflows[step] else [("AllGather", gathers[0][1])])
        if not overflows[step]:
            assert [o.phase for o in ops[-2:]] == ["grad_norm", "param_allgather"]


def test_zero1_legacy_allgather_shards_and_per_destination_reduces():
    config = dict(ZERO1, ranks=8, reduce_bucket_size=20_000_000)
    base = plan(**config)
    p = plan(**config, variants=("legacy_allgather", "no_multi_rank_bucket"))
    overflows = deepspeed_overflows(0, 9, 1000)
    step = overflows.index(False)
    ops, base_ops = steps_of(p, 0)[step], steps_of(base, 0)[step]
    assert len(funcs(base_ops, "param_allgather")) == 2  # Hugging Face's two groups
    shards = funcs(ops, "param_allgather")
    assert len(shards) > 2
    assert sum(c for _, c in shards) == sum(c for _, c in funcs(base_ops, "param_allgather"))
    reduces = [o for o in ops if o.phase == "backward"]
    assert {o.func for o in reduces} == {"Reduce"} and {o.root for o in reduces} == set(range(8))
    assert sum(o.count for o in reduces) == sum(o.count for o in base_ops if o.phase == "backward")


def test_zero1_overlap_comm_reduces_in_backward_order():
    config = dict(ZERO1, reduce_bucket_size=20_000_000)
    base, p = plan(**config), plan(**config, variants=("overlap_comm",))
    first = [o.count for o in steps_of(base, 0)[0] if o.phase == "backward"]
    hooked = [o.count for o in steps_of(p, 0)[0] if o.phase == "backward"]
    assert sum(first) == sum(hooked) and first != hooked


def test_zero2_accumulation_reduces_every_micro_batch_and_all_reduce_path():
    p = plan(
        workload="zero",
        ranks=4,
        steps=4,
        zero_stage=2,
        layers=4,
        grad_accum=3,
        variants=("no_reduce_scatter",),
    )
    for ops in steps_of(p, 0).values():
        micro = {o.micro_batch for o in ops if o.phase == "backward"}
        assert micro == {0, 1, 2}
        assert {o.func for o in ops if o.phase == "backward"} == {"AllReduce"}


MEGATRON = dict(workload="megatron", ranks=8, tp=2, pp=2, steps=8, grad_accum=4, seed=0)


def test_megatron_fp16_overflow_skips_norm_and_param_gather():
    p = plan(**MEGATRON, variants=("fp16_overflow",))
    overflows = megatron_overflows(0, 9, 1000)
    assert overflows[0] and not all(overflows)
    for rank in range(8):
        for step, ops in steps_of(p, rank).items():
            gathers = [o for o in ops if o.phase == "param_gather"]
            assert (not gathers) == overflows[step]
            if gathers:  # inside the Step, after the reduce-scatters
                last_rs = max(i for i, o in enumerate(ops) if o.func == "ReduceScatter")
                assert ops.index(gathers[0]) > last_rs


def test_megatron_overlap_param_gather_feeds_the_next_forward():
    p = plan(**MEGATRON, variants=("overlap_param_gather", "fp16_overflow"))
    overflows = megatron_overflows(0, 9, 1000)
    enabled = overflows.index(False)
    for rank in range(8):
        steps = steps_of(p, rank)
        for step, ops in steps.items():
            gathers = [o for o in ops if o.phase == "param_gather"]
            assert bool(gathers) == (step > enabled)
            if gathers:
                assert all(o.micro_batch in (None, 0) for o in gathers)
                assert ops.index(gathers[0]) < [o.phase for o in ops].index("backward")
        tail = [a.op for a in p.programs[rank] if isinstance(a, Issue) and a.op.step is None]
        assert tail[-1].phase == "param_gather"


def test_megatron_no_clip_zero_counting_and_bucket_size():
    base = steps_of(plan(**MEGATRON, precision="bf16"), 0)[1]
    p = steps_of(plan(**MEGATRON, precision="bf16", variants=("no_clip", "log_num_zeros")), 0)[1]
    stats = [o for o in base if o.phase == "optimizer" and o.count == 1]
    assert len([o for o in p if o.phase == "optimizer" and o.count == 1]) == len(stats) + 1
    small = steps_of(plan(**MEGATRON, precision="bf16", variants=("ddp_bucket_10m",)), 0)[1]
    rs = [o for o in small if o.func == "ReduceScatter"]
    assert len(rs) > len([o for o in base if o.func == "ReduceScatter"])
    assert len([o for o in small if o.phase == "param_gather"]) == len(rs)


def test_megatron_timer_barriers_and_log_interval():
    p = plan(**MEGATRON, precision="bf16", variants=("timers_l1", "log_interval_2"))
    for step, ops in steps_of(p, 0).items():
        assert ops[0].phase == "barrier"  # 'forward-backward' starts the Step
        assert len([o for o in ops if o.phase == "barrier"]) == 12 + (step % 2)
        logged = [o for o in ops if o.phase == "log"]
        assert [(o.func, o.count) for o in logged] == ([("AllGather", 24)] if step % 2 else [])
