"""Injected faults: a rank skips, sleeps before, dies before, or mismatches one op."""

from __future__ import annotations

import pytest
from sim_recording import assert_well_formed, run_sim

from comminsight.sim import Fault, FaultSpecError, SimConfig, SimConfigError, parse_fault
from comminsight.sim.launcher import run_simulation

RANKS = 4
HOLD_S = 0.5
# ddp op indexes: 0 barrier, 1 parameter broadcast, 2..6 the warm-up step's bucket all-reduces
FAULT_OP = 4


def faulty_run(recording_plugin, tmp_path, *specs: str, **settings):
    faults = tuple(parse_fault(s) for s in specs)
    settings = {"ranks": RANKS, "hang_hold_s": HOLD_S, **settings}
    return run_sim(recording_plugin, tmp_path, faults=faults, **settings)


def assert_peers_stuck_at(run, culprit: int, op_index: int) -> None:
    """Everyone else issued the op, its kernel started and never finished; later ops never
    reached the GPU; the plugin saw the channels open and the communicator finalized."""
    for truth in run.truths:
        if truth.rank == culprit:
            continue
        ops = truth.ops
        assert all(o["completed"] for o in ops[:op_index])
        stuck = ops[op_index]
        assert not stuck["completed"] and stuck["gpu_start_tick"] and stuck["gpu_end_tick"] is None
        assert stuck["kernel_ch_events"] == stuck["n_channels"]
        later = ops[op_index + 1 :]
        assert later, "the host keeps enqueueing until the step's synchronization"
        assert all(o["gpu_start_tick"] is None and not o["completed"] for o in later)
        assert truth.end["status"] == "aborted"
        assert [s["completed"] for s in truth.of("step")] == [False]

        proc = run.calls[truth.rank]
        assert_well_formed(proc, abi=5, all_stopped=False)
        tasks = proc.tasks()
        assert len(tasks) == len(ops)
        channels = proc.kernel_channels(tasks[op_index])
        assert len(channels) == stuck["n_channels"]
        assert not any(proc.stops.get(c["h"]) for c in channels), "stuck channels never stop"
        assert all(not proc.kernel_channels(t) for t in tasks[op_index + 1 :])
        assert {c["ctx"] for c in proc.of("finalize")} == set(proc.contexts)


def test_a_skipped_op_hangs_the_peers_until_the_hold_ends(recording_plugin, tmp_path):
    run = faulty_run(recording_plugin, tmp_path, f"skip:rank=1,op={FAULT_OP}")
    summary = run.summary
    assert (summary["status"], summary["abort_reason"], summary["ok"]) == ("aborted", "hang", True)
    assert summary["elapsed_s"] >= HOLD_S
    assert_peers_stuck_at(run, culprit=1, op_index=FAULT_OP)
    skipper = run.truths[1]
    assert [o["op_index"] for o in skipper.ops] == list(range(FAULT_OP))
    (fault,) = skipper.of("fault")
    assert (fault["fault"], fault["op_index"], fault["func"]) == ("skip", FAULT_OP, "AllReduce")
    assert len(run.calls[1].tasks()) == FAULT_OP
    assert skipper.end["status"] == "aborted"
    assert_well_formed(run.calls[1], abi=5)


def test_a_dead_rank_leaves_its_peers_waiting(recording_plugin, tmp_path):
    run = faulty_run(recording_plugin, tmp_path, f"die:rank=2,op={FAULT_OP}")
    summary = run.summary
    assert (summary["status"], summary["abort_reason"], summary["ok"]) == ("aborted", "hang", True)
    dead = summary["rank_results"][2]
    assert (dead["status"], dead["exit_code"]) == ("died", -9)
    assert_peers_stuck_at(run, culprit=2, op_index=FAULT_OP)
    truth = run.truths[2]
    assert truth.end is None and truth.of("fault")[0]["fault"] == "die"
    assert all(o["completed"] for o in truth.ops) and len(truth.ops) == FAULT_OP
    assert not run.calls[2].of("finalize"), "a killed process finalizes nothing"


def test_a_mismatched_count_hangs_everyone_on_that_op(recording_plugin, tmp_path):
    run = faulty_run(recording_plugin, tmp_path, f"mismatch:rank=3,op={FAULT_OP}")
    assert (run.summary["status"], run.summary["abort_reason"]) == ("aborted", "hang")
    assert_peers_stuck_at(run, culprit=3, op_index=FAULT_OP)
    bad = run.truths[3].ops[FAULT_OP]
    good = run.truths[0].ops[FAULT_OP]
    assert bad["count"] == 2 * good["count"] and bad["seq"] == good["seq"]
    assert bad["mismatch"] == {"field": "count", "expected": good["count"], "issued": bad["count"]}
    assert not bad["completed"]
    assert run.calls[3].tasks()[FAULT_OP].int("count") == bad["count"]


