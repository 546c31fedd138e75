"""Attacks on hang diagnosis and incidents with cases real jobs hit: a whole job killed with
ops in flight, a slave whose reports stop while a hang is open, a master whose slave's wall
clock is off, two jobs on one node, sub-communicators, pipeline chains, a hang at the job's
first op, a slow rank that is not hung, and the incidents API with bad parameters.

Hand-built snapshots go through the real `diagnose`, `group_reports` and job view; the
simulated NCCL drives the real Profiler plugin where a case needs it (never timed: each
run waits with a deadline for the condition it checks)."""

from __future__ import annotations

import dataclasses
import os

import httpx
import pytest
from fifo_events import event_bytes
from hang_snapshots import (
    MS,
    NOW,
    THRESHOLD,
    S,
    culprit_ranks,
    member,
    only,
    op,
    p2p,
    proc,
    snapshot,
    stuck_at,
    tp_then_dp,
)
from live_agent import LiveAgent
from waiting import wait_until

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incident_store import IncidentStore
from comminsight.agent.hangs.incidents import group_reports, with_roles
from comminsight.agent.hangs.resolution import resolve_cleared
from comminsight.agent.hangs.unnamed_jobs import jobs_by_communicator
from comminsight.agent.master.job_view import NodeRecord, job_snapshot
from comminsight.agent.state.node_state import NodeRows
from comminsight.agent.state.snapshot import group_by_comm
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.hang_report_v1 import CauseLink, Resolution, Verdict

REAL = 1_700_000_000 * S


def gone(rank: int):
    """A rank's process that was killed (SIGKILL, or SIGTERM without an exit handler): its
    pid is gone and its region was never closed."""
    return proc(rank, exists=False)


def on_node(view, node: str, **kw):
    return dataclasses.replace(view, node_name=node, **kw)


# ---- a whole job killed with ops in flight ----------------------------------------------


def test_a_job_killed_whole_with_collectives_in_flight_is_no_hang():
    """A scheduler cancels a healthy job (SIGTERM then SIGKILL to every rank): each rank had
    its latest all-reduce in flight. Until the Agent retires the regions (twice the hang
    threshold) their rows still show those ops, older than the threshold. Nobody waits for
    anybody: no rank is alive to wait."""
    snap = snapshot(*(stuck_at(r, 9, process=gone(r)) for r in range(4)))
    assert [r.summary for r in diagnose(snap, NOW, THRESHOLD)] == []


def test_a_job_killed_whole_with_pipeline_sends_in_flight_is_no_hang():
    snap = snapshot(
        member(0, 0, 0, p2p("Send", 1), nranks=2, p2p_enqueued=8, p2p_completed=7,
               process=gone(0)),
        member(1, 0, 0, p2p("Recv", 0), nranks=2, p2p_enqueued=8, p2p_completed=7,
               process=gone(1)),
    )  # fmt: skip
    assert [r.summary for r in diagnose(snap, NOW, THRESHOLD)] == []


def test_a_rank_killed_mid_op_while_its_peers_wait_is_still_process_died():
    """The guard against the case above must keep the real one: rank 2 was killed inside
    all-reduce #9 while the live ranks wait in it."""
    snap = snapshot(stuck_at(0, 9), stuck_at(1, 9), stuck_at(2, 9, process=gone(2)), stuck_at(3, 9))
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert report.verdict is Verdict.process_died and culprit_ranks(report) == [2]


