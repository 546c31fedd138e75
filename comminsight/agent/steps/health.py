"""The live Semantic Engine's part of `/api/v1/health`: the agent-master-api
SemanticEngineHealth model, and the reasons it gives for a degraded status.

A failure keeps health degraded for RECENT_FAILURE_S after it even though the engine restarted
at once (a scrape every minute or so still sees it; the metrics count every failure for ever);
a GPU that is backing off, or a worker thread that stopped, keeps it degraded until it is over.
"""

from __future__ import annotations

import time

from comminsight.agent.steps.engine_status import GpuEngineStatus
from comminsight.agent.steps.restarts import EngineFailure
from comminsight.agent.steps.semantic_hook import SemanticEngineHook
from comminsight_gen.models import agent_master_api_v1 as api

RECENT_FAILURE_S = 300.0
MS = 1e6


def _failure(failure: EngineFailure | None, pid: int | None) -> api.SemanticEngineFailure | None:
    if failure is None or pid is None:
        return None
    return api.SemanticEngineFailure(
        reason=failure.reason,
        message=failure.message,
        pid=max(1, pid),
        failed_real_ns=failure.real_ns,
    )


def _gpu(s: GpuEngineStatus) -> api.SemanticEngineGpu:
    return api.SemanticEngineGpu(
        pid=max(1, s.pid),
        global_rank=s.global_rank,
        state=api.SemanticEngineGpuState(s.state),
        lag_ms=s.lag_ns / MS if s.lag_ns is not None else None,
        steps_written=s.steps_written,
        failures=s.failures,
        restarts=s.restarts,
        retry_in_ms=s.retry_in_s * 1000 if s.retry_in_s is not None else None,
        last_failure=_failure(s.last_failure, s.pid),
    )


def engine_health(hook: SemanticEngineHook) -> tuple[api.SemanticEngineHealth, list[str]]:
    """The model, and the reasons (empty when the engine is well)."""
    gpus = hook.gpu_status()
    counts = hook.counts
    lags = [s.lag_ns for s in gpus if s.lag_ns is not None]
    model = api.SemanticEngineHealth(
        running=hook.running,
        failures_total=sum(counts.failures.values()),
        restarts_total=sum(counts.restarts.values()),
        lag_ms=max(lags) / MS if lags else None,
        last_failure=_failure(counts.last, counts.last_pid),
        gpus=[_gpu(s) for s in gpus if s.state != "finished"],  # one per process ever: unbounded
    )
    return model, _reasons(hook, gpus)


def _reasons(hook: SemanticEngineHook, gpus: list[GpuEngineStatus]) -> list[str]:
    reasons = []
    if not hook.running:
        reasons.append("the Semantic Engine's worker thread has stopped: no Steps are recovered")
    now = time.monotonic()
    for s in gpus:
        f = s.last_failure
        who = f"pid {s.pid}" + (f" (rank {s.global_rank})" if s.global_rank is not None else "")
        if s.state == "backing_off":
            reasons.append(
                f"the Semantic Engine of {who} failed {s.failures} times, last: {f.message}; "
                f"it restarts from its checkpoint in {s.retry_in_s:.0f} s"
            )
        elif f is not None and now - f.mono_s < RECENT_FAILURE_S:
            reasons.append(
                f"the Semantic Engine of {who} failed {now - f.mono_s:.0f} s ago "
                f"({f.message}) and restarted from its checkpoint ({s.restarts} restarts)"
            )
    last = hook.counts.last
    if hook.counts.last_pid is None and last is not None and now - last.mono_s < RECENT_FAILURE_S:
        reasons.append(
            f"the Semantic Engine's worker failed {now - last.mono_s:.0f} s ago outside any "
            f"GPU's engine ({last.message}); it went on with the next batches"
        )
    fault = hook.storage_fault
    if fault is not None:
        waiting, dropped = hook.pending_summaries()
        reasons.append(
            f"the Semantic Engine cannot write {fault.path} ({fault.error}) for "
            f"{now - fault.since_mono_s:.0f} s: {waiting} Step summaries wait in memory"
            + (f", {dropped} dropped past its bound" if dropped else "")
            + "; retried every few seconds"
        )
    stats = hook.live_cut.stats
    if stats.last_unsettled_s is not None and now - stats.last_unsettled_s < RECENT_FAILURE_S:
        reasons.append(
            f"{stats.ops_unsettled} ops placed in no Step so far, the latest "
            f"{now - stats.last_unsettled_s:.0f} s ago: no cut of the node's GPUs settled them "
            "before the engine's bound on held ops (their ops show no Step that repeats)"
        )
    return reasons
