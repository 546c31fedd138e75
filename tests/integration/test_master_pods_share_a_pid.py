"""Two pods of one node whose training processes have the same pid, each numbered in its own PID
namespace, seen through a master: the slave's rows name each process by pid and namespace, so
the master keeps two processes, each with its own ranks, its own op in flight and its own
retirement. Keyed by pid alone, their memberships collided and pod-b's wait took pod-a's rank.

The regions are real files the node Agent maps; the rows cross the wire serialized, as a slave
sends them, and reach the master's row store (apply_rows), its API renderers and its hang
snapshot."""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec
import pytest
from fifo_events import event_bytes
from live_agent import LiveAgent
from test_metrics_fleet import UUID_A, UUID_B, FakeProducer
from test_node_api_rows import COMM, waiting

from comminsight.agent.api.views import communicators, inflight_ops
from comminsight.agent.core.liveness import own_pid_namespace
from comminsight.agent.master.grpc_service import apply_rows
from comminsight.agent.master.job_view import NodeRecord, job_rows, job_snapshot, node_summary
from comminsight.agent.master.store import MasterStore
from comminsight.agent.state.node_state import RowDiff, read_node_rows
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.step_summary_v1 import StepSummary

STALE_NS = 60 * 10**9


@pytest.fixture
def two_pods(tmp_path):
    """pod-a (this test's own PID namespace) drives ranks 0 and 1; pod-b, in another
    namespace with the same pid, holds rank 2 and waits in op 7."""
    home = tmp_path / "home"
    a = FakeProducer(home, "ci-pod-a-7-1.shm", host="pod-a", rank=0, device=0, uuid=UUID_A)
    a.header["pid_namespace"] = own_pid_namespace()
    a.add_comm(0, COMM, "dp", rank=0, nranks=3, device=0, uuid=UUID_A)
    a.add_comm(1, COMM, "dp", rank=1, nranks=3, device=1, uuid=UUID_B)
    b = FakeProducer(home, "ci-pod-b-7-1.shm", host="pod-b", rank=2, local_rank=0)
    b.header["pid_namespace"] = own_pid_namespace() + 1
    b.add_comm(0, COMM, "dp", rank=2, nranks=3)
    waiting(b, 0, 7, time.monotonic_ns() - 2_000_000_000)
    with LiveAgent(home, polling=False) as live:
        yield live


def slave_rows(live):
    producers = live.service.producers.producers.values()
    return read_node_rows(producers, time.monotonic_ns(), STALE_NS)


def on_the_wire(changes, full: bool, seq: int) -> pb.NodeStateBatch:
    batch = pb.NodeStateBatch(
        batch_seq=seq,
        full_state=full,
        full_state_last=full,
        processes=changes.processes,
        communicators=changes.members,
        progress=changes.progress,
    )
    return pb.NodeStateBatch.FromString(batch.SerializeToString())


def master_of(live) -> tuple[NodeRecord, RowDiff]:
    """The master's record of the slave, after the slave's first (full) state."""
    node = NodeRecord("node-1", api.AgentMode.slave, offset_ns=0, state=api.NodeState.connected)
    diff = RowDiff()
    apply_rows(node, on_the_wire(diff.changes(slave_rows(live)), full=True, seq=1))
    return node, diff


def test_the_slave_names_each_process_by_pid_and_namespace(two_pods):
    rows = slave_rows(two_pods)
    assert sorted(rows.processes) == [
        (os.getpid(), own_pid_namespace()),
        (os.getpid(), own_pid_namespace() + 1),
    ]
    ranks = {key[3]: key[1:3] for key in rows.members}
    assert ranks[0] == ranks[1] != ranks[2]
    assert set(rows.progress) == set(rows.members)


def test_the_master_keeps_two_processes_and_their_three_ranks(two_pods):
    node, _ = master_of(two_pods)
    summary = node_summary(node, time.monotonic_ns(), time.time_ns())
    assert summary.processes_total == 2 and summary.global_ranks == [0, 2]
    (comm,) = communicators(job_rows([node]), {}, full=True, now=time.monotonic_ns())
    assert comm.complete and comm.ranks_seen == [0, 1, 2]
    assert [(r.comm_rank, r.global_rank, r.pid) for r in comm.ranks] == [
        (0, 0, os.getpid()),
        (1, 0, os.getpid()),
        (2, 2, os.getpid()),
    ]


def test_an_op_in_flight_names_the_rank_of_its_own_pod(two_pods):
    node, _ = master_of(two_pods)
    (op,) = inflight_ops(job_rows([node]), time.monotonic_ns())
    assert (op.comm_rank, op.global_rank, op.seq) == (2, 2, 7)
    snap = job_snapshot([node], "master", time.monotonic_ns(), time.time_ns(), STALE_NS)
    assert len(snap.processes) == 2
    owner = {m.rank: m.process.global_rank for m in snap.comms[COMM].members}
    assert owner == {0: 0, 1: 0, 2: 2}