def test_a_hung_job_the_operator_kills_ends_its_incident_without_a_new_root(tmp_path):
    """The usual answer to a hang: rank 1 sits in host code, ranks 0, 2, 3 wait in
    all-reduce #9; the operator kills the job. The incident's root stays rank 1 and it
    ends because the processes ended, not because the op completed, and no 'every rank
    died' root replaces it while the dead regions wait for retirement."""
    store = IncidentStore(tmp_path, "node-a")
    held: dict = {}

    def one_pass(snap, now):
        reports = diagnose(snap, now, THRESHOLD, now_real_ns=REAL + now)
        groups = group_reports(reports)
        for r in with_roles(reports, groups):
            held[r.report_id] = r
        for r in resolve_cleared(list(held.values()), reports, snap):
            held[r.report_id] = r
        store.update(groups, held, now, REAL + now)
        return reports

    hung = [stuck_at(r, 9) for r in (0, 2, 3)] + [member(1, 9, 9, at=NOW - 4 * S)]
    assert one_pass(snapshot(*hung), NOW)
    (incident,) = store.incidents.values()
    killed = [dataclasses.replace(m, process=gone(m.rank)) for m in hung]
    later = NOW + 2 * S
    assert [r.summary for r in one_pass(snapshot(*killed), later)] == []
    (incident,) = store.incidents.values()
    assert [c.comm_rank for c in incident.root.culprits] == [1]
    assert incident.root_changes == []
    assert incident.status.value == "resolved"
    assert incident.resolution is Resolution.comm_finalized, incident.resolution


# ---- a rank that left after issuing the same op -----------------------------------------


def test_a_rank_that_left_after_issuing_the_very_op_the_others_wait_in_is_no_mismatch():
    """Real rows, as the Profiler writes them: the in-flight view of an all-reduce carries
    NCCL's root argument (0), the completed-op window leaves the root out of unrooted
    functions. Rank 3 issued all-reduce #35 like everyone, then its communicator was
    aborted (a NIC error): it left; it made no odd call."""
    waiters = []
    for r in (0, 1, 2):
        m = stuck_at(r, 35)
        waiters.append(dataclasses.replace(m, inflight=dataclasses.replace(m.inflight, peer=0)))
    left = member(3, 36, 36, None, state=shm_v1.CommState.FINALIZED, finalize_mono_ns=NOW - 2 * S)
    snap = snapshot(*waiters, left)
    view = dataclasses.replace(group_by_comm(waiters)[waiters[0].comm_id], departed=(left,))
    snap = dataclasses.replace(snap, comms={}, torn_down={view.comm_id: view})

    def completed(m):
        return {35: op(35, NOW - 3 * S)} if m.rank == 3 else {}

    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=completed))
    assert report.verdict is Verdict.rank_left, report.summary
    assert culprit_ranks(report) == [3]


def test_after_an_elastic_restart_only_the_new_incarnation_s_hang_is_reported():
    """torchrun restarted a failed 4-rank job with 3 ranks on the same host: the old
    processes were killed with their last all-reduce in flight (regions not yet retired),
    the new ones have new pids and ranks renumbered (old rank 3 is new rank 2). New rank 1
    sits in host code. Only the new communicator's hang is reported, naming the new
    process, never an old row that happens to share its rank number."""
    old, new = 0x01D, 0x2E1
    rows = [stuck_at(r, 9, comm_id=old, process=gone(r)) for r in range(4)]
    fresh = {r: dataclasses.replace(proc(r), pid=3000 + r) for r in range(3)}
    rows += [
        stuck_at(0, 2, comm_id=new, nranks=3, process=fresh[0]),
        member(1, 2, 2, at=NOW - 4 * S, comm_id=new, nranks=3, process=fresh[1]),
        stuck_at(2, 2, comm_id=new, nranks=3, process=fresh[2]),
    ]
    report = only(diagnose(snapshot(*rows), NOW, THRESHOLD))
    assert report.comm.comm_id == f"{new:016x}"
    assert [(c.comm_rank, c.pid) for c in report.culprits] == [(1, 3001)]


# ---- a master whose slave stops reporting while a hang is open --------------------------


