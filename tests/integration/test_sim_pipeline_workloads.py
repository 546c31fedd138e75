"""The pipeline-parallel workloads (`pp`, `megatron`): their schedules, plans and, through the
real plugin, their ground truth.

Schedules are checked against the textbook orders written out here, not against the module
that produces them; plans are checked to be deadlock-free on a GPU that runs one launch (an
op, or an NCCL group) at a time, as the simulator's is; runs check the ground truth is
consistent job-wide (every op completes, Steps are contiguous stretches of each rank's ops,
matched ops agree, every rank has the same Steps) and that the schedule reached NCCL as
planned."""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict

import pytest
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.cli_args import add_sim_arguments, config_from_args
from comminsight.sim.config import SimConfigError
from comminsight.sim.plan import GroupEnd, GroupStart, Issue
from comminsight.sim.truth import read_ground_truth
from comminsight.sim.workloads import build_plan
from comminsight.sim.workloads.megatron_lm import Parallelism, group_sequence
from comminsight.sim.workloads.pipeline_schedule import (
    Backward,
    Exchange,
    Forward,
    ScheduleShape,
    schedule_table,
    stage_schedules,
)

ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"),)


def plan_for(workload: str, **settings):
    base = {"plugin": "p.so", "home": "/h", "workload": workload, "model_params": 100_000_000}
    return build_plan(SimConfig(**{**base, **settings}))


def textbook_1f1b(pp: int, micro_batches: int, stage: int) -> list[str]:
    """PipeDream-flush / Megatron 1F1B: pp - stage - 1 warm-up forwards, then one forward and
    one backward at a time, then the remaining backwards."""
    warmup = min(pp - stage - 1, micro_batches)
    order = [f"F{m}" for m in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [f"F{warmup + i}", f"B{i}"]
    return order + [f"B{micro_batches - warmup + i}" for i in range(warmup)]


def compute_order(work) -> list[str]:
    return [
        f"{'F' if isinstance(w, Forward) else 'B'}{w.micro}"
        for w in work
        if isinstance(w, Forward | Backward)
    ]


# ---- schedules ----


@pytest.mark.parametrize(("pp", "micro_batches"), [(4, 8), (4, 4), (2, 4), (4, 6), (3, 2), (1, 3)])
def test_1f1b_orders_forwards_and_backwards_per_stage(pp, micro_batches):
    schedules = stage_schedules(ScheduleShape(pp, micro_batches))
    for stage, work in enumerate(schedules):
        assert compute_order(work) == textbook_1f1b(pp, micro_batches, stage), stage


def test_1f1b_pairs_the_steady_state_send_with_the_next_receive_in_one_exchange():
    """send_forward_recv_backward and send_backward_recv_forward: two P2P ops, one batch."""
    stage1 = stage_schedules(ScheduleShape(4, 8))[1]
    kinds = [tuple(t.kind for t in w.transfers) for w in stage1 if isinstance(w, Exchange)]
    assert kinds[:5] == [
        ("recv_prev",),
        ("send_next",),
        ("recv_prev",),
        ("send_next",),
        ("recv_prev",),
    ]
    assert ("send_next", "recv_next") in kinds and ("send_prev", "recv_prev") in kinds
    assert kinds[-1] == ("send_prev",)


@pytest.mark.parametrize(
    ("pp", "micro_batches", "chunks", "group"), [(4, 8, 2, 0), (3, 6, 3, 0), (4, 10, 2, 5)]
)
def test_interleaved_schedule_runs_every_chunk_and_micro_batch_once(
    pp, micro_batches, chunks, group
):
    shape = ScheduleShape(pp, micro_batches, chunks, group)
    n = group or pp
    table = schedule_table(micro_batches, chunks, n)
    total = micro_batches * chunks
    for stage, work in enumerate(stage_schedules(shape)):
        forwards = [(w.chunk, w.micro) for w in work if isinstance(w, Forward)]
        backwards = [(w.chunk, w.micro) for w in work if isinstance(w, Backward)]
        assert forwards == [(c, m) for m, c in table]
        assert backwards == [(chunks - 1 - c, m) for m, c in table]
        first_backward = next(i for i, w in enumerate(work) if isinstance(w, Backward))
        warmup = sum(1 for w in work[:first_backward] if isinstance(w, Forward)) - 1
        assert warmup == min((pp - stage - 1) * 2 + (chunks - 1) * n, total), stage
        done = set()
        for w in work:
            if isinstance(w, Forward):
                done.add((w.chunk, w.micro))
            elif isinstance(w, Backward):
                assert (w.chunk, w.micro) in done


def test_interleaved_table_runs_groups_of_micro_batches_through_each_chunk():
    # the example in Megatron's schedules.py: PP2 N3M5 with VP2
    assert schedule_table(5, 2, 3) == [
        (0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"pp": 2, "virtual_pp": 2, "grad_accum": 4}, "needs pp > 2"),
        ({"pp": 4, "virtual_pp": 2, "grad_accum": 6, "layers": 8}, "M % vp-group"),
        ({"pp": 4, "virtual_pp": 2, "grad_accum": 2, "layers": 8}, "in \\[pp=4, M=2\\]"),
        ({"pp": 4, "virtual_pp": 3, "grad_accum": 8, "layers": 8}, "must divide layers"),
        ({"pp": 3, "tp": 2, "ranks": 8}, "tp\\*pp must divide ranks"),
        ({"precision": "fp8"}, "precision must be one of"),
    ],
)
def test_shapes_megatron_refuses_are_refused(settings, message):
    with pytest.raises(SimConfigError, match=message):
        plan_for("megatron", **{"ranks": 8, "tp": 1, "layers": 12, **settings})


