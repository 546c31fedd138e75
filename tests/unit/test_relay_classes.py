"""A relay's reduction (ranks in the same state as one class) and the master's verdict from it:
the same verdict and culprits as from every rank's rows, in a fraction of the rows."""

from __future__ import annotations

import pytest
from relay_jobs import (
    NOW,
    OPS,
    RANKS_PER_NODE,
    REAL,
    STALE,
    THRESHOLD,
    WORLD,
    job_nodes,
    node_comm,
    relay_of,
)

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.master.grpc_service import (
    MAX_SUBTREE_NODES,
    Refusal,
    apply_rows,
    check_reduction,
)
from comminsight.agent.master.job_view import counted_sources, job_snapshot
from comminsight.agent.relay.classes import rank_classes
from comminsight.agent.state.rank_runs import BadRuns, RankRuns
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api


def verdicts(nodes) -> list[tuple]:
    """(verdict, communicator, culprits as (rank, node, pid)) of the master's diagnosis."""
    snap = job_snapshot(nodes, "master", NOW, REAL, STALE)
    return sorted(
        (
            r.verdict.value,
            r.comm.comm_id,
            tuple((c.comm_rank, c.node_name, c.pid) for c in r.culprits),
        )
        for r in diagnose(snap, NOW, THRESHOLD, now_real_ns=REAL)
    )


# ---- rank runs ----------------------------------------------------------------------------


def test_runs_hold_ranks_compactly_and_answer_membership():
    runs = RankRuns.of([5, 0, 1, 2, 3, 9, 4])
    assert (runs.starts, runs.ends) == ((0, 9), (6, 10))
    assert runs.flat() == [0, 6, 9, 1] and len(runs) == 7
    assert 4 in runs and 6 not in runs and 9 in runs and "4" not in runs
    assert RankRuns.from_flat(runs.flat(), 10) == runs
    assert runs.union(RankRuns.of([6, 7, 8])).flat() == [0, 10]
    assert runs.text() == "0-5,9"


@pytest.mark.parametrize(
    "flat, limit, why",
    [
        ([0], 8, "pairs"),
        ([0, 0], 8, "empty run"),
        ([4, 2, 2, 1], 8, "not after"),
        ([4, 2, 5, 1], 8, "not after"),
        ([6, 4], 8, "passes the communicator"),
        ([0, 1] * ((1 << 17) + 1), 1 << 40, r"runs \(at most"),
    ],
)
def test_runs_a_peer_sends_are_checked(flat, limit, why):
    with pytest.raises(BadRuns, match=why):
        RankRuns.from_flat(flat, limit)


# ---- the reduction ------------------------------------------------------------------------


def test_a_healthy_job_is_one_class_per_communicator():
    nodes = job_nodes(16)
    classes = rank_classes(nodes, NOW, STALE)
    world = [c for c in classes if c.member.comm_id == WORLD]
    assert len(world) == 1 and world[0].size == 16 * RANKS_PER_NODE and world[0].nodes == 16
    assert RankRuns.from_flat(world[0].rank_runs).flat() == [1, 127]
    assert len(classes) == 1 + 16  # the world, and each node's own communicator
    # the representative is the rank that waited longest: local rank 0 of some node
    assert world[0].member.comm_rank % RANKS_PER_NODE == 0


def test_the_representative_s_times_are_moved_onto_the_relay_s_clock():
    offset = 7 * 1_000_000_000
    nodes = job_nodes(2, offsets={0: offset, 1: offset})
    (world,) = [c for c in rank_classes(nodes, NOW, STALE) if c.member.comm_id == WORLD]
    # a node's own clock is `offset` behind; the class carries the relay's (here the master's)
    assert world.progress.oldest_inflight.enqueued_mono_ns == NOW - 3 * 1_000_000_000
    assert world.process.heartbeat_mono_ns == NOW


def test_an_outlier_s_process_travels_rank_by_rank():
    nodes = job_nodes(8, stalled=frozenset({13}))
    classes = rank_classes(nodes, NOW, STALE)
    alone = [c for c in classes if c.process.global_rank == 13]
    # its world row and its node-communicator row, each a class of one
    assert sorted(c.member.comm_id for c in alone) == sorted([WORLD, node_comm(1)])
    assert all(c.size == 1 and not c.rank_runs for c in alone)
    world = [c for c in classes if c.member.comm_id == WORLD]
    assert sum(c.size for c in world) == 64