def test_a_silent_slave_s_waiting_ranks_do_not_replace_the_rank_that_never_joined():
    """A master's job snapshot: rank 0 (node-a) sits in host code and never issued
    all-reduce #9; ranks 1-3 wait in it. node-b's slave then stops reporting (its Agent
    restarts, or the network drops): on the master the heartbeats of its ranks 2 and 3 go
    stale. They had joined #9: they are waiting, not the reason nobody completes it. The
    verdict stays on rank 0."""
    a = {r: on_node(proc(r), "node-a") for r in (0, 1)}
    b = {r: on_node(proc(r, hb_age=30 * S), "node-b") for r in (2, 3)}
    snap = snapshot(
        member(0, 9, 9, at=NOW - 4 * S, process=a[0], nnodes=2),
        stuck_at(1, 9, process=a[1], nnodes=2),
        stuck_at(2, 9, process=b[2], nnodes=2),
        stuck_at(3, 9, process=b[3], nnodes=2),
    )
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert culprit_ranks(report) == [0], report.summary
    assert report.verdict is Verdict.stuck_outside_nccl


# ---- a master whose slave's wall clock is off -------------------------------------------


def _node(name: str, *, local: bool, real_skew_ns: int, ranks: list[int], op_times, nranks: int):
    """A NodeRecord as the master holds it: one process per rank, one communicator, the last
    collective of each rank enqueued at op_times[rank] (node monotonic = master monotonic:
    offset 0; the node's wall clock is real_skew_ns ahead)."""
    rec = NodeRecord(
        name=name, mode=api.AgentMode.master if local else api.AgentMode.slave, local=local
    )
    rec.offset_ns = 0
    rec.state = api.NodeState.connected
    rows = NodeRows()
    for rank in ranks:
        pid = 5000 + rank
        rows.processes[(pid, 0)] = pb.ProcessInfo(
            pid=pid,
            ingest_state=pb.INGEST_STATE_ACTIVE,
            alive=True,
            heartbeat_mono_ns=NOW - 10 * MS,
            started_real_ns=REAL + real_skew_ns,
            started_mono_ns=1,
            global_rank=rank,
            job_id="job1",
        )
        key = (0xC0FFEE, pid, 0)
        rows.members[key] = pb.CommunicatorMember(
            comm_id=0xC0FFEE, pid=pid, comm_rank=rank, nranks=nranks, nnodes=2,
            name="dp:0", init_mono_ns=NOW - 100 * S,
        )  # fmt: skip
        n, at = op_times[rank]
        rows.progress[key] = pb.CommProgress(
            comm_id=0xC0FFEE,
            pid=pid,
            comm_rank=rank,
            collectives=pb.StageCounters(
                enqueued=n, enqueued_mono_ns=at, gpu_started=n, gpu_started_mono_ns=at,
                completed=n, completed_mono_ns=at,
            ),
        )  # fmt: skip
    rec.rows = rows
    return rec


@pytest.mark.parametrize("skew_s", [2, -2])
def test_a_slave_whose_wall_clock_is_off_is_not_a_straggler(skew_s):
    """Every rank enqueues each all-reduce at the same instant (one master-clock time); only
    node-b's wall clock is off by 2 s (no NTP). Ranks that join together are no stragglers,
    whatever the nodes' wall clocks say."""
    history = []
    for i in range(8):
        at = NOW - (20 - i) * S
        times = {r: (i + 1, at) for r in range(4)}
        nodes = [
            _node("node-a", local=True, real_skew_ns=0, ranks=[0, 1], op_times=times, nranks=4),
            _node("node-b", local=False, real_skew_ns=skew_s * S, ranks=[2, 3], op_times=times,
                  nranks=4),
        ]  # fmt: skip
        history.append(job_snapshot(nodes, "node-a", at + 50 * MS, REAL + at, 10 * S))
    reports = diagnose(history[-1], NOW, THRESHOLD, history=history[:-1])
    assert [r.summary for r in reports] == []


# ---- two jobs on one node ---------------------------------------------------------------


