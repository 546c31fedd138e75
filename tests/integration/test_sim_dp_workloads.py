"""Data/tensor-parallel and RL workloads through the real plugin: DTensor TP x FSDP2/DDP
(tp-dp), DeepSpeed ZeRO 1/2/3 with fp16 loss scaling (zero), veRL-style colocated GRPO (rl)
and DDP's dynamic accumulation and skipped updates. Each run's ground truth must be sound
(every op completes, each rank's Steps are contiguous stretches of its ops after the start-up,
every rank has the same Steps) and show the structure the framework issues."""

from __future__ import annotations

from collections import Counter

import pytest
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.plan import Compute, StepBegin, StepEnd
from comminsight.sim.truth import RankTruth, read_ground_truth
from comminsight.sim.workloads import build_plan
from comminsight.sim.workloads.loss_scale import deepspeed_overflows, grad_scaler_overflows
from comminsight.sim.workloads.model import SEQ_LEN, ModelShape
from comminsight.sim.workloads.rl import PROMPTS_PER_RANK, response_lengths
from comminsight.sim.workloads.transformer_params import decoder_parameters

ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"),)
SMALL = {"model_params": 20_000_000, "layers": 4}
MODEL = ModelShape(SMALL["model_params"], SMALL["layers"])
PARAM_TENSORS = len(decoder_parameters(MODEL))  # 9 per Llama layer + embedding, norm, head
MODEL_NUMEL = sum(p.numel for p in decoder_parameters(MODEL))
LARGEST_PARAM = max(p.numel for p in decoder_parameters(MODEL))


def config_for(tmp_path, **settings) -> SimConfig:
    base = {"time_scale": 0.02, "env": ENV, **SMALL}
    return SimConfig(plugin=str(builds()["plain"].path), home=str(tmp_path), **base | settings)


def simulate(tmp_path, **settings) -> list[RankTruth]:
    config = config_for(tmp_path, **settings)
    sim = run_simulation(config)
    assert not sim.errors, sim.errors
    truths = read_ground_truth(sim.run_dir)
    assert_sound(truths, config)
    return truths


def assert_sound(truths: list[RankTruth], config: SimConfig) -> None:
    for truth in truths:
        assert truth.end is not None and truth.end["status"] == "done"
        ops = truth.ops
        assert [o["op_index"] for o in ops] == list(range(len(ops)))
        assert all(o["completed"] for o in ops), "every op completes"
        steps = truth.of("step")
        assert [s["step"] for s in steps] == list(range(config.total_steps))
        assert all(s["completed"] for s in steps)
        following = steps[0]["first_op"]
        for s in steps:
            assert s["first_op"] == following, "Steps tile the ops after the start-up"
            inside = [o["op_index"] for o in ops if o["step"] == s["step"]]
            assert inside == list(range(s["first_op"], s["last_op"] + 1))
            following = s["last_op"] + 1
        assert following == len(ops)
        assert all(o["step"] is None for o in ops[: steps[0]["first_op"]])
    assert len({len(t.of("step")) for t in truths}) == 1


def step_ops(truth: RankTruth, step: int) -> list[dict]:
    return [o for o in truth.ops if o["step"] == step]


def comm_names(truth: RankTruth) -> dict[str, str | None]:
    return {c["comm_id"]: c["name"] for c in truth.of("comm")}


def shape(ops: list[dict]) -> list[tuple]:
    return [(o["comm_id"], o["func"], o["api_count"], o["api_datatype"]) for o in ops]


# ---- tp-dp ----