@pytest.mark.parametrize(
    "fault",
    [
        {"stalled": frozenset({13})},
        {"stalled": frozenset(range(16, 24))},  # a whole node never joined
        {"dead": frozenset({40})},
        {"mismatched": frozenset({7})},
        {"wait_s": 0.2},
    ],
    ids=["one-rank-stalled", "a-node-stalled", "a-process-died", "a-mismatched-call", "healthy"],
)
def test_the_verdict_from_classes_is_the_verdict_from_every_row(fault):
    nodes = job_nodes(8, **fault)
    flat = verdicts(nodes)
    tree = verdicts([relay_of("relay-a", nodes[:4]), relay_of("relay-b", nodes[4:])])
    assert tree == flat
    assert bool(flat) == ("wait_s" not in fault)


def test_a_relay_of_relays_gives_the_same_verdict_and_culprit():
    nodes = job_nodes(12, stalled=frozenset({50}))
    middle = [relay_of(f"relay-{i}", nodes[i * 4 : i * 4 + 4]) for i in range(3)]
    top = relay_of("relay-top", middle, offset=3 * 1_000_000_000)
    assert verdicts([top]) == verdicts(nodes)
    assert top.subtree["node-00006"].via == ["relay-1"]
    (world,) = [v for v in verdicts([top]) if v[1] == f"{WORLD:016x}"]
    assert world[2] == ((50, "node-00006", 1050),)


def test_the_master_holds_classes_not_rows():
    nodes = job_nodes(64, stalled=frozenset({77}))
    relays = [relay_of(f"relay-{i}", nodes[i * 16 : i * 16 + 16]) for i in range(4)]
    snap = job_snapshot(relays, "master", NOW, REAL, STALE)
    world = snap.comms[WORLD]
    assert world.ranks_present == 64 * RANKS_PER_NODE and not world.missing_ranks
    assert len(world.members) <= 4 * 3  # per relay: the waiting class, the culprit's, a split
    assert world.member(300) is not None and world.member(77).rank == 77
    (report,) = [
        r
        for r in diagnose(snap, NOW, THRESHOLD, now_real_ns=REAL)
        if r.comm.comm_id == f"{WORLD:016x}"
    ]
    assert f"{OPS}" in report.summary and "511 rank(s) wait" in report.summary


# ---- the master's side of a relay ---------------------------------------------------------


def _relay_batch(relay, **fields) -> pb.NodeStateBatch:
    return pb.NodeStateBatch(
        batch_seq=1,
        full_state=True,
        full_state_last=True,
        rank_classes=relay.classes,
        subtree_nodes=list(relay.subtree.values()),
        **fields,
    )


def test_a_relay_s_full_state_replaces_its_classes_whole():
    relay = relay_of("relay-a", job_nodes(4))
    at_master = relay_of("relay-a", [])
    apply_rows(at_master, _relay_batch(relay))
    assert len(at_master.classes) == len(relay.classes) and len(at_master.subtree) == 4
    apply_rows(at_master, _relay_batch(relay_of("relay-a", job_nodes(1))))
    assert len(at_master.subtree) == 1


@pytest.mark.parametrize(
    "corrupt, why",
    [
        (lambda b: setattr(b.rank_classes[0], "node_name", "../x"), "does not match"),
        (lambda b: setattr(b, "full_state", False), "outside a full_state"),
        (lambda b: b.subtree_nodes[0].via.extend(["r"] * 17), "more than 16 relays"),
        (lambda b: b.subtree_nodes[0].via.append("../up"), "a bad name on its way"),
    ],
)
def test_a_relay_s_bad_batch_is_refused_by_name(corrupt, why):
    relay = relay_of("relay-a", job_nodes(2))
    batch = _relay_batch(relay)
    corrupt(batch)
    with pytest.raises(Refusal, match=why) as e:
        check_reduction(relay, batch)
    assert e.value.reject.reason == pb.REJECT_REASON_MALFORMED


@pytest.mark.parametrize(
    "corrupt, why",
    [
        (lambda c: c.rank_runs.extend([0, 1]), "not after"),
        (lambda c: c.rank_runs.extend([10**6, 1]), "passes the communicator"),
        (lambda c: setattr(c.member, "comm_rank", 1), "in its runs"),
        (lambda c: setattr(c.member, "nranks", 0), "passes the communicator"),
    ],
)
def test_a_relay_s_bad_class_is_dropped_by_name_and_the_rest_applied(corrupt, why):
    relay = relay_of("relay-a", job_nodes(2))
    batch = _relay_batch(relay)
    (world,) = [c for c in batch.rank_classes if c.member.comm_id == WORLD]
    corrupt(world)
    (reason,), runs = check_reduction(relay, batch)
    assert why in reason and f"{WORLD:016x}" in reason
    assert len(batch.rank_classes) == len(runs) == len(relay.classes) - 1
    assert all(c.member.comm_id != WORLD for c in batch.rank_classes)


