"""What the Profiler wrote: the run's inspector_logs segments, each verified against its seal,
and the checks on them (every segment sealed and verified, an op record for every op each
rank issued, hang evidence of the skipped op from the peers that waited for it and none from
the rank that skipped it)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from comminsight.demo.checklist import Check
from comminsight.demo.sim_checks import InjectedFault
from comminsight.demo.simulation import SimRun
from comminsight.log_segments import SegmentError, segments_in, verify_segment
from comminsight_gen.models.inspector_log_v1 import (
    CiColl,
    CiCollCompact,
    CiHangEvidence,
    CiP2p,
    CiP2pCompact,
    CiSegmentStart,
    InspectorLogRecord,
)


@dataclass(frozen=True)
class LoggedOp:
    """What the demo shows of an op line, whichever form it was written in."""

    size_bytes: int
    busbw_gbs: float | None  # None where the line holds no finite number
    timing_source: str


def _logged_op(r: InspectorLogRecord) -> LoggedOp:
    ci = r.ci
    if isinstance(ci, (CiCollCompact, CiP2pCompact)):
        return LoggedOp(ci.b, _finite(ci.bw), _text(ci.ts))
    if isinstance(ci, CiColl):
        p = r.coll_perf
        return LoggedOp(
            p.coll_msg_size_bytes, _finite(p.coll_busbw_gbs), _text(p.coll_timing_source)
        )
    p = r.p2p_perf
    return LoggedOp(p.p2p_msg_size_bytes, _finite(p.p2p_busbw_gbs), _text(p.p2p_timing_source))


def _finite(bw) -> float | None:
    return float(bw) if isinstance(bw, float | int) and math.isfinite(bw) else None


def _text(value) -> str:
    return value.value if isinstance(value, Enum) else str(value)


@dataclass
class RunLogs:
    directory: Path
    sealed: list[Path] = field(default_factory=list)
    still_open: list[Path] = field(default_factory=list)  # .partial: never sealed
    failures: list[str] = field(default_factory=list)  # segments that do not verify
    by_rank: dict[int, list[InspectorLogRecord]] = field(default_factory=dict)

    def records_of(self, rank: int, kind: type) -> list[InspectorLogRecord]:
        return [r for r in self.by_rank.get(rank, []) if isinstance(r.ci, kind)]

    def ops_of(self, rank: int, collective: bool) -> list[LoggedOp]:
        """The rank's collective (or point-to-point) op lines, in either form."""
        kinds = (CiColl, CiCollCompact) if collective else (CiP2p, CiP2pCompact)
        return [_logged_op(r) for r in self.by_rank.get(rank, []) if isinstance(r.ci, kinds)]


def read_logs(directory: Path) -> RunLogs:
    """Every segment under `directory`, verified (line count, byte count and CRC-32 against
    its seal), its records by the global rank its segment-start record names."""
    logs = RunLogs(directory)
    by_rank: dict[int, list] = defaultdict(list)
    for path in segments_in(directory, include_open=True):
        if path.name.endswith(".partial"):
            logs.still_open.append(path)
            continue
        logs.sealed.append(path)
        try:
            segment = verify_segment(path)
        except (SegmentError, OSError) as e:
            logs.failures.append(str(e))
            continue
        start = segment.records[0].ci if segment.records else None
        if not isinstance(start, CiSegmentStart):
            logs.failures.append(f"{path}: the first record is not a segment start")
            continue
        by_rank[start.process.global_rank] += segment.records
    logs.by_rank = dict(by_rank)
    return logs


def segments_check(run_name: str, logs: RunLogs, ranks: int) -> Check:
    label = f"{run_name}: every inspector_logs segment sealed and verified"
    missing = sorted(set(range(ranks)) - set(logs.by_rank))
    problems = [*logs.failures]
    if logs.still_open:
        problems.append(f"{len(logs.still_open)} never sealed: {logs.still_open[0].name}")
    if missing:
        problems.append(f"no verified segment from rank(s) {missing}")
    if not logs.sealed:
        problems.append(f"no sealed segment in {logs.directory}")
    if problems:
        return Check(label, False, "; ".join(problems))
    return Check(
        label,
        True,
        f"{len(logs.sealed)} sealed segments from all {ranks} ranks, none left open; each "
        "one's line count, byte count and CRC-32 match its seal",
    )


def ops_logged_check(run_name: str, logs: RunLogs, run: SimRun) -> Check:
    """An op record (collective or P2P) in the logs for every op each rank issued."""
    label = f"{run_name}: the logs hold a record of every op each rank issued"
    wrong, total = [], 0
    for truth in run.truths:
        issued = truth.end["ops_issued"] if truth.end else len(truth.ops)
        logged = len(logs.ops_of(truth.rank, True)) + len(logs.ops_of(truth.rank, False))
        total += logged
        if logged != issued:
            wrong.append(f"rank {truth.rank}: {logged} records, {issued} ops issued")
    if wrong:
        return Check(label, False, "; ".join(wrong))
    return Check(label, True, f"{total} op records, as many as the simulator's ranks issued")


def hang_evidence_check(run_name: str, logs: RunLogs, fault: InjectedFault, run: SimRun) -> Check:
    """Every peer of the faulted rank on the communicator it skipped the op in wrote hang
    evidence of that op; the faulted rank, which never issued it, wrote none there."""
    label = (
        f"{run_name}: rank {fault.rank}'s peers on {fault.comm_name} wrote hang evidence of "
        f"{fault.op_text()}, rank {fault.rank} none"
    )
    peers = sorted(
        truth.rank
        for truth in run.truths
        if truth.rank != fault.rank and any(c["comm_id"] == fault.comm_id for c in truth.of("comm"))
    )
    on_comm = {
        rank: [r.ci for r in logs.records_of(rank, CiHangEvidence) if r.ci.comm_id == fault.comm_id]
        for rank in logs.by_rank
    }
    of_op = sorted(
        rank
        for rank, evidence in on_comm.items()
        if any(fault.seq is None or h.seq == fault.seq for h in evidence)
    )
    everyone = sorted(r for r in logs.by_rank if logs.records_of(r, CiHangEvidence))
    problems = []
    if [r for r in of_op if r != fault.rank] != peers:
        problems.append(f"evidence of it from rank(s) {of_op}, its peers are {peers}")
    if on_comm.get(fault.rank):
        problems.append(f"rank {fault.rank}, which never issued it, wrote evidence there too")
    if problems:
        return Check(label, False, "; ".join(problems))
    return Check(
        label,
        True,
        f"from rank(s) {peers}, none from rank {fault.rank}; ranks {everyone} wrote hang "
        "evidence in all (the table above)",
    )
