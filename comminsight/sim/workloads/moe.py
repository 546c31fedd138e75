"""MoE: expert parallelism over all ranks, data parallelism for the dense parameters.

Every layer routes its tokens to experts on other ranks and back: one all-to-all to dispatch
and one to combine, in forward and again in backward. How many tokens go where depends on the
router, so the all-to-all sizes change from layer to layer and step to step (drawn from a
generator seeded by step and layer, the same on every rank, as NCCL needs). After backward the
dense gradients are all-reduced in buckets, as DDP does.
"""

from __future__ import annotations

import random

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads.ddp import BUCKET_BYTES, FIRST_BUCKET_BYTES, bucket_sizes
from comminsight.sim.workloads.model import ModelShape

TOKEN_DTYPE = "ncclBfloat16"
GRAD_DTYPE, GRAD_BYTES = "ncclFloat32", 4
DENSE_FRACTION = 0.25  # attention and embeddings; the rest of the parameters are experts


def routed_elements(seed: int, step: int, layer: int, micro: int, base: int) -> int:
    """Tokens x hidden this layer sends in this micro-batch: the router's load varies."""
    rng = random.Random(f"{seed}/moe/{step}/{layer}/{micro}")
    return max(1, int(base * rng.uniform(0.6, 1.4)))


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    dense_bytes = int(model.params * DENSE_FRACTION) * GRAD_BYTES
    buckets = bucket_sizes(dense_bytes, FIRST_BUCKET_BYTES, BUCKET_BYTES)
    expert_params = model.layer_params // 2
    for rank in range(cfg.ranks):
        b.barrier(rank, world)
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            for micro in range(cfg.grad_accum):
                where = {"step": step, "micro_batch": micro}
                sizes = [
                    routed_elements(cfg.seed, step, layer, micro, model.activation_elements)
                    for layer in range(cfg.layers)
                ]
                for layer in range(cfg.layers):
                    for _ in ("dispatch", "combine"):
                        b.collective(
                            rank,
                            world,
                            "AlltoAll",
                            sizes[layer],
                            TOKEN_DTYPE,
                            phase="forward",
                            **where,
                        )
                    b.compute(rank, model.forward_ns(expert_params, warmup), "forward")
                for layer in reversed(range(cfg.layers)):
                    for _ in ("dispatch", "combine"):
                        b.collective(
                            rank,
                            world,
                            "AlltoAll",
                            sizes[layer],
                            TOKEN_DTYPE,
                            phase="backward",
                            **where,
                        )
                    b.compute(rank, model.backward_ns(expert_params, warmup), "backward")
            for size in buckets:
                b.collective(
                    rank,
                    world,
                    "AllReduce",
                    size // GRAD_BYTES,
                    GRAD_DTYPE,
                    phase="backward",
                    step=step,
                )
            b.extra_ops(rank, world, step)
            b.compute(rank, model.optimizer_ns(model.params // cfg.ranks), "optimizer")
            b.step_end(rank, step)
