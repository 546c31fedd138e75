"""One log line per period for input that may arrive by the million (forged FIFO events,
malformed metadata lines): the first occurrence is logged at once, later ones are summed and
logged with their count at most once per period, so a flood cannot fill the disk with the
Agent's log or spend its time formatting lines. Counters keep the exact totals."""

from __future__ import annotations

import logging
import time

# for a condition that persists rather than floods (descriptors exhausted, a failing pass)
PERSISTENT_PERIOD_S = 60.0


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        period_s: float = 10.0,
        level: int = logging.WARNING,
    ) -> None:
        self.logger = logger
        self.what = what
        self.period_s = period_s
        self.level = level
        self.lines = 0  # log lines written
        self._suppressed = 0
        self._next_s = 0.0

    def note(self, message: str | None, now_s: float | None = None) -> None:
        now = time.monotonic() if now_s is None else now_s
        if now < self._next_s or message is None:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last line)" if self._suppressed else ""
        self.logger.log(self.level, "%s: %s%s", self.what, message, more)
        self.lines += 1
        self._suppressed = 0
        self._next_s = now + self.period_s
