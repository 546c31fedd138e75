"""The Agent's Prometheus families, made from the metrics protocol's specs
(protocols/metrics/v1): a family's name, type, HELP text and label names come from there, never
from the module that fills it, so the README's table, the golden /metrics page and what a
scrape returns cannot drift apart."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from comminsight_gen.metrics_v1 import MetricSpec

_FAMILIES = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "histogram": HistogramMetricFamily,
}


def metric_family(spec: MetricSpec, level: str = "job", *, value: float | None = None):
    """An empty family of spec's type, with its labels at a metrics level (job or rank); or,
    for a family without labels, the family holding one value."""
    make = _FAMILIES[spec.type]
    if value is not None:
        if spec.labels:
            raise ValueError(f"{spec.exposed} has labels: its samples go in with add_metric")
        return make(spec.family, spec.help, value=value)
    return make(spec.family, spec.help, labels=spec.label_names(level))


def counts_family(spec: MetricSpec, counts: dict[str, int]):
    """A family of one label (a reason, an outcome) with a sample per key, in key order."""
    family = metric_family(spec)
    for key, n in sorted(counts.items()):
        family.add_metric([key], n)
    return family
