"""The workload plans: what each training style issues, step by step (no processes started)."""

from __future__ import annotations

from collections import Counter

import pytest

from comminsight.sim.config import SimConfig, SimConfigError
from comminsight.sim.cost_model import tune
from comminsight.sim.plan import StepBegin, StepEnd
from comminsight.sim.workloads import build_plan
from comminsight.sim.workloads.ddp import BUCKET_BYTES, FIRST_BUCKET_BYTES
from comminsight.sim.workloads.model import parse_param_count
from comminsight.sim.workloads.tp_pp_dp import layout

MB = 1 << 20


def plan_for(workload: str, **settings):
    base = {"plugin": "p.so", "home": "/h", "workload": workload, "model_params": 100_000_000}
    return build_plan(SimConfig(**{**base, **settings}))


def step_ops(plan, rank: int, step: int):
    return [op for op in plan.rank_ops(rank) if op.step == step]


def test_ddp_all_reduces_gradient_buckets_once_per_step():
    plan = plan_for("ddp", ranks=4, grad_accum=3, steps=2, warmup_steps=1)
    ops = plan.rank_ops(0)
    assert [(o.func, o.phase) for o in ops[:2]] == [
        ("AllReduce", "barrier"),
        ("Broadcast", "sync_module_states"),
    ]
    assert ops[1].root == 0 and ops[1].count * 4 == 250 * MB
    buckets = [o.count * 4 for o in step_ops(plan, 0, 1)]
    assert buckets[0] == FIRST_BUCKET_BYTES and set(buckets[1:-1]) == {BUCKET_BYTES}
    assert sum(buckets) == 400_000_000
    assert {o.micro_batch for o in step_ops(plan, 0, 1)} == {2}, (
        "no_sync() on earlier micro-batches"
    )
    assert len(plan.comms) == 1 and plan.comms[0].members == (0, 1, 2, 3)


def test_ddp_broadcasts_parameters_in_250_mb_chunks():
    plan = plan_for("ddp", ranks=2)
    broadcasts = [o for o in plan.rank_ops(1) if o.func == "Broadcast"]
    assert [o.count * 4 for o in broadcasts] == [250 * MB, 400_000_000 - 250 * MB]


def test_fsdp_gathers_per_layer_twice_and_reduce_scatters_on_the_last_micro_batch():
    plan = plan_for("fsdp", ranks=4, layers=6, grad_accum=2, steps=1)
    ops = step_ops(plan, 2, 1)
    counts = Counter((o.func, o.phase, o.micro_batch) for o in ops)
    for micro in (0, 1):
        assert counts[("AllGather", "forward", micro)] == 6
        assert counts[("AllGather", "backward", micro)] == 6
    assert (
        counts[("ReduceScatter", "backward", 1)] == 6
        and counts[("ReduceScatter", "backward", 0)] == 0
    )
    gather = next(o for o in ops if o.func == "AllGather")
    assert gather.count == 100_000_000 // 6 // 4 and gather.datatype == "ncclBfloat16"


def test_tp_pp_dp_lays_out_ranks_and_pairs_every_send_with_a_recv():
    plan = plan_for("tp-pp-dp", ranks=16, tp=2, pp=4, layers=8, grad_accum=3, steps=1)
    assert layout(13, tp=2, pp=4) == (1, 2, 1)
    roles = Counter(c.role for c in plan.comms)
    assert roles == {"world": 1, "tp": 8, "pp": 4 * 3, "dp": 8}
    tp = plan.comm_by_role(13, "tp")
    assert tp.members == (12, 13)
    assert plan.comm_by_role(13, "dp").members == (5, 13)
    # PyTorch's lazy two-rank P2P communicators: one per neighbour, both named after the group
    pairs = [c for c in plan.comms if c.role == "pp" and 13 in c.members]
    assert [c.members for c in pairs] == [(11, 13), (13, 15)]
    assert pairs[0].name == pairs[1].name and pairs[0].comm_id != pairs[1].comm_id
    names = {c.name for c in plan.comms}
    assert len(names) == 1 + 8 + 4 + 8, "one name per torch.distributed group"
    sends, recvs = Counter(), Counter()
    for rank in range(16):
        for op in plan.rank_ops(rank):
            if op.func in ("Send", "Recv"):
                inst = plan.instances[op.instance]
                assert rank in inst.participants and len(inst.participants) == 2
                (sends if op.func == "Send" else recvs)[op.instance] += 1
    assert sends == recvs and set(sends.values()) == {1}
    # a middle stage receives and sends each micro-batch forward and backward
    middle = Counter(o.func for o in step_ops(plan, 3, 1) if o.func in ("Send", "Recv"))
    assert middle == {"Send": 6, "Recv": 6}
    tp_ops = [o for o in step_ops(plan, 3, 1) if o.comm == plan.comm_by_role(3, "tp").index]
    assert len(tp_ops) == 3 * 2 * 2 * 2  # micro-batches x (fwd, bwd) x layers per stage x 2


def test_every_workload_brackets_its_steps():
    for workload in ("ddp", "fsdp", "tp-pp-dp"):
        plan = plan_for(workload, ranks=8, steps=2, warmup_steps=2)
        for program in plan.programs:
            begins = [a.step for a in program if isinstance(a, StepBegin)]
            ends = [a.step for a in program if isinstance(a, StepEnd)]
            assert begins == ends == [0, 1, 2, 3]
        assert [w for _, w in plan.steps] == [True, True, False, False]


def test_tuning_follows_observed_nccl_choices():
    one_mib_all_reduce = tune("AllReduce", 1 << 20, nnodes=1)
    assert one_mib_all_reduce.algo == "RING" and one_mib_all_reduce.proto in ("LL128", "SIMPLE")
    big = tune("AllReduce", 64 << 20, nnodes=1)
    assert (big.algo, big.proto, big.n_channels, big.n_warps) == ("RING", "SIMPLE", 24, 17)
    assert tune("AllReduce", 4, nnodes=1).proto == "LL"
    assert tune("AllReduce", 1 << 20, nnodes=2).algo == "TREE"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"workload": "tp-pp-dp", "ranks": 6, "tp": 4, "pp": 1}, "tp\\*pp must divide ranks"),
        ({"workload": "ddp", "ranks": 3, "nodes": 2}, "nodes must divide ranks"),
        ({"workload": "zero-infinity"}, "workload must be one of"),
        ({"workload": "ddp", "abi": 3}, "abi must be 4, 5, 6 or 7"),
        ({"workload": "ddp", "abi": 6, "user_tags": True}, "user_tags needs abi 7"),
    ],
)
def test_impossible_shapes_are_refused(settings, message):
    with pytest.raises(SimConfigError, match=message):
        plan_for(**settings)


def test_parameter_counts_parse():
    assert parse_param_count("125M") == 125_000_000
    assert parse_param_count("1.3b") == 1_300_000_000
    assert parse_param_count("350000000") == 350_000_000
    with pytest.raises(ValueError):
        parse_param_count("lots")
