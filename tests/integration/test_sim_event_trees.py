"""The simulated NCCL calls a profiler plugin as NCCL 2.28 does: event trees, threads, masks."""

from __future__ import annotations

from collections import defaultdict

import pytest
from sim_recording import (
    HOST_SEQUENCE_V5,
    assert_well_formed,
    host_sequence,
    run_sim,
)


@pytest.fixture(scope="module")
def mixed_v5(recording_plugin, tmp_path_factory):
    """TP+PP+DP on 8 ranks over 2 nodes, every event enabled: colls, p2p, proxy events."""
    return run_sim(
        recording_plugin,
        tmp_path_factory.mktemp("mixed_v5"),
        workload="tp-pp-dp",
        ranks=8,
        nodes=2,
        steps=1,
        grad_accum=2,
    )


def test_mixed_workload_completes_with_well_formed_trees(mixed_v5):
    assert mixed_v5.summary["status"] == "completed", mixed_v5.summary
    assert sorted(mixed_v5.calls) == list(range(8)), "one plugin instance per rank process"
    assert len({p.pid for p in mixed_v5.calls.values()}) == 8
    for proc in mixed_v5.calls.values():
        assert_well_formed(proc, abi=5)
        assert {
            "GroupApi",
            "CollApi",
            "P2pApi",
            "KernelLaunch",
            "Group",
            "Coll",
            "P2p",
        } <= proc.types
        assert "KernelCh" in proc.types


def test_every_op_follows_nccls_host_sequence(mixed_v5):
    for proc in mixed_v5.calls.values():
        group_apis = proc.started("GroupApi")
        assert len(group_apis) == len(proc.tasks())
        for group_api in group_apis:
            assert host_sequence(proc, group_api) == HOST_SEQUENCE_V5
            assert group_api.int("depth") == 1


def test_sequence_numbers_count_per_communicator_and_function(mixed_v5):
    for proc in mixed_v5.calls.values():
        seen = defaultdict(list)
        for task in proc.tasks():
            if task["type"] == "Coll":
                seen[(task["ctx"], task["func"])].append(task.int("seq"))
        assert seen
        for key, seqs in seen.items():
            assert seqs == list(range(len(seqs))), key


def test_communicators_agree_across_ranks(mixed_v5):
    members = defaultdict(list)
    for proc in mixed_v5.calls.values():
        inits = proc.of("init")
        assert len(inits) == len({c["comm"] for c in inits}), "init once per communicator"
        for init in inits:
            members[init["comm"]].append((init["name"], init.int("nranks"), init.int("rank")))
    roles = defaultdict(int)
    for comm, seen in members.items():
        names = {name for name, _, _ in seen}
        assert len(names) == 1, comm
        nranks = seen[0][1]
        assert sorted(rank for _, _, rank in seen) == list(range(nranks)), comm
        roles[names.pop().split(":")[0]] += 1
    # world + 4 TP pairs + 4 PP pairs + 4 DP pairs on dp=2 x pp=2 x tp=2
    assert roles == {
        "default_pg": 1,
        "tensor_parallel": 4,
        "pipeline_parallel": 4,
        "data_parallel": 4,
    }


def test_p2p_events_carry_peer_and_channels(mixed_v5):
    for proc in mixed_v5.calls.values():
        p2ps = [t for t in proc.tasks() if t["type"] == "P2p"]
        assert p2ps, f"rank {proc.rank} has pipeline sends/receives"
        for p2p in p2ps:
            assert p2p["func"] in ("Send", "Recv")
            assert p2p.int("peer") in (0, 1)  # the other stage of a two-stage pipeline
            assert len(proc.kernel_channels(p2p)) == p2p.int("nch") > 0


def test_proxy_events_only_on_communicators_spanning_nodes(mixed_v5):
    truth_comms = {c["comm_id"]: c for t in mixed_v5.truths for c in t.of("comm")}
    for proc in mixed_v5.calls.values():
        contexts = proc.contexts
        proxy_ops = proc.started("ProxyOp")
        assert proxy_ops
        for op in proxy_ops:
            comm = truth_comms[contexts[op["ctx"]]]
            assert comm["nnodes"] == 2, "network proxy work exists only between nodes"
            assert op.int("pid") == proc.pid
            steps = [c for c in proc.children[op["h"]] if c["type"] == "ProxyStep"]
            assert len(steps) == op.int("nsteps")
            for step in steps:
                states = [s.int("state") for s in proc.states[step["h"]]]
                assert states == ([8, 20, 9] if op["send"] == "1" else [10, 11, 12])
            assert [s.int("state") for s in proc.states[op["h"]]] == [19]


def test_kernel_channel_ticks_look_like_a_gpu_globaltimer(mixed_v5):
    for proc in mixed_v5.calls.values():
        ticks = [c.int("ptimer") for c in proc.started("KernelCh")]
        assert min(ticks) > 1_600_000_000 * 10**9, "globaltimer counts ns since the epoch"