def test_two_jobs_without_job_ids_on_one_node_do_not_share_an_incident():
    """Two 2-rank jobs share a node and give no job id (no torchrun run id). Job 1's rank 1
    is stuck in host code (a root). Job 2's ranks wait in an all-reduce on a communicator
    whose other ranks sent no data (created at first use, on another node): nothing ties it
    to job 1, whose ranks are blocked behind its own root. It is its own incident."""
    j1 = [dataclasses.replace(proc(r), job_id="") for r in (0, 1)]
    # torchrun without --rdzv-id exports TORCHELASTIC_RUN_ID=none: no job id; both jobs
    # number their ranks from 0
    j2 = [dataclasses.replace(proc(r), pid=2000 + r, job_id="") for r in (0, 1)]
    snap = snapshot(
        stuck_at(0, 5, comm_id=0x1111, name="job1:dp", nranks=2, process=j1[0]),
        member(1, 5, 5, comm_id=0x1111, name="job1:dp", nranks=2, process=j1[1]),
        stuck_at(0, 3, comm_id=0x2222, name="job2:dp", nranks=4, nnodes=2, process=j2[0]),
        stuck_at(1, 3, comm_id=0x2222, name="job2:dp", nranks=4, nnodes=2, process=j2[1]),
    )
    reports = diagnose(snap, NOW, THRESHOLD)
    assert len(reports) == 2, [r.summary for r in reports]
    for jobs in (None, lambda: jobs_by_communicator(snap)):  # reports alone; communicators
        groups = group_reports(reports, jobs)
        assert len(groups) == 2, [
            (g.root.summary, [c.reason for _, c in g.consequences]) for g in groups
        ]


@pytest.mark.parametrize("tie", ["rank", "communicator", "nothing"])
def test_an_unnamed_jobs_report_without_data_joins_a_root_only_when_tied_to_its_job(tie):
    """No job id: the job is its processes that share communicators. Rank 1 of tp:1 is stuck
    in host code; rank 0 waits there and in dp:2 with the process of rank 2. A communicator
    whose rank 0 sent no data waits with one process. When that is rank 2's (in dp:2's
    report), or a process that shares a healthy communicator (the world) with the job's, it
    is of that job and the report joins tp:1's incident (`missing_member` when only the
    communicator ties it). When nothing ties it to that job (another tenant's job could be
    waiting for the missing rank), it stays its own root."""
    p = {r: dataclasses.replace(proc(r), job_id="") for r in range(5)}
    lazy = p[2] if tie == "rank" else p[4]
    rows = [
        stuck_at(0, 5, age=4 * S, comm_id=0x1111, name="tp:1", nranks=2, process=p[0]),
        member(1, 5, 5, comm_id=0x1111, name="tp:1", nranks=2, process=p[1]),
        member(0, 1, 0, op(0, NOW - 3 * S, started=False), comm_id=0x2222, name="dp:2",
               nranks=2, process=p[0]),
        member(1, 1, 0, op(0, NOW - 3 * S), comm_id=0x2222, name="dp:2", nranks=2,
               process=p[2]),
        member(1, 1, 0, op(0, NOW - 2 * S), comm_id=0x7777, name="dp:7", nranks=2,
               process=lazy),
    ]  # fmt: skip
    if tie == "communicator":  # the world, every op of which completed: no report
        rows += [
            member(r, 3, 3, comm_id=0x9999, name="world", nranks=5, process=p[r]) for r in range(5)
        ]
    snap = snapshot(*rows)
    reports = diagnose(snap, NOW, THRESHOLD)
    groups = group_reports(reports, lambda: jobs_by_communicator(snap))
    roots = {g.root.comm.comm_name: g for g in groups}
    if tie == "nothing":
        assert set(roots) == {"tp:1", "dp:7"}
        return
    assert set(roots) == {"tp:1"}
    links = {r.comm.comm_name: c.link for r, c in roots["tp:1"].consequences}
    assert set(links) == {"dp:2", "dp:7"}
    if tie == "communicator":
        assert links["dp:7"] is CauseLink.missing_member


