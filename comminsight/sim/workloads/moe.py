"""MoE: expert parallelism over all ranks, data parallelism for the dense parameters.

Every layer routes its tokens to experts on other ranks and back: one all-to-all to dispatch
and one to combine, in forward and again in backward. How many tokens go where depends on the
router, so the all-to-all sizes change from layer to layer and step to step (drawn from a
generator seeded by step and layer, the same on every rank, as NCCL needs). After backward the
dense gradients are all-reduced in buckets, as DDP does.

`moe_alltoall` says how an all-to-all reaches NCCL: `collective` is one ncclAlltoAll (NCCL
2.28's collective); `grouped-p2p` is what PyTorch's NCCL backend does for all_to_all_single
with upstream NCCL (torch/csrc/cuda/nccl.cpp: ncclAllToAll only where the NCCL build announces
NCCL_ALLTOALL_SUPPORTED, which upstream NCCL does not): ncclGroupStart, a ncclSend and a
ncclRecv per peer (itself included), ncclGroupEnd. Then the router decides every pair's size:
what rank a sends rank b is drawn from a generator seeded by the pair, so b receives exactly it.
"""

from __future__ import annotations

import random

from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads.ddp import BUCKET_BYTES, FIRST_BUCKET_BYTES, bucket_sizes
from comminsight.sim.workloads.model import ModelShape

TOKEN_DTYPE = "ncclBfloat16"
GRAD_DTYPE, GRAD_BYTES = "ncclFloat32", 4
DENSE_FRACTION = 0.25  # attention and embeddings; the rest of the parameters are experts


def routed_elements(seed: int, step: int, layer: int, micro: int, base: int) -> int:
    """Tokens x hidden this layer sends in this micro-batch: the router's load varies."""
    rng = random.Random(f"{seed}/moe/{step}/{layer}/{micro}")
    return max(1, int(base * rng.uniform(0.6, 1.4)))


def pair_elements(seed: int, step: int, layer: int, micro: int, src: int, dst: int, base: int):
    """Elements rank `src` routes to rank `dst` in one dispatch: the same on both ranks."""
    rng = random.Random(f"{seed}/moe-pair/{step}/{layer}/{micro}/{src}/{dst}")
    return max(1, int(base * rng.uniform(0.6, 1.4)))


def grouped_alltoall(b: PlanBuilder, rank: int, comm: CommSpec, sends, recvs, where) -> None:
    """all_to_all_single on PyTorch's NCCL backend: per peer a Send then a Recv, one group."""
    with b.nccl_group(rank):
        for peer in range(comm.nranks):
            b.send(rank, comm, peer, sends[peer], TOKEN_DTYPE, **where)
            b.recv(rank, comm, peer, recvs[peer], TOKEN_DTYPE, **where)


def alltoall(
    b: PlanBuilder, rank: int, comm: CommSpec, layer: int, combine: bool, count: int, where
):
    """One dispatch (tokens to their experts) or combine (results back, the reverse sizes)."""
    if b.config.moe_alltoall == "collective":
        b.collective(rank, comm, "AlltoAll", count, TOKEN_DTYPE, **where)
        return
    cfg, step, micro = b.config, where["step"], where["micro_batch"]

    def routed(src: int, dst: int) -> int:
        return pair_elements(cfg.seed, step, layer, micro, src, dst, count)

    out = [routed(rank, peer) for peer in range(comm.nranks)]
    back = [routed(peer, rank) for peer in range(comm.nranks)]
    sends, recvs = (back, out) if combine else (out, back)
    grouped_alltoall(b, rank, comm, sends, recvs, where)


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
                    for combine in (False, True):
                        fwd = {"phase": "forward", **where}
                        alltoall(b, rank, world, layer, combine, sizes[layer], fwd)
                    b.compute(rank, model.forward_ns(expert_params, warmup), "forward")
                for layer in reversed(range(cfg.layers)):
                    for combine in (False, True):
                        bwd = {"phase": "backward", **where}
                        alltoall(b, rank, world, layer, combine, sizes[layer], bwd)
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
