"""Score one fault run of bench/gpu/fault_train.py against what the Agent's incidents say, and
summarize a run's results. It runs under the GPU machine's python3: the incidents are decoded
with the generated API client's models (bench/gpu/agent_api.py says where they come from),
imported only to score, so the summary table needs the standard library alone.

`evaluate(...)` takes the run's events (fault_train.py's JSON lines per rank), the incidents
the Agent served (/api/v1/incidents/{id}: the incident and its reports) and when the driver
first saw each, and returns one result line: incidents opened, the root's verdict, culprit
ranks, communicator and op, the stacks attached (for the sleep fault, the sleeping frame),
time from the fault to the incident's opening, and the checks with pass/fail.

What each fault must give (rank R = --fault-rank, k = the step's op the fault hits):
  none      no incident, both ranks exit 0
  sleep     one incident: stuck_outside_nccl or rank_not_joined, culprit R, AllReduce at the
            torch sequence number of rank 0's first bucket of the step; R's Python stack
            shows slow_data_loader at the line of its time.sleep
  skip      one incident: op_mismatch, culprit R, AllReduce at the skipped bucket's sequence
            number (R's next collective, the loss all-reduce, stands where the others issue
            that bucket; with two ranks the Agent calls the higher rank's op the odd one)
  extra     one incident: op_mismatch, culprit R, AllReduce at the extra op's sequence number
  sendsend  one incident: op_mismatch, culprits 0 and 1 (each waits in Send to the other),
            Send at the p2p index of the step's first send
and, for every fault, the incident opens within threshold + 2 s of the fault event (both
CLOCK_MONOTONIC of the one host: the Agent's opened_mono_ns, the rank's mono_ns).

    python3 bench/gpu/faults_report.py $OUT/faults.jsonl     # the summary as a markdown table
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the generated client is imported where the incidents are decoded
    from comminsight_client.models import (
        Incident,
        IncidentDetail,
        IncidentRoot,
        IncidentStack,
    )

LATENCY_SLACK_S = 2.0

EXPECTED = {
    "none": {"incidents": 0},
    "sleep": {"incidents": 1, "verdicts": ("stuck_outside_nccl", "rank_not_joined")},
    "skip": {"incidents": 1, "verdicts": ("op_mismatch",)},
    "extra": {"incidents": 1, "verdicts": ("op_mismatch",)},
    "sendsend": {"incidents": 1, "verdicts": ("op_mismatch",)},
}


def first(events: list[dict], ev: str, **match) -> dict | None:
    return next(
        (e for e in events if e.get("ev") == ev and all(e.get(k) == v for k, v in match.items())),
        None,
    )


def expected_op(fault: str, events: dict[int, list[dict]], fault_ev: dict | None) -> dict:
    """The op the hang is in, from the ranks' own events: func, the sequence number(s) it
    may carry, its element count on rank 0, and when rank 0 enqueued it."""
    r0 = events.get(0, [])
    if fault_ev is None:
        return {}
    step = fault_ev.get("step")
    if fault == "sendsend":
        send0 = first(r0, "p2p", func="Send", step=step)
        seqs = {fault_ev.get("p2p_index")}
        if send0:
            seqs.add(send0.get("p2p_index"))
        return {
            "func": "Send",
            "seqs": sorted(s for s in seqs if s is not None),
            "count": fault_ev.get("count"),
            "rank0_enqueue_mono_ns": send0["mono_ns"] if send0 else None,
        }
    if fault == "skip":
        op0 = first(r0, "coll", step=step, name=f"bucket{fault_ev.get('bucket')}")
    else:  # sleep, extra: rank 0's first collective of the step
        op0 = first(r0, "coll", step=step)
    seqs = set()
    if op0 and op0.get("torch_seq") is not None:
        seqs.add(op0["torch_seq"])
    if fault in ("skip", "extra") and fault_ev.get("torch_seq") is not None:
        seqs.add(fault_ev["torch_seq"])
    return {
        "func": "AllReduce",
        "seqs": sorted(seqs),
        "count": op0.get("count") if op0 else None,
        "rank0_op": op0.get("name") if op0 else None,
        "rank0_enqueue_mono_ns": op0["mono_ns"] if op0 else None,
    }


def known(value):
    """An optional field's value, None where the Agent left it out."""
    import agent_api

    return agent_api.known(value)


def served(answer: Mapping | IncidentDetail | Incident) -> IncidentDetail:
    """One incident as the Agent served it: an /api/v1/incidents/{id} answer (the incident and
    its reports) or a bare listed incident (no reports), JSON-decoded or already a model."""
    from agent_api import Incident, IncidentDetail

    if isinstance(answer, IncidentDetail):
        return answer
    if isinstance(answer, Incident):
        return IncidentDetail(incident=answer, reports=[])
    try:
        return IncidentDetail.from_dict(answer)
    except KeyError:  # no incident in it: the incident itself
        return IncidentDetail(incident=Incident.from_dict(answer), reports=[])


