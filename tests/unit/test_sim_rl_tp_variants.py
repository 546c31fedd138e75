"""The RL and TP-only variants issue what the frameworks' sources issue (plans only)."""

from __future__ import annotations

import pytest

from comminsight.sim.config import SimConfig, SimConfigError
from comminsight.sim.plan import Issue, StepBegin, StepEnd
from comminsight.sim.workloads import build_plan
from comminsight.sim.workloads.model import ModelShape
from comminsight.sim.workloads.rl_openrlhf import STATUS_METRICS
from comminsight.sim.workloads.transformer_params import decoder_parameters


def plan(**kw):
    return build_plan(SimConfig(plugin="x", home="/tmp/x", **kw))


def params(cfg_kw) -> int:
    cfg = SimConfig(plugin="x", home="/tmp/x", **cfg_kw)
    return len(decoder_parameters(ModelShape(cfg.model_params, cfg.layers)))


def step_of_ops(p, rank):
    """(op, Step it is issued in or None) for a rank's program."""
    out, current = [], None
    for a in p.programs[rank]:
        if isinstance(a, StepBegin):
            current = a.step
        elif isinstance(a, StepEnd):
            current = None
        elif isinstance(a, Issue):
            out.append((a.op, current))
    return out


def test_unknown_variant_refused():
    with pytest.raises(SimConfigError):
        SimConfig(plugin="x", home="/tmp/x", workload="rl", variants=("bogus",)).validate()
    with pytest.raises(SimConfigError):
        SimConfig(plugin="x", home="/tmp/x", workload="tp-dp", variants=("openrlhf",)).validate()


# ---- OpenRLHF ----

OPENRLHF = dict(workload="rl", ranks=8, rollout_tp=2, steps=3, variants=("openrlhf",))


def test_openrlhf_model_update_group_is_rank0_and_every_engine_unnamed():
    p = plan(**OPENRLHF)
    update = [c for c in p.comms if c.members == (0, 4, 5, 6, 7)]
    assert len(update) == 1 and update[0].name is None  # stateless PyNccl: no commName
    engines = [c.members for c in p.comms if c.role == "tp"]
    assert engines == [(4, 5), (6, 7)]
    assert next(c for c in p.comms if c.name == "default_pg:0").members == (0, 1, 2, 3)


def test_openrlhf_one_broadcast_per_parameter_from_actor_rank0_after_its_all_gather():
    p = plan(**OPENRLHF)
    n = params(OPENRLHF)
    ops = [(op, s) for op, s in step_of_ops(p, 0) if op.phase == "weight_sync"]
    # 4 Steps, 2 per iteration: iterations at Steps 0 and 2, both complete: two syncs (the
    # first iteration has none, the last one's follows training outside any Step)
    bcasts = [(op, s) for op, s in ops if op.func == "Broadcast"]
    assert len(bcasts) == 2 * n
    assert all(op.root == 0 and op.datatype == "ncclBfloat16" for op, _ in bcasts)
    assert {s for _, s in bcasts[:n]} == {2} and {s for _, s in bcasts[n:]} == {None}
    assert [op.func for op, _ in ops[:4]] == ["AllGather", "Broadcast", "AllGather", "Broadcast"]
    # the other actor ranks only all-gather; no Step begins with anything but the sync
    assert {op.func for op, _ in step_of_ops(p, 1) if op.phase == "weight_sync"} == {"AllGather"}
    first_of_step2 = next(op for op, s in step_of_ops(p, 0) if s == 2)
    assert first_of_step2.phase == "weight_sync"


def test_openrlhf_status_all_reduced_key_by_key_every_micro_batch():
    p = plan(**{**OPENRLHF, "grad_accum": 2})
    status = [op for op, s in step_of_ops(p, 1) if op.phase == "status" and s == 1]
    assert len(status) == 2 * len(STATUS_METRICS)
    assert all(op.func == "AllReduce" and op.count == 1 for op in status)
    # the Step ends on the last status reduce of the micro-batch that stepped the optimizer
    last = [op for op, s in step_of_ops(p, 1) if s == 1][-1]
    assert last.phase == "status"


