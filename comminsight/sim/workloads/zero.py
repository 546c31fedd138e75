"""DeepSpeed ZeRO stage 1, 2 or 3 with fp16 and dynamic loss scaling, data parallel over the
world (DeepSpeed's groups default to the world group: `default_pg:0`).

Hugging Face's Trainer hands DeepSpeed two parameter groups (with and without weight decay);
ZeRO keeps one flat fp16 buffer per group, partitioned over the ranks.

Start-up:
- stage 1/2: `DeepSpeedEngine._broadcast_model` broadcasts every parameter from rank 0, one
  `dist.broadcast` each, in `named_parameters()` order;
- stage 3: `zero.Init` broadcasts every parameter as the model is built
  (`Init._zero_init_param`) and partitions it; the optimizer's constructor barriers three
  times and, creating its gradient hooks (`create_reduce_and_remove_grad_hooks`), gathers and
  re-partitions every parameter once more, one all-gather each.

Per micro-batch (engine.backward; `gradient_accumulation_steps` of them per step):
- stage 1 (deepspeed/runtime/zero/stage_1_and_2.py, `reduce_gradients`): nothing until the
  last micro-batch; then, after its backward, the gradients in parameter order are
  all-reduced in buckets of `reduce_bucket_size` elements (`average_tensor`, whose
  multi-rank bucket all-reduce is the default);
- stage 2: the same buckets, filled by the gradient hooks as backward produces them (reverse
  order) and all-reduced as each fills, in every micro-batch (gradients are partitioned, so
  they cannot wait), the last partial bucket at the end of backward
  (`independent_gradient_partition_epilogue`);
- stage 3 (stage3.py, partitioned_param_coordinator.py): per-module all-gathers forward and
  backward with trace-driven prefetch (`zero3_fetch`), gradients reduce-scattered in buckets
  of `reduce_bucket_size` elements (`reduce_scatter_coalesced`: one reduce-scatter of the
  bucket's padded partitions), every micro-batch.

Optimizer step (`step()` at the accumulation boundary): stage 3 first releases every
parameter; then `has_overflow` all-reduces a one-byte inf/NaN flag with MAX and reads it on the
host. On overflow the update is skipped: no gradient norm, no all-gather, the loss scale halves
(after the hysteresis); which steps overflow follows DeepSpeed's DynamicLossScaler
(`loss_scale`, seeded, the same on every rank). Otherwise the gradient norm of each group is
all-reduced (one fp32 scalar each), the optimizer runs on the local partition, and stage 1/2
all-gather the updated fp16 partitions (`all_gather_dp_groups`, one per group) while stage 3
gathers its persistent parameters (`_post_step`).

Framework variants (`SimConfig.variants`, none on by default; DeepSpeed master,
deepspeed/runtime/zero/stage_1_and_2.py and deepspeed/runtime/utils.py):

- `single_param_group`: DeepSpeed given `model.parameters()` (one optimizer group, no Hugging
  Face Trainer): one flat buffer, one gradient-norm all-reduce, one parameter all-gather.
- `legacy_allgather`: `all_gather_dp_groups` where `dist.has_all_gather_into_tensor()` is
  false (older torch): each group's partition is gathered in
  max(1, partition x dp // allgather_bucket_size) shards, each a `dist.all_gather`, the shard
  size rounded down to `nccl_start_alignment_factor` and the last taking the rest;
  allgather_bucket_size is taken equal to reduce_bucket_size, as DeepSpeed's example configs
  and Hugging Face's "auto" set them.
- `no_multi_rank_bucket` (use_multi_rank_bucket_allreduce: false): `average_tensor` buckets
  the slices by destination partition and `allreduce_no_retain(rank=dst)` reduces each to its
  owner: one ncclReduce (root = the partition's rank) per destination, in the order the
  destinations first appear, cut at reduce_bucket_size.
- `no_reduce_scatter` (reduce_scatter: false): `average_tensor` all-reduces the whole bucket
  (`gradient_reduction_w_predivide`): one ncclAllReduce of the bucket's elements.
- `overlap_comm` (overlap_comm: true, as Hugging Face's ZeRO configs set it): stage 1 then has
  gradient hooks too (`create_reduce_and_remove_grad_hooks` runs when partition_gradients or
  overlap_comm), which fill and reduce buckets in backward order during the boundary
  micro-batch's backward; `reduce_gradients` then only reduces what is left. Stage 2 issues the
  same calls either way.
- `overflow_spikes`: a gradient spike in one step of four, so that overflow steps also come
  in the middle of training and not only while the scale settles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.loss_scale import deepspeed_overflows
from comminsight.sim.workloads.model import ModelShape
from comminsight.sim.workloads.transformer_params import (
    OwningModule,
    ParamTensor,
    decoder_parameters,
    owning_modules,
)
from comminsight.sim.workloads.zero3_fetch import Gather, ParameterCoordinator

FP16, FP32 = "ncclFloat16", "ncclFloat32"
FLAG_DTYPE = "ncclInt8"  # the overflow flag is a uint8 tensor; the sim has no ncclUint8
INDEX_DTYPE = "ncclInt64"
ALIGNMENT = 2  # nccl_start_alignment_factor: each group's flat buffer is padded to 2 x world
STAGE3_INIT_BARRIERS = 3
# framework behaviours a config turns on by name (see the docstring)
VARIANTS = (
    "single_param_group",
    "legacy_allgather",
    "no_multi_rank_bucket",
    "no_reduce_scatter",
    "overlap_comm",
    "overflow_spikes",
)
SPIKY_RATE = 0.25  # overflow_spikes: a step in four has a gradient spike


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    params = decoder_parameters(model)
    spikes = {"spike_rate": SPIKY_RATE} if "overflow_spikes" in cfg.variants else {}
    overflows = deepspeed_overflows(cfg.seed, cfg.total_steps, cfg.loss_scale_window, **spikes)
    for rank in range(cfg.ranks):
        ZeroRank(b, model, rank, world, params, overflows).run()


def param_groups(params: list[ParamTensor]) -> list[list[ParamTensor]]:
    """Hugging Face Trainer's optimizer groups: weight decay, then none."""
    return [[p for p in params if p.decay], [p for p in params if not p.decay]]


