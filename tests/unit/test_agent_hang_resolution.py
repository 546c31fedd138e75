"""Open hang reports a pass no longer finds are resolved once, with the reason this node sees."""

from __future__ import annotations

from pathlib import Path

import msgspec

from comminsight.agent.hangs.resolution import resolve_cleared
from comminsight.agent.state.snapshot import CommView, NodeSnapshot
from comminsight_gen.models.hang_report_v1 import HangReport, ReportStatus, Resolution

FIXTURES = Path(__file__).resolve().parents[2] / "contract-tests/fixtures/json/hang-report/v1"
OPEN = msgspec.json.decode(
    (FIXTURES / "valid" / "rank-not-joined-open.json").read_bytes(), type=HangReport
)
COMM = int(OPEN.comm.comm_id, 16)


def snapshot(*comm_ids: int) -> NodeSnapshot:
    comms = {c: CommView(comm_id=c, name="", nranks=4, nnodes=1, members=()) for c in comm_ids}
    return NodeSnapshot(
        node_name="n",
        taken_mono_ns=OPEN.detected_mono_ns + 5 * 10**9,
        taken_real_ns=OPEN.detected_real_ns + 5 * 10**9,
        heartbeat_stale_ns=10**9,
        processes=(),
        comms=comms,
    )


def test_still_reported_stays_open():
    assert resolve_cleared([OPEN], [OPEN], snapshot(COMM)) == []


def test_cleared_while_the_comm_is_active_means_the_op_completed():
    (r,) = resolve_cleared([OPEN], [], snapshot(COMM))
    assert (r.status, r.resolution) == (ReportStatus.resolved, Resolution.op_completed)
    assert r.resolved_mono_ns == OPEN.detected_mono_ns + 5 * 10**9
    assert r.report_id == OPEN.report_id and r.verdict == OPEN.verdict
    msgspec.json.decode(msgspec.json.encode(r), type=HangReport)  # still a valid report


def test_a_comm_gone_from_view_was_finalized():
    (r,) = resolve_cleared([OPEN], [], snapshot(COMM + 1))
    assert r.resolution is Resolution.comm_finalized


def test_another_report_on_the_comm_supersedes():
    other = msgspec.structs.replace(OPEN, report_id="other-report")
    (r,) = resolve_cleared([OPEN, other], [other], snapshot(COMM))
    assert r.report_id == OPEN.report_id and r.resolution is Resolution.superseded


def test_resolved_reports_are_not_resolved_again():
    (r,) = resolve_cleared([OPEN], [], snapshot(COMM))
    assert resolve_cleared([r], [], snapshot(COMM)) == []
