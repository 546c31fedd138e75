"""`comminsight_build_info`: which CommInsight a fleet runs, as one constant series (value 1)
whose labels are the version, the git commit where one is known, and the versions of the
protocols this Agent speaks, so that a dashboard can group nodes by build and spot a node
whose Agent cannot read its Profilers' regions."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from comminsight.agent.core.metric_family import metric_family
from comminsight.build_identity import build_labels
from comminsight_gen import metrics_v1


def build_info_family() -> GaugeMetricFamily:
    spec = metrics_v1.BUILD_INFO
    labels = build_labels()
    family = metric_family(spec)
    family.add_metric([labels[name] for name in spec.label_names()], 1)
    return family