@pytest.mark.parametrize(("comm_names_on", "seed"), [(True, 0), (False, 1)])
def test_tp_only_runs_same_sized_all_reduces_on_the_default_group(tmp_path, comm_names_on, seed):
    truths = simulate(
        tmp_path,
        workload="tp-dp",
        ranks=4,
        tp=4,
        grad_accum=2,
        steps=1,
        seed=seed,
        comm_names=comm_names_on,
    )
    act = MODEL.activation_elements
    for truth in truths:
        assert set(comm_names(truth).values()) == {"default_pg:0"}, "1-D world mesh"
        for step in range(2):
            ops = step_ops(truth, step)
            for micro in (0, 1):
                tp = [o for o in ops if o["micro_batch"] == micro and o["phase"] != "loss_parallel"]
                assert {(o["func"], o["api_count"]) for o in tp} == {("AllReduce", act)}
                # embedding + wo, w2 per layer forward; head + wq, wk, wv, w1, w3 backward
                assert len(tp) == (1 + 2 * MODEL.layers) + (1 + 5 * MODEL.layers)
                loss = [
                    o for o in ops if o["micro_batch"] == micro and o["phase"] == "loss_parallel"
                ]
                assert [(o["api_count"], o["api_datatype"]) for o in loss] == [
                    (SEQ_LEN, "ncclFloat32")
                ] * 3
            assert [(o["phase"], o["api_count"]) for o in ops[-1:]] == [("clip_grad_norm", 1)]


def test_tp_dp_fsdp2_names_mesh_groups_and_syncs_on_the_last_micro_batch(tmp_path):
    truths = simulate(
        tmp_path, workload="tp-dp", ranks=8, nodes=2, tp=2, grad_accum=2, steps=2, seed=3
    )
    truth = truths[5]  # dp index 2, tp index 1
    names = comm_names(truth)
    by_name = {n: c for c, n in names.items()}
    # DeviceMesh: the dp groups (mesh_dp:1..2), then the tp groups (mesh_tp:3..6)
    assert set(names.values()) == {"default_pg:0", "mesh_dp:2", "mesh_tp:5"}
    dp, tp = by_name["mesh_dp:2"], by_name["mesh_tp:5"]
    comms = {c["comm_id"]: c for c in truth.of("comm")}
    assert comms[dp]["nranks"] == 4 and comms[tp]["nranks"] == 2
    assert comms[dp]["nnodes"] == 2 and comms[tp]["nnodes"] == 1
    ops = step_ops(truth, 1)
    for micro, reduce_scatters in ((0, 0), (1, MODEL.layers + 1)):
        on_dp = Counter(o["func"] for o in ops if o["comm_id"] == dp and o["micro_batch"] == micro)
        assert on_dp["ReduceScatter"] == reduce_scatters, "set_requires_gradient_sync(False)"
        assert on_dp["AllGather"] > MODEL.layers, "FSDP2 gathers every micro-batch"
    clip = [o["comm_id"] for o in ops if o["phase"] == "clip_grad_norm"]
    assert clip == [dp, tp], "one scalar all-reduce per mesh dimension"


def test_fsdp2_alone_shards_over_the_default_group(tmp_path):
    truths = simulate(tmp_path, workload="tp-dp", ranks=4, nodes=2, tp=1, steps=1, seed=2)
    for truth in truths:
        assert set(comm_names(truth).values()) == {"default_pg:0"}
        ops = step_ops(truth, 1)
        funcs = Counter((o["func"], o["phase"]) for o in ops)
        # root + every block forward; every block but the last (kept) backward
        assert funcs[("AllGather", "forward")] == 1 + MODEL.layers
        assert funcs[("AllGather", "backward")] == MODEL.layers - 1
        assert funcs[("ReduceScatter", "backward")] == MODEL.layers + 1
        assert funcs[("AllReduce", "clip_grad_norm")] == 1
        assert {o["api_datatype"] for o in ops if o["func"] == "ReduceScatter"} == {"ncclFloat32"}