def _pods_sharing_pids(namespaces: tuple[int, int]):
    """Two 2-rank jobs in two pods of one node, each pod numbering its processes from the same
    pids (its own PID namespace, namespaces[i]). In job A, rank 1 is stuck in host code and
    rank 0 waits in all-reduce #5; in job B, rank 0 is stuck in host code and rank 1 waits in
    #3. Job B's culprit has the pid of job A's waiting rank."""
    pods = [
        [dataclasses.replace(proc(r), job_id=job, pid_namespace=ns) for r in (0, 1)]
        for job, ns in zip(("jobA", "jobB"), namespaces, strict=True)
    ]
    return snapshot(
        stuck_at(0, 5, comm_id=0x1111, name="jobA:dp", nranks=2, process=pods[0][0]),
        member(1, 5, 5, comm_id=0x1111, name="jobA:dp", nranks=2, process=pods[0][1]),
        member(0, 3, 3, comm_id=0x2222, name="jobB:dp", nranks=2, process=pods[1][0]),
        stuck_at(1, 3, comm_id=0x2222, name="jobB:dp", nranks=2, process=pods[1][1]),
    )


def test_two_pods_whose_processes_share_pids_are_two_incidents():
    """Each job's hang is its own: job B's culprit is not 'stuck in' job A's all-reduce
    because a process of the other pod, with its pid, waits there. The reports name each
    process's PID namespace."""
    reports = diagnose(_pods_sharing_pids((4026531836, 4026532999)), NOW, THRESHOLD)
    assert len(reports) == 2, [r.summary for r in reports]
    assert sorted({c.pid_namespace for r in reports for c in r.culprits}) == [
        4026531836,
        4026532999,
    ]
    groups = group_reports(reports)
    assert sorted(g.root.comm.comm_name for g in groups) == ["jobA:dp", "jobB:dp"], [
        (g.root.summary, [c.reason for _, c in g.consequences]) for g in groups
    ]


def test_pods_whose_namespaces_are_unknown_are_taken_for_one_process_per_pid():
    """The same two pods from Profilers that recorded no PID namespace: the pid is all there
    is, and job B's culprit is taken for job A's waiting rank (what the namespace prevents)."""
    groups = group_reports(diagnose(_pods_sharing_pids((0, 0)), NOW, THRESHOLD))
    assert len(groups) == 1


# ---- sub-communicators and several communicators in flight ------------------------------


def test_a_rank_stuck_in_a_sub_communicator_is_the_root_of_the_world_hang():
    """8 ranks; a 2-rank sub-communicator {5, 6} (an expert-parallel pair). World rank 6
    never issues its all-to-all #4 there (host code); world rank 5 waits in it. Every other
    rank then waits in the world all-reduce #20 that ranks 5 and 6 never reach. The root
    is rank 6 on the sub-communicator; the world hang follows from it."""
    world, ep = 0xAAAA, 0xBBBB
    procs = {r: proc(r) for r in range(8)}
    rows = [
        stuck_at(r, 20, age=2 * S, comm_id=world, name="world", nranks=8, process=procs[r])
        for r in range(8)
        if r not in (5, 6)
    ]
    rows += [
        member(5, 20, 20, comm_id=world, name="world", nranks=8, process=procs[5]),
        member(6, 20, 20, at=NOW - 5 * S, comm_id=world, name="world", nranks=8,
               process=procs[6]),
        stuck_at(0, 4, age=4 * S, comm_id=ep, name="ep", nranks=2, process=procs[5],
                 op_kw={"func": "AllToAll"}),
        member(1, 4, 4, at=NOW - 5 * S, comm_id=ep, name="ep", nranks=2, process=procs[6]),
    ]  # fmt: skip
    reports = diagnose(snapshot(*rows), NOW, THRESHOLD)
    groups = group_reports(reports)
    assert len(groups) == 1, [g.root.summary for g in groups]
    root = groups[0].root
    assert root.comm.comm_name == "ep" and [c.global_rank for c in root.culprits] == [6]


