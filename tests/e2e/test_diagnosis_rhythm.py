"""The odd rank by the job's own rhythm: where ranks disagree at one op and no majority decides
(two ranks, an even split), the culprit is the rank whose op breaks the cycle the job's ops
repeat (the Semantic Engine's Step cycle, or the period of the communicator's completed ops);
when nothing decides, no culprit and both sides in the report.

Hand-built snapshots as in test_agent_diagnosis, the op sequence of a real 2 x H200 DDP job
(tests/data/gpu/ddp_h200x2), step summaries the offline engine recovers from it, and end to
end: the simulated NCCL driving the real plugin while a LiveAgent diagnoses."""

from __future__ import annotations

import dataclasses
import json
import os
import tarfile
import threading
from pathlib import Path

import jsonschema
import msgspec
import pytest
from agent_home import hold_agent_lock
from hang_snapshots import (
    NOW,
    THRESHOLD,
    S,
    culprit_ranks,
    member,
    only,
    op,
    proc,
    snapshot,
    stuck_at,
)
from live_agent import LiveAgent

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.hangs.incident_store import IncidentStore
from comminsight.agent.hangs.incidents import group_reports, with_roles
from comminsight.agent.hangs.op_rhythm import (
    MIN_SPAN_OPS,
    StepCycle,
    Unknown,
    comm_history,
    expected_op,
)
from comminsight.agent.hangs.step_cycles import StepCycles, cycle_in, newest_steps
from comminsight.agent.state.snapshot import InflightOp
from comminsight.sim import SimConfig, parse_fault, run_simulation
from comminsight.sim.workloads import build_plan
from comminsight_gen.models.hang_report_v1 import CulpritBasis, HangReport, Severity, Verdict

REAL = 1_700_000_000 * S
DATA = Path(__file__).parents[1] / "data" / "gpu"
SCHEMA = json.loads(
    (Path(__file__).parents[2] / "protocols/hang-report/v1/hang-report.schema.json").read_text()
)
# A DDP Step on the communicator: gradient buckets all-reduced in one order every Step
STEP = (8396800, 6553600, 6553600, 262144)
SCALAR = 1  # the extra op of the real case: a 1-element all-reduce


def _broadcast(i: int) -> InflightOp:
    return dataclasses.replace(op(i, NOW - 60 * S, func="Broadcast", count=62_500_000), peer=0)


def ddp_history(steps: int = 3, startup: int = 2, step=STEP) -> dict[int, InflightOp]:
    """The communicator's completed collectives: start-up broadcasts, then `steps` Steps."""
    ops = [_broadcast(i) for i in range(startup)]
    for _ in range(steps):
        ops.extend(op(len(ops), NOW - 30 * S, count=c) for c in step)
    return {o.op_index: o for o in ops}


def windows(history: dict[int, InflightOp], ranks: int):
    """completed_ops: every rank completed the same ops (the ranks were in step until now)."""
    return lambda m: dict(history) if m.rank < ranks else {}


def at(rank: int, index: int, count: int, nranks: int):
    """A rank waiting in an all-reduce, as the SHM in-flight view shows it: with NCCL's root
    argument (0) where the completed-op window keeps a root for rooted functions only."""
    m = stuck_at(rank, index, nranks=nranks, op_kw={"count": count})
    return dataclasses.replace(m, inflight=dataclasses.replace(m.inflight, peer=0))


def valid(report: HangReport) -> HangReport:
    """The report as JSON obeys hang-report v1, combinations included."""
    jsonschema.validate(json.loads(msgspec.json.encode(report)), SCHEMA)
    return report


# ---- deciding a tie ----


@pytest.mark.parametrize("odd", [0, 1])
def test_two_ranks_the_one_that_breaks_the_step_cycle_is_named(odd):
    """The real case: one rank issued an extra 1-element all-reduce where its peer issued the
    Step's first gradient bucket. Rank 0 or rank 1: the verdict does not lean on rank order."""
    history = ddp_history()
    n = len(history)
    other = 1 - odd
    snap = snapshot(at(odd, n, SCALAR, nranks=2), at(other, n, STEP[0], nranks=2))
    report = valid(only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(history, 2))))
    assert report.verdict is Verdict.op_mismatch
    assert culprit_ranks(report) == [odd]
    assert report.culprit_basis is CulpritBasis.rhythm
    reason = report.culprits[0].reason
    assert reason.startswith(
        "issued AllReduce count 1 ncclFloat32 where the communicator's repeating op sequence "
        f"expects AllReduce count {STEP[0]} ncclFloat32 (as rank {other} issued"
    ), reason
    assert f"a cycle of {len(STEP)} ops" in reason and "3 cycles" in reason
    assert "no majority decides" in report.summary
    assert report.op.count == STEP[0]  # the op the rank that kept the rhythm issued