def test_a_relay_s_oversized_full_state_is_refused():
    relay = relay_of("relay-a", job_nodes(1))
    batch = _relay_batch(relay)
    batch.subtree_nodes.extend(pb.SubtreeNode(node_name=f"n{i}") for i in range(MAX_SUBTREE_NODES))
    with pytest.raises(Refusal, match="subtree nodes"):
        check_reduction(relay, batch)


def test_classes_from_a_slave_are_refused():
    slave = job_nodes(1)[0]
    batch = _relay_batch(relay_of("relay-a", job_nodes(1)))
    with pytest.raises(Refusal, match="registered as a slave"):
        check_reduction(slave, batch)


def test_a_relay_that_died_counts_until_its_nodes_are_heard_again():
    nodes = job_nodes(4, stalled=frozenset({5}))
    relay = relay_of("relay-a", nodes)
    relay.state = api.NodeState.disconnected
    for n in nodes:
        n.state = api.NodeState.disconnected
    # half its nodes came to the master directly: the old classes still count, the moved
    # nodes' new rows wait, so that no rank is counted twice
    nodes[0].state = nodes[1].state = api.NodeState.connected
    kept, shadowed = counted_sources([relay, *nodes[:2]])
    assert kept == [relay] and shadowed == {"node-00000", "node-00001"}
    assert verdicts([relay, *nodes[:2]]) == verdicts(nodes)
    # all of them moved: the relay's classes go
    for n in nodes:
        n.state = api.NodeState.connected
    kept, shadowed = counted_sources([relay, *nodes])
    assert kept == nodes and not shadowed
    # a slave whose rows the master kept from before now reports through a relay
    live = relay_of("relay-b", nodes[2:])  # it hears node 3, which the master lost
    nodes[3].state = api.NodeState.disconnected
    kept, _ = counted_sources([live, *nodes])
    assert nodes[3] not in kept and live in kept


# ---- the API through a relay --------------------------------------------------------------


def test_the_master_s_communicator_view_counts_every_rank_of_its_classes():
    from comminsight.agent.api.views import communicators
    from comminsight.agent.master.job_view import job_rows

    nodes = job_nodes(16, stalled=frozenset({77}))
    flat = {c.comm_id: c for c in communicators(job_rows(nodes), {}, full=True, now=NOW)}
    relays = [relay_of("relay-a", nodes[:8]), relay_of("relay-b", nodes[8:])]
    tree = {c.comm_id: c for c in communicators(job_rows(relays), {}, full=True, now=NOW)}
    assert tree.keys() == flat.keys()
    for comm_id, c in tree.items():
        f = flat[comm_id]
        assert (c.ranks_seen, c.complete) == (f.ranks_seen, f.complete)
        assert set(c.nodes) <= set(f.nodes)  # the representatives' nodes
        assert (c.ops_completed_total, c.ranks_inflight) == (
            f.ops_completed_total,
            f.ranks_inflight,
        )
        assert sum(r.same_state_count for r in c.ranks) == len(f.ranks)
    world = tree[f"{WORLD:016x}"]
    assert len(world.ranks) < len(flat[f"{WORLD:016x}"].ranks) // 10
    (alone,) = [r for r in world.ranks if r.comm_rank == 77]
    assert alone.same_state_count == 1 and alone.same_state_ranks is None
    assert alone.node_name == "node-00009"


def test_a_report_through_relays_has_an_entry_per_class_not_per_rank():
    nodes = job_nodes(16, stalled=frozenset({77}))
    relays = [relay_of("relay-a", nodes[:8]), relay_of("relay-b", nodes[8:])]
    snap = job_snapshot(relays, "master", NOW, REAL, STALE)
    (report,) = [
        r
        for r in diagnose(snap, NOW, THRESHOLD, now_real_ns=REAL)
        if r.comm.comm_id == f"{WORLD:016x}"
    ]
    counts = [
        e.same_state_count if isinstance(e.same_state_count, int) else 1 for e in report.evidence
    ]
    assert sum(counts) == 128 and len(report.evidence) < 10
    (culprit,) = [e for e in report.evidence if e.comm_rank == 77]
    assert culprit.joined is False and not isinstance(culprit.same_state_count, int)
    classes = [e for e in report.evidence if isinstance(e.same_state_count, int)]
    assert all(e.joined and e.same_state_ranks for e in classes)