def test_openrlhf_engines_have_no_steps_and_receive_every_broadcast():
    p = plan(**OPENRLHF)
    for rank in (4, 7):
        assert not any(isinstance(a, StepBegin) for a in p.programs[rank])
        got = [op for op in p.rank_ops(rank) if op.func == "Broadcast"]
        assert len(got) == 2 * params(OPENRLHF)


# ---- veRL ----


def test_verl_sync_after_update_begins_the_next_iteration_and_the_first_is_setup():
    kw = dict(workload="rl", ranks=4, steps=3, variants=("verl_sync_after_update",))
    p = plan(**kw)
    ops = step_of_ops(p, 0)
    syncs = [(op, s) for op, s in ops if op.phase == "weight_sync"]
    n = params(kw)
    assert [s for _, s in syncs[::n]] == [None, 2, None]
    # the sync follows the previous Step's clip all-reduce at once
    i = next(k for k, (op, s) in enumerate(ops) if s == 2)
    assert ops[i - 1][0].phase == "clip_grad_norm" and ops[i][0].phase == "weight_sync"
    default = plan(workload="rl", ranks=4, steps=3)
    assert [s for op, s in step_of_ops(default, 0) if op.phase == "weight_sync"][::n] == [0, 2]


def test_verl_ppo_epochs_two_updates_per_mini_batch():
    p = plan(workload="rl", ranks=4, steps=7, variants=("ppo_epochs_2",))
    ops = step_of_ops(p, 0)
    assert sorted({s for op, s in ops if op.phase == "weight_sync"}) == [0, 4]
    assert sum(op.phase == "clip_grad_norm" for op, _ in ops) == 8


# ---- TRL GRPO ----

TRL = dict(workload="rl", ranks=4, steps=3, grad_accum=3, variants=("trl_grpo",))


def test_trl_grpo_colocated_ddp_sync_has_no_nccl_and_steps_open_with_gathers():
    p = plan(**TRL)
    ops = step_of_ops(p, 2)
    in_steps = [(op, s) for op, s in ops if s is not None]
    assert not any(op.func == "Broadcast" for op, _ in in_steps)
    for step in range(4):
        mine = [op for op, s in in_steps if s == step]
        assert mine[0].func == "AllGather" and mine[0].datatype == "ncclFloat32"  # rewards
        assert mine[-1].phase == "log"
        grads = [op for op in mine if op.phase == "backward"]
        assert grads and {op.micro_batch for op in grads} == {2}  # no_sync before the last


# ---- tensor parallel alone ----

TP = dict(workload="tp-dp", ranks=2, tp=2, steps=3, grad_accum=2)


def test_tp_only_everything_on_the_default_group():
    p = plan(**TP)
    assert [c.name for c in p.comms] == ["default_pg:0"]


def test_tp_only_clip_is_one_scalar_all_reduce_per_step_and_no_clip_none():
    clip = [op for op in plan(**TP).rank_ops(0) if op.phase == "clip_grad_norm"]
    assert len(clip) == 4 and all(op.count == 1 and op.func == "AllReduce" for op in clip)
    assert not any(
        op.phase == "clip_grad_norm" for op in plan(**TP, variants=("no_clip",)).rank_ops(0)
    )


@pytest.mark.parametrize("sp", [False, True])
def test_tp_only_no_clip_micro_batches_and_steps_issue_the_same_ops(sp):
    p = plan(**TP, sequence_parallel=sp, variants=("no_clip",))
    shape = {}
    for op in p.rank_ops(1):
        if op.step is None:
            continue
        shape.setdefault((op.step, op.micro_batch or 0), []).append(
            (op.func, op.count, op.datatype)
        )
    # every micro-batch of every Step: one op sequence (the micro-batch field aside)
    sequences = {tuple(v) for v in shape.values()}
    assert len(sequences) == 1
    funcs = {f for f, _, _ in next(iter(sequences))}
    assert funcs == ({"AllGather", "ReduceScatter", "AllReduce"} if sp else {"AllReduce"})