@dataclass
class GradientBucket:
    """DeepSpeed's IPG bucket: gradients gathered up to `reduce_bucket_size` elements."""

    size: int
    params: list[ParamTensor] = field(default_factory=list)

    @property
    def elements(self) -> int:
        return sum(p.numel for p in self.params)

    def overflows_with(self, param: ParamTensor) -> bool:
        return bool(self.params) and self.elements + param.numel > self.size

    def take(self) -> list[ParamTensor]:
        taken, self.params = self.params, []
        return taken


class FlatPartitions:
    """Where each parameter lies in its group's flat fp16 buffer, and the ranks' partitions
    of that buffer (stage 1/2: padded to ALIGNMENT x world, then split evenly)."""

    def __init__(self, groups: list[list[ParamTensor]], world: int):
        self.offset: dict[str, tuple[int, int]] = {}  # name -> (group, offset)
        self.size: list[int] = []
        for index, group in enumerate(groups):
            offset = 0
            for p in group:
                self.offset[p.name] = (index, offset)
                offset += p.numel
            self.size.append(math.ceil(offset / (ALIGNMENT * world)) * ALIGNMENT)

    def slices(self, param: ParamTensor) -> list[tuple[int, int]]:
        """(partition, elements) pieces of a parameter's gradient, in offset order."""
        group, start = self.offset[param.name]
        size, end = self.size[group], start + param.numel
        pieces = []
        while start < end:
            partition = start // size
            stop = min(end, (partition + 1) * size)
            pieces.append((partition, stop - start))
            start = stop
        return pieces

    def all_reduce_counts(self, params: list[ParamTensor], bucket_size: int) -> list[int]:
        """average_tensor's multi-rank bucket all-reduce (allreduce_and_scatter): the bucket's
        gradients cut where partitions change (neighbours bound for the same partition
        merged), all-reduced whenever the pieces gathered pass the bucket size, so that a
        parameter larger than a bucket is all-reduced in pieces."""
        pieces: list[int] = []
        last = None
        for p in params:
            for partition, elements in self.slices(p):
                if pieces and partition == last:
                    pieces[-1] += elements
                else:
                    pieces.append(elements)
                last = partition
        counts, pending = [], 0
        for elements in pieces:
            pending += elements
            if pending > bucket_size:
                counts.append(pending)
                pending = 0
        return counts + ([pending] if pending else [])

    def reduce_counts(self, params: list[ParamTensor], bucket_size: int) -> list[tuple[int, int]]:
        """average_tensor without the multi-rank bucket: (destination, elements) of each
        dist.reduce, the slices bound for one partition together (allreduce_no_retain)."""
        by_dst: dict[int, list[int]] = {}
        last = None
        for p in params:
            for partition, elements in self.slices(p):
                slices = by_dst.setdefault(partition, [])
                if partition == last:
                    slices[-1] += elements
                else:
                    slices.append(elements)
                last = partition
        reduces = []
        for dst, slices in by_dst.items():
            pending = 0
            for elements in slices:
                pending += elements
                if pending > bucket_size:
                    reduces.append((dst, pending))
                    pending = 0
            if pending:
                reduces.append((dst, pending))
        return reduces


