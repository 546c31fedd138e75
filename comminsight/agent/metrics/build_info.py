"""`comminsight_build_info`: which CommInsight a fleet runs, as one constant series (value 1)
whose labels are the version, the git commit where one is known, and the versions of the
protocols this Agent speaks, so that a dashboard can group nodes by build and spot a node
whose Agent cannot read its Profilers' regions."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from comminsight.build_identity import build_labels


def build_info_family() -> GaugeMetricFamily:
    labels = build_labels()
    family = GaugeMetricFamily(
        "comminsight_build_info",
        "CommInsight build of this Agent (always 1): version, git commit where known, and "
        "the versions of the protocols it speaks",
        labels=list(labels),
    )
    family.add_metric(list(labels.values()), 1)
    return family
