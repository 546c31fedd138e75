"""The accuracy suite's variants of each workload family, each built from what the framework's
own source issues (module docstrings cite what was read): one module per family group, so that
each can grow on its own."""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case
from comminsight.sim.accuracy_variants import (
    data_parallel,
    rl,
    sharded_optimizer,
    tensor_parallel,
    training_loops,
)

VARIANT_CASES: list[Case] = (
    sharded_optimizer.CASES
    + data_parallel.CASES
    + rl.CASES
    + tensor_parallel.CASES
    + training_loops.CASES
)