def test_an_even_split_of_four_ranks_names_the_half_that_breaks_the_cycle():
    history = ddp_history()
    n = len(history)
    snap = snapshot(
        at(0, n, STEP[0], nranks=4),
        at(1, n, SCALAR, nranks=4),
        at(2, n, STEP[0], nranks=4),
        at(3, n, SCALAR, nranks=4),
    )
    report = valid(only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(history, 4))))
    assert culprit_ranks(report) == [1, 3]
    assert report.culprit_basis is CulpritBasis.rhythm
    assert all("(as ranks 0, 2 issued" in c.reason for c in report.culprits)


def test_mid_step_the_cycle_is_the_step_not_the_run_of_equal_buckets():
    """Inside a Step the last ops are equal buckets (a period of 1 over a few ops); the Step's
    cycle explains far more of the history and is the one that decides."""
    history = ddp_history(steps=3)
    del history[max(history)]  # the hang falls on the Step's last op, after two equal buckets
    n = len(history)
    snap = snapshot(at(0, n, STEP[3], nranks=2), at(1, n, STEP[2], nranks=2))
    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(history, 2)))
    assert culprit_ranks(report) == [1]
    assert report.op.count == STEP[3]


def test_a_majority_of_three_still_decides_even_against_the_rhythm():
    history = ddp_history()
    n = len(history)
    snap = snapshot(
        at(0, n, SCALAR, nranks=3), at(1, n, SCALAR, nranks=3), at(2, n, STEP[0], nranks=3)
    )
    report = valid(only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(history, 3))))
    assert culprit_ranks(report) == [2]
    assert report.culprit_basis is CulpritBasis.majority
    assert report.culprits[0].reason == f"issued count {STEP[0]} vs 1 (the other ranks)"


def test_a_divergence_between_two_ranks_is_decided_by_the_rhythm():
    """Rank 0 issued an extra scalar all-reduce that NCCL completed against rank 1's gradient
    bucket; their sequences have been a call apart since, until rank 0 waits in an op rank 1
    completed. Scalars are commoner than the bucket in these windows (two per Step), so the
    rarest op there is rank 1's: the Step's cycle tells that the odd call was rank 0's."""
    step = (8396800, SCALAR, 6553600, SCALAR)
    steady = [c for _ in range(8) for c in step]
    rank0 = steady[:12] + [SCALAR] + steady[12:20]
    rank1 = steady[:22]

    def window(counts):
        return {i: op(i, NOW - 30 * S, count=c) for i, c in enumerate(counts)}

    snap = snapshot(stuck_at(0, 21, nranks=2), member(1, enqueued=22, completed=22, nranks=2))
    completed = {0: window(rank0), 1: window(rank1)}
    report = valid(only(diagnose(snap, NOW, 2 * S, completed_ops=lambda m: completed[m.rank])))
    assert report.verdict is Verdict.op_mismatch
    assert culprit_ranks(report) == [0]
    assert report.culprit_basis is CulpritBasis.rhythm
    assert "first differ at op #12" in report.summary
    assert report.culprits[0].reason.startswith(
        "at op #12 issued AllReduce count 1 ncclFloat32 where the communicator's repeating op "
        "sequence expects AllReduce count 8396800 ncclFloat32 (as rank 1 issued"
    )
    assert report.op.count == 8396800  # the call rank 0 should have made


@pytest.mark.parametrize("waiting", [0, 1])
@pytest.mark.parametrize("odd", [0, 1])
def test_the_op_one_rank_waits_in_against_the_other_s_completed_op_decides(odd, waiting):
    """One rank issued the Step's first bucket with twice the count; NCCL completed it on one
    side and that rank moved on, while the other still waits in its own op at that index. The
    completed windows stop one op short on the waiting side: the op it waits in is its side
    of the first difference, and the rhythm names the odd rank, whichever side waits."""
    history = ddp_history()
    n = len(history)
    count = {odd: 2 * STEP[0], 1 - odd: STEP[0]}
    done = 1 - waiting
    snap = snapshot(
        at(waiting, n, count[waiting], nranks=2),
        member(done, enqueued=n + 1, completed=n + 1, nranks=2),
    )
    completed = {
        waiting: dict(history),
        done: {**history, n: op(n, NOW - 5 * S, count=count[done])},
    }
    report = valid(only(diagnose(snap, NOW, THRESHOLD, completed_ops=lambda m: completed[m.rank])))
    assert report.verdict is Verdict.op_mismatch
    assert culprit_ranks(report) == [odd], report.summary
    assert report.culprit_basis is CulpritBasis.rhythm
    assert f"first differ at op #{n}" in report.summary
    assert report.op.count == STEP[0]  # the call the odd rank should have made


