"""The Steps the Agent's Semantic Engine recovered live, against the Steps the simulator ran:
per rank as many (the check), and how many begin and end on the ops the simulator's Step did
(measured and stated, with the Steps that differ: the live engine decides boundaries from
what it has seen so far, and may place one a few ops off)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from comminsight.demo.checklist import Check
from comminsight.demo.simulation import SimRun
from comminsight.sim.step_accuracy import op_identity
from comminsight_client.models import StepSummary

OpKey = tuple[str, str, int]  # comm_id, func, seq as the engine names an op


def true_steps(run: SimRun) -> dict[int, list[tuple[OpKey, OpKey]]]:
    """rank -> its Steps in order, each as (first op, last op)."""
    steps = {}
    for truth in run.truths:
        ids = op_identity(truth)
        steps[truth.rank] = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.of("step")]
    return steps


def found_steps(summaries: list[StepSummary]) -> dict[int, dict[int, tuple[OpKey, OpKey]]]:
    """rank -> step index -> (first op, last op) of the Agent's summaries."""
    found: dict[int, dict[int, tuple[OpKey, OpKey]]] = defaultdict(dict)
    for s in summaries:
        found[s.global_rank][s.step_index] = (
            (s.first_op.comm_id, s.first_op.func, s.first_op.seq),
            (s.last_op.comm_id, s.last_op.func, s.last_op.seq),
        )
    return found


@dataclass(frozen=True)
class StepComparison:
    check: Check
    differences: list[str]  # Steps found on other ops than the simulator's, as text


def op_text(op: OpKey, names: dict[str, str]) -> str:
    comm_id, func, seq = op
    return f"{func} seq {seq} on {names.get(comm_id, comm_id)}"


def steps_check(run: SimRun, summaries: list[StepSummary]) -> StepComparison:
    """Passes when the Agent found, on every rank, as many Steps as the simulator ran (and no
    others); how many of them begin and end on the simulator's ops is stated, measured."""
    label = "healthy run: the Agent's Semantic Engine found each rank's Steps, as many as were run"
    truth, found = true_steps(run), found_steps(summaries)
    names = {c["comm_id"]: c["name"] for t in run.truths for c in t.of("comm")}
    problems, differences, exact, total = [], [], 0, 0
    for rank, expected in sorted(truth.items()):
        got = found.get(rank, {})
        total += len(expected)
        if len(got) != len(expected):
            problems.append(f"rank {rank}: {len(got)} Steps, the simulator ran {len(expected)}")
        for index, bounds in enumerate(expected):
            if got.get(index) == bounds:
                exact += 1
            elif index in got:
                first, last = got[index]
                differences.append(
                    f"rank {rank} Step {index}: {op_text(first, names)} .. "
                    f"{op_text(last, names)}; the simulator's: {op_text(bounds[0], names)} .. "
                    f"{op_text(bounds[1], names)}"
                )
    strays = sorted(set(found) - set(truth))
    if strays:
        problems.append(f"Steps of rank(s) {strays}, which the run does not have")
    if not summaries:
        problems.append("the Agent served no Step (is its Semantic Engine on? `make build-engine`)")
    if problems:
        shown = problems[:4] + ([f"and {len(problems) - 4} more"] if len(problems) > 4 else [])
        return StepComparison(Check(label, False, "; ".join(shown)), differences)
    each = "/".join(map(str, sorted({len(v) for v in truth.values()})))
    warmups = sum(s.get("warmup", False) for s in run.truths[0].of("step"))
    detail = (
        f"{total} Steps, {each} on each of {len(truth)} ranks ({warmups} of them warm-up) as "
        f"the simulator ran them; {exact} of {total} begin and end on the simulator's ops"
    )
    return StepComparison(Check(label, True, detail), differences)
