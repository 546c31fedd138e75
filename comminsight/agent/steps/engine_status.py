"""What the live engine tells health and metrics: each GPU's state and lag, what it holds, and
the summaries that wait for the disk. Read from the Agent's threads while the engine's thread
works: each reads a copy of the GPUs' list, never the engine's dict as it changes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from comminsight.agent.steps.lag import NodeLags
from comminsight.agent.steps.live_gpu import LiveGpu
from comminsight.agent.steps.restarts import EngineFailure


@dataclass(frozen=True)
class GpuEngineStatus:
    """One GPU's live engine, for health."""

    pid: int
    global_rank: int | None
    state: str  # running | backing_off | finished
    lag_ns: int | None
    steps_written: int
    failures: int
    restarts: int
    last_failure: EngineFailure | None
    retry_in_s: float | None


@dataclass(frozen=True)
class EngineHeld:
    """What the hook holds, in ops and records (its memory is bounded by these)."""

    queued_records: int  # waiting for the worker
    replay_records: int  # kept for restarts
    engine_ops: int  # in the engines' reorder windows and selection probes
    gpus: int


def gpu_status(gpus: list[LiveGpu], lags: NodeLags) -> list[GpuEngineStatus]:
    now = time.monotonic()
    out = []
    for g in gpus:
        lag = lags.get(g.gpu)
        if g.finished:
            state = "finished"
        elif g.retry_at is not None:
            state = "backing_off"
        else:
            state = "running"
        out.append(
            GpuEngineStatus(
                pid=g.gpu.pid,
                global_rank=g.gpu.global_rank,
                state=state,
                lag_ns=lag.lag_ns() if lag is not None and not g.finished else None,
                steps_written=g.reported,
                failures=g.failures,
                restarts=g.restarts,
                last_failure=g.last_failure,
                retry_in_s=max(0.0, g.retry_at - now) if g.retry_at is not None else None,
            )
        )
    return sorted(out, key=lambda s: (s.global_rank is None, s.global_rank or 0, s.pid))


def worst_lag_ns(status: list[GpuEngineStatus]) -> int | None:
    """The worst lag of the GPUs whose processes run (None before any op)."""
    lags = [s.lag_ns for s in status if s.lag_ns is not None]
    return max(lags, default=None)


def held(gpus: list[LiveGpu], queued_records: int) -> EngineHeld:
    engine_ops = sum(
        len(b) for g in gpus for b in (g.engine.held, g.engine.pending) if b is not None
    )
    return EngineHeld(
        queued_records=queued_records,
        replay_records=sum(g.replay.records for g in gpus),
        engine_ops=engine_ops,
        gpus=len(gpus),
    )


def pending_summaries(gpus: list[LiveGpu]) -> tuple[int, int]:
    """Summaries waiting in memory for the disk, and those dropped past its bound."""
    return sum(g.out.pending for g in gpus), sum(g.out.dropped for g in gpus)