# ---- plans ----


def launches(plan, rank: int) -> list[list[int]]:
    """The rank's kernel launches in order: a lone op, or every op of one NCCL group."""
    out, group = [], None
    for action in plan.programs[rank]:
        if isinstance(action, GroupStart):
            group = []
        elif isinstance(action, GroupEnd):
            out.append(group)
            group = None
        elif isinstance(action, Issue):
            if group is None:
                out.append([action.op.instance])
            else:
                group.append(action.op.instance)
    return out


def assert_deadlock_free(plan) -> None:
    """Play every rank's launches on a GPU that runs one launch at a time: an op finishes once
    every participant's GPU has reached the launch holding it, a launch once all its ops have."""
    queues = [launches(plan, r) for r in range(plan.world)]
    position = [{i: n for n, launch in enumerate(q) for i in launch} for q in queues]
    head = [0] * plan.world
    progressed = True
    while progressed:
        progressed = False
        for rank, queue in enumerate(queues):
            while head[rank] < len(queue) and all(
                position[p][i] <= head[p]
                for i in queue[head[rank]]
                for p in plan.instances[i].participants
            ):
                head[rank] += 1
                progressed = True
    stuck = {r: queues[r][head[r]] for r in range(plan.world) if head[r] < len(queues[r])}
    assert not stuck, f"deadlock: rank -> launch it waits in: {stuck}"


SHAPES = [
    ("pp", {"ranks": 4, "tp": 1, "pp": 4, "grad_accum": 8}),
    ("pp", {"ranks": 8, "tp": 2, "pp": 2, "grad_accum": 4}),
    ("pp", {"ranks": 8, "tp": 1, "pp": 4, "grad_accum": 8, "virtual_pp": 2, "layers": 8}),
    ("pp", {"ranks": 6, "tp": 2, "pp": 3, "grad_accum": 5, "virtual_pp": 2, "vp_group": 5}),
    ("megatron", {"ranks": 8, "tp": 2, "pp": 2, "grad_accum": 4, "sequence_parallel": True}),
    ("megatron", {"ranks": 8, "tp": 1, "pp": 4, "grad_accum": 6}),
    ("megatron", {"ranks": 8, "tp": 1, "pp": 4, "grad_accum": 8, "virtual_pp": 2, "layers": 8}),
    ("megatron", {"ranks": 4, "tp": 2, "pp": 1, "grad_accum": 2}),
]


