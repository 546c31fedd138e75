"""The demo's judgement of the Agent's hang diagnosis (comminsight/demo/verdict_check.py)
against the fault it injected, on incidents as the API's generated client decodes them; and
how its output is kept to a width in a file (comminsight/demo/console.py)."""

from __future__ import annotations

from comminsight.demo.console import fold, piped_width
from comminsight.demo.sim_checks import InjectedFault
from comminsight.demo.verdict_check import verdict_check
from comminsight_client.models import (
    CommRef,
    Culprit,
    Incident,
    IncidentRoot,
    IncidentStatus,
    OpClass,
    OpInfo,
    Resolution,
    Severity,
    Verdict,
)

TP = "95781991fd8f8e0c"
DEFAULT_PG = "7445270f57fef2f7"
FAULT = InjectedFault(
    rank=1, comm_id=TP, comm_name="tensor_parallel:1", func="AllReduce", seq=5, comm_op_index=5
)


def incident(
    ranks: list[int],
    comm_id: str = TP,
    func: str = "AllReduce",
    seq: int = 5,
    severity: Severity = Severity.CRITICAL,
    verdict: Verdict = Verdict.STUCK_OUTSIDE_NCCL,
    resolution: Resolution = Resolution.COMM_FINALIZED,
    incident_id: str = "inc-1",
) -> Incident:
    return Incident(
        schema_version=1,
        incident_id=incident_id,
        diagnosed_by="vm",
        status=IncidentStatus.RESOLVED,
        severity=severity,
        root=IncidentRoot(
            report_id=f"{comm_id}-{verdict.value}-0",
            verdict=verdict,
            comm=CommRef(comm_id=comm_id, nranks=2, comm_name="tensor_parallel:1"),
            culprits=[
                Culprit(comm_rank=r % 2, node_name="vm", reason="x", global_rank=r) for r in ranks
            ],
            summary="",
            op=OpInfo(
                kind=OpClass.COLL, func=func, seq=seq, count=1, datatype="ncclFloat32", size_bytes=4
            ),
        ),
        consequences=[],
        root_changes=[],
        opened_mono_ns=1,
        opened_real_ns=1,
        updated_real_ns=1,
        stacks=[],
        resolution=resolution,
    )


def test_the_faulted_rank_named_alone_on_its_communicator_and_op_passes():
    check = verdict_check(FAULT, [incident([1])], [], {})
    assert check.ok, check.detail
    assert "blames rank 1 alone on tensor_parallel:1" in check.detail


def test_another_rank_named_fails_and_says_whom_it_named():
    check = verdict_check(FAULT, [incident([0])], [], {})
    assert not check.ok
    assert "did not name rank 1" in check.detail and "rank 0 on tensor_parallel:1" in check.detail


def test_no_rank_named_fails():
    inconclusive = incident([], severity=Severity.WARNING, verdict=Verdict.INCONCLUSIVE)
    check = verdict_check(FAULT, [inconclusive], [], {})
    assert not check.ok and "no incident is critical" in check.detail
    assert not verdict_check(FAULT, [], [], {}).ok


def test_the_right_rank_on_another_communicator_or_op_fails():
    elsewhere = verdict_check(FAULT, [incident([1], comm_id=DEFAULT_PG)], [], {})
    assert not elsewhere.ok and "not on tensor_parallel:1" in elsewhere.detail
    other_op = verdict_check(FAULT, [incident([1], seq=4)], [], {})
    assert not other_op.ok and "AllReduce seq 4" in other_op.detail


def test_a_second_rank_blamed_beside_the_faulted_one_fails():
    both = [incident([1]), incident([3], comm_id=DEFAULT_PG, incident_id="inc-2")]
    assert not verdict_check(FAULT, both, [], {}).ok
    assert not verdict_check(FAULT, [incident([1, 0])], [], {}).ok


def test_a_wait_whose_op_then_completed_is_no_verdict_on_the_fault():
    passed = incident(
        [], comm_id=DEFAULT_PG, seq=0, resolution=Resolution.OP_COMPLETED, incident_id="inc-2"
    )
    assert verdict_check(FAULT, [incident([1]), passed], [], {}).ok
    assert not verdict_check(FAULT, [passed], [], {}).ok


def test_a_long_line_is_folded_to_the_width_without_losing_a_word():
    line = "  ├─ " + " ".join(f"word{i}" for i in range(60))
    folded = fold(line, 50)
    assert all(len(part) <= 50 for part in folded)
    assert " ".join(" ".join(folded).split()) == " ".join(line.split())
    assert folded[1].startswith("      ")  # continued under the line's own indent
    assert fold("x" * 130, 50) == ["x" * 50, "    " + "x" * 46, "    " + "x" * 34]


def test_the_width_in_a_file_is_columns_within_bounds_else_120():
    assert piped_width({}) == 120
    assert piped_width({"COLUMNS": "100"}) == 100
    assert piped_width({"COLUMNS": "1000000"}) == 200
    assert piped_width({"COLUMNS": "5"}) == 40
    assert piped_width({"COLUMNS": "wide"}) == 120
