"""bench/gpu/faults_report.py: scoring a fault run of bench/gpu/fault_train.py against the
Agent's incidents. The incidents are built with the protocol's own models and encoded as the
Agent's API serves them, the events as fault_train.py writes them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec
import pytest

from comminsight_gen.models.hang_report_v1 import (
    CommRef,
    Culprit,
    CulpritBasis,
    HangReport,
    Incident,
    IncidentRoot,
    IncidentStack,
    IncidentStackFrame,
    IncidentStackStatus,
    IncidentStatus,
    OpClass,
    OpInfo,
    ReportStatus,
    Severity,
    Verdict,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))
import faults_report  # noqa: E402

S = 1_000_000_000
FAULT_NS = 100 * S
JOB = "/repo/bench/gpu/fault_train.py"


def events(fault: str, *, at: int = 8) -> dict[int, list[dict]]:
    """Both ranks' lines as fault_train.py writes them, the fault on rank 1 at step `at`."""
    job = "pp" if fault == "sendsend" else "ddp"
    start = {"ev": "start", "job": job, "fault": fault, "at": at, "fault_rank": 1}
    start["group"] = "default_pg:0"
    r0 = [{**start, "mono_ns": 1, "rank": 0}]
    r1 = [{**start, "mono_ns": 1, "rank": 1}]
    if fault == "sendsend":
        r0.append(
            {"ev": "p2p", "func": "Send", "peer": 1, "step": at, "count": 64, "p2p_index": 16}
        )
        r0[-1]["mono_ns"] = FAULT_NS + 5_000_000
        r1.append({"ev": "fault", "kind": "sendsend", "step": at, "count": 64, "p2p_index": 16})
        r1[-1]["mono_ns"] = FAULT_NS
        return {0: r0, 1: r1}
    # rank 0's step `at`: three buckets, then the loss all-reduce (5 collectives a step)
    seq = 1 + 5 * at
    for i in range(3):
        r0.append(
            {"ev": "coll", "name": f"bucket{i}", "func": "AllReduce", "step": at}
            | {"count": 1000 + i, "torch_seq": seq + i, "mono_ns": FAULT_NS + (i + 1) * 1000}
        )
    if fault == "sleep":
        r1.append(
            {"ev": "fault", "kind": "sleep", "step": at, "seconds": 120.0, "mono_ns": FAULT_NS}
            | {"function": "slow_data_loader", "file": JOB, "line": 97}
        )
    elif fault == "skip":
        r1.append(
            {"ev": "fault", "kind": "skip", "step": at, "bucket": 2, "count": 1002}
            | {"torch_seq": seq + 2, "mono_ns": FAULT_NS}
        )
    elif fault == "extra":
        r1.append(
            {"ev": "fault", "kind": "extra", "step": at, "count": 1, "torch_seq": seq}
            | {"mono_ns": FAULT_NS}
        )
    for r in (r0, r1):
        r.append({"ev": "step", "step": 0, "mono_ns": 2})
    return {0: r0, 1: r1}


def frame(function: str, line: int, file: str = JOB) -> IncidentStackFrame:
    return IncidentStackFrame(file=file, function=function, line=line, code="...")


def stack(rank: int, frames: list[IncidentStackFrame]) -> IncidentStack:
    return IncidentStack(
        rank=rank,
        host="gpu-host",
        pid=4000 + rank,
        status=IncidentStackStatus.captured,
        frames=frames,
        thread_name="MainThread",
        thread_id=1,
        captured_at_real_ns=5,
    )


def unavailable(rank: int) -> IncidentStack:
    return IncidentStack(
        rank=rank,
        host="gpu-host",
        pid=4000 + rank,
        status=IncidentStackStatus.unavailable,
        frames=[],
        unavailable_reason="timed out after 2.0 s",
    )