def test_ranks_stuck_in_different_communicators_of_one_job_follow_one_root():
    """Megatron TP=2 x DP=2: rank 1 never issues TP all-reduce #7 (host code) and rank 0
    waits there; the DP group {1, 3}'s all-reduce #3 never gets rank 1 either, and rank 3
    waits in it. Two communicators, one culprit: one incident."""
    tp, dp = 0x1010, 0x2020
    p = {r: proc(r) for r in range(4)}
    rows = [
        stuck_at(0, 7, age=4 * S, comm_id=tp, name="tp:0", nranks=2, process=p[0]),
        member(1, 7, 7, at=NOW - 6 * S, comm_id=tp, name="tp:0", nranks=2, process=p[1]),
        member(0, 3, 3, at=NOW - 6 * S, comm_id=dp, name="dp:1", nranks=2, process=p[1]),
        stuck_at(1, 3, age=2 * S, comm_id=dp, name="dp:1", nranks=2, process=p[3]),
    ]
    groups = group_reports(diagnose(snapshot(*rows), NOW, THRESHOLD))
    assert len(groups) == 1, [g.root.summary for g in groups]
    assert [c.global_rank for c in groups[0].root.culprits] == [1]


# ---- pipeline chains (Megatron 1F1B) ----------------------------------------------------


def test_a_pipeline_hang_where_the_stuck_stage_is_not_the_odd_one_by_count():
    """Four stages each with 8 sends/recvs posted; stage 1 is stuck in a Send to stage 2
    (activations), stage 2 sits in host code (not in NCCL) having posted as many P2P ops as
    everyone. Counting ops says nothing; the chain of waits names stage 2."""
    snap = snapshot(
        member(0, 0, 0, p2p("Recv", 1, age=2 * S), nranks=4, p2p_enqueued=8, p2p_completed=7,
               name="pp:3"),
        member(1, 0, 0, p2p("Send", 2, age=3 * S), nranks=4, p2p_enqueued=8, p2p_completed=7,
               name="pp:3"),
        member(2, 0, 0, nranks=4, p2p_enqueued=8, p2p_completed=8, name="pp:3"),
        member(3, 0, 0, p2p("Recv", 2, age=4 * S), nranks=4, p2p_enqueued=8, p2p_completed=7,
               name="pp:3"),
    )  # fmt: skip
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert culprit_ranks(report) == [2], report.summary
    assert report.verdict is Verdict.stuck_outside_nccl


def test_a_batched_pipeline_exchange_behind_a_tensor_parallel_hang_follows_from_it():
    """Megatron TP=2 x PP=2 (global ranks: tp {0, 1}, {2, 3}; pp {0, 2}, {1, 3}), seen with
    the simulated NCCL: rank 3 never issues TP all-reduce #25, rank 2 waits in it. The
    exchange rank 2 then posted with rank 0 (batch_isend_irecv: a Send and a Recv each way,
    one group) is queued behind it; both show their Send as the oldest op. That is no call
    order mismatch naming ranks 0 and 2 in an incident of its own: it follows from rank 3."""
    tp_b, pp_a = 0x3D7F, 0xE603
    g = {r: proc(r) for r in range(4)}
    rows = [
        stuck_at(0, 25, age=4 * S, comm_id=tp_b, name="tp:23", nranks=2, process=g[2]),
        member(1, 25, 25, at=NOW - 5 * S, comm_id=tp_b, name="tp:23", nranks=2, process=g[3]),
        member(0, 0, 0, p2p("Send", 1, age=3 * S), comm_id=pp_a, name="pp:24", nranks=2,
               p2p_enqueued=10, p2p_completed=8, process=g[0]),
        member(1, 0, 0, p2p("Send", 0, age=3 * S), comm_id=pp_a, name="pp:24", nranks=2,
               p2p_enqueued=10, p2p_completed=8, process=g[2]),
    ]  # fmt: skip
    reports = diagnose(snapshot(*rows), NOW, THRESHOLD)
    pp_report = next(r for r in reports if r.comm.comm_name == "pp:24")
    assert pp_report.verdict is not Verdict.op_mismatch, pp_report.summary
    groups = group_reports(reports)
    assert len(groups) == 1, [g.root.summary for g in groups]
    assert [c.global_rank for c in groups[0].root.culprits] == [3]