def test_a_waiting_rank_without_its_own_history_is_not_blamed_by_the_other_side_s():
    """The waiting rank's window is empty (a rank of another node, as a master sees it): its
    op alone against the other side's whole history decides nothing."""
    history = ddp_history()
    n = len(history)
    snap = snapshot(
        at(0, n, STEP[0], nranks=2), member(1, enqueued=n + 1, completed=n + 1, nranks=2)
    )
    completed = {0: {}, 1: {**history, n: op(n, NOW - 5 * S, count=2 * STEP[0])}}
    report = valid(only(diagnose(snap, NOW, THRESHOLD, completed_ops=lambda m: completed[m.rank])))
    assert report.verdict is Verdict.op_mismatch
    assert report.culprits == [] and report.culprit_basis is CulpritBasis.undecided


# ---- nothing decides: no culprit, both sides shown ----


def _undecided(report: HangReport, why: str) -> None:
    assert report.verdict is Verdict.op_mismatch
    assert report.culprits == []
    assert report.culprit_basis is CulpritBasis.undecided
    assert "rank 0" in report.summary and "count 1," in report.summary
    assert "rank 1" in report.summary and f"count {STEP[0]}," in report.summary
    assert why in report.summary and report.summary.endswith("no culprit named")
    # every rank's own op stays in the evidence
    assert {e.comm_rank: e.inflight.count for e in report.evidence} == {0: 1, 1: STEP[0]}


def tie(n: int):
    return snapshot(at(0, n, SCALAR, nranks=2), at(1, n, STEP[0], nranks=2))


def test_without_completed_ops_nothing_decides():
    report = valid(only(diagnose(tie(14), NOW, THRESHOLD)))
    _undecided(report, "the Agent keeps no completed ops")


def test_with_empty_windows_nothing_decides():
    report = only(diagnose(tie(14), NOW, THRESHOLD, completed_ops=lambda m: {}))
    _undecided(report, "no completed op of this communicator right before op #14")


def test_one_step_of_history_is_no_rhythm():
    history = ddp_history(steps=1, startup=0)
    report = only(diagnose(tie(len(history)), NOW, THRESHOLD, completed_ops=windows(history, 2)))
    _undecided(report, "show no cycle repeated 2 times")


def test_a_gap_right_before_the_op_leaves_the_rhythm_unknown():
    """The windows end before the op in question (ops lost, or the window was overwritten):
    what the ops before a gap repeat says nothing of the op after it."""
    history = ddp_history()
    n = len(history)
    del history[n - 1]
    report = only(diagnose(tie(n), NOW, THRESHOLD, completed_ops=windows(history, 2)))
    _undecided(report, f"no completed op of this communicator right before op #{n}")


def test_when_neither_side_issued_the_expected_op_nothing_decides():
    history = ddp_history()
    n = len(history)
    snap = snapshot(at(0, n, SCALAR, nranks=2), at(1, n, STEP[0], nranks=2))
    shifted = {i: dataclasses.replace(o, count=o.count + 8) for i, o in history.items()}
    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(shifted, 2)))
    _undecided(report, "which no rank issued")


# ---- the engine's Step cycle ----


def test_the_engine_s_step_cycle_decides_where_the_ops_alone_are_too_few():
    step = STEP[:3]
    history = ddp_history(steps=2, startup=0, step=step)  # 6 ops: under MIN_SPAN_OPS
    assert len(history) < MIN_SPAN_OPS
    n = len(history)
    snap = snapshot(at(0, n, SCALAR, nranks=2), at(1, n, STEP[0], nranks=2))
    without = only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(history, 2)))
    assert without.culprits == []
    cycle = StepCycle(ops_per_step=3, steps=4, confidence=0.97)
    report = only(
        diagnose(
            snap,
            NOW,
            THRESHOLD,
            completed_ops=windows(history, 2),
            step_cycles=lambda m: cycle,
        )
    )
    assert culprit_ranks(report) == [0]
    reason = report.culprits[0].reason
    assert "where the job's Step cycle expects AllReduce count 8396800" in reason
    assert "3 collectives per Step in the Semantic Engine's last 4 Steps" in reason