def incident(
    verdict: Verdict,
    culprits: list[int],
    *,
    func: str = "AllReduce",
    seq: int = 41,
    opened_ns: int = FAULT_NS + 5_600_000_000,
    incident_id: str = "inc-1",
    stacks: list[IncidentStack] = (),
    comm_name: str = "default_pg:0",
    basis: CulpritBasis | None = None,
) -> dict:
    """One incident as /api/v1/incidents/{id} serves it, with its root report (validated by
    the protocol's models)."""
    comm = CommRef(comm_id="00000000000000ab", nranks=2, comm_name=comm_name)
    blamed = [
        Culprit(comm_rank=r, node_name="gpu-host", reason="why", global_rank=r) for r in culprits
    ]
    op = OpInfo(
        kind=OpClass.p2p if func in ("Send", "Recv") else OpClass.coll,
        func=func,
        seq=seq,
        count=1000,
        datatype="ncclFloat32",
        size_bytes=4000,
    )
    report = HangReport(
        schema_version=1,
        report_id=f"{incident_id}-root",
        diagnosed_by="gpu-host",
        detected_mono_ns=opened_ns,
        detected_real_ns=1,
        verdict=verdict,
        severity=Severity.critical,
        comm=comm,
        culprits=blamed,
        evidence=[],
        threshold_ms=5000,
        summary="a summary",
        status=ReportStatus.open,
        op=op,
        **({"culprit_basis": basis} if basis is not None else {}),
    )
    inc = Incident(
        schema_version=1,
        incident_id=incident_id,
        diagnosed_by="gpu-host",
        status=IncidentStatus.open,
        severity=Severity.critical,
        root=IncidentRoot(
            report_id=report.report_id,
            verdict=verdict,
            comm=comm,
            culprits=blamed,
            summary="a summary",
            op=op,
        ),
        consequences=[],
        root_changes=[],
        opened_mono_ns=opened_ns,
        opened_real_ns=1,
        updated_real_ns=1,
        stacks=list(stacks),
    )
    return {
        "incident": json.loads(msgspec.json.encode(inc)),
        "reports": [json.loads(msgspec.json.encode(report))],
    }


SLEEPING = [frame("slow_data_loader", 97), frame("ddp_job", 160), frame("main", 300)]


def test_a_sleeping_rank_with_its_sleeping_frame_passes():
    inc = incident(Verdict.stuck_outside_nccl, [1], stacks=[stack(1, SLEEPING)])
    res = faults_report.evaluate("sleep", 5.0, events("sleep"), [inc], rank_rc=[-9, -9])
    assert res["pass"], res["checks"]
    assert res["sleeping_frame"]["function"] == "slow_data_loader"
    assert res["sleeping_frame"]["line"] == 97
    assert res["fault_to_open_s"] == 5.6
    assert res["expected"]["seqs"] == [41]  # rank 0's first bucket of the step


def test_a_sleeping_rank_without_its_stack_fails():
    inc = incident(Verdict.stuck_outside_nccl, [1], stacks=[unavailable(1)])
    res = faults_report.evaluate("sleep", 5.0, events("sleep"), [inc])
    assert not res["pass"]
    assert res["checks"]["stack_frame"] is False
    assert res["stacks"][0]["reason"] == "timed out after 2.0 s"


def test_the_sleeping_frame_must_be_at_the_sleep_line():
    moved = [frame("slow_data_loader", 96), *SLEEPING[1:]]
    inc = incident(Verdict.stuck_outside_nccl, [1], stacks=[stack(1, moved)])
    res = faults_report.evaluate("sleep", 5.0, events("sleep"), [inc])
    assert res["checks"]["stack_frame"] is False


def test_the_sleeping_frame_must_be_the_culprits():
    inc = incident(Verdict.stuck_outside_nccl, [1], stacks=[stack(0, SLEEPING)])
    res = faults_report.evaluate("sleep", 5.0, events("sleep"), [inc])
    assert res["checks"]["stack_frame"] is False


def test_a_skip_is_an_op_mismatch_at_the_skipped_buckets_seq():
    inc = incident(Verdict.op_mismatch, [1], seq=43, stacks=[unavailable(1)])
    res = faults_report.evaluate("skip", 5.0, events("skip"), [inc])
    assert res["pass"], res["checks"]
    assert res["expected"]["seqs"] == [43]


def test_an_extra_op_named_by_the_jobs_rhythm_passes_and_says_so():
    inc = incident(Verdict.op_mismatch, [1], basis=CulpritBasis.rhythm)
    res = faults_report.evaluate("extra", 5.0, events("extra"), [inc])
    assert res["pass"], res["checks"]
    assert res["culprit_basis"] == "rhythm"
    assert "| op_mismatch (rhythm) | [1] |" in faults_report.markdown([res])


def test_an_op_mismatch_that_names_no_culprit_fails():
    inc = incident(Verdict.op_mismatch, [], basis=CulpritBasis.undecided)
    res = faults_report.evaluate("extra", 5.0, events("extra"), [inc])
    assert res["checks"]["culprits"] is False and not res["pass"]


