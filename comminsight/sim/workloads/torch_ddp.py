"""DistributedDataParallel as PyTorch 2.x issues it, op for op (the `ddp` workload's variants).

Read from pytorch/pytorch:

- Construction (`torch/nn/parallel/distributed.py` `__init__`):
  `_verify_param_shape_across_processes` -> `verify_params_across_processes`
  (`torch/csrc/distributed/c10d/reducer.cpp`): an all-gather of the parameter count (int64, 1
  element, read back with `.item()`), then a broadcast from rank 0 of every parameter's sizes
  and strides (int64, 2 x the sum of the parameters' dims, copied back to the host). Then
  `_sync_module_states` -> `_broadcast_coalesced` of parameters then buffers from rank 0,
  bucketed per dtype up to `broadcast_bucket_size` (250 MB), buckets ordered by their first
  tensor: the fp32 parameters (and fp32 buffers), then an int64 bucket when there are int64
  buffers.
- Buckets (`_ddp_init_helper`): with `find_unused_parameters=False` (or `static_graph`) the
  first iteration uses ONE bucket of every gradient (`bucket_size_limits = [sys.maxsize]`), so
  the first backward issues a single all-reduce at its end. With `find_unused_parameters=True`
  buckets are `[_DEFAULT_FIRST_BUCKET_BYTES (1 MiB), bucket_cap_mb (25 MiB)]` over the
  parameters in registration order, then reversed (the 1 MiB bucket, the embedding's, last).
- Rebuild (`forward` -> `reducer._rebuild_buckets()`, reducer.cpp `rebuild_buckets`): only
  when `should_rebuild_buckets()` = `(static_graph_ || !find_unused_parameters_) &&
  !has_rebuilt_bucket_` and gradients were recorded (`rebuilt_params_`, filled by the autograd
  hooks of a backward that synchronizes: `no_sync` backwards record nothing). It runs at the
  first forward with grad enabled after the first synchronized backward, i.e. at the start of
  the second iteration's forward (its first micro-batch, even inside `no_sync`), before the
  buffer broadcast. `sync_bucket_indices` broadcasts from rank 0 two int32 tensors, each read
  back on the host: the bucket indices plus the bucket count (count = parameters + 1), then
  the bucket sizes (count = buckets). The new buckets follow the order gradients became ready
  (reverse registration order), limits [1 MiB, 25 MiB].
- Buffers (`_sync_buffers` in `forward`, before the module runs): when
  `require_forward_param_sync and broadcast_buffers and buffers exist`, a `_broadcast_coalesced`
  of the buffers from rank 0: one broadcast per dtype bucket (here BatchNorm statistics: fp32
  running_mean/var, then int64 num_batches_tracked). `require_forward_param_sync` starts True
  and is set after each forward: True if grad was enabled and `require_backward_grad_sync`,
  else False. So a `no_sync` micro-batch's forward, or an eval forward under `no_grad`,
  switches it off for the NEXT forward: with accumulation only the first micro-batch
  broadcasts; the first eval batch broadcasts, the others and the first training forward after
  the evaluation do not.
- `find_unused_parameters=True` (not static graph): no rebuild ever; once the last bucket was
  marked ready the reducer all-reduces the local-used map (`all_reduce_local_used_map`: int32,
  one element per parameter) right after the last bucket's all-reduce, in every synchronized
  backward.
- Evaluation (a user's loop, as the examples and Lightning's loops run it): `model.eval()`,
  under `torch.no_grad()` several batches each through the DDP forward, the batch loss
  all-reduced (fp32, 1 element) and read with `.item()`, then `dist.barrier()`; this belongs
  to the Step it follows.
"""

from __future__ import annotations

import sys

from comminsight.sim.plan import CommSpec, HostSync, PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.model import ModelShape
from comminsight.sim.workloads.transformer_params import decoder_parameters

FIRST_BUCKET_BYTES = 1 << 20  # dist._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_BYTES = 25 << 20  # bucket_cap_mb=25
BROADCAST_BYTES = 250 << 20  # broadcast_bucket_size
FP32, INT32, INT64 = "ncclFloat32", "ncclInt32", "ncclInt64"
EVAL_EVERY = 5  # an evaluation pass after every 5th training Step
EVAL_BATCHES = 4
NORMS_PER_LAYER = 2  # BatchNorm-style layers with running statistics, per decoder layer

VARIANTS = ("rebuild_buckets", "broadcast_buffers", "find_unused_parameters", "eval_every_5")


def assign_buckets(sizes: list[int], limits: list[int]) -> list[int]:
    """compute_bucket_assignment_by_size for one dtype: tensors join the open bucket in order,
    which closes once it reaches its limit; the limits advance, the last repeating."""
    buckets, open_bytes = [], 0
    for size in sizes:
        open_bytes += size
        if open_bytes >= limits[min(len(buckets), len(limits) - 1)]:
            buckets.append(open_bytes)
            open_bytes = 0
    if open_bytes:
        buckets.append(open_bytes)
    return buckets


