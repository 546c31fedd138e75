"""The simulated NCCL's network proxy takes an op at its launch, as NCCL's does: the proxy ops
of launches queued behind a stuck kernel exist and wait at their first step, which is the
progress a Profiler that raises its mask on a suspected hang gets to see."""

from __future__ import annotations

import pytest
from sim_recording import assert_well_formed, build_recording_plugin, run_sim

from comminsight.sim import parse_fault
from comminsight_gen.abi.nccl_profiler_v5 import EventState as S

FAULT_OP = 4  # ddp: 0 barrier, 1 parameter broadcast, 2.. the warm-up step's bucket all-reduces


@pytest.fixture(scope="module")
def stuck_across_nodes(tmp_path_factory):
    """Two ranks on two nodes (every event enabled); rank 1 never issues op FAULT_OP."""
    plugin = build_recording_plugin(tmp_path_factory.mktemp("plugin"))
    return run_sim(
        plugin,
        tmp_path_factory.mktemp("run"),
        ranks=2,
        nodes=2,
        faults=(parse_fault(f"skip:rank=1,op={FAULT_OP}"),),
        hang_hold_s=2.0,
    )


def proxy_tree(proc, task):
    """(is_send, [step state lists], stopped) for each ProxyOp of a task."""
    out = []
    for op in (c for c in proc.children[task["h"]] if c["type"] == "ProxyOp"):
        steps = [c for c in proc.children[op["h"]] if c["type"] == "ProxyStep"]
        states = [[s.int("state") for s in proc.states.get(step["h"], [])] for step in steps]
        out.append((op["send"] == "1", states, bool(proc.stops.get(op["h"]))))
    return out


def test_later_launches_post_their_proxy_ops_while_the_stuck_kernel_runs(stuck_across_nodes):
    run = stuck_across_nodes
    assert run.summary["abort_reason"] == "hang", run.summary
    proc = run.calls[0]
    assert_well_formed(proc, abi=5, all_stopped=False)
    tasks = proc.tasks()
    later = tasks[FAULT_OP + 1 :]
    assert later, "the host issues more ops before its step's synchronization"
    for task in later:
        assert not proc.kernel_channels(task), "their kernels never start"
        tree = proxy_tree(proc, task)
        assert len(tree) == 2 * task.int("nch"), "a send and a receive per channel"
        for is_send, states, stopped in tree:
            # step 0 posted: a send buffer for the GPU to fill, a receive for the peer's data
            want = S.PROXY_STEP_SEND_GPU_WAIT if is_send else S.PROXY_STEP_RECV_WAIT
            assert states == [[want]] and not stopped


def test_the_stuck_op_sends_wait_on_the_peer_and_receives_on_its_data(stuck_across_nodes):
    proc = stuck_across_nodes.calls[0]
    stuck = proc.tasks()[FAULT_OP]
    assert len(proc.kernel_channels(stuck)) == stuck.int("nch")
    tree = proxy_tree(proc, stuck)
    assert tree
    for is_send, states, stopped in tree:
        want = (
            [S.PROXY_STEP_SEND_GPU_WAIT, S.PROXY_STEP_SEND_PEER_WAIT]
            if is_send
            else [S.PROXY_STEP_RECV_WAIT]
        )
        assert states == [want] and not stopped


def test_completed_ops_finish_every_step_in_nccls_order(stuck_across_nodes):
    proc = stuck_across_nodes.calls[0]
    for task in proc.tasks()[:FAULT_OP]:
        for is_send, states, stopped in proxy_tree(proc, task):
            assert stopped
            for step in states:
                assert step == (
                    [
                        S.PROXY_STEP_SEND_GPU_WAIT,
                        S.PROXY_STEP_SEND_PEER_WAIT,
                        S.PROXY_STEP_SEND_WAIT,
                    ]
                    if is_send
                    else [
                        S.PROXY_STEP_RECV_WAIT,
                        S.PROXY_STEP_RECV_FLUSH_WAIT,
                        S.PROXY_STEP_RECV_GPU_WAIT,
                    ]
                )