def test_tp_dp_sequence_parallel_with_ddp(tmp_path):
    truths = simulate(
        tmp_path,
        workload="tp-dp",
        ranks=4,
        tp=2,
        tp_dp_data_parallel="ddp",
        sequence_parallel=True,
        loss_parallel=False,
        grad_accum=2,
        steps=2,
        comm_names=False,
    )
    truth = truths[0]
    names = comm_names(truth)
    tp = next(c for c, n in names.items() if n == "mesh_tp:3")
    dp = next(c for c, n in names.items() if n == "mesh_dp:1")
    startup = [(o["func"], o["phase"]) for o in truth.ops if o["step"] is None]
    assert startup[0] == ("Broadcast", "seed")
    assert startup[1:3] == [("AllGather", "ddp_init"), ("Broadcast", "ddp_init")]
    ops = step_ops(truth, 2)
    on_tp = Counter(o["func"] for o in ops if o["comm_id"] == tp and o["phase"] != "clip_grad_norm")
    assert set(on_tp) == {"AllGather", "ReduceScatter"}, "SequenceParallel: no TP all-reduce"
    dp_micro = {o["micro_batch"] for o in ops if o["comm_id"] == dp and o["phase"] == "backward"}
    assert dp_micro == {1}, "DDP no_sync() before the last micro-batch"
    assert [o["comm_id"] for o in ops if o["phase"] == "clip_grad_norm"] == [tp]


# ---- zero ----


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_skips_the_update_on_overflow_steps(tmp_path, stage):
    steps, seed = 7, 4
    truths = simulate(
        tmp_path,
        workload="zero",
        zero_stage=stage,
        ranks=4,
        nodes=2,
        steps=steps,
        seed=seed,
        loss_scale_window=3,
        reduce_bucket_size=5_000_000,
    )
    overflows = deepspeed_overflows(seed, steps + 1, 3)
    assert overflows[0] and not all(overflows), "early steps overflow while the scale settles"
    for truth in truths:
        startup = [o for o in truth.ops if o["step"] is None]
        assert [o["func"] for o in startup] == ["Broadcast"] * PARAM_TENSORS
        assert {o["root"] for o in startup} == {0}
        for step, overflow in enumerate(overflows):
            ops = step_ops(truth, step)
            phases = Counter(o["phase"] for o in ops)
            assert phases["overflow_check"] == 1
            assert phases["grad_norm"] == phases["param_allgather"] == (0 if overflow else 2)
            assert ("AllGather" in {o["func"] for o in ops}) == (not overflow)
            flag = next(o for o in ops if o["phase"] == "overflow_check")
            assert (flag["func"], flag["api_count"]) == ("AllReduce", 1)


def test_zero_stage_2_reduces_every_micro_batch_stage_1_only_the_last(tmp_path):
    for stage in (1, 2):
        truth = simulate(
            tmp_path / str(stage),
            workload="zero",
            zero_stage=stage,
            ranks=2,
            steps=1,
            grad_accum=3,
            reduce_bucket_size=5_000_000,
            comm_names=stage == 2,
        )[1]
        reductions = [o for o in step_ops(truth, 1) if o["phase"] == "backward"]
        assert {o["func"] for o in reductions} == {"AllReduce"}
        micro_batches = {2} if stage == 1 else {0, 1, 2}
        assert {o["micro_batch"] for o in reductions} == micro_batches
        for micro in micro_batches:  # every gradient once, in whole-parameter buckets
            counts = [o["api_count"] for o in reductions if o["micro_batch"] == micro]
            assert sum(counts) == MODEL_NUMEL
            assert len(counts) > 2 and max(counts) <= LARGEST_PARAM, "buckets or pieces"


def test_zero_stage_3_gathers_per_module_and_reduce_scatters(tmp_path):
    truths = simulate(
        tmp_path,
        workload="zero",
        zero_stage=3,
        ranks=4,
        nodes=2,
        steps=3,
        grad_accum=2,
        seed=1,
        reduce_bucket_size=5_000_000,
        prefetch_bucket_size=5_000_000,
        max_reuse_distance=1_000_000,
        max_live_parameters=10_000_000,  # a model large next to what may be gathered
    )
    overflows = deepspeed_overflows(1, 4, 1000)
    for truth in truths:
        startup = Counter((o["func"], o["phase"]) for o in truth.ops if o["step"] is None)
        assert startup == {
            ("Broadcast", "zero_init"): PARAM_TENSORS,  # zero.Init, one per parameter
            ("AllReduce", "barrier"): 3,
            ("AllGather", "grad_hooks"): PARAM_TENSORS,
        }
        checks = [o for o in truth.ops if o["phase"] == "trace_check"]
        assert {o["step"] for o in checks} == {0} and len(checks) == 1 + 2 * 3
        for step, overflow in enumerate(overflows):
            phases = Counter((o["func"], o["phase"]) for o in step_ops(truth, step))
            assert phases[("AllGather", "forward")] and phases[("AllGather", "backward")]
            assert phases[("ReduceScatter", "backward")] >= 2, "every micro-batch"
            assert phases[("AllGather", "persistent_params")] == (0 if overflow else 1)


