"""The data-parallel variants' plans carry what PyTorch's DDP and FSDP2 sources issue."""

from __future__ import annotations

import pytest

from comminsight.sim.accuracy_variants.data_parallel import CASES
from comminsight.sim.config import SimConfig, SimConfigError
from comminsight.sim.workloads import build_plan
from comminsight.sim.workloads.model import ModelShape
from comminsight.sim.workloads.transformer_params import decoder_parameters


def plan_of(**config):
    return build_plan(SimConfig(plugin="x", home="/tmp", **config))


def step_ops(plan, rank, step):
    return [op for op in plan.rank_ops(rank) if op.step == step]


def test_every_case_builds_and_times_vary():
    for case in CASES:
        plan = plan_of(**case.config)
        assert all(step_ops(plan, 0, s) for s, _ in plan.steps), case.name
    for family in ("ddp", "fsdp"):
        timings = {
            c.config.get("timing", "modeled") for c in CASES if c.config["workload"] == family
        }
        assert {"flat", "noisy"} <= timings


def test_default_plans_unchanged_by_the_variant_machinery():
    for workload in ("ddp", "fsdp"):
        plain = plan_of(workload=workload, ranks=2, steps=3)
        first = plain.rank_ops(0)[0]
        assert (first.func, first.phase) == ("AllReduce", "barrier")
    with pytest.raises(SimConfigError):
        plan_of(workload="ddp", variants=("no_such_variant",))


def test_ddp_rebuild_broadcasts_open_step_1_and_only_step_1():
    plan = plan_of(workload="ddp", ranks=4, steps=4, variants=("rebuild_buckets",))
    nparams = len(decoder_parameters(_model()))
    ops1 = step_ops(plan, 0, 1)
    assert [(o.func, o.datatype, o.phase) for o in ops1[:2]] == [
        ("Broadcast", "ncclInt32", "rebuild_buckets"),
        ("Broadcast", "ncclInt32", "rebuild_buckets"),
    ]
    assert ops1[0].count == nparams + 1
    # the first iteration reduces all gradients in one bucket, later ones in the rebuilt ones
    assert [o.func for o in step_ops(plan, 0, 0)] == ["AllReduce"]
    assert len([o for o in ops1 if o.func == "AllReduce"]) > 1
    rebuilds = [o for o in plan.rank_ops(0) if o.phase == "rebuild_buckets"]
    assert {o.step for o in rebuilds} == {1}
    setup = [o for o in plan.rank_ops(0) if o.step is None]
    assert [(o.func, o.datatype) for o in setup[:2]] == [
        ("AllGather", "ncclInt64"),
        ("Broadcast", "ncclInt64"),
    ]


def _model():
    return ModelShape(125_000_000, 12)


def test_ddp_buffers_only_on_the_first_micro_batch_after_a_synced_forward():
    plan = plan_of(
        workload="ddp",
        ranks=2,
        steps=3,
        grad_accum=3,
        variants=("rebuild_buckets", "broadcast_buffers"),
    )
    for step in range(plan.steps[-1][0] + 1):
        ops = step_ops(plan, 0, step)
        buffers = [o for o in ops if o.phase == "sync_buffers"]
        assert [o.datatype for o in buffers] == ["ncclFloat32", "ncclInt64"]
        assert {o.micro_batch for o in buffers} == {0}
    ops1 = step_ops(plan, 0, 1)
    assert [o.phase for o in ops1[:4]] == ["rebuild_buckets"] * 2 + ["sync_buffers"] * 2


def test_ddp_find_unused_parameters_never_rebuilds_and_reduces_the_used_map():
    plan = plan_of(workload="ddp", ranks=2, steps=3, variants=("find_unused_parameters",))
    ops = plan.rank_ops(0)
    assert not [o for o in ops if o.phase == "rebuild_buckets"]
    for step, _ in plan.steps:
        last = step_ops(plan, 0, step)[-1]
        assert (last.func, last.datatype, last.phase) == (
            "AllReduce",
            "ncclInt32",
            "local_used_map",
        )


