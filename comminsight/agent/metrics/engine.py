"""The live Semantic Engine's Prometheus series (comminsight_semantic_engine_*), read from the
hook once per Agent pass and exposed at scrape time by NodeMetrics.

Labels are bounded: a failure's reason is the exception's type, a GPU state one of three.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from comminsight.agent.core.metric_family import counts_family, metric_family
from comminsight_gen import metrics_v1

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
    yield counts_family(metrics_v1.SEMANTIC_ENGINE_FAILURES_TOTAL, m.failures)
    yield counts_family(metrics_v1.SEMANTIC_ENGINE_RESTARTS_TOTAL, m.restarts)
    yield metric_family(metrics_v1.SEMANTIC_ENGINE_LAG_SECONDS, value=m.lag_s)
    gpus = metric_family(metrics_v1.SEMANTIC_ENGINE_GPUS)
    for state in GPU_STATES:
        gpus.add_metric([state], m.gpus.get(state, 0))
    yield gpus
    yield metric_family(metrics_v1.SEMANTIC_ENGINE_REPLAY_RECORDS, value=m.replay_records)
    yield metric_family(metrics_v1.SEMANTIC_ENGINE_HELD_OPS, value=m.engine_ops)
    yield metric_family(metrics_v1.SEMANTIC_ENGINE_CUTS_TOTAL, value=m.cuts)
    yield metric_family(
        metrics_v1.SEMANTIC_ENGINE_CUTS_CONTRADICTING_TOTAL, value=m.cuts_contradicting
    )
    yield metric_family(metrics_v1.SEMANTIC_ENGINE_OPS_UNSETTLED_TOTAL, value=m.ops_unsettled)
    yield metric_family(metrics_v1.SEMANTIC_ENGINE_UP, value=1 if m.running else 0)