def test_abi_v4_is_driven_through_the_v4_adapter_rules(recording_plugin, tmp_path):
    run = run_sim(recording_plugin, tmp_path, workload="tp-pp-dp", ranks=4, abi=4, steps=1)
    assert run.summary["status"] == "completed", run.summary
    for proc in run.calls.values():
        assert_well_formed(proc, abi=4)
        assert proc.types == {"Group", "Coll", "P2p", "KernelCh"}
        assert not [s for s in proc.of("state") if s.int("state") in (23, 24)]
        for task in proc.tasks():
            assert proc.starts[task["parent"]]["type"] == "Group"
            if task["type"] == "P2p":
                assert task.int("nch") == 0, "NCCL's v4 adapter leaves P2p nChannels unset"
                assert len(proc.kernel_channels(task)) > 0


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0, set()),
        (0x40, {"GroupApi", "CollApi", "Group", "Coll", "KernelCh"}),  # parents come with it
        (0x06, {"GroupApi", "CollApi", "Group", "Coll"}),
        (0x800, {"GroupApi", "KernelLaunch"}),
        (0x200, {"GroupApi", "CollApi"}),
        (0x01, {"GroupApi", "Group"}),
    ],
)
def test_the_activation_mask_selects_events_as_nccl_does(
    recording_plugin, tmp_path, mask, expected
):
    run = run_sim(
        recording_plugin, tmp_path, steps=1, plugin_env={"RECORDING_PLUGIN_MASK": str(mask)}
    )
    assert run.summary["status"] == "completed"
    for proc in run.calls.values():
        assert_well_formed(proc, abi=5)
        assert proc.types == expected
    for truth in run.truths:  # the modeled GPU runs whatever the plugin listens to
        assert all(op["completed"] and op["gpu_end_tick"] for op in truth.ops)
        assert all(
            op["kernel_ch_events"] == (op["n_channels"] if mask & 0x40 else 0) for op in truth.ops
        )


def test_a_plugin_may_change_the_mask_at_run_time(recording_plugin, tmp_path):
    env = {"RECORDING_PLUGIN_MASK": "0xFFF", "RECORDING_PLUGIN_MASK_SWITCH": "4:6"}
    run = run_sim(recording_plugin, tmp_path, steps=1, plugin_env=env)
    for proc in run.calls.values():
        assert_well_formed(proc, abi=5)
        tasks = proc.tasks()
        assert len(tasks) > 6
        # the 4th op read the mask before its Coll start switched it; from the 5th on: no GPU
        for i, task in enumerate(tasks):
            assert bool(proc.kernel_channels(task)) == (i < 4), i
        launches = proc.started("KernelLaunch")
        assert len(launches) == 4


def test_strings_are_fresh_per_call_and_poisoned_afterwards(recording_plugin, tmp_path):
    run = run_sim(
        recording_plugin, tmp_path, steps=1, plugin_env={"RECORDING_PLUGIN_KEEP_STRINGS": "1"}
    )
    for proc in run.calls.values():
        colls = proc.started("Coll")
        pointers = set()
        for coll in colls:
            stop = proc.stops[coll["h"]][0]
            assert stop["late_func"] != coll["func"], "a kept string pointer must not still work"
            pointers.add(coll["send"])
        assert len(pointers) == len(colls)


def test_comm_names_null_without_inject_and_failed_init_disables_the_communicator(
    recording_plugin, tmp_path
):
    run = run_sim(recording_plugin, tmp_path, steps=1, comm_names=False)
    for proc in run.calls.values():
        assert {c["name"] for c in proc.of("init")} == {"(null)"}

    failing = run_sim(
        recording_plugin,
        tmp_path / "failing",
        workload="tp-pp-dp",
        ranks=4,
        steps=1,
        plugin_env={"RECORDING_PLUGIN_FAIL_INIT": "tensor_parallel"},
    )
    assert failing.summary["status"] == "completed"
    for proc, truth in zip(failing.calls.values(), failing.truths, strict=True):
        failed = {c["comm"] for c in proc.of("init_failed")}
        assert len(failed) == 1
        assert failed.isdisjoint(proc.contexts.values())
        assert_well_formed(proc, abi=5)
        tp_ops = [op for op in truth.ops if op["role"] == "tp"]
        assert tp_ops and all(op["completed"] and op["kernel_ch_events"] == 0 for op in tp_ops)
        assert {c["init_result"] for c in truth.of("comm") if c["role"] == "tp"} == {5}


def test_only_task_and_proxy_descriptors_carry_the_rank(mixed_v5):
    for proc in mixed_v5.calls.values():
        comm_rank = {c["comm"]: c.int("rank") for c in proc.of("init")}
        for start in proc.starts.values():
            rank = comm_rank[proc.contexts[start["ctx"]]]
            if start["type"] in ("Coll", "P2p", "ProxyOp", "ProxyStep"):
                assert start.int("rank") == rank
            else:
                assert start.int("rank") == 0, "NCCL leaves rank unset in these descriptors"