def test_the_ranks_missing_from_runs():
    runs = RankRuns.of([0, 1, 2, 5, 9])
    assert list(runs.missing(12)) == [3, 4, 6, 7, 8, 10, 11]
    assert list(runs.missing(3)) == [] and list(RankRuns().missing(2)) == [0, 1]
    assert list(RankRuns.of([4]).missing(3)) == [0, 1, 2]


def test_a_quiet_relay_s_classes_go_after_a_while_and_the_master_s_node_is_never_left_out():
    from comminsight.agent.master.job_view import QUIET_RELAY_KEPT_NS

    nodes = job_nodes(3)
    relay = relay_of("relay-a", nodes)
    relay.state, relay.last_seen_mono_ns = api.NodeState.disconnected, NOW
    nodes[2].state = api.NodeState.disconnected  # died with its relay: never heard again
    nodes[0].local = True
    nodes[0].state = api.NodeState.local  # a relay claims the master's own node
    kept, shadowed = counted_sources([relay, *nodes], NOW + 1)
    assert relay in kept and nodes[0] in kept and "node-00000" not in shadowed
    kept, shadowed = counted_sources([relay, *nodes], NOW + QUIET_RELAY_KEPT_NS)
    assert relay not in kept and not shadowed


# ---- what diagnosis asks beyond a rank's own row --------------------------------------------


def _advanced(ops: int, late_rank: int, late_ns: int) -> list:
    """A job of 4 nodes (world communicator only) `ops` collectives on, every rank joining
    at the same instant but late_rank, which joins late_ns after them."""
    nodes = job_nodes(4, wait_s=0.2)
    for n in nodes:
        for key in [k for k in n.rows.members if k[0] != WORLD]:
            del n.rows.members[key], n.rows.progress[key]
        for key, g in n.rows.progress.items():
            c = g.collectives
            c.enqueued, c.gpu_started, c.completed = (
                c.enqueued + ops,
                c.gpu_started + ops,
                c.completed + ops,
            )
            g.oldest_inflight.op_index += ops
            g.oldest_inflight.seq += ops
            at = NOW - 400_000_000 + (late_ns if key[1] == 1000 + late_rank else 0)
            g.oldest_inflight.enqueued_mono_ns = c.enqueued_mono_ns = at
    return nodes