def test_a_step_cycle_the_ops_do_not_show_is_not_believed():
    """The engine's Steps say 5 ops, the ops repeat every 4: the ops decide."""
    history = ddp_history()
    got = expected_op(history, len(history), [StepCycle(5, 3, 1.0)])
    assert not isinstance(got, Unknown)
    assert (got.period, got.step_cycle) == (4, None)


def test_members_whose_engines_disagree_give_no_step_cycle():
    history = ddp_history(steps=2, startup=0, step=STEP[:3])
    got = expected_op(history, 6, [StepCycle(3, 3, 1.0), StepCycle(2, 3, 1.0)])
    assert isinstance(got, Unknown)


def test_a_step_cycle_and_an_op_period_expecting_different_ops_decide_nothing():
    a, b = 8396800, 262144
    ops = [op(i, NOW, count=c) for i, c in enumerate([a, b, b] * 3)]  # period 3, ends b b
    got = expected_op({o.op_index: o for o in ops}, 9, [StepCycle(1, 2, 1.0)])
    assert isinstance(got, Unknown)
    assert "Step cycle (1 ops) expects AllReduce count 262144" in got.reason
    assert "repeating op sequence (3 ops) AllReduce count 8396800" in got.reason


def test_ops_the_windows_disagree_on_are_no_rhythm():
    history = ddp_history()
    other = dict(history)
    other[5] = op(5, NOW, count=3)
    joined = comm_history([history, other], before=len(history))
    assert 5 not in joined and len(joined) == len(history) - 1
    assert comm_history([history], before=4).keys() == {0, 1, 2, 3}


# ---- the real DDP job's op sequence and step summaries ----


@pytest.fixture(scope="module")
def ddp_logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    with tarfile.open(DATA / "ddp_h200x2.tar.gz") as tar:
        tar.extractall(root, filter="data")
    return root / "inspector_logs"


def real_ops(logs: Path, rank_file: int = 0) -> dict[int, InflightOp]:
    """A rank's collectives of the real job, as the Agent's recent-ops window gives them."""
    path = sorted(logs.glob("*.jsonl"))[rank_file]
    out = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if "coll_perf" not in d:
            continue
        ci, perf = d["ci"], d["coll_perf"]
        i = ci["op_index"]
        out[i] = dataclasses.replace(
            op(i, NOW - 30 * S, func=perf["coll"], count=ci["count"]),
            datatype=ci["datatype"],
            seq=perf["coll_sn"],
        )
    return out


def test_the_real_ddp_job_s_rank_with_the_extra_scalar_all_reduce_is_named(ddp_logs):
    """The job's ops up to Step 8, then the hang: rank 0 issued a 1-element all-reduce, rank
    1 the op the job issued at that place of every Step."""
    ops = real_ops(ddp_logs)
    index = 7 + 8 * 9 + 4  # start-up takes ops 0..6; 9 collectives per Step; mid-Step
    history = {i: o for i, o in ops.items() if i < index}
    right = ops[index]
    snap = snapshot(at(0, index, SCALAR, nranks=2), at(1, index, right.count, nranks=2))
    report = only(diagnose(snap, NOW, THRESHOLD, completed_ops=windows(history, 2)))
    assert culprit_ranks(report) == [0]
    assert f"expects AllReduce count {right.count}" in report.culprits[0].reason
    assert "a cycle of 9 ops" in report.culprits[0].reason


def test_step_cycles_from_the_engine_s_summaries_of_the_real_job(ddp_logs, tmp_path):
    """The offline engine's summaries of the real job, under a live file's name: 9
    collectives per Step on its one communicator."""
    from comminsight.semantic.offline import recover_steps

    out = tmp_path / "out"
    recover_steps(ddp_logs, out_dir=out)
    produced = sorted(out.glob("*.jsonl"))
    assert produced
    steps = newest_steps(produced[0])
    assert len(steps) >= 8
    cycle = cycle_in(steps, "cd2314d342f7b3ec")
    assert cycle is not None and cycle.ops_per_step == 9 and cycle.steps == 8

    live = tmp_path / "home" / "semantics" / "step"
    live.mkdir(parents=True)
    p = proc(0)
    name = f"live-node-a-{p.pid}-{p.start_real_ns}.jsonl.partial"
    (live / name).write_bytes(produced[0].read_bytes())
    cycles = StepCycles(tmp_path / "home", "node-a")
    got = cycles(member(0, 80, 79, comm_id=0xCD2314D342F7B3EC))
    assert got == cycle
    assert cycles(member(0, 80, 79, comm_id=0x1234)) is None  # a communicator it never used