def test_an_op_at_another_seq_fails():
    inc = incident(Verdict.op_mismatch, [1], seq=42)
    res = faults_report.evaluate("extra", 5.0, events("extra"), [inc])
    assert res["checks"]["op_seq"] is False and not res["pass"]


def test_the_wrong_culprit_or_verdict_fails():
    wrong_rank = faults_report.evaluate(
        "extra", 5.0, events("extra"), [incident(Verdict.op_mismatch, [0])]
    )
    assert wrong_rank["checks"]["culprits"] is False and not wrong_rank["pass"]
    wrong_verdict = faults_report.evaluate(
        "extra", 5.0, events("extra"), [incident(Verdict.stuck_outside_nccl, [1])]
    )
    assert wrong_verdict["checks"]["verdict"] is False and not wrong_verdict["pass"]


def test_another_communicator_fails():
    inc = incident(Verdict.op_mismatch, [1], comm_name="other:1")
    res = faults_report.evaluate("extra", 5.0, events("extra"), [inc])
    assert res["checks"]["comm"] is False


def test_a_late_incident_fails_the_latency():
    inc = incident(Verdict.op_mismatch, [1], opened_ns=FAULT_NS + 7_200_000_000)
    res = faults_report.evaluate("extra", 5.0, events("extra"), [inc])
    assert res["fault_to_open_s"] == 7.2
    assert res["checks"]["latency"] is False and not res["pass"]


def test_two_incidents_for_one_fault_fail_and_both_are_shown():
    a = incident(Verdict.op_mismatch, [1], incident_id="inc-a")
    b = incident(Verdict.stuck_outside_nccl, [0], incident_id="inc-b", opened_ns=FAULT_NS + 6 * S)
    res = faults_report.evaluate("extra", 5.0, events("extra"), [b, a])
    assert res["incidents_opened"] == 2 and not res["pass"]
    assert res["incident_id"] == "inc-a"  # the first opened is scored
    assert res["others"][0]["incident_id"] == "inc-b"


def test_send_send_blames_both_stages():
    inc = incident(Verdict.op_mismatch, [0, 1], func="Send", seq=16)
    res = faults_report.evaluate("sendsend", 5.0, events("sendsend"), [inc])
    assert res["pass"], res["checks"]
    one = incident(Verdict.op_mismatch, [1], func="Send", seq=16)
    assert not faults_report.evaluate("sendsend", 5.0, events("sendsend"), [one])["pass"]


def test_no_incident_for_a_fault_fails():
    res = faults_report.evaluate("sleep", 5.0, events("sleep"), [])
    assert res["incidents_opened"] == 0 and not res["pass"]


def test_the_control_passes_only_without_incidents_and_with_clean_exits():
    ok = faults_report.evaluate("none", 5.0, events("none"), [], rank_rc=[0, 0])
    assert ok["pass"]
    noisy = faults_report.evaluate(
        "none", 5.0, events("none"), [incident(Verdict.op_mismatch, [1])], rank_rc=[0, 0]
    )
    assert not noisy["pass"]
    crashed = faults_report.evaluate("none", 5.0, events("none"), [], rank_rc=[0, 1])
    assert not crashed["pass"]


def test_a_fault_that_never_happened_fails():
    evs = events("none")  # the ranks wrote no fault line
    res = faults_report.evaluate("skip", 5.0, evs, [incident(Verdict.op_mismatch, [1])])
    assert res["checks"]["fault_happened"] is False and not res["pass"]


def test_an_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown fault"):
        faults_report.evaluate("kill", 5.0, {}, [])


def test_the_summary_skips_lines_it_cannot_read(tmp_path):
    inc = incident(Verdict.stuck_outside_nccl, [1], stacks=[stack(1, SLEEPING)])
    res = faults_report.evaluate("sleep", 5.0, events("sleep"), [inc])
    path = tmp_path / "faults.jsonl"
    good = json.dumps({"bench": "gpu_fault", "metric": "fault_sleep", **res})
    other = json.dumps({"bench": "gpu_hang", "fault": "skip"})
    path.write_text(f"{good}\nnot json\n{other}\n\n")
    rows = faults_report.read_lines(path)
    assert [r["fault"] for r in rows] == ["sleep"]
    table = faults_report.markdown(rows)
    assert "| sleep | pass | 1 | stuck_outside_nccl | [1] | default_pg:0 |" in table
    assert "`slow_data_loader` (fault_train.py:97)" in table