@pytest.mark.parametrize(("workload", "settings"), SHAPES, ids=lambda v: str(v))
def test_plans_cannot_deadlock_and_pair_every_p2p_op(workload, settings):
    plan = plan_for(workload, steps=2, **settings)
    assert_deadlock_free(plan)
    ends = defaultdict(list)
    for rank in range(plan.world):
        for op in plan.rank_ops(rank):
            if op.func in ("Send", "Recv"):
                assert op.group is not None, "batch_isend_irecv: P2P only inside NCCL groups"
                ends[op.instance].append(op)
    for instance, ops in ends.items():
        assert sorted(o.func for o in ops) == ["Recv", "Send"], instance
        send, recv = sorted(ops, key=lambda o: o.func, reverse=True)
        assert (send.phase, send.micro_batch) == (recv.phase, recv.micro_batch)


def test_megatron_names_groups_in_initialize_model_parallel_order():
    plan = plan_for("megatron", ranks=8, tp=2, pp=2, grad_accum=4)
    par = Parallelism(tp=2, pp=2, dp=2, chunks=1)
    order = {members_desc: n + 1 for n, members_desc in enumerate(group_sequence(par))}
    assert par.coords(6) == (1, 1, 0) and par.rank_of(1, 1, 0) == 6  # tp-cp-ep-dp-pp
    names = {c.name: (c.role, c.members) for c in plan.comms}
    assert names["default_pg:0"] == ("world", tuple(range(8)))
    for name, (_, members) in names.items():
        desc, number = name.rsplit(":", 1)
        if desc != "default_pg":
            assert order[(desc, members)] == int(number), name
    roles = Counter(role for role, _ in names.values())
    assert roles == {"world": 1, "dp": 4, "mp": 2, "tp": 4, "pp": 4, "embd": 4, "dist-opt": 1}
    assert names["TENSOR_MODEL_PARALLEL_GROUP:27"] == ("tp", (0, 1))
    assert names["PIPELINE_MODEL_PARALLEL_GROUP:31"] == ("pp", (0, 4))
    assert names["EMBEDDING_GROUP:32"] == ("embd", (0, 4))
    assert ("dist-opt", tuple(range(8))) in names.values()


def test_pp_uses_no_distributed_optimizer_group():
    plan = plan_for("pp", ranks=8, tp=2, pp=2, grad_accum=4)
    assert "dist-opt" not in {c.role for c in plan.comms}
    funcs = {o.func for o in plan.rank_ops(0) if o.phase == "grad_reduce"}
    assert funcs == {"AllReduce"}


def test_setup_ops_precede_every_step_and_steps_are_contiguous():
    plan = plan_for("megatron", ranks=8, tp=2, pp=2, grad_accum=4, steps=2, warmup_steps=1)
    for rank in range(plan.world):
        steps = [op.step for op in plan.rank_ops(rank)]
        setup = steps.index(0)
        assert set(steps[:setup]) == {None} and None not in steps[setup:]
        assert steps[setup:] == sorted(steps[setup:])
        first_stage = rank in (0, 1, 2, 3)
        setup_funcs = [op.func for op in plan.rank_ops(rank)[:setup]]
        # barrier, start time, tied embedding, data flags, the interval timer's barrier
        assert setup_funcs == ["AllReduce", "AllReduce", "AllReduce", "Broadcast", "AllReduce"]
        assert first_stage or plan.comms[plan.rank_ops(rank)[2].comm].role == "embd"


def test_first_step_launches_the_first_stages_buckets_at_finalize_later_ones_in_backward():
    # 1.3B parameters: each layer's 54M per TP rank fills a 40M bucket of its own
    plan = plan_for(
        "megatron", ranks=8, tp=2, pp=2, grad_accum=4, steps=2, model_params=1_300_000_000
    )
    for step, overlapped in ((0, False), (1, True)):
        ops = [op for op in plan.rank_ops(0) if op.step == step]
        first_reduce = next(i for i, o in enumerate(ops) if o.phase == "grad_reduce")
        last_backward = max(i for i, o in enumerate(ops) if o.phase == "backward")
        assert (first_reduce < last_backward) == overlapped, step
    # a later stage calls grad_sync_func after its backwards, in every step
    last_stage = [op for op in plan.rank_ops(4) if op.step == 0]
    first_reduce = next(i for i, o in enumerate(last_stage) if o.phase == "grad_reduce")
    assert all(o.phase != "backward" for o in last_stage[first_reduce:])


