"""The ground truth the simulated NCCL writes matches what the plugin was called with."""

from __future__ import annotations

from collections import defaultdict

import pytest
from sim_recording import run_sim

from comminsight.sim.config import SimConfig
from comminsight.sim.workloads import build_plan


@pytest.fixture(scope="module", params=["ddp", "fsdp", "tp-pp-dp"])
def run(request, recording_plugin, tmp_path_factory):
    ranks = 8 if request.param == "tp-pp-dp" else 4
    return run_sim(
        recording_plugin,
        tmp_path_factory.mktemp(request.param),
        workload=request.param,
        ranks=ranks,
        grad_accum=2,
    )


def test_every_issued_op_matches_the_plugins_task_event(run):
    assert run.summary["status"] == "completed", run.summary
    for truth in run.truths:
        proc = run.calls[truth.rank]
        ops, tasks = truth.ops, proc.tasks()
        assert [o["op_index"] for o in ops] == list(range(len(ops)))
        assert len(ops) == len(tasks) == run.summary["rank_results"][truth.rank]["ops_planned"]
        for op, task in zip(ops, tasks, strict=True):
            assert op["completed"]
            assert task["func"] == op["func"]
            assert task.int("count") == op["count"]
            assert task["dtype"] == op["datatype"]
            assert task.int("nch") == op["n_channels"]
            assert proc.contexts[task["ctx"]] == op["comm_id"]
            if task["type"] == "Coll":
                assert task.int("seq") == op["seq"]
                assert (task["algo"], task["proto"]) == (op["algo"], op["proto"])
                assert task.int("nwarps") == op["n_warps"]
                assert task.int("root") == op["root"]
            else:
                assert op["seq"] is None and task.int("peer") == op["peer"]
            assert op["host_start_ns"] <= task.int("t") <= op["host_stop_ns"]
            channels = proc.kernel_channels(task)
            assert len(channels) == op["kernel_ch_events"] == op["n_channels"]
            assert min(c.int("ptimer") for c in channels) == op["gpu_start_tick"]
            ends = [proc.states[c["h"]][0].int("ptimer") for c in channels]
            assert max(ends) == op["gpu_end_tick"]


def test_all_gather_and_broadcast_reach_the_device_as_bytes(run):
    for truth in run.truths:
        for op in truth.ops:
            if op["func"] in ("AllGather", "Broadcast"):
                assert op["datatype"] == "ncclInt8" and op["api_datatype"] != "ncclInt8"
                assert op["bytes"] == op["count"] > op["api_count"]
            else:
                assert (op["count"], op["datatype"]) == (op["api_count"], op["api_datatype"])


def test_communicator_records_match_the_inits(run):
    for truth in run.truths:
        inits = {c["comm"]: c for c in run.calls[truth.rank].of("init")}
        comms = truth.of("comm")
        assert len(comms) == len(inits)
        for comm in comms:
            init = inits[comm["comm_id"]]
            assert init["name"] == comm["name"]
            assert (init.int("nranks"), init.int("rank")) == (comm["nranks"], comm["rank"])
            assert comm["init_result"] == 0
        assert {c["comm_id"] for c in truth.of("comm_finalize")} == set(inits)
        assert truth.end["status"] == "done"
        assert truth.end["ops_issued"] == truth.end["ops_completed"] == len(truth.ops)
        assert truth.end["nonzero_returns"] == 0


def test_a_collective_ends_after_every_participant_started_it(run):
    by_instance = defaultdict(list)
    for truth in run.truths:
        offset = truth.run["gpu_tick_offset_ns"]
        for op in truth.ops:
            by_instance[op["instance"]].append(
                (op["gpu_start_tick"] - offset, op["gpu_end_tick"] - offset, op)
            )
    for instance, views in by_instance.items():
        latest_start = max(start for start, _, _ in views)
        for _, end, op in views:
            assert end > latest_start, (instance, op["global_rank"])
            assert end >= op["host_api_ns"]
        assert len({op["seq"] for _, _, op in views}) == 1, "all ranks agree on the sequence"


def test_steps_partition_the_ops(run):
    for truth in run.truths:
        steps = truth.of("step")
        assert [s["step"] for s in steps] == [0, 1, 2]
        assert [s["warmup"] for s in steps] == [True, False, False]
        ops = truth.ops
        for step in steps:
            assert step["completed"] and step["start_ns"] < step["end_ns"]
            inside = [o["op_index"] for o in ops if o["step"] == step["step"]]
            assert inside == list(range(step["first_op"], step["last_op"] + 1))
            for op in ops[step["first_op"] : step["last_op"] + 1]:
                assert step["start_ns"] <= op["host_start_ns"] <= step["end_ns"]
        setup = [o for o in ops if o["step"] is None]
        assert setup and setup == ops[: len(setup)], "setup ops come before step 0"


def test_the_same_seed_gives_the_same_plan_and_another_seed_other_timing():
    config = SimConfig(
        plugin="p.so", home="/h", workload="tp-pp-dp", ranks=8, model_params=20_000_000, layers=4
    )
    a, b = build_plan(config), build_plan(config)
    c = build_plan(SimConfig(**{**config.__dict__, "seed": 1}))
    assert a.instances == b.instances and a.programs == b.programs
    assert [i.func for i in c.instances] == [i.func for i in a.instances]
    assert [i.duration_ns for i in c.instances] != [i.duration_ns for i in a.instances]
    assert {x.comm_id for x in c.comms}.isdisjoint({x.comm_id for x in a.comms})
