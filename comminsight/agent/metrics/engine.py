"""The live Semantic Engine's Prometheus series (comminsight_semantic_engine_*), read from the
hook once per Agent pass and exposed at scrape time by NodeMetrics.

Labels are bounded: a failure's reason is the exception's type, a GPU state one of three.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:  # metrics.py imports this module; the engine itself is optional
    from comminsight.agent.steps.semantic_hook import SemanticEngineHook

GPU_STATES = ("running", "backing_off", "finished")


@dataclass(frozen=True)
class SemanticEngineMetrics:
    failures: dict[str, int] = field(default_factory=dict)  # by reason
    restarts: dict[str, int] = field(default_factory=dict)  # by the reason of the failure
    lag_s: float = 0.0  # worst running GPU
    gpus: dict[str, int] = field(default_factory=dict)  # by state
    replay_records: int = 0
    engine_ops: int = 0
    running: bool = True
    cuts: int = 0  # the node's job-wide Step cuts
    ops_unsettled: int = 0
    cuts_contradicting: int = 0


def engine_metrics(hook: SemanticEngineHook) -> SemanticEngineMetrics:
    status = hook.gpu_status()
    lags = [s.lag_ns for s in status if s.lag_ns is not None]
    held = hook.held()
    return SemanticEngineMetrics(
        failures=dict(hook.counts.failures),
        restarts=dict(hook.counts.restarts),
        lag_s=max(lags) / 1e9 if lags else 0.0,
        gpus={state: sum(1 for s in status if s.state == state) for state in GPU_STATES},
        replay_records=held.replay_records,
        engine_ops=held.engine_ops,
        running=hook.running,
        cuts=hook.live_cut.stats.cuts,
        ops_unsettled=hook.live_cut.stats.ops_unsettled,
        cuts_contradicting=hook.live_cut.stats.offset_disagreements,
    )


def families(m: SemanticEngineMetrics) -> Iterator:
    yield _by_reason(
        "comminsight_semantic_engine_failures",
        "Failures (exceptions) of a GPU's live Semantic Engine, by reason (exception type)",
        m.failures,
    )
    yield _by_reason(
        "comminsight_semantic_engine_restarts",
        "Restarts of a GPU's live Semantic Engine from its checkpoint, by the failure's reason",
        m.restarts,
    )
    yield GaugeMetricFamily(
        "comminsight_semantic_engine_lag_seconds",
        "How far the live engine trails its input, worst GPU: completion time of the newest "
        "op ingested minus that of the newest op placed into a Step",
        value=m.lag_s,
    )
    gpus = GaugeMetricFamily(
        "comminsight_semantic_engine_gpus",
        "GPUs (profiled processes) of the live engine, by state",
        labels=["state"],
    )
    for state in GPU_STATES:
        gpus.add_metric([state], m.gpus.get(state, 0))
    yield gpus
    yield GaugeMetricFamily(
        "comminsight_semantic_engine_replay_records",
        "Op records kept to restart the engines from their checkpoints",
        value=m.replay_records,
    )
    yield GaugeMetricFamily(
        "comminsight_semantic_engine_held_ops",
        "Ops the engines hold unplaced (reorder windows, ops waiting for the node's Step cut)",
        value=m.engine_ops,
    )
    yield CounterMetricFamily(
        "comminsight_semantic_engine_cuts",
        "Job-wide Step cuts over the node's GPUs",
        value=m.cuts,
    )
    yield CounterMetricFamily(
        "comminsight_semantic_engine_cuts_contradicting",
        "Node Step cuts that contradicted Steps already placed (they settle nothing unless "
        "ops must go)",
        value=m.cuts_contradicting,
    )
    yield CounterMetricFamily(
        "comminsight_semantic_engine_ops_unsettled",
        "Ops placed in no Step because no cut settled them before the engine's bound on held ops",
        value=m.ops_unsettled,
    )
    yield GaugeMetricFamily(
        "comminsight_semantic_engine_up",
        "1 while the engine's worker thread runs",
        value=1 if m.running else 0,
    )


def _by_reason(name: str, documentation: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=["reason"])
    for reason, n in sorted(counts.items()):
        family.add_metric([reason], n)
    return family
