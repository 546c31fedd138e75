"""Jobs as a master or relay holds them (NodeRecords of agent-master-slave rows), for the relay
tree's tests: nodes of 8 ranks, one process per rank, each rank in the job-wide world
communicator and in its node's communicator, every rank having completed OPS collectives.
Faults: a rank that never joins the next world collective (stalled, stuck outside NCCL), a
process that died in it, a rank that called another function (mismatched)."""

from __future__ import annotations

from comminsight.agent.master.job_view import NodeRecord, class_runs
from comminsight.agent.relay.classes import rank_classes
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api

S = 1_000_000_000
NOW = 1_000 * S
REAL = 1_700_000_000 * S
STALE = 10 * S
THRESHOLD = 1 * S
RANKS_PER_NODE = 8
WORLD = 0xABCD000000000001
OPS = 100


def node_comm(node: int) -> int:
    return 0x1000000000000000 + node


def _process(rank: int, dead: bool, offset: int) -> pb.ProcessInfo:
    return pb.ProcessInfo(
        pid=1000 + rank,
        ingest_state=pb.INGEST_STATE_DRAINING if dead else pb.INGEST_STATE_ACTIVE,
        alive=not dead,
        heartbeat_mono_ns=NOW - offset - (30 * S if dead else 0),
        started_mono_ns=NOW - offset - 600 * S,
        started_real_ns=REAL - 600 * S,
        global_rank=rank,
    )


def _rows(comm: int, rank: int, comm_rank: int, nranks: int, nnodes: int, joined: bool,
          func: str, offset: int, wait_s: float):  # fmt: skip
    pid = 1000 + rank
    m = pb.CommunicatorMember(
        comm_id=comm, pid=pid, generation=1, comm_rank=comm_rank, nranks=nranks, nnodes=nnodes,
        init_mono_ns=NOW - offset - 500 * S,
    )  # fmt: skip
    enqueued = OPS + joined
    at = NOW - offset - int(wait_s * S)
    g = pb.CommProgress(
        comm_id=comm,
        pid=pid,
        generation=1,
        comm_rank=comm_rank,
        collectives=pb.StageCounters(
            enqueued=enqueued,
            enqueued_mono_ns=at,
            gpu_started=enqueued,
            gpu_started_mono_ns=at,
            completed=OPS,
            completed_mono_ns=at - S,
        ),  # fmt: skip
        inflight_count=int(joined),
        ops_completed_total=OPS,
    )
    if joined:
        g.oldest_inflight.CopyFrom(
            pb.InflightOp(
                seq=OPS, kind=pb.OP_KIND_COLL, func=func, datatype="ncclFloat32", count=1024,
                size_bytes=4096, channels_started=2, n_channels=2, enqueued_mono_ns=at,
                gpu_started_mono_ns=at, op_index=OPS,
            )
        )  # fmt: skip
    return m, g


def job_nodes(
    nodes: int,
    *,
    stalled: frozenset[int] = frozenset(),
    dead: frozenset[int] = frozenset(),
    mismatched: frozenset[int] = frozenset(),
    first: int = 0,
    total_nodes: int | None = None,
    offsets: dict[int, int] | None = None,
    wait_s: float = 3.0,
) -> list[NodeRecord]:
    """Nodes first..first+nodes-1 of a job of total_nodes (default: nodes) nodes. Every rank
    waits wait_s in world collective #OPS but the stalled ones (never joined it) and the dead
    ones (joined, then died); a node's ranks all wait in their node communicator's collective
    #OPS but a stalled rank, which never joined it either. offsets: node -> its monotonic
    clock behind the master's (ns)."""
    total = total_nodes or nodes
    out = []
    for n in range(first, first + nodes):
        offset = (offsets or {}).get(n, 0)
        rec = NodeRecord(
            f"node-{n:05d}",
            api.AgentMode.slave,
            offset_ns=offset,
            identity=pb.NodeIdentity(node_name=f"node-{n:05d}", host=f"host-{n}"),
            state=api.NodeState.connected,
            has_state=True,
        )
        for local in range(RANKS_PER_NODE):
            rank = n * RANKS_PER_NODE + local
            rec.rows.processes[(1000 + rank, 0)] = _process(rank, rank in dead, offset)
            func = "Broadcast" if rank in mismatched else "AllReduce"
            joined = rank not in stalled
            for comm, comm_rank, nranks, nnodes in (
                (WORLD, rank, total * RANKS_PER_NODE, total),
                (node_comm(n), local, RANKS_PER_NODE, 1),
            ):
                wait = wait_s - 0.001 * local
                m, g = _rows(comm, rank, comm_rank, nranks, nnodes, joined, func, offset, wait)
                key = (comm, 1000 + rank, comm_rank, 1)
                rec.rows.members[key] = m
                rec.rows.progress[key] = g
        out.append(rec)
    return out


def relay_of(name: str, children: list[NodeRecord], offset: int = 0) -> NodeRecord:
    """A relay's record at its parent: the reduction of `children` (on the relay's clock, which
    is `offset` behind the parent's) and the node list it sends."""
    classes = rank_classes(children, NOW, STALE)
    rec = NodeRecord(
        name,
        api.AgentMode.relay,
        offset_ns=offset,
        identity=pb.NodeIdentity(node_name=name, host=f"host-{name}", relay=True),
        state=api.NodeState.connected,
        has_state=True,
    )
    # the relay's clock: its children's times moved by their offsets, and its own offset
    for rc in classes:
        _shift(rc, -offset)
    rec.classes = classes
    rec.class_runs = [class_runs(rc) for rc in classes]
    for child in children:
        rec.subtree[child.name] = pb.SubtreeNode(
            node_name=child.name, host=child.host, state=child.state.value
        )
        for below in child.subtree.values():
            moved = pb.SubtreeNode()
            moved.CopyFrom(below)
            moved.via.insert(0, child.name)
            rec.subtree[below.node_name] = moved
    return rec


def _shift(rc: pb.RankClass, by: int) -> None:
    def moved(t: int) -> int:
        return t + by if t else 0

    rc.member.init_mono_ns = moved(rc.member.init_mono_ns)
    for stages in (rc.progress.collectives, rc.progress.p2p):
        stages.enqueued_mono_ns = moved(stages.enqueued_mono_ns)
        stages.gpu_started_mono_ns = moved(stages.gpu_started_mono_ns)
        stages.completed_mono_ns = moved(stages.completed_mono_ns)
    if rc.progress.HasField("oldest_inflight"):
        op = rc.progress.oldest_inflight
        op.enqueued_mono_ns = moved(op.enqueued_mono_ns)
        op.gpu_started_mono_ns = moved(op.gpu_started_mono_ns)
    rc.process.heartbeat_mono_ns = moved(rc.process.heartbeat_mono_ns)
    rc.process.started_mono_ns = moved(rc.process.started_mono_ns)