def test_megatron_per_step_ops_per_stage():
    """tp=2, pp=2, dp=2, M=4, 12 layers, no sequence parallelism: what one steady step issues."""
    plan = plan_for("megatron", ranks=8, tp=2, pp=2, grad_accum=4, steps=2)

    def per_step(rank):
        return Counter(
            (plan.comms[o.comm].role, o.func) for o in plan.rank_ops(rank) if o.step == 1
        )

    first, last = per_step(0), per_step(4)
    # 6 layers x 2 all-reduces forward and backward per micro-batch, + embedding / loss
    assert first[("tp", "AllReduce")] == 4 * (6 * 2 + 1 + 6 * 2)
    assert last[("tp", "AllReduce")] == 4 * (6 * 2 + 3 + 6 * 2 + 1)
    assert first[("tp", "Broadcast")] == last[("tp", "Broadcast")] == 4 * 2
    assert first[("pp", "Send")] == first[("pp", "Recv")] == 4
    assert first[("dp", "ReduceScatter")] == first[("dp", "AllGather")] == 2  # layers, embedding
    assert first[("embd", "AllReduce")] == last[("embd", "AllReduce")] == 1
    assert first[("dist-opt", "AllReduce")] == 2  # found-inf, grad norm
    assert first[("mp", "AllReduce")] == 2
    assert last[("dp", "AllReduce")] == 1 and first[("dp", "AllReduce")] == 0  # the loss


def test_sequence_parallel_shards_p2p_tensors_and_reduces_layernorm_grads():
    plain = plan_for("megatron", ranks=4, tp=2, pp=2, grad_accum=2)
    sp = plan_for("megatron", ranks=4, tp=2, pp=2, grad_accum=2, sequence_parallel=True)
    p2p = [o.count for o in plain.rank_ops(0) if o.func == "Send"]
    p2p_sp = [o.count for o in sp.rank_ops(0) if o.func == "Send"]
    assert p2p_sp[0] * 2 == p2p[0]
    finalize = [o for o in sp.rank_ops(0) if o.phase == "finalize" and o.step == 1]
    assert [sp.comms[o.comm].role for o in finalize] == ["tp", "embd"]
    assert not [
        o for o in plain.rank_ops(0) if o.func == "ReduceScatter" and o.phase != "grad_reduce"
    ]


def test_cli_takes_the_pipeline_knobs():
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    args = parser.parse_args(
        "--workload megatron --home /h --ranks 8 --tp 1 --pp 4 --virtual-pp 2 --vp-group 4 "
        "--layers 8 --grad-accum 8 --sequence-parallel --precision bf16".split()
    )
    config = config_from_args(args)
    assert (config.virtual_pp, config.vp_group, config.precision) == (2, 4, "bf16")
    assert config.sequence_parallel
    with pytest.raises(SimConfigError, match="needs pp > 2"):
        config_from_args(
            parser.parse_args("--workload pp --home /h --ranks 2 --tp 1 --virtual-pp 2".split())
        )


# ---- runs through the real plugin ----


def check_ground_truth(sim) -> list:
    assert not sim.errors and sim.abort_reason is None, sim.errors
    truths = read_ground_truth(sim.run_dir)
    config = sim.config
    by_instance = defaultdict(list)
    for truth in truths:
        end = truth.end
        assert end and end["status"] == "done"
        ops = truth.ops
        assert end["ops_issued"] == end["ops_completed"] == len(ops)
        assert all(op["completed"] for op in ops)
        steps = truth.of("step")
        assert [s["step"] for s in steps] == list(range(config.total_steps))
        for s in steps:
            inside = {op["op_index"] for op in ops if op["step"] == s["step"]}
            assert s["completed"] and inside == set(range(s["first_op"], s["last_op"] + 1))
        first_step_op = steps[0]["first_op"]
        assert all(op["step"] is None for op in ops if op["op_index"] < first_step_op)
        assert all(op["step"] is not None for op in ops if op["op_index"] >= first_step_op)
        for op in ops:
            by_instance[op["instance"]].append(op)
    for instance, ops in by_instance.items():
        agreed = {(o["comm_id"], o["api_count"], o["api_datatype"], o["step"]) for o in ops}
        assert len(agreed) == 1, (instance, agreed)
        if ops[0]["func"] in ("Send", "Recv"):
            assert sorted(o["func"] for o in ops) == ["Recv", "Send"]
            assert len({(o["phase"], o["micro_batch"]) for o in ops}) == 1
        else:
            assert len({(o["func"], o["seq"]) for o in ops}) == 1
            assert len(ops) == sim.plan.comms[sim.plan.instances[instance].comm].nranks
    return truths