def captured(stack: IncidentStack) -> bool:
    from agent_api import IncidentStackStatus

    return stack.status is IncidentStackStatus.CAPTURED


def culprit_ranks(root: IncidentRoot) -> list[int]:
    out = []
    for c in root.culprits:
        g = known(c.global_rank)
        out.append(g if isinstance(g, int) else c.comm_rank)
    return sorted(out)


def stack_view(stacks: list[IncidentStack], max_frames: int = 8) -> list[dict]:
    view = []
    for s in stacks:
        entry = {"rank": s.rank, "pid": s.pid, "status": s.status.value}
        if captured(s):
            entry["thread"] = known(s.thread_name)
            entry["frames"] = [
                f"{f.function} ({os.path.basename(f.file)}:{known(f.line)})"
                for f in s.frames[:max_frames]
            ]
        else:
            entry["reason"] = known(s.unavailable_reason)
        view.append(entry)
    return view


def sleeping_frame(stacks: list[IncidentStack], rank: int, fault_ev: dict) -> dict | None:
    """The frame of fault_ev's function in a captured stack of `rank`, or None."""
    want_file = os.path.basename(fault_ev.get("file", ""))
    for s in stacks:
        if s.rank != rank or not captured(s):
            continue
        for f in s.frames:
            if f.function == fault_ev.get("function") and os.path.basename(f.file) == want_file:
                return {
                    "function": f.function,
                    "file": f.file,
                    "line": known(f.line),
                    "code": known(f.code),
                    "thread": known(s.thread_name),
                }
    return None


def evaluate(
    fault: str,
    threshold_s: float,
    events: dict[int, list[dict]],
    incidents: list[Mapping | IncidentDetail | Incident],
    first_seen_mono_ns: dict[str, int] | None = None,
    rank_rc: list[int | None] | None = None,
) -> dict:
    """`incidents`: /api/v1/incidents/{id} answers (the incident and its reports) or bare
    incidents, one per incident id the Agent ever served during the run (see `served`)."""
    if fault not in EXPECTED:
        raise ValueError(f"unknown fault {fault!r}")
    want = EXPECTED[fault]
    details = sorted((served(i) for i in incidents), key=lambda d: d.incident.opened_mono_ns)
    incs = [d.incident for d in details]
    first_seen_mono_ns = first_seen_mono_ns or {}
    start0 = first(events.get(0, []), "start") or {}
    fault_rank = start0.get("fault_rank", 1)
    fault_ev = next(
        (e for r in sorted(events) if (e := first(events[r], "fault")) is not None), None
    )
    res: dict = {
        "fault": fault,
        "job": start0.get("job"),
        "activation_bytes": start0.get("activation_bytes"),
        "threshold_s": threshold_s,
        "fault_rank": fault_rank,
        "group": start0.get("group"),
        "rank_rc": rank_rc,
        "incidents_opened": len(incs),
        "incident_ids": [i.incident_id for i in incs],
        "fault_event": fault_ev,
        "steps_done": {
            r: sum(1 for e in evs if e.get("ev") == "step") for r, evs in events.items()
        },
    }
    checks: dict[str, bool | None] = {"incidents": len(incs) == want["incidents"]}
    if fault == "none":
        checks["ranks_exit_0"] = rank_rc is not None and all(rc == 0 for rc in rank_rc)
        res["checks"] = checks
        res["pass"] = all(checks.values())
        return res
    checks["fault_happened"] = fault_ev is not None
    exp = expected_op(fault, events, fault_ev)
    want_culprits = [0, 1] if fault == "sendsend" else [fault_rank]
    res["expected"] = {
        "verdicts": list(want["verdicts"]),
        "culprits": want_culprits,
        "comm_name": start0.get("group"),
        **{k: v for k, v in exp.items() if k != "rank0_enqueue_mono_ns"},
    }
    if not incs:
        res["checks"] = checks
        res["pass"] = False
        return res
    inc = incs[0]
    root = inc.root
    root_report = next((r for r in details[0].reports if r.report_id == root.report_id), None)
    basis = known(root_report.culprit_basis) if root_report is not None else None
    op = known(root.op)
    op_func = op.func if op is not None else None
    op_seq = op.seq if op is not None else None
    op_index = known(op.index) if op is not None else None
    comm_name = known(root.comm.comm_name)
    fault_ns = fault_ev["mono_ns"] if fault_ev else None
    enq0 = exp.get("rank0_enqueue_mono_ns")
    hang_start = max(x for x in (fault_ns, enq0) if x is not None) if fault_ns else None
    opened = inc.opened_mono_ns
    seen = first_seen_mono_ns.get(inc.incident_id)
    stacks = inc.stacks
    res.update(
        incident_id=inc.incident_id,
        status=inc.status.value,
        severity=inc.severity.value,
        verdict=root.verdict.value,
        culprit_basis=basis.value if basis is not None else None,
        culprits=culprit_ranks(root),
        comm_name=comm_name,
        comm_id=root.comm.comm_id,
        op_func=op_func,
        op_seq=op_seq,
        op_index=op_index,
        op_count=op.count if op is not None else None,
        summary=root.summary,
        consequences=len(inc.consequences),
        root_changes=len(inc.root_changes),
        fault_to_open_s=round((opened - fault_ns) / 1e9, 3) if opened and fault_ns else None,
        hang_start_to_open_s=round((opened - hang_start) / 1e9, 3)
        if opened and hang_start
        else None,
        fault_to_api_seen_s=round((seen - fault_ns) / 1e9, 3) if seen and fault_ns else None,
        stacks=stack_view(stacks),
        others=[
            {
                "incident_id": i.incident_id,
                "verdict": i.root.verdict.value,
                "culprits": culprit_ranks(i.root),
                "comm_name": known(i.root.comm.comm_name),
                "summary": i.root.summary,
            }
            for i in incs[1:]
        ],
    )
    checks["verdict"] = res["verdict"] in want["verdicts"]
    checks["culprits"] = res["culprits"] == want_culprits
    checks["comm"] = bool(start0.get("group")) and comm_name == start0.get("group")
    checks["op_func"] = op_func == exp.get("func")
    # the sequence number is checked where the ranks' events could say it
    # torch counts a group's collectives together, as the op index (#N) does; NCCL's seq
    # counts each function apart (DDP's start-up broadcasts shift it), P2P by its own counter
    from agent_api import OpClass

    coll = op is not None and op.kind is OpClass.COLL
    position = op_index if coll and op_index is not None else op_seq
    checks["op_seq"] = position in exp["seqs"] if exp.get("seqs") else None
    checks["latency"] = (
        res["fault_to_open_s"] is not None
        and res["fault_to_open_s"] <= threshold_s + LATENCY_SLACK_S
    )
    if fault == "sleep":
        frame = sleeping_frame(stacks, fault_rank, fault_ev or {})
        res["sleeping_frame"] = frame
        res["expected"]["frame"] = {
            k: (fault_ev or {}).get(k) for k in ("function", "file", "line")
        }
        checks["stack_frame"] = frame is not None and frame.get("line") == (fault_ev or {}).get(
            "line"
        )
    res["checks"] = checks
    res["unchecked"] = [k for k, v in checks.items() if v is None]
    res["pass"] = all(v is not False for v in checks.values())
    return res