def legacy_allgather_counts(partition: int, dp: int, bucket_size: int) -> list[int]:
    """all_gather_dp_groups without all_gather_into_tensor: one group's shards."""
    shards = max(1, partition * dp // bucket_size)
    size = partition // shards
    size -= size % ALIGNMENT
    return [size] * (shards - 1) + [partition - (shards - 1) * size]


@dataclass
class ZeroRank:
    b: PlanBuilder
    model: ModelShape
    rank: int
    world: CommSpec
    params: list[ParamTensor]
    overflows: list[bool]

    def __post_init__(self) -> None:
        cfg = self.b.config
        self.stage = cfg.zero_stage
        self.variants = set(cfg.variants)
        single = "single_param_group" in self.variants
        self.groups = [list(self.params)] if single else param_groups(self.params)
        self.modules = owning_modules(self.params)
        self.bucket = GradientBucket(cfg.reduce_bucket_size)
        self.partitions = FlatPartitions(self.groups, self.dp)
        self.fetcher = ParameterCoordinator(
            self.modules,
            self.world.nranks,
            cfg.prefetch_bucket_size,
            cfg.max_reuse_distance,
            cfg.max_live_parameters,
        )

    @property
    def dp(self) -> int:
        return self.world.nranks

    @property
    def hooks(self) -> bool:
        """Stage 1 reduces from gradient hooks too with overlap_comm."""
        return "overlap_comm" in self.variants

    def coll(self, func: str, count: int, dtype: str, **where) -> None:
        self.b.collective(self.rank, self.world, func, count, dtype, **where)

    def run(self) -> None:
        cfg = self.b.config
        self._startup()
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            self.b.step_begin(self.rank, step, warmup)
            micros = accumulation.micro_batches(cfg, step)
            for micro in range(micros):
                where = {"step": step, "micro_batch": micro}
                self._forward(where, warmup)
                self._backward(where, warmup, boundary=micro == micros - 1)
            self.b.extra_ops(self.rank, self.world, step)
            self._optimizer_step(step)
            self.b.step_end(self.rank, step)

    # ---- start-up ----

    def _startup(self) -> None:
        phase = "zero_init" if self.stage == 3 else "broadcast_model"
        for p in self.params:
            self.coll("Broadcast", p.numel, FP16, root=0, phase=phase, step=None)
        if self.stage != 3:
            return
        for _ in range(STAGE3_INIT_BARRIERS):
            self.b.barrier(self.rank, self.world)
        for group in self.groups:  # create_reduce_and_remove_grad_hooks
            for p in group:
                count = self.fetcher.partition(p)
                self.coll("AllGather", count, FP16, phase="grad_hooks", step=None)

    # ---- forward and backward ----

    def _compute_ns(self, module: OwningModule, backward: bool, warmup: bool) -> float:
        if module.params[0].ndim < 2 or "embed" in module.name:
            return 0.0  # norms and the embedding lookup cost next to nothing
        ns = self.model.forward_ns(module.numel, warmup)
        return 2 * ns if backward else ns

    def _forward(self, where: dict, warmup: bool) -> None:
        fwd = {"phase": "forward", **where}
        if self.stage == 3:
            self._check_trace(fwd)
        for module in self.modules:
            self._fetch(module, fwd)
            self.b.compute(self.rank, self._compute_ns(module, False, warmup), "forward")
            self._release(module)

    def _backward(self, where: dict, warmup: bool, boundary: bool) -> None:
        bwd = {"phase": "backward", **where}
        for module in reversed(self.modules):
            self._fetch(module, bwd)
            self.b.compute(self.rank, self._compute_ns(module, True, warmup), "backward")
            self._release(module)
            if self.stage >= 2 or (self.stage == 1 and boundary and self.hooks):
                for p in module.params:  # the gradient hooks reduce as gradients appear
                    self._add_to_bucket(p, bwd)
        if self.stage == 1 and boundary and not self.hooks:  # reduce_gradients, param order
            for group in self.groups:
                for p in group:
                    self._add_to_bucket(p, bwd)
        if self.stage >= 2 or boundary:
            self._reduce_bucket(bwd)

    def _check_trace(self, where: dict) -> None:
        """assert_ints_same_as_other_ranks on the recorded trace (the first two passes)."""
        check = {**where, "phase": "trace_check"}
        for length in self.fetcher.reset_step():
            self.coll("Broadcast", 1, INDEX_DTYPE, root=0, **check)
            wait_for_gpu(self.b, self.rank, "list length .item()")
            if length:  # NCCL does not launch an empty broadcast
                self.coll("Broadcast", length, INDEX_DTYPE, root=0, **check)
            wait_for_gpu(self.b, self.rank, "list .cpu()")

    def _fetch(self, module: OwningModule, where: dict) -> None:
        if self.stage != 3:
            return
        for gather in self.fetcher.fetch(module):
            self._gather(gather, where)

    def _release(self, module: OwningModule) -> None:
        if self.stage == 3:
            self.fetcher.release(module)

    def _gather(self, gather: Gather, where: dict) -> None:
        self.coll("AllGather", gather.count, FP16, **where)

    def _add_to_bucket(self, param: ParamTensor, where: dict) -> None:
        if self.bucket.overflows_with(param):
            self._reduce_bucket(where)
        self.bucket.params.append(param)

    def _reduce_bucket(self, where: dict) -> None:
        params = self.bucket.take()
        if not params:
            return
        if self.stage == 3:  # reduce_scatter_coalesced: each tensor padded to the world
            count = sum(math.ceil(p.numel / self.dp) for p in params)
            self.coll("ReduceScatter", count, FP16, **where)
            return
        if "no_reduce_scatter" in self.variants:  # gradient_reduction_w_predivide
            self.coll("AllReduce", sum(p.numel for p in params), FP16, **where)
            return
        if "no_multi_rank_bucket" in self.variants:  # a reduce to each partition's owner
            for dst, count in self.partitions.reduce_counts(params, self.bucket.size):
                self.coll("Reduce", count, FP16, root=dst, **where)
            return
        for count in self.partitions.all_reduce_counts(params, self.bucket.size):
            self.coll("AllReduce", count, FP16, **where)

    # ---- the optimizer step ----

    def _optimizer_step(self, step: int) -> None:
        where = {"step": step}
        if self.stage == 3:
            self.fetcher.release_all()
        self.coll("AllReduce", 1, FLAG_DTYPE, phase="overflow_check", **where)
        wait_for_gpu(self.b, self.rank, "overflow .item()")
        if self.overflows[step]:
            return  # skipped: the loss scale halves, the parameters stay as they are
        for _ in self.groups:
            self.coll("AllReduce", 1, FP32, phase="grad_norm", **where)
        self.b.compute(self.rank, self.model.optimizer_ns(self.model.params // self.dp), "adam")
        if self.stage == 3:
            persistent = self.fetcher.gather_persistent()
            if persistent:
                self._gather(persistent, {"phase": "persistent_params", **where})
            return
        for group in self.groups:
            flat = sum(p.numel for p in group)
            partition = math.ceil(flat / (ALIGNMENT * self.dp)) * ALIGNMENT
            counts = [partition]
            if "legacy_allgather" in self.variants:
                counts = legacy_allgather_counts(partition, self.dp, self.bucket.size)
            for count in counts:
                self.coll("AllGather", count, FP16, phase="param_allgather", **where)