class TorchDdp:
    """One rank's DDP, tracking the reducer state that decides what each forward issues."""

    def __init__(self, b: PlanBuilder, rank: int, world: CommSpec, model: ModelShape):
        self.b, self.rank, self.world, self.model = b, rank, world, model
        variants = set(b.config.variants)
        self.find_unused = "find_unused_parameters" in variants
        self.buffers = "broadcast_buffers" in variants
        self.eval_every = EVAL_EVERY if "eval_every_5" in variants else 0
        self.params = decoder_parameters(model)
        grad_bytes = [p.numel * 4 for p in self.params]
        self.rebuilt = assign_buckets(grad_bytes[::-1], [FIRST_BUCKET_BYTES, BUCKET_BYTES])
        if self.find_unused:
            self.buckets = assign_buckets(grad_bytes, [FIRST_BUCKET_BYTES, BUCKET_BYTES])[::-1]
        else:
            self.buckets = assign_buckets(grad_bytes, [sys.maxsize])
        self.has_rebuilt = False
        self.recorded_grads = False  # rebuilt_params_ non-empty
        self.require_forward_param_sync = True
        self.warmup = False
        norms = NORMS_PER_LAYER * model.layers
        self.fp32_buffers = 2 * model.hidden * norms if self.buffers else 0
        self.int64_buffers = norms if self.buffers else 0

    def coll(self, func: str, count: int, dtype: str, phase: str, step, micro=None) -> None:
        self.b.collective(
            self.rank, self.world, func, count, dtype, phase=phase, step=step, micro_batch=micro
        )

    def construct(self) -> None:
        rank = self.rank
        self.coll("AllGather", 1, INT64, "verify_params", None)
        wait_for_gpu(self.b, rank, "param count .item()")
        dims = sum(2 * p.ndim for p in self.params)
        self.coll("Broadcast", dims, INT64, "verify_params", None)
        wait_for_gpu(self.b, rank, "param shapes to CPU")
        fp32 = [p.numel * 4 for p in self.params] + (
            [self.fp32_buffers * 4] if self.fp32_buffers else []
        )
        for size in assign_buckets(fp32, [BROADCAST_BYTES]):
            self.coll("Broadcast", size // 4, FP32, "sync_module_states", None)
        if self.int64_buffers:
            self.coll("Broadcast", self.int64_buffers, INT64, "sync_module_states", None)

    def forward(self, step: int, micro: int | None, grad: bool, sync: bool) -> None:
        where = {"step": step, "micro": micro}
        if grad and self.recorded_grads and not self.has_rebuilt and not self.find_unused:
            self.coll("Broadcast", len(self.params) + 1, INT32, "rebuild_buckets", **where)
            wait_for_gpu(self.b, self.rank, "bucket indices to CPU")
            self.coll("Broadcast", len(self.rebuilt), INT32, "rebuild_buckets", **where)
            wait_for_gpu(self.b, self.rank, "bucket sizes to CPU")
            self.buckets, self.has_rebuilt = self.rebuilt, True
        if self.require_forward_param_sync and self.buffers:
            self.coll("Broadcast", self.fp32_buffers, FP32, "sync_buffers", **where)
            self.coll("Broadcast", self.int64_buffers, INT64, "sync_buffers", **where)
        ns = self.model.forward_ns(self.model.params, self.warmup and grad)
        self.b.compute(self.rank, ns, "forward")
        self.require_forward_param_sync = grad and sync

    def backward(self, step: int, micro: int, sync: bool, warmup: bool) -> None:
        total = sum(self.buckets)
        for size in self.buckets:
            ns = self.model.backward_ns(self.model.params, warmup) * size / total
            self.b.compute(self.rank, ns, "backward")
            if sync:
                self.coll("AllReduce", size // 4, FP32, "backward", step, micro)
        if sync and self.find_unused:
            self.coll("AllReduce", len(self.params), INT32, "local_used_map", step, micro)
        if sync:
            self.recorded_grads = True

    def evaluate(self, step: int) -> None:
        for _batch in range(EVAL_BATCHES):
            self.forward(step, None, grad=False, sync=False)
            self.coll("AllReduce", 1, FP32, "eval_loss", step)
            wait_for_gpu(self.b, self.rank, "eval loss .item()")
        self.coll("AllReduce", 1, FP32, "eval_barrier", step)
        self.b.programs[self.rank].append(HostSync("barrier"))


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    for rank in range(cfg.ranks):
        ddp = TorchDdp(b, rank, world, model)
        ddp.construct()
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            ddp.warmup = warmup
            micros = accumulation.micro_batches(cfg, step)
            for micro in range(micros):
                sync = micro == micros - 1  # no_sync() for the others
                ddp.forward(step, micro, grad=True, sync=sync)
                ddp.backward(step, micro, sync, warmup)
            b.compute(rank, model.optimizer_ns(model.params), "optimizer")
            b.extra_ops(rank, world, step)
            if ddp.eval_every and (step + 1) % ddp.eval_every == 0:
                ddp.evaluate(step)
            b.step_end(rank, step)