# ---- the step-summary reader on bad input ----


def summary(index: int, ops: int, *, comm="00000000000000aa", warmup=False, conf=1.0) -> dict:
    return {
        "schema_version": 1,
        "step_index": index,
        "warmup": warmup,
        "recovery": {"method": "period", "period_ops": ops, "confidence": conf},
        "comm_seqs": [
            {"kind": "coll", "comm_id": comm, "first_seq": 0, "last_seq": ops - 1, "op_count": ops}
        ],
    }


def write_steps(home: Path, name: str, lines: list) -> Path:
    d = home / "semantics" / "step"
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_bytes(
        b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)
    )
    return path


def live_name(rank: int = 0, suffix: str = "") -> str:
    p = proc(rank)
    return f"live-node-a-{p.pid}-{p.start_real_ns}{suffix}.jsonl"


AA = member(0, 80, 79, comm_id=0xAA)


def test_the_newest_agreeing_steps_make_the_cycle(tmp_path):
    steps = [summary(0, 9, warmup=True), summary(1, 4), summary(2, 5, conf=0.8), summary(3, 5)]
    write_steps(tmp_path, live_name(), steps)
    assert StepCycles(tmp_path, "node-a")(AA) == StepCycle(5, 2, 0.8)


@pytest.mark.parametrize(
    "lines",
    [
        [],
        [summary(3, 5)],  # one Step: no cycle
        [summary(2, 5), summary(3, 6)],  # the newest two disagree
        [summary(2, 5), summary(3, 5, comm="00000000000000bb")],  # the newest lacks it
        [summary(2, 5, warmup=True), summary(3, 5, warmup=True)],  # warm-up only
        [b"not json", b'{"schema_version": 2, "step_index": 1}', b"\xff\xfe", b"[]"],
        [{**summary(2, 5), "step_index": -1}, {**summary(3, 5), "recovery": {"confidence": 7}}],
        [summary(2, 5), {**summary(3, 5), "comm_seqs": [{"kind": "coll", "comm_id": "x"}]}],
    ],
    ids=["empty", "one", "disagree", "missing", "warmup", "garbage", "out-of-range", "bad-span"],
)
def test_summaries_that_show_no_cycle_give_none(tmp_path, lines):
    write_steps(tmp_path, live_name(), lines)
    assert StepCycles(tmp_path, "node-a")(AA) is None


def test_garbage_between_good_steps_is_skipped(tmp_path):
    write_steps(tmp_path, live_name(), [summary(2, 5), b"{truncated", summary(3, 5)])
    assert StepCycles(tmp_path, "node-a")(AA) == StepCycle(5, 2, 1.0)


def test_only_the_members_own_process_files_are_read(tmp_path):
    p = proc(0)
    # a process whose start time begins with this one's digits is another process
    write_steps(tmp_path, f"live-node-a-{p.pid}-{p.start_real_ns}7.jsonl", [summary(2, 5)] * 2)
    write_steps(tmp_path, live_name(1), [summary(2, 5), summary(3, 5)])  # another pid
    cycles = StepCycles(tmp_path, "node-a")
    assert cycles(AA) is None
    remote = dataclasses.replace(AA, process=dataclasses.replace(p, node_name="node-b"))
    write_steps(tmp_path, live_name(), [summary(2, 5), summary(3, 5)])
    assert cycles(remote) is None  # its summaries are on its own node
    assert StepCycles(tmp_path / "nowhere", "node-a")(AA) is None


def test_a_process_that_drives_several_gpus_has_one_file_per_gpu(tmp_path):
    write_steps(tmp_path, live_name(suffix=".dev0"), [summary(2, 7, comm="00000000000000bb")] * 2)
    write_steps(tmp_path, live_name(suffix=".dev1"), [summary(2, 5), summary(3, 5)])
    assert StepCycles(tmp_path, "node-a")(AA) == StepCycle(5, 2, 1.0)


