"""How long to wait before trying again: exponential backoff with a cap, and jitter so that
many Agents that lost one peer at once do not come back in step."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """base, 2*base, 4*base, ... up to cap: the wait after the n-th failure in a row."""

    base_s: float
    cap_s: float

    def delay(self, failures: int) -> float:
        doublings = min(max(0, failures - 1), 64)  # past the cap long before; no float overflow
        return min(self.cap_s, self.base_s * 2**doublings)

    def jittered(self, failures: int) -> float:
        return jitter(self.delay(failures))


def jitter(wait_s: float) -> float:
    """Somewhere in the later half of wait_s."""
    return wait_s * random.uniform(0.5, 1.0)