# ---- rl ----


@pytest.mark.parametrize(("comm_names_on", "seed"), [(True, 0), (False, 5)])
def test_rl_rollout_belongs_to_the_first_update_of_each_iteration(tmp_path, comm_names_on, seed):
    cfg = {"ranks": 4, "nodes": 2, "rollout_tp": 2, "ppo_mini_batches": 2, "steps": 3}
    cfg["response_length"] = 12
    truths = simulate(tmp_path, workload="rl", seed=seed, comm_names=comm_names_on, **cfg)
    for truth in truths:
        names = comm_names(truth)
        pynccl = {c for c, n in names.items() if n is None}
        assert len(pynccl) == 1, "vLLM's own NCCL communicator has no name"
        assert any(n and n.startswith("undefined:") for n in names.values())
        group = truth.rank // 2
        for step in range(4):
            ops = step_ops(truth, step)
            phases = Counter(o["phase"] for o in ops)
            first_update = step % 2 == 0
            assert phases["weight_sync"] == (PARAM_TENSORS if first_update else 0)
            assert (phases["rollout"] > 0) == first_update
            assert [o["phase"] for o in ops[-1:]] == ["clip_grad_norm"]
            if first_update:
                lengths = response_lengths(seed, step // 2, group, PROMPTS_PER_RANK * 2, 12)
                forwards = 1 + max(lengths) - 1  # one prefill chunk, then one per token
                tp_ops = [o for o in ops if o["comm_id"] in pynccl]
                assert len(tp_ops) == forwards * (1 + 2 * MODEL.layers)


def test_rl_cuda_graphs_hide_the_decode_all_reduces(tmp_path):
    truths = simulate(
        tmp_path,
        workload="rl",
        ranks=2,
        rollout_tp=2,
        ppo_mini_batches=1,
        steps=1,
        response_length=8,
        rollout_cuda_graphs=True,
    )
    for truth in truths:
        pynccl = {c for c, n in comm_names(truth).items() if n is None}
        for step in range(2):
            tp_ops = [o for o in step_ops(truth, step) if o["comm_id"] in pynccl]
            assert len(tp_ops) == 1 + 2 * MODEL.layers, "only the eager prefill"


# ---- ddp options ----


def test_ddp_dynamic_accumulation_and_skipped_updates_change_only_timing(tmp_path):
    settings = {
        "workload": "ddp",
        "ranks": 2,
        "steps": 6,
        "grad_accum": 2,
        "dynamic_accum": True,
        "skipped_updates": True,
        "loss_scale_window": 2,
        "seed": 2,
    }
    plan = build_plan(config_for(tmp_path, **settings))
    overflows = grad_scaler_overflows(2, 7, 2)
    assert any(overflows) and not all(overflows)
    for program in plan.programs:
        step, optimizer_steps = None, set()
        for action in program:
            if isinstance(action, StepBegin):
                step = action.step
            elif isinstance(action, StepEnd):
                step = None
            elif isinstance(action, Compute) and action.label == "optimizer":
                optimizer_steps.add(step)
        assert optimizer_steps == {s for s, o in enumerate(overflows) if not o}
    syncing = {s: {o.micro_batch for o in plan.rank_ops(0) if o.step == s} for s in range(7)}
    assert len({min(m) for m in syncing.values()}) > 1, "the last micro-batch's index varies"
    for truth in simulate(tmp_path, **settings):
        steady = [shape(step_ops(truth, s)) for s in range(1, 7)]
        assert all(s == steady[0] for s in steady), "the same collectives every steady step"