def test_ddp_eval_every_5_inside_the_step_it_follows():
    plan = plan_of(
        workload="ddp",
        ranks=2,
        steps=14,
        variants=("rebuild_buckets", "broadcast_buffers", "eval_every_5"),
    )
    for step, _ in plan.steps:
        ops = step_ops(plan, 0, step)
        evals = [o for o in ops if o.phase.startswith("eval")]
        if (step + 1) % 5 == 0:
            assert [o.phase for o in evals] == ["eval_loss"] * 4 + ["eval_barrier"]
            assert ops[-1].phase == "eval_barrier"
            # only the first eval forward broadcasts buffers
            first_eval = ops.index(evals[0])
            assert [o.phase for o in ops[first_eval - 2 : first_eval]] == ["sync_buffers"] * 2
        else:
            assert not evals
        if step % 5 == 0 and step > 0:  # the first forward after an evaluation: no buffers
            assert step_ops(plan, 0, step)[0].phase != "sync_buffers"


def test_fsdp2_root_all_gather_opens_every_step():
    plan = plan_of(
        workload="fsdp", ranks=4, steps=3, layers=4, variants=("fully_shard", "clip_grad_norm")
    )
    firsts = {step_ops(plan, 0, s)[0].count for s, _ in plan.steps}
    assert len(firsts) == 1
    for step, _ in plan.steps:
        ops = step_ops(plan, 0, step)
        assert (ops[0].func, ops[0].datatype) == ("AllGather", "ncclBfloat16")
        assert ops[0].count > ops[1].count  # the root (embedding + head), then block 0
        assert (ops[-1].func, ops[-1].phase, ops[-1].count) == ("AllReduce", "clip_grad_norm", 1)
        # the root's reduce-scatter is the last of the backward
        rs = [o for o in ops if o.func == "ReduceScatter"]
        assert rs[-1].count == ops[0].count


def test_fsdp2_no_reshard_gathers_nothing_in_backward():
    plan = plan_of(workload="fsdp", ranks=4, steps=2, layers=4, variants=("no_reshard",))
    for step, _ in plan.steps:
        gathers = [o for o in step_ops(plan, 0, step) if o.func == "AllGather"]
        assert len(gathers) == 5 and {o.phase for o in gathers} == {"forward"}


def test_fsdp2_accumulation_regathers_the_root_and_reduces_once():
    plan = plan_of(
        workload="fsdp", ranks=4, steps=2, layers=3, grad_accum=2, variants=("fully_shard",)
    )
    ops = step_ops(plan, 0, 1)
    root = ops[0].count
    assert [o.micro_batch for o in ops if o.func == "AllGather" and o.count == root] == [0, 1]
    assert {o.micro_batch for o in ops if o.func == "ReduceScatter"} == {1}


def test_fsdp2_hsdp_and_torchtitan_logging():
    plan = plan_of(
        workload="fsdp", ranks=8, steps=10, layers=3, variants=("hsdp", "torchtitan", "log_loss")
    )
    comms = {c.index: c for c in plan.comms}
    ops = step_ops(plan, 0, 1)
    for i, op in enumerate(ops):
        if op.func == "ReduceScatter":
            nxt = ops[i + 1]
            assert nxt.func == "AllReduce" and comms[nxt.comm].name.startswith("mesh_dp_replicate")
            assert comms[op.comm].nranks == 4 and comms[nxt.comm].nranks == 2
    # the last block is not resharded after forward: backward gathers one block fewer
    assert len([o for o in ops if o.func == "AllGather" and o.phase == "backward"]) == 2
    logged = {s for s, _ in plan.steps if step_ops(plan, 0, s)[-1].phase == "log_loss"}
    assert logged == {0, 4, 9}  # torchtitan steps 1, 5, 10
    for step in logged:
        assert [o.phase for o in step_ops(plan, 0, step)[-3:]] == [
            "clip_grad_norm",
            "log_loss",
            "log_loss",
        ]
