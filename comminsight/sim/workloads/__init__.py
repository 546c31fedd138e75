"""Training workloads the simulated NCCL replays; `build_plan` turns a config into a plan."""

from __future__ import annotations

from comminsight.sim.config import SimConfig
from comminsight.sim.plan import PlanBuilder, WorkloadPlan
from comminsight.sim.workloads import (
    ddp,
    fsdp,
    fsdp1,
    megatron,
    moe,
    pp,
    rl,
    tp_dp,
    tp_pp_dp,
    training_loops,
    zero,
)
from comminsight.sim.workloads.model import ModelShape

BUILDERS = {
    "ddp": ddp.build,
    "fsdp": fsdp.build,
    "tp-pp-dp": tp_pp_dp.build,
    "moe": moe.build,
    "pp": pp.build,
    "megatron": megatron.build,
    "tp-dp": tp_dp.build,
    "zero": zero.build,
    "rl": rl.build,
    "training-loops": training_loops.build,
    "fsdp1": fsdp1.build,
}


def build_plan(config: SimConfig) -> WorkloadPlan:
    """The same config always gives the same plan, in every process."""
    builder = PlanBuilder(config.validate())
    BUILDERS[config.workload](builder, ModelShape(config.model_params, config.layers))
    return builder.build()