def test_a_mismatched_function_counts_in_its_own_sequence(recording_plugin, tmp_path):
    run = faulty_run(recording_plugin, tmp_path, f"mismatch:rank=0,op={FAULT_OP},field=func")
    assert run.summary["abort_reason"] == "hang"
    bad = run.truths[0].ops[FAULT_OP]
    assert (bad["func"], bad["seq"], bad["datatype"]) == ("AllGather", 0, "ncclInt8")
    assert run.truths[1].ops[FAULT_OP]["func"] == "AllReduce"


def test_a_sleeping_rank_delays_its_peers_but_everything_completes(recording_plugin, tmp_path):
    seconds = 0.4
    run = faulty_run(recording_plugin, tmp_path, f"sleep:rank=0,op={FAULT_OP},seconds={seconds}")
    assert (run.summary["status"], run.summary["ok"]) == ("completed", True)
    sleeper = run.truths[0]
    (fault,) = sleeper.of("fault")
    issued_at = sleeper.ops[FAULT_OP]["host_api_ns"]  # the kernel launches before the Coll starts
    assert issued_at - fault["at_ns"] >= seconds * 1e9
    for truth in run.truths[1:]:
        op = truth.ops[FAULT_OP]
        offset = truth.run["gpu_tick_offset_ns"]
        assert op["completed"] and op["gpu_end_tick"] - offset > issued_at
        assert op["gpu_end_tick"] - op["gpu_start_tick"] >= 0.5 * seconds * 1e9
    for proc in run.calls.values():
        assert_well_formed(proc, abi=5)


def test_several_faults_on_one_communicator_of_a_mixed_workload(recording_plugin, tmp_path):
    run = faulty_run(
        recording_plugin,
        tmp_path,
        "sleep:rank=0,op=1,comm=tp,seconds=0.2",
        "skip:rank=5,op=3,comm=tp",
        workload="tp-pp-dp",
        ranks=8,
        steps=1,
    )
    assert run.summary["abort_reason"] == "hang"
    assert [f["fault"] for f in run.truths[0].of("fault")] == ["sleep"]
    (skip,) = run.truths[5].of("fault")
    tp_ops = [o for o in run.truths[4].ops if o["role"] == "tp"]  # rank 5's TP peer
    assert tp_ops[3]["comm_id"] == skip["comm_id"] and not tp_ops[3]["completed"]
    assert all(o["completed"] for o in tp_ops[:3])


@pytest.mark.parametrize(
    "spec",
    [
        "boom:rank=0,op=1",
        "skip:rank=0",
        "skip:rank=x,op=1",
        "sleep:rank=0,op=1",
        "skip:op=1,rank=0,zz=1",
        "mismatch:rank=0,op=1,field=dtype",
        "die:rank=-1,op=0",
    ],
)
def test_bad_fault_specs_are_refused_with_the_reason(spec):
    with pytest.raises(FaultSpecError, match="fault"):
        parse_fault(spec)


def test_faults_must_name_an_op_the_rank_issues(tmp_path):
    config = SimConfig(
        plugin="none.so", home=str(tmp_path), ranks=2, faults=(Fault("skip", rank=1, op=10_000),)
    )
    with pytest.raises(SimConfigError, match="issues no such op"):
        run_simulation(config)
    config = SimConfig(
        plugin="none.so",
        home=str(tmp_path),
        ranks=2,
        faults=(Fault("skip", rank=1, op=0, comm="tp"),),
    )
    with pytest.raises(SimConfigError, match="no tp communicator"):
        run_simulation(config)


def test_a_run_over_its_time_limit_is_aborted_and_reported(recording_plugin, tmp_path):
    run = run_sim(
        recording_plugin,
        tmp_path,
        steps=500,
        model_params=300_000_000,
        time_scale=1.0,
        timeout_s=1.0,
    )
    summary = run.summary
    assert (summary["status"], summary["abort_reason"], summary["ok"]) == (
        "error",
        "timeout",
        False,
    )
    assert "--timeout" in summary["errors"][0]
    assert {t.end["status"] for t in run.truths} == {"aborted"}
    for proc in run.calls.values():
        assert {c["ctx"] for c in proc.of("finalize")} == set(proc.contexts)