def test_two_blocking_sends_toward_each_other_stay_a_call_order_mismatch():
    """The guard above must keep the real deadlock: each rank's only P2P op in flight is a
    Send to the other (torch.distributed.send blocks, so the Recv after it never comes)."""
    rows = [
        member(0, 0, 0, p2p("Send", 1), nranks=2, p2p_enqueued=8, p2p_completed=7),
        member(1, 0, 0, p2p("Send", 0), nranks=2, p2p_enqueued=8, p2p_completed=7),
    ]
    report = only(diagnose(snapshot(*rows), NOW, THRESHOLD))
    assert report.verdict is Verdict.op_mismatch and culprit_ranks(report) == [0, 1]


def test_sends_facing_each_other_with_more_ops_in_flight_and_nothing_before_are_a_mismatch():
    """As on two H200s (bench/gpu fault `sendsend`: a pipeline job whose rank 1 sends where
    it should receive): each rank has several P2P ops in flight, its oldest a Send to the
    other, and nothing of another communicator enqueued before. No hang elsewhere explains
    it: the call order is wrong, both ranks are named."""
    rows = [
        member(0, 0, 0, p2p("Send", 1), nranks=2, p2p_enqueued=19, p2p_completed=16),
        member(1, 0, 0, p2p("Send", 0), nranks=2, p2p_enqueued=18, p2p_completed=16),
    ]
    report = only(diagnose(snapshot(*rows), NOW, THRESHOLD))
    assert report.verdict is Verdict.op_mismatch and culprit_ranks(report) == [0, 1]


# ---- a straggler that is slow, and the first op of a job --------------------------------


def test_a_slow_rank_below_the_threshold_is_a_straggler_never_a_hang():
    """Rank 2 joins every all-reduce 300 ms late (a slow data loader), below the 1 s hang
    threshold; its peers wait for it each time, under the threshold."""
    history = []
    for i in range(8):
        base = NOW - 10 * S + i * S
        rows = [member(r, i + 1, i, op(i, base), at=base) for r in (0, 1, 3)]
        rows.append(member(2, i + 1, i, op(i, base + 300 * MS), at=base + 300 * MS))
        history.append(snapshot(*rows))
    reports = diagnose(history[-1], NOW - 10 * S + 7 * S + 500 * MS, THRESHOLD, history=history)
    assert {r.verdict for r in reports} <= {Verdict.straggler}
    assert all(culprit_ranks(r) == [2] for r in reports)


def test_a_hang_at_the_job_s_first_op_names_the_rank_that_never_issued_it():
    """No history, no rhythm: the very first all-reduce (#0) of a fresh communicator, rank 1
    never issued it (stuck loading its checkpoint)."""
    snap = snapshot(stuck_at(0, 0), member(1, 0, 0, at=0), stuck_at(2, 0), stuck_at(3, 0))
    report = only(diagnose(snap, NOW, THRESHOLD))
    assert culprit_ranks(report) == [1]
    assert report.verdict is Verdict.stuck_outside_nccl


# ---- hostile input: forged hang events, bad incident API requests -----------------------

TOKEN = "attack-token"


def _write_fifo(path, data: bytes) -> None:

    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_forged_hang_events_open_no_report_and_no_incident(tmp_path):
    """Anyone who can write the FIFO can claim a hang: 'hang suspected' for a communicator
    and pid no SHM region shows. Diagnosis rests on the regions, so nothing opens."""

    with LiveAgent(tmp_path) as agent:
        forged = b"".join(
            event_bytes(pid=4242, comm_id=0xDEAD0000 + i, op_index=i, rank=i % 8) for i in range(64)
        )
        _write_fifo(agent.service.fifo.path, forged)
        wait_until(lambda: agent.service.fifo.stats.events >= 64, 60, "the forged events read")
        agent.wait_passes(3)
        assert agent.call(lambda: dict(agent.service.hangs.reports)) == {}
        assert agent.call(lambda: dict(agent.service.incidents.incidents)) == {}


