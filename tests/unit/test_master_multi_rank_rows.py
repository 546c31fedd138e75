"""Rows of a process that drives two ranks of one communicator, keyed by the protocol key.

Such a process (ncclCommInitAll, one thread per local GPU) has two comm table entries with the
same communicator id and pid, both in their first generation. Keyed without the rank, the
later row replaces the earlier on the slave's wire diff and at the master: one rank a process,
half the ops, and a verdict diagnosed over half the communicator."""

from __future__ import annotations

from hang_snapshots import NOW, REAL, THRESHOLD, S

from comminsight.agent.api.views import communicators
from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.master.grpc_service import apply_rows
from comminsight.agent.master.job_view import NodeRecord, job_rows, job_snapshot
from comminsight.agent.state.node_state import NodeRows, RowDiff, row_key
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api

COMM = 0xAE8B603A2E47EC5B
NRANKS = 4
OPS = 100  # completed by every rank before the last all-reduce
OP_BYTES = 4096


def process(pid: int, rank: int) -> pb.ProcessInfo:
    return pb.ProcessInfo(
        pid=pid,
        ingest_state=pb.INGEST_STATE_ACTIVE,
        alive=True,
        heartbeat_mono_ns=NOW,
        started_mono_ns=NOW - 60 * S,
        global_rank=rank,
    )


def member(pid: int, rank: int) -> pb.CommunicatorMember:
    return pb.CommunicatorMember(
        comm_id=COMM, pid=pid, generation=1, comm_rank=rank, nranks=NRANKS, nnodes=2,
        init_mono_ns=NOW - 50 * S,
    )  # fmt: skip


def progress(pid: int, rank: int, joined: bool) -> pb.CommProgress:
    """Every rank completed OPS ops 3 s ago; a rank that joined the next one waits in it."""
    enqueued = OPS + joined
    g = pb.CommProgress(
        comm_id=COMM,
        pid=pid,
        generation=1,
        comm_rank=rank,
        collectives=pb.StageCounters(
            enqueued=enqueued,
            enqueued_mono_ns=NOW - 3 * S,
            gpu_started=enqueued,
            gpu_started_mono_ns=NOW - 3 * S,
            completed=OPS,
            completed_mono_ns=NOW - 3 * S,
        ),
        inflight_count=int(joined),
        ops_completed_total=OPS,
        bytes_completed_total=OPS * OP_BYTES,
    )
    if joined:
        g.oldest_inflight.CopyFrom(
            pb.InflightOp(
                seq=OPS, kind=pb.OP_KIND_COLL, func="AllReduce", datatype="ncclFloat32",
                count=OP_BYTES // 4, size_bytes=OP_BYTES, channels_started=2, n_channels=2,
                enqueued_mono_ns=NOW - 3 * S, gpu_started_mono_ns=NOW - 3 * S, op_index=OPS,
            )
        )  # fmt: skip
    return g


def node_batch(pid: int, ranks: tuple[int, int], stalled: int | None = None) -> pb.NodeStateBatch:
    """A full state of a node whose one process drives `ranks`; `stalled` never joined."""
    return pb.NodeStateBatch(
        batch_seq=1,
        full_state=True,
        full_state_last=True,
        processes=[process(pid, ranks[0] // 2)],
        communicators=[member(pid, r) for r in ranks],
        progress=[progress(pid, r, joined=r != stalled) for r in ranks],
    )


def job() -> list[NodeRecord]:
    """Two slaves, one process of two ranks each; rank 3 stalls outside NCCL."""
    nodes = []
    for i, (pid, ranks) in enumerate(((4100, (0, 1)), (4200, (2, 3)))):
        node = NodeRecord(f"node-{i}", api.AgentMode.slave, offset_ns=0)
        apply_rows(node, node_batch(pid, ranks, stalled=3))
        nodes.append(node)
    return nodes


def test_the_key_tells_the_ranks_of_one_process_apart():
    assert row_key(member(4200, 2)) != row_key(member(4200, 3))
    assert row_key(member(4200, 3)) == row_key(progress(4200, 3, joined=False))
    # the pid stays second: a retired process takes every row whose key names it
    assert row_key(member(4200, 3))[1] == 4200


def test_the_master_keeps_both_ranks_of_a_process():
    (comm,) = communicators(job_rows(job()), {}, full=True, now=NOW)
    assert comm.ranks_seen == [0, 1, 2, 3] and comm.complete
    assert [(r.comm_rank, r.node_name, r.pid) for r in comm.ranks] == [
        (0, "node-0", 4100), (1, "node-0", 4100), (2, "node-1", 4200), (3, "node-1", 4200)
    ]  # fmt: skip
    assert comm.ops_completed_total == NRANKS * OPS
    assert comm.bytes_completed_total == NRANKS * OPS * OP_BYTES


def test_the_masters_verdict_names_the_stalled_rank_beside_its_waiting_sibling():
    snap = job_snapshot(job(), "master", NOW, REAL, 10 * S)
    assert sorted(m.rank for m in snap.comms[COMM].members) == [0, 1, 2, 3]
    (report,) = [r for r in diagnose(snap, NOW, THRESHOLD, now_real_ns=REAL) if r.culprits]
    assert [(c.comm_rank, c.node_name, c.pid) for c in report.culprits] == [(3, "node-1", 4200)]
    assert sorted(e.comm_rank for e in report.evidence if e.joined) == [0, 1, 2]


def test_a_later_batch_replaces_one_rank_and_keeps_the_other():
    node = job()[1]
    later = progress(4200, 2, joined=True)
    later.ops_completed_total = OPS + 1
    apply_rows(node, pb.NodeStateBatch(batch_seq=2, progress=[later]))
    totals = {key[3]: g.ops_completed_total for key, g in node.rows.progress.items()}
    assert totals == {2: OPS + 1, 3: OPS}


def test_a_retired_process_takes_both_of_its_ranks():
    node = job()[1]
    retired = pb.ProcessInfo(pid=4200, ingest_state=pb.INGEST_STATE_RETIRED)
    apply_rows(node, pb.NodeStateBatch(batch_seq=2, processes=[retired]))
    assert not node.rows.processes and not node.rows.members and not node.rows.progress


def test_the_slave_sends_each_rank_and_then_only_the_one_that_moved():
    rows = NodeRows(processes={(4200, 0): process(4200, 1)})
    for rank in (2, 3):
        rows.members[row_key(member(4200, rank))] = member(4200, rank)
        rows.progress[row_key(member(4200, rank))] = progress(4200, rank, joined=False)
    diff = RowDiff()
    first = diff.changes(rows)
    assert sorted(m.comm_rank for m in first.members) == [2, 3]
    assert sorted(g.comm_rank for g in first.progress) == [2, 3]
    rows.progress[row_key(member(4200, 3))] = progress(4200, 3, joined=True)
    second = diff.changes(rows)
    assert [g.comm_rank for g in second.progress] == [3] and not second.members
    assert not second.vanished
