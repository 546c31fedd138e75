"""FSDP (ZeRO-3): parameters sharded across all ranks, gathered per layer when needed.

As FullyShardedDataParallel with one unit per layer, reshard-after-forward and bf16 mixed
precision with fp32 gradient reduction: forward all-gathers each layer's parameters before
computing it; backward all-gathers them again, computes, and reduce-scatters the layer's
gradients. With gradient accumulation the reduce-scatters happen only in the last
micro-batch's backward. AllGather and ReduceScatter count their sequence numbers separately,
as NCCL does per function.

Variants (`SimConfig.variants`, see torch_fsdp2.py): FSDP2's `fully_shard` with a root unit
that is not resharded after forward, clip_grad_norm_, reshard_after_forward=False, HSDP,
torchtitan's training loop and loss logging.
"""

from __future__ import annotations

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads import torch_fsdp2
from comminsight.sim.workloads.model import ModelShape

PARAM_DTYPE = "ncclBfloat16"
REDUCE_DTYPE = "ncclFloat32"
# FSDP2 as PyTorch and torchtitan issue it (torch_fsdp2.py): any of these replaces the above
VARIANTS = torch_fsdp2.VARIANTS


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    if cfg.variants:
        torch_fsdp2.build(b, model)
        return
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    shard = max(1, model.layer_params // cfg.ranks)
    for rank in range(cfg.ranks):
        b.barrier(rank, world)
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            for micro in range(cfg.grad_accum):
                where = {"step": step, "micro_batch": micro}
                for _layer in range(cfg.layers):
                    b.collective(
                        rank, world, "AllGather", shard, PARAM_DTYPE, phase="forward", **where
                    )
                    b.compute(rank, model.forward_ns(model.layer_params, warmup), "forward")
                sync = micro == cfg.grad_accum - 1
                for _layer in reversed(range(cfg.layers)):
                    b.collective(
                        rank, world, "AllGather", shard, PARAM_DTYPE, phase="backward", **where
                    )
                    b.compute(rank, model.backward_ns(model.layer_params, warmup), "backward")
                    if sync:
                        b.collective(
                            rank,
                            world,
                            "ReduceScatter",
                            shard,
                            REDUCE_DTYPE,
                            phase="backward",
                            **where,
                        )
            b.extra_ops(rank, world, step)
            b.compute(rank, model.optimizer_ns(model.params // cfg.ranks), "optimizer")
            b.step_end(rank, step)