@pytest.mark.parametrize("relays", [1, 2])
def test_a_straggler_stays_apart_from_its_class(relays):
    def view(nodes):
        return [
            relay_of(f"relay-{i}", nodes[i * 4 // relays : (i + 1) * 4 // relays])
            for i in range(relays)
        ]

    found = {}
    for label, shape in (("flat", lambda ns: ns), ("tree", view)):
        history = []
        for k in range(7):
            snap = job_snapshot(shape(_advanced(k, 13, 300_000_000)), "master", NOW, REAL, STALE)
            reports = diagnose(snap, NOW, THRESHOLD, history=history, now_real_ns=REAL)
            history.append(snap)
        found[label] = [(r.verdict.value, [c.comm_rank for c in r.culprits]) for r in reports]
    assert found["tree"] == found["flat"] == [("straggler", [13])]


def test_a_pipeline_wait_names_the_peer_inside_a_class():
    from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

    pp = 0x5050000000000001
    nodes = job_nodes(8, wait_s=0.2)
    for n, rec in enumerate(nodes):  # one pipeline rank per node: idle but rank 3
        pid = 1000 + n * RANKS_PER_NODE
        key = (pp, pid, n, 1)
        rec.rows.members[key] = pb.CommunicatorMember(
            comm_id=pp, pid=pid, generation=1, comm_rank=n, nranks=8, nnodes=8,
            init_mono_ns=NOW - 500 * 10**9,
        )  # fmt: skip
        g = rec.rows.progress[key] = pb.CommProgress(
            comm_id=pp, pid=pid, generation=1, comm_rank=n,
            p2p=pb.StageCounters(enqueued=10, completed=10, enqueued_mono_ns=NOW - 60 * 10**9,
                                 completed_mono_ns=NOW - 60 * 10**9),
        )  # fmt: skip
        if n == 3:  # waits in a receive from rank 2, which is busy in the world collective
            at = NOW - 5 * 10**9
            g.p2p.enqueued, g.p2p.enqueued_mono_ns, g.inflight_count = 11, at, 1
            g.oldest_inflight.CopyFrom(
                pb.InflightOp(
                    seq=10, kind=pb.OP_KIND_P2P, func="Recv", datatype="ncclFloat32", count=1024,
                    size_bytes=4096, peer_or_root=2, enqueued_mono_ns=at, op_index=10,
                    n_channels=1,
                )
            )  # fmt: skip

    def culprits(view):
        snap = job_snapshot(view, "master", NOW, REAL, STALE)
        return [
            (r.verdict.value, [c.comm_rank for c in r.culprits])
            for r in diagnose(snap, NOW, THRESHOLD, now_real_ns=REAL)
            if r.comm.comm_id == f"{pp:016x}"
        ]

    assert culprits(nodes) == [("rank_not_joined", [2])]
    assert culprits([relay_of("relay-a", nodes)]) == culprits(nodes)
    assert culprits([relay_of("relay-a", nodes[:4]), relay_of("relay-b", nodes[4:])]) == culprits(
        nodes
    )


def test_many_ranks_missing_an_op_while_busy_elsewhere_are_not_stuck_outside_nccl():
    """24 ranks never joined the world collective, each busy in its node's communicator:
    more than an outlier class, yet its representative's other rows still reach the master."""
    stalled = frozenset(range(16, 40))
    nodes = job_nodes(8, stalled=stalled)
    for n in nodes:  # the stalled ranks wait in their node communicator instead
        for key, g in n.rows.progress.items():
            if key[0] != WORLD and 1000 + 16 <= key[1] < 1000 + 40:
                c = g.collectives
                c.enqueued = OPS + 1
                g.inflight_count = 1
                g.oldest_inflight.CopyFrom(
                    pb.InflightOp(
                        seq=OPS, kind=pb.OP_KIND_COLL, func="AllGather", datatype="ncclFloat32",
                        count=8, size_bytes=32, enqueued_mono_ns=NOW - 2 * 10**9, op_index=OPS,
                        n_channels=1,
                    )
                )  # fmt: skip
    world = f"{WORLD:016x}"
    flat = [v for v in verdicts(nodes) if v[1] == world]
    tree = [
        v
        for v in verdicts([relay_of("relay-a", nodes[:4]), relay_of("relay-b", nodes[4:])])
        if v[1] == world
    ]
    assert [v[0] for v in tree] == [v[0] for v in flat] == ["rank_not_joined"]
    assert set(r for r, _, _ in tree[0][2]) <= stalled


def test_a_record_knows_when_its_waits_cross_the_threshold():
    relay = relay_of("relay-a", job_nodes(2, wait_s=0.2), offset=5 * 10**9)
    relay.note_waits()
    # the ranks enqueued 0.2 s ago and a little later (a millisecond per local rank); on the
    # master's clock
    assert relay.wait_starts[0] == NOW - 200_000_000
    crossing = NOW - 200_000_000 + THRESHOLD
    assert relay.wait_crosses(crossing - 1, crossing, THRESHOLD)
    assert not relay.wait_crosses(NOW, crossing - 1, THRESHOLD)  # not yet
    assert not relay.wait_crosses(NOW + THRESHOLD, NOW + 2 * THRESHOLD, THRESHOLD)  # long past
    healthy = job_nodes(1, wait_s=0.2)[0]
    for g in healthy.rows.progress.values():
        g.ClearField("oldest_inflight")
    healthy.note_waits()
    assert healthy.wait_starts == [] and not healthy.wait_crosses(0, NOW * 2, THRESHOLD)


def test_the_ranks_a_master_remembers_do_not_pile_up_as_representatives_change():
    from comminsight.agent.hangs.left_comm import MembersSeen

    seen = MembersSeen()
    for first in range(6):  # each report another rank waited longest: another representative
        nodes = job_nodes(4, wait_s=0.2)
        for n in nodes:
            for key, g in n.rows.progress.items():
                if key[0] == WORLD and key[2] == first:
                    g.oldest_inflight.enqueued_mono_ns -= 10**8
                    g.collectives.enqueued_mono_ns -= 10**8
        snap = job_snapshot([relay_of("relay-a", nodes)], "master", NOW, REAL, STALE)
        seen.note(snap)
        assert len(seen.of(WORLD)) == len(snap.comms[WORLD].members)
