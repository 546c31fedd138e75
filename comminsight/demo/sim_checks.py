"""What the simulator says happened, per rank (its exit status and ground truth): whether a
run went to its end, and which fault was injected where."""

from __future__ import annotations

from dataclasses import dataclass

from comminsight.demo.checklist import Check
from comminsight.demo.simulation import HANG_HOLD_S, SimRun


def healthy_ranks_check(run: SimRun) -> Check:
    """Every rank exited 0 having done its whole program: status done, every op completed."""
    label = "healthy run: every rank ran to the end"
    result = run.result
    problems = list(result.errors)
    if result.abort_reason is not None:
        problems.append(f"the launcher aborted the run ({result.abort_reason})")
    ops = 0
    for truth, code in zip(run.truths, result.exit_codes, strict=True):
        end = truth.end
        if code != 0:
            problems.append(f"rank {truth.rank} exited with status {code}")
        if end is None:
            problems.append(f"rank {truth.rank} wrote no end record")
        elif end["status"] != "done" or end["ops_completed"] != end["ops_issued"]:
            problems.append(
                f"rank {truth.rank} ended {end['status']} with {end['ops_completed']} of "
                f"{end['ops_issued']} ops completed"
            )
        else:
            ops += end["ops_completed"]
    if problems:
        return Check(label, False, "; ".join(dict.fromkeys(problems)))
    return Check(
        label,
        True,
        f"{len(run.truths)}/{len(run.truths)} ranks exited 0, status done, {ops} ops issued "
        "and all completed",
    )


@dataclass(frozen=True)
class InjectedFault:
    """The op a rank skipped, as its peers issued it on the communicator."""

    rank: int  # global rank that skipped it
    comm_id: str  # 16 hex digits
    comm_name: str
    func: str
    seq: int | None  # the op's sequence number on the communicator (None: no peer issued it)
    comm_op_index: int

    def op_text(self) -> str:
        seq = f"seq {self.seq}" if self.seq is not None else f"#{self.comm_op_index}"
        return f"{self.func} {seq}"


def injected_fault(run: SimRun) -> InjectedFault | None:
    """The skip the ground truth records (None if no rank applied one)."""
    for truth in run.truths:
        for fault in truth.of("fault"):
            if fault["fault"] != "skip":
                continue
            peer_ops = [
                op
                for t in run.truths
                if t.rank != truth.rank
                for op in t.ops
                if op["comm_id"] == fault["comm_id"]
                and op["comm_op_index"] == fault["comm_op_index"]
            ]
            names = [c["name"] for c in truth.of("comm") if c["comm_id"] == fault["comm_id"]]
            return InjectedFault(
                rank=truth.rank,
                comm_id=fault["comm_id"],
                comm_name=names[0] if names else fault["comm_id"],
                func=fault["func"],
                seq=peer_ops[0]["seq"] if peer_ops else None,
                comm_op_index=fault["comm_op_index"],
            )
    return None


def hang_ranks_check(run: SimRun, fault: InjectedFault | None) -> Check:
    """The fault was applied and the others hung; the launcher held the hang, then aborted
    the run, and every rank stopped cleanly."""
    label = "hang run: the fault was applied, the run hung, every rank stopped cleanly"
    result = run.result
    problems = list(result.errors)
    if fault is None:
        problems.append("no rank's ground truth records the skipped op")
    if result.abort_reason != "hang":
        problems.append(f"the run did not hang (launcher's outcome: {result.abort_reason})")
    for truth, code in zip(run.truths, result.exit_codes, strict=True):
        if code != 0:
            problems.append(f"rank {truth.rank} exited with status {code}")
        elif truth.end is None:
            problems.append(f"rank {truth.rank} wrote no end record")
        elif truth.end["status"] != "aborted":
            problems.append(f"rank {truth.rank} ended {truth.end['status']}, not aborted")
    if problems:
        return Check(label, False, "; ".join(dict.fromkeys(problems)))
    return Check(
        label,
        True,
        f"rank {fault.rank} skipped {fault.op_text()} on {fault.comm_name}; the hang held "
        f"{HANG_HOLD_S:g} s, then the launcher aborted it and all {len(run.truths)} ranks "
        "exited 0 (status aborted)",
    )