def test_one_pod_retired_takes_only_its_own_rows(two_pods):
    node, diff = master_of(two_pods)
    rows = slave_rows(two_pods)
    gone = (os.getpid(), own_pid_namespace() + 1)
    del rows.processes[gone]  # ingest retired pod-b's region: its rows are read no more
    for table in (rows.members, rows.progress):
        for key in [k for k in table if k[1:3] == gone]:
            del table[key]
    changes = diff.changes(rows)
    (retired,) = changes.processes
    assert (retired.pid, retired.pid_namespace, retired.ingest_state) == (
        *gone,
        pb.INGEST_STATE_RETIRED,
    )
    apply_rows(node, on_the_wire(changes, full=False, seq=2))
    assert list(node.rows.processes) == [(os.getpid(), own_pid_namespace())]
    assert sorted(key[3] for key in node.rows.members) == [0, 1]
    assert sorted(key[3] for key in node.rows.progress) == [0, 1]


def test_rows_of_a_slave_that_knows_no_namespace_still_key_by_pid(two_pods):
    """An older slave sends no pid_namespace (0): its processes key as (pid, 0), as before,
    and a later row of the same pid replaces the earlier."""
    node = NodeRecord("old", api.AgentMode.slave, offset_ns=0)
    first = pb.ProcessInfo(pid=4242, global_rank=5, ingest_state=pb.INGEST_STATE_ACTIVE)
    later = pb.ProcessInfo(pid=4242, global_rank=6, ingest_state=pb.INGEST_STATE_ACTIVE)
    apply_rows(node, pb.NodeStateBatch(batch_seq=1, processes=[first]))
    apply_rows(node, pb.NodeStateBatch(batch_seq=2, processes=[later]))
    assert {k: p.global_rank for k, p in node.rows.processes.items()} == {(4242, 0): 6}


def test_a_stack_is_asked_of_the_pod_the_namespace_names(two_pods):
    """A culprit's stack goes to its own pod's process (its host and its user), and a pid
    whose namespace is unknown names neither of two running pods' processes."""
    service = two_pods.service
    a = service.producer_of(os.getpid(), own_pid_namespace())
    b = service.producer_of(os.getpid(), own_pid_namespace() + 1)
    assert (a.host, b.host) == ("pod-a", "pod-b")
    assert service.producer_of(os.getpid()) is None
    assert service.producer_of(os.getpid(), 12345) is None


STEP_FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "contract-tests/fixtures/json/step-summary/v1/valid/ddp-warmup-anomalies.json"
)


def step_of(host: str, pid: int) -> tuple[StepSummary, bytes]:
    """Step 3 of global rank 0 in a pod: two jobs' rank 0 in two pods with one pid."""
    base = msgspec.json.decode(STEP_FIXTURE.read_bytes(), type=StepSummary)
    summary = msgspec.structs.replace(base, host=host, pid=pid, global_rank=0, step_index=3)
    return summary, msgspec.json.encode(summary)


def test_the_master_keeps_each_pods_hang_events_and_steps_and_a_resent_one_once(tmp_path):
    """Each pod's process counts its hang events from 1: the first event of two pods with
    one pid, and their Step 3 of rank 0, are four things, not two with two duplicates; the
    same bytes sent again (a slave's retry), before and after a master restart, are one."""
    events = [
        (event_bytes(pid=7, event_seq=1, hostname=host.encode(), detect_real_ns=10**18), 1)
        for host in ("pod-a", "pod-b")
    ]
    steps = [step_of("pod-a", 7), step_of("pod-b", 7)]
    store = MasterStore(tmp_path)
    store.load()
    first = store.commit("node-1", 1, 1, events, steps)
    assert (len(first.hang_events), first.steps, first.duplicates) == (2, 2, 0)
    again = store.commit("node-1", 1, 2, events[:1], steps[:1])
    assert (len(again.hang_events), again.steps, again.duplicates) == (0, 0, 2)
    restarted = MasterStore(tmp_path)
    restarted.load()
    resent = restarted.commit("node-1", 1, 3, events, steps)
    assert (len(resent.hang_events), resent.steps, resent.duplicates) == (0, 0, 4)


def test_a_slave_forwards_the_steps_of_each_pods_rank_apart():
    """The slave forwards Steps past the last index it sent per GPU: two pods' rank 0 with
    one pid are two GPUs (their hosts differ), not one whose Steps 3 were sent already."""
    from types import SimpleNamespace

    from comminsight.agent.slave.uplink import new_step_records

    a, b = step_of("pod-a", 7)[0], step_of("pod-b", 7)[0]
    records, moved = new_step_records(
        SimpleNamespace(steps_sent={"pod-a:0:7": 3}), SimpleNamespace(read=lambda: [a, b])
    )
    assert [msgspec.json.decode(r.json, type=StepSummary).host for r in records] == ["pod-b"]
    assert moved == {"pod-b:0:7": 3}


def test_the_api_and_the_cli_name_each_pods_process_apart(two_pods):
    """The API gives each process and rank its PID namespace, and `comminsight job status`
    lists two processes, not one with the ranks of both."""
    import httpx

    from comminsight.cli.node import job_processes
    from comminsight_client.models import Communicator, Node

    node = httpx.get(two_pods.base_url + "/api/v1/node", timeout=30).json()
    assert sorted(p["pid_namespace"] for p in node["processes"]) == [
        own_pid_namespace(),
        own_pid_namespace() + 1,
    ]
    comms = httpx.get(two_pods.base_url + "/api/v1/communicators?view=full", timeout=30).json()
    (listed,) = job_processes(
        Node.from_dict(node), [Communicator.from_dict(c) for c in comms["items"]]
    ).values()
    assert sorted((p.global_rank, p.pid, len(p.comm_ids)) for p in listed) == [
        (0, os.getpid(), 1),
        (2, os.getpid(), 1),
    ]