@pytest.mark.parametrize(
    ("method", "path", "params", "codes"),
    [
        ("GET", "/api/v1/incidents", {"limit": "-1"}, {400}),
        ("GET", "/api/v1/incidents", {"limit": "0"}, {400}),
        ("GET", "/api/v1/incidents", {"limit": str(10**30)}, {400}),
        ("GET", "/api/v1/incidents", {"limit": "1e3"}, {400}),
        ("GET", "/api/v1/incidents", {"limit": "5", "status": "bogus"}, {400}),
        ("GET", "/api/v1/incidents", {"status": ""}, {400}),
        ("GET", "/api/v1/incidents/" + "a" * 5000, {}, {400, 414}),
        ("GET", "/api/v1/incidents/%2e%2e%2fmetadata", {}, {400, 404}),
        ("GET", "/api/v1/incidents/inc-%00", {}, {400}),
        ("GET", "/api/v1/incidents/.hidden", {}, {400}),
        ("GET", "/api/v1/incidents/inc-%E2%80%AE", {}, {400}),
        ("POST", "/api/v1/incidents/inc-nope/resolve", {}, {404}),
        ("POST", "/api/v1/incidents/.x/resolve", {}, {400}),
    ],
)
def test_bad_incident_requests_are_refused_by_name(tmp_path, method, path, params, codes):

    with LiveAgent(tmp_path, polling=False, agent_token=TOKEN) as agent:
        r = httpx.request(
            method,
            agent.base_url + path,
            params=params,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code in codes, (r.status_code, r.text[:300])
        if r.status_code != 414:
            assert "code" in r.json(), r.text[:300]
        # the server serves on
        assert httpx.get(agent.base_url + "/api/v1/incidents").status_code == 200


def test_a_resolve_with_a_huge_or_hostile_note_is_refused_and_the_incident_stays(tmp_path):
    """An incident exists; resolve requests with a 10 MB body, a note of the wrong type, or
    JSON nested deep must not resolve it nor stop the server."""

    with LiveAgent(tmp_path, polling=False, agent_token=TOKEN) as agent:
        reports = diagnose(snapshot(*tp_then_dp()), NOW, THRESHOLD, now_real_ns=REAL)
        groups = group_reports(reports)

        def put():
            for r in with_roles(reports, groups):
                agent.service.hangs.save(r)
            agent.service.incidents.update(groups, agent.service.hangs.reports, NOW, REAL)

        agent.call(put)
        incident_id = next(iter(agent.call(lambda: dict(agent.service.incidents.incidents))))
        url = f"{agent.base_url}/api/v1/incidents/{incident_id}/resolve"
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        for body in (
            b'{"note": "' + b"x" * (10 << 20) + b'"}',
            b'{"note": ["a"]}',
            b"[" * 100_000 + b"]" * 100_000,
            b'{"note": "ok", "note": 5}',
        ):
            try:
                r = httpx.post(url, content=body, headers=auth, timeout=60)
            except httpx.TransportError:
                continue  # the server may cut a body over its limit short
            assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
        listed = httpx.get(f"{agent.base_url}/api/v1/incidents").json()
        assert listed["total"] == 1 and listed["items"][0]["status"] == "open"


@pytest.mark.parametrize("kind", ["incidents", "hangs"])
def test_a_resolve_body_that_is_not_utf8_is_a_malformed_body(tmp_path, kind):
    with LiveAgent(tmp_path, polling=False, agent_token=TOKEN) as agent:
        r = httpx.post(
            f"{agent.base_url}/api/v1/{kind}/any-id/resolve",
            content=b'{"note": "\xff\xfe"}',
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["code"] == "malformed_body", r.text[:300]
