"""`comminsight_incident_open`: one series per open incident, labelled with what a page needs
(the job, the root's verdict and communicator, the rank to blame and its host), so the alert
fires once per incident however many ranks wait behind it. The series goes when the incident
resolves; the open incidents of a node are few, so the label set stays small.
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec import UNSET
from prometheus_client.core import GaugeMetricFamily

from comminsight.agent.core.metric_family import metric_family
from comminsight_gen import metrics_v1
from comminsight_gen.models.hang_report_v1 import Incident


def incident_labels(incident: Incident) -> list[str]:
    """The incident's label values, in the family's order. The root rank is the culprit with
    the lowest rank in the communicator: its global rank (`comm rank N` where that is
    unknown) and its host (the node whose Agent saw it where the process never said); both ""
    with no culprit."""
    root = incident.root
    comm = root.comm.comm_name if root.comm.comm_name is not UNSET else root.comm.comm_id
    culprit = min(root.culprits, key=lambda c: c.comm_rank, default=None)
    if culprit is None:
        rank = host = ""
    else:
        rank = (
            str(culprit.global_rank)
            if culprit.global_rank is not UNSET
            else f"comm rank {culprit.comm_rank}"
        )
        host = culprit.host if culprit.host is not UNSET else culprit.node_name
    job = incident.job_id if incident.job_id is not UNSET else ""
    named = {
        "incident_id": incident.incident_id,
        "job_id": job,
        "verdict": root.verdict.value,
        "comm": comm,
        "root_rank": rank,
        "root_host": host,
    }
    return [named[name] for name in metrics_v1.INCIDENT_OPEN.label_names()]


def incident_family(incidents: Iterable[Incident]) -> GaugeMetricFamily:
    family = metric_family(metrics_v1.INCIDENT_OPEN)
    for labels in sorted(incident_labels(i) for i in incidents):
        family.add_metric(labels, 1)
    return family
