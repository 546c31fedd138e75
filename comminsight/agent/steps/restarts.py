"""How often a GPU's live engine may be restarted after failures, and what is kept of them.

A failure that comes back on every restart (a bug the GPU's ops trigger each time) must not
turn the engine thread into a restart loop that starves the other GPUs: each GPU may restart
`max_restarts` times in any `window_s`; past that it waits (backs off) until the oldest
restart leaves the window, its ops kept for the restart in its replay log meanwhile.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0
MESSAGE_CHARS = 300


class RestartBudget:
    def __init__(self, max_restarts: int = MAX_RESTARTS, window_s: float = RESTART_WINDOW_S):
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._times: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()

    def take(self, now: float) -> bool:
        """Whether a restart may happen now (and if so, it is counted)."""
        self._expire(now)
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True

    def next_at(self, now: float) -> float:
        """When the next restart may happen (CLOCK_MONOTONIC s)."""
        self._expire(now)
        if len(self._times) < self.max_restarts:
            return now
        return (self._times[0] if self._times else now) + self.window_s


@dataclass(frozen=True)
class EngineFailure:
    """One failure of a GPU's engine: an exception out of it."""

    reason: str  # the exception's type: a small, fixed set (a metric label)
    message: str
    real_ns: int
    mono_s: float

    @classmethod
    def of(cls, error: BaseException) -> EngineFailure:
        return cls(
            type(error).__name__[:64],
            f"{type(error).__name__}: {error}"[:MESSAGE_CHARS],
            time.time_ns(),
            time.monotonic(),
        )


@dataclass
class FailureCounts:
    """The engine's failures and restarts, by reason, over all GPUs since the Agent started
    (monotonic: Prometheus counters)."""

    failures: Counter = field(default_factory=Counter)
    restarts: Counter = field(default_factory=Counter)
    last: EngineFailure | None = None
    last_pid: int | None = None

    def count(self, error: BaseException, pid: int | None) -> EngineFailure:
        """Count one failure: of a GPU's engine, or (pid None) of the worker outside any."""
        failure = EngineFailure.of(error)
        self.failures[failure.reason] += 1
        self.last, self.last_pid = failure, pid
        return failure
