"""DDP: every rank holds the whole model; gradients are all-reduced in buckets during backward.

As torch.nn.parallel.DistributedDataParallel does it: at construction a barrier and a
broadcast of the parameters from rank 0 (250 MB chunks); per step a forward pass, then
backward with one all-reduce per gradient bucket as the bucket fills (the first bucket 1 MiB,
the others 25 MiB, in reverse parameter order), then the optimizer. With gradient accumulation
only the last micro-batch synchronizes (no_sync() for the others). During the warm-up Steps
the buckets are still the ones built at construction (all 25 MiB); DDP rebuilds them from the
order gradients became ready in the first iteration, so later Steps have other sizes.

Options: `dynamic_accum` varies the micro-batches per Step (seeded, the same on every rank);
the communication of a Step is unchanged (only the last micro-batch synchronizes), its length
is not. `skipped_updates` trains in fp16 with torch.amp.GradScaler: `scaler.step()` reads the
found-inf flags on the host (`.item()`, after the all-reduced gradients were unscaled) and
skips `optimizer.step()` when there were any, so an overflow Step issues the same collectives
and only lacks the optimizer's compute; which Steps overflow follows GradScaler.update
(`loss_scale`, seeded, growth interval `loss_scale_window`).

Variants (`SimConfig.variants`, see torch_ddp.py): PyTorch 2.x DDP as its source issues it:
the construction-time checks, the first iteration's single bucket, the bucket rebuild's two
broadcasts at the second iteration's forward, buffer broadcasts, find_unused_parameters'
used-map all-reduce, an evaluation pass every 5 Steps.
"""

from __future__ import annotations

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads import accumulation, torch_ddp
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.loss_scale import grad_scaler_overflows
from comminsight.sim.workloads.model import ModelShape

FIRST_BUCKET_BYTES = 1 << 20
BUCKET_BYTES = 25 << 20
BROADCAST_BYTES = 250 << 20
GRAD_DTYPE, GRAD_BYTES = "ncclFloat32", 4
# PyTorch 2.x DDP op for op (torch_ddp.py): any of these replaces the model above
VARIANTS = torch_ddp.VARIANTS


def bucket_sizes(total_bytes: int, first: int, rest: int) -> list[int]:
    sizes, left = [], total_bytes
    while left > 0:
        size = min(left, first if not sizes else rest)
        sizes.append(size)
        left -= size
    return sizes


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    if cfg.variants:
        torch_ddp.build(b, model)
        return
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    grad_bytes = model.params * GRAD_BYTES
    buckets = bucket_sizes(grad_bytes, FIRST_BUCKET_BYTES, BUCKET_BYTES)
    initial_buckets = bucket_sizes(grad_bytes, BUCKET_BYTES, BUCKET_BYTES)
    overflows = grad_scaler_overflows(cfg.seed, cfg.total_steps, cfg.loss_scale_window)
    for rank in range(cfg.ranks):
        b.barrier(rank, world)
        for size in bucket_sizes(grad_bytes, BROADCAST_BYTES, BROADCAST_BYTES):
            b.collective(
                rank,
                world,
                "Broadcast",
                size // GRAD_BYTES,
                GRAD_DTYPE,
                root=0,
                phase="sync_module_states",
                step=None,
            )
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            micros = accumulation.micro_batches(cfg, step)
            for micro in range(micros):
                b.compute(rank, model.forward_ns(model.params, warmup), "forward")
                sync = micro == micros - 1
                for size in initial_buckets if warmup else buckets:
                    share = size / grad_bytes
                    b.compute(rank, model.backward_ns(model.params, warmup) * share, "backward")
                    if sync:
                        b.collective(
                            rank,
                            world,
                            "AllReduce",
                            size // GRAD_BYTES,
                            GRAD_DTYPE,
                            phase="backward",
                            step=step,
                            micro_batch=micro,
                        )
            b.extra_ops(rank, world, step)
            if cfg.skipped_updates:
                wait_for_gpu(b, rank, "GradScaler found_inf .item()")
            if not (cfg.skipped_updates and overflows[step]):
                b.compute(rank, model.optimizer_ns(model.params), "optimizer")
            b.step_end(rank, step)