def run(tmp_path, **settings):
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        time_scale=0.02,
        env=ENV,
        steps=2,
        warmup_steps=1,
        **settings,
    )
    return run_simulation(config)


RUNS = [
    ("pp", {"ranks": 4, "tp": 1, "pp": 4, "grad_accum": 8, "seed": 1}),
    ("pp", {"ranks": 8, "tp": 2, "pp": 2, "grad_accum": 4, "comm_names": False}),
    (
        "pp",
        {"ranks": 8, "tp": 1, "pp": 4, "grad_accum": 8, "virtual_pp": 2, "layers": 8, "nodes": 2},
    ),
    (
        "megatron",
        {"ranks": 8, "tp": 2, "pp": 2, "grad_accum": 4, "sequence_parallel": True, "nodes": 2},
    ),
    (
        "megatron",
        {
            "ranks": 8,
            "tp": 1,
            "pp": 4,
            "grad_accum": 8,
            "virtual_pp": 2,
            "layers": 8,
            "comm_names": False,
            "precision": "bf16",
            "seed": 2,
        },
    ),
    ("megatron", {"ranks": 4, "tp": 1, "pp": 4, "grad_accum": 6, "seed": 3, "extra_ops_every": 1}),
    # interleaved with M = 5 micro-batches on 3 stages: one group of 5 per chunk
    (
        "pp",
        {
            "ranks": 6,
            "tp": 2,
            "pp": 3,
            "grad_accum": 5,
            "virtual_pp": 2,
            "vp_group": 5,
            "layers": 6,
        },
    ),
]


@pytest.mark.parametrize(("workload", "settings"), RUNS, ids=lambda v: str(v))
def test_runs_write_a_consistent_ground_truth(tmp_path, workload, settings):
    sim = run(tmp_path, workload=workload, **settings)
    truths = check_ground_truth(sim)
    plan = sim.plan
    for truth in truths:
        planned = [(o.func, o.count, o.step) for o in plan.rank_ops(truth.rank)]
        assert [(o["func"], o["api_count"], o["step"]) for o in truth.ops] == planned
        names = {c["name"] for c in truth.of("comm")}
        assert names == {plan.comms[o.comm].name for o in plan.rank_ops(truth.rank)}


def test_1f1b_run_reaches_nccl_in_the_textbook_order(tmp_path):
    """pp=4, M=8: the middle stages' sends say when each forward and backward ran."""
    sim = run(tmp_path, workload="pp", ranks=4, tp=1, pp=4, grad_accum=8)
    truths = check_ground_truth(sim)
    for stage in (1, 2):  # rank = stage with tp = dp = 1
        sends = [op for op in truths[stage].ops if op["func"] == "Send" and op["step"] == 1]
        order = [f"{'F' if o['phase'] == 'forward' else 'B'}{o['micro_batch']}" for o in sends]
        assert order == textbook_1f1b(4, 8, stage)
        groups = Counter(op["group"] for op in truths[stage].ops if op["func"] in ("Send", "Recv"))
        assert max(groups.values()) == 2  # send_forward_recv_backward in one NCCL group
    # PyTorch creates the pipeline communicator at the first batch_isend_irecv, inside step 0
    step0 = truths[1].of("step")[0]
    pipe = next(c for c in truths[1].of("comm") if c["role"] == "pp")
    assert step0["start_ns"] < pipe["init_ns"] < step0["end_ns"]
