"""The Agent's hang diagnosis, as its API serves it (incidents, their roots and culprits),
against the fault the demo injected: the root cause must name the rank that skipped the op,
alone, on the communicator and at the op it skipped. An incident whose op then completed (a
wait that passed, not the hang) is no verdict on the fault; the demo shows it apart."""

from __future__ import annotations

from comminsight.cli.client import known
from comminsight.demo.checklist import Check
from comminsight.demo.sim_checks import InjectedFault
from comminsight.demo.simulation import SimRun
from comminsight_client.models import HangReport, Incident, Resolution, Severity


def ended_by_itself(incident: Incident) -> bool:
    """Its root op completed: a wait over the threshold that passed (a rank slow to start on a
    loaded machine), not the hang the fault caused, whose op never completes."""
    return known(incident.resolution) == Resolution.OP_COMPLETED


def hang_incidents(incidents: list[Incident]) -> list[Incident]:
    """The incidents that stand for a hang: not merged into another, not ended by itself."""
    return [i for i in incidents if known(i.merged_into) is None and not ended_by_itself(i)]


def passed_waits(incidents: list[Incident]) -> list[Incident]:
    return [i for i in incidents if known(i.merged_into) is None and ended_by_itself(i)]


def global_ranks(run: SimRun) -> dict[tuple[str, int], int]:
    """(comm_id, rank in the communicator) -> global rank, from the ground truth."""
    return {
        (comm["comm_id"], comm["rank"]): truth.rank
        for truth in run.truths
        for comm in truth.of("comm")
    }


def culprit_ranks(incident: Incident, ranks: dict[tuple[str, int], int]) -> list[int | str]:
    """The global ranks the incident's root blames (a comm rank the run does not know is
    named as such)."""
    named: list[int | str] = []
    for c in incident.root.culprits:
        rank = known(c.global_rank)
        if rank is None:
            rank = ranks.get((incident.root.comm.comm_id, c.comm_rank))
        named.append(rank if rank is not None else f"comm rank {c.comm_rank}")
    return named


def root_text(incident: Incident, ranks: dict[tuple[str, int], int]) -> str:
    root = incident.root
    named = [f"rank {r}" if isinstance(r, int) else r for r in culprit_ranks(incident, ranks)]
    who = ", ".join(named) if named else "no rank"
    op = known(root.op)
    at = f", {op.func} seq {op.seq}" if op is not None else ""
    comm = known(root.comm.comm_name) or root.comm.comm_id
    return f"{incident.incident_id}: {who} on {comm}{at} ({root.verdict.value})"


def verdict_check(
    fault: InjectedFault | None,
    incidents: list[Incident],
    reports: list[HangReport],
    ranks: dict[tuple[str, int], int],
) -> Check:
    if fault is None:
        return Check(
            "hang run: the Agent's diagnosis names the faulted rank",
            False,
            "no fault was recorded in the ground truth to compare the diagnosis with",
        )
    label = (
        f"hang run: the Agent's diagnosis names rank {fault.rank}, {fault.comm_name} and "
        f"{fault.op_text()}"
    )
    not_named = f"the Agent did not name rank {fault.rank} alone as the cause"
    live = hang_incidents(incidents)
    critical = [i for i in live if i.severity == Severity.CRITICAL]
    if not live:
        verdicts = sorted({r.verdict.value for r in reports})
        return Check(
            label,
            False,
            f"{not_named}: it opened no incident ({len(reports)} hang reports, verdicts "
            f"{verdicts or 'none'})",
        )
    if not critical:
        roots = "; ".join(root_text(i, ranks) for i in live)
        return Check(label, False, f"{not_named}: no incident is critical: {roots}")
    if len(critical) > 1 or culprit_ranks(critical[0], ranks) != [fault.rank]:
        roots = "; ".join(root_text(i, ranks) for i in critical)
        return Check(label, False, f"{not_named}: its critical incident(s): {roots}")
    incident = critical[0]
    root = incident.root
    op = known(root.op)
    comm = known(root.comm.comm_name) or root.comm.comm_id
    if root.comm.comm_id != fault.comm_id:
        return Check(
            label,
            False,
            f"the Agent named rank {fault.rank} but on {comm} ({root.comm.comm_id}), not on "
            f"{fault.comm_name} ({fault.comm_id}) where it skipped the op",
        )
    if op is None or op.func != fault.func or (fault.seq is not None and op.seq != fault.seq):
        at = f"{op.func} seq {op.seq}" if op is not None else "no op"
        return Check(
            label,
            False,
            f"the Agent named rank {fault.rank} on {comm} but at {at}, not at "
            f"{fault.op_text()}, the op it skipped",
        )
    grouped = {root.report_id, *(c.report_id for c in incident.consequences)}
    in_it = sum(r.report_id in grouped for r in reports)
    return Check(
        label,
        True,
        f"incident {incident.incident_id} ({incident.severity.value}) blames rank "
        f"{fault.rank} alone on {comm} ({root.comm.comm_id}) at {op.func} seq {op.seq}: "
        f"{root.verdict.value}; {in_it} of the {len(reports)} hang reports are grouped under it",
    )