def markdown(results: list[dict]) -> str:
    head = (
        "| fault | result | incidents | verdict | culprits | communicator | op | "
        "fault → incident (s) | limit (s) | stack of the culprit |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for r in results:
        failed = [k for k, v in r.get("checks", {}).items() if v is False]
        result = "pass" if r.get("pass") else "**fail** (" + ", ".join(failed or ["error"]) + ")"
        if r.get("fault") == "none":
            rows.append(
                f"| none | {result} | {r.get('incidents_opened')} | - | - | - | - | - | - | - |"
            )
            continue
        frame = r.get("sleeping_frame")
        if frame:
            stack = f"`{frame['function']}` ({os.path.basename(frame['file'])}:{frame['line']})"
        else:
            stack = "; ".join(
                f"rank {s['rank']}: {s['status']}"
                + (f" ({s['frames'][0]})" if s.get("frames") else "")
                for s in r.get("stacks", [])
            )
        op = f"{r.get('op_func')} seq {r.get('op_seq')}" if r.get("op_func") else "-"
        limit = r.get("threshold_s", 0) + LATENCY_SLACK_S
        verdict = r.get("verdict", "-")
        if r.get("culprit_basis"):
            verdict += f" ({r['culprit_basis']})"
        rows.append(
            f"| {r['fault']} | {result} | {r.get('incidents_opened')} | {verdict} "
            f"| {r.get('culprits', '-')} | {r.get('comm_name', '-')} | {op} "
            f"| {r.get('fault_to_open_s', '-')} | {limit:g} | {stack or '-'} |"
        )
    return head + "\n".join(rows) + "\n"


def read_lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("bench") == "gpu_fault":
            out.append(d)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="markdown summary of faults.jsonl")
    ap.add_argument("faults_jsonl")
    args = ap.parse_args()
    results = read_lines(Path(args.faults_jsonl))
    sys.stdout.write(markdown(results))
    return 0 if results and all(r.get("pass") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