def test_only_the_file_s_tail_is_read_and_its_cut_line_skipped(tmp_path):
    lines = [summary(i, 5) for i in range(200)]
    path = write_steps(tmp_path, live_name(), lines)
    size = os.path.getsize(path)
    steps = newest_steps(path, tail_bytes=size // 4)
    assert 0 < len(steps) < 60 and steps[-1].step_index == 199


def test_a_summary_file_that_grows_is_read_again(tmp_path):
    path = write_steps(tmp_path, live_name(), [summary(2, 5), summary(3, 5)])
    cycles = StepCycles(tmp_path, "node-a")
    assert cycles(AA) == StepCycle(5, 2, 1.0)
    with open(path, "ab") as f:
        f.write(json.dumps(summary(4, 6)).encode() + b"\n")
    assert cycles(AA) is None  # the newest Step is another length now


# ---- incidents ----


def test_an_undecided_mismatch_is_an_incident_root_that_names_no_one(tmp_path):
    """No culprit, yet the hang's cause is the mismatched call: it roots the incident (which
    pages), and a data-parallel hang of the same rank behind it is its consequence."""
    dp = 0x2222
    r0, r1, r2 = proc(0), proc(1), proc(2)
    snap = snapshot(
        stuck_at(0, 14, age=5 * S, nranks=2, op_kw={"count": SCALAR}, process=r0),
        stuck_at(1, 14, age=5 * S, nranks=2, op_kw={"count": STEP[0]}, process=r1),
        member(0, 1, 0, op(0, NOW - 3 * S, started=False), comm_id=dp, name="dp:2", nranks=2,
               process=r0),
        member(1, 1, 0, op(0, NOW - 3 * S), comm_id=dp, name="dp:2", nranks=2, process=r2),
    )  # fmt: skip
    reports = diagnose(snap, NOW, THRESHOLD, now_real_ns=REAL)
    by_name = {r.comm.comm_name: r for r in reports}
    root = by_name["default_pg:0"]
    assert root.verdict is Verdict.op_mismatch and root.culprits == []
    assert by_name["dp:2"].summary.endswith(f"it follows from {root.report_id}")
    groups = group_reports(reports)
    assert len(groups) == 1 and groups[0].root.report_id == root.report_id
    severities = {r.comm.comm_name: r.severity for r in with_roles(reports, groups)}
    assert severities == {"default_pg:0": Severity.critical, "dp:2": Severity.info}
    (incident,) = IncidentStore(tmp_path, "node-a").update(groups, {}, NOW, REAL)
    assert incident.root.culprits == [] and "no culprit named" in incident.root.summary


# ---- end to end: simulated NCCL -> real plugin -> LiveAgent ----


E2E_ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "0.5"),
)


@pytest.mark.parametrize("odd", [0, 1])
def test_e2e_two_ddp_ranks_the_one_with_the_odd_count_is_named(plugin, tmp_path, odd):
    """Two DDP ranks; one issues its first gradient bucket of a steady Step with twice the
    count (the simulator's mismatch fault). No majority between two: the Agent's recent-ops
    window shows the Step's cycle, and the rank that broke it is named."""
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        steps=4,
        time_scale=0.02,
        hang_hold_s=3.0,
        env=E2E_ENV,
    )
    first_bucket = next(
        o.op_index
        for o in build_plan(config).rank_ops(odd)
        if o.step == 4 and o.func == "AllReduce"
    )
    config = dataclasses.replace(
        config, faults=(parse_fault(f"mismatch:rank={odd},op={first_bucket},field=count"),)
    )
    lock = hold_agent_lock(tmp_path)
    with LiveAgent(tmp_path, profiler_hang_timeout_s=0.5, agent_heartbeat_stale_ms=5000) as live:
        result = {}
        sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
        sim.start()
        sim.join()
        live.wait_passes(2)
        reports = live.call(lambda: list(live.service.hangs.reports.values()))
    lock.close()
    assert not result["sim"].errors, result["sim"].errors
    mismatches = [r for r in reports if r.verdict is Verdict.op_mismatch]
    assert mismatches, [r.summary for r in reports]
    report = valid(mismatches[0])
    assert culprit_ranks(report) == [odd], report.summary
    assert report.culprit_basis is CulpritBasis.rhythm
    assert report.culprits[0].global_rank == odd
    assert "where the communicator's repeating op sequence expects" in report.culprits[0].reason
