"""When a hang report's condition ends: the open reports a pass no longer finds, resolved.

A report is open while diagnosis keeps finding it (same report_id); the first pass that does
not find it resolves it once, saying why as far as this node can tell:
- another report now stands for the same communicator (the diagnosis changed): superseded;
- the communicator is no longer active on this node (finalized, its processes retired, or
  every one of them ended: a job killed whole): comm_finalized;
- otherwise the ranks moved on, so the op completed: op_completed.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from comminsight.agent.state.snapshot import NodeSnapshot
from comminsight_gen.models.hang_report_v1 import HangReport, ReportStatus, Resolution


def resolve_cleared(
    stored: Iterable[HangReport], current: Iterable[HangReport], snapshot: NodeSnapshot
) -> list[HangReport]:
    """The stored open reports absent from `current`, as resolved reports."""
    current_ids = {r.report_id for r in current}
    comms_reported = {r.comm.comm_id for r in current}
    # a communicator whose every process ended is over, though its rows wait for retirement
    active = {
        c.comm_id_hex
        for c in snapshot.comms.values()
        if not c.members or not all(m.process.ended for m in c.members)
    }
    resolved = []
    for report in stored:
        if report.status is not ReportStatus.open or report.report_id in current_ids:
            continue
        if report.comm.comm_id in comms_reported:
            why = Resolution.superseded
        elif report.comm.comm_id not in active:
            why = Resolution.comm_finalized
        else:
            why = Resolution.op_completed
        resolved.append(
            msgspec.structs.replace(
                report,
                status=ReportStatus.resolved,
                resolution=why,
                resolved_mono_ns=max(snapshot.taken_mono_ns, report.detected_mono_ns),
                resolved_real_ns=max(snapshot.taken_real_ns, report.detected_real_ns),
            )
        )
    return resolved
