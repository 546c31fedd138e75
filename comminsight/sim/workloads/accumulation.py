"""How many micro-batches each optimizer step accumulates.

Fixed (`grad_accum`), or with `dynamic_accum` varying from step to step as token-budget
batching makes it (variable-length samples packed until a step's token budget is full), drawn
from a generator seeded by the run's seed and the step only, so that every rank of the job runs
the same number (the frameworks agree on it: veRL all-reduces the count with MAX, see
`rearrange_micro_batches`; a hand-written loop broadcasts its batch plan).
"""

from __future__ import annotations

import random

from comminsight.sim.config import SimConfig


def micro_batches(config: SimConfig, step: int) -> int:
    if not config.dynamic_accum:
        return config.grad_accum
    rng = random.Random(f"{config.seed}/accum/{step}")
    low = max(1, config.grad_accum // 2)
    return rng.randint(low, config.grad_accum + config.grad_accum // 2 + 1)
