"""Tensor parallel x data parallel with PyTorch DTensor: a (dp, tp) DeviceMesh, TP inside a
node-sized group, FSDP2 or DDP over the other dimension (torchtitan's llama recipe, the PyTorch
TP tutorial).

Communicators: `init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp"))` creates the
dp groups then the tp groups, named `mesh_dp:<n>` / `mesh_tp:<n>`. A dimension of size 1 is
left out of the mesh (torchtitan's ParallelDims); a mesh that is then 1-D over the whole world
is the default group itself, so TP-only (dp=1) runs every all-reduce on `default_pg:0`.

Start-up: torchtitan's `set_determinism` broadcasts rank 0's 8-byte seed on the world; the
model is built on the meta device and sharded locally, so nothing else is sent. With DDP,
its constructor checks the parameters across the dp group (`verify_params_across_processes`:
an all-gather of the parameter count and a broadcast of every shape and stride, each waited
for) and broadcasts the parameters from rank 0 in 250 MB chunks (`_sync_module_states`).

Forward, per micro-batch, as `parallelize_module` with ColwiseParallel/RowwiseParallel makes
DTensor communicate (torch/distributed/tensor/parallel/style.py):
- without SequenceParallel (the tutorial's plan): the embedding (RowwiseParallel) and each
  block's `wo` and `w2` (RowwiseParallel) all-reduce their partial outputs; backward, every
  ColwiseParallel linear's `DTensor.from_local` input redistributes its Partial gradient, so
  wq, wk, wv, w1, w3 and the output head each all-reduce one; every one of them is
  sequence x hidden, so all TP all-reduces of a micro-batch have the same size;
- with SequenceParallel (torchtitan's plan): PrepareModuleInput all-gathers the sequence
  shards before attention and MLP and RowwiseParallel reduce-scatters after them, and backward
  swaps the two; the embedding reduce-scatters, the head all-gathers;
- the loss: with `loss_parallel()` the vocab-sharded cross-entropy all-reduces the per-token
  max (MAX), the per-token sum of exponentials and the target logit (SUM), fp32, no backward
  communication (torch/distributed/tensor/parallel/loss.py); without it the head's Replicate
  output all-gathers the logits.
FSDP2 (`fully_shard` per block and at the root, bf16 params, fp32 reduce): all-gathers the root
then every block forward; backward prefetches the next block's all-gather, reduce-scatters each
block's gradients after it and the root's last. The root and the last block stay unsharded
after forward (FSDP2's root rule, torchtitan's last-block rule). Gradient accumulation uses
`set_requires_gradient_sync(False)`: the all-gathers repeat every micro-batch, the
reduce-scatters only in the last. DDP all-reduces gradient buckets (1 MiB first, then 25 MiB;
the warm-up Steps still use the construction-time buckets) during the last micro-batch's
backward, `no_sync()` before.

Optimizer: `clip_grad_norm_` over DTensor gradients materializes the total norm with
`full_tensor()`: one scalar all-reduce per mesh dimension the norm is Partial on (dp then tp
with FSDP2; tp with DDP, whose gradients are already reduced), then the optimizer.

Variants (`cfg.variants`; none: all of the above, unchanged):
- `no_clip`: no gradient clipping (the PyTorch TP tutorial's loop, torchtitan with
  `max_norm` off): `optimizer.step()` issues nothing, so with tp alone a Step's end shows
  in no collective; only the optimizer's and the data loader's idle time tells a Step's
  last micro-batch from the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.comm_groups import device_mesh
from comminsight.sim.workloads.ddp import (
    BROADCAST_BYTES,
    BUCKET_BYTES,
    FIRST_BUCKET_BYTES,
    bucket_sizes,
)
from comminsight.sim.workloads.fsdp2 import Fsdp2Model
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.model import MICRO_BATCH, SEQ_LEN, ModelShape
from comminsight.sim.workloads.transformer_params import VOCAB, decoder_parameters, root_numel

ACT_DTYPE = "ncclBfloat16"
FP32, FP32_BYTES = "ncclFloat32", 4
SEED_BYTES = 8  # torchtitan broadcasts torch.get_rng_state()[:8]; NCCL's uint8 is sent as int8
ATTENTION_COLWISE = 3  # wq, wk, wv
MLP_COLWISE = 2  # w1, w3
VARIANTS = ("no_clip",)


@dataclass(frozen=True)
class Mesh:
    tp: int
    dp: int
    tp_comm: CommSpec | None  # None where tp == 1
    dp_comm: CommSpec | None  # None where dp == 1


def build_meshes(b: PlanBuilder, world: CommSpec) -> dict[int, Mesh]:
    """Each rank's view of the (dp, tp) DeviceMesh, leaving out dimensions of size 1."""
    cfg = b.config
    tp, dp = cfg.tp, cfg.ranks // cfg.tp
    dims = [(size, name) for size, name in ((dp, "dp"), (tp, "tp")) if size > 1]
    groups: dict = {}
    if dims:
        shape = tuple(size for size, _ in dims)
        groups = device_mesh(b, world, shape, tuple(name for _, name in dims))
    return {
        r: Mesh(tp, dp, groups.get("tp", {}).get(r), groups.get("dp", {}).get(r))
        for r in range(cfg.ranks)
    }


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    meshes = build_meshes(b, world)
    for rank in range(cfg.ranks):
        TpDpRank(b, model, rank, meshes[rank], world).run()


@dataclass
class TpDpRank:
    b: PlanBuilder
    model: ModelShape
    rank: int
    mesh: Mesh
    world: CommSpec
    fsdp: Fsdp2Model | None = field(init=False)

    def __post_init__(self) -> None:
        fsdp2 = self.b.config.tp_dp_data_parallel == "fsdp2"
        dp = self.mesh.dp_comm
        shards = self.mesh.tp * self.mesh.dp
        # torchtitan keeps the last block unsharded after forward: backward needs it at once
        self.fsdp = (
            Fsdp2Model(self.b, self.rank, dp, self.model, shards, reshard_last_block=False)
            if fsdp2 and dp is not None
            else None
        )

    @property
    def ddp(self) -> bool:
        return self.b.config.tp_dp_data_parallel == "ddp" and self.mesh.dp_comm is not None

    @property
    def act(self) -> int:
        return self.model.activation_elements

    @property
    def act_shard(self) -> int:
        return self.act // self.mesh.tp

    def tp_coll(self, func: str, count: int, dtype: str, where: dict) -> None:
        self.b.collective(self.rank, self.mesh.tp_comm, func, count, dtype, **where)

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
                self._backward(where, warmup, sync=micro == micros - 1)
            self._optimizer(step)
            self.b.step_end(self.rank, step)

    # ---- start-up ----

    def _startup(self) -> None:
        b, rank = self.b, self.rank
        b.collective(rank, self.world, "Broadcast", SEED_BYTES, "ncclInt8", phase="seed", step=None)
        wait_for_gpu(b, rank, "seed .item()")
        if self.ddp:
            self._ddp_construction()

    def _ddp_construction(self) -> None:
        b, rank, dp = self.b, self.rank, self.mesh.dp_comm
        params = decoder_parameters(self.model)
        where = {"phase": "ddp_init", "step": None}
        b.collective(rank, dp, "AllGather", 1, "ncclInt64", **where)
        wait_for_gpu(b, rank, "parameter count .item()")
        shapes = sum(2 * p.ndim for p in params)
        b.collective(rank, dp, "Broadcast", shapes, "ncclInt64", root=0, **where)
        wait_for_gpu(b, rank, "shape check copy")
        for size in bucket_sizes(self._grad_bytes(), BROADCAST_BYTES, BROADCAST_BYTES):
            b.collective(rank, dp, "Broadcast", size // FP32_BYTES, FP32, root=0, **where)

    # ---- forward ----

    def _forward(self, where: dict, warmup: bool) -> None:
        model, fsdp = self.model, self.fsdp
        fwd = {"phase": "forward", **where}
        if fsdp:
            fsdp.root_pre_forward(fwd)
        self._embedding_forward(fwd)
        for layer in range(model.layers):
            if fsdp:
                fsdp.block_pre_forward(layer, fwd)
            half = model.forward_ns(model.layer_params // self.mesh.tp, warmup) / 2
            for block in ("attention", "mlp"):
                self._tp_block_forward(half, block, fwd)
            if fsdp:
                fsdp.block_post_forward(layer)
        self._head_forward(fwd, warmup)

    def _embedding_forward(self, where: dict) -> None:
        if self.mesh.tp_comm is None:
            return
        if self.b.config.sequence_parallel:  # RowwiseParallel(output_layouts=Shard(1))
            self.tp_coll("ReduceScatter", self.act_shard, ACT_DTYPE, where)
        else:
            self.tp_coll("AllReduce", self.act, ACT_DTYPE, where)

    def _tp_block_forward(self, ns: float, block: str, where: dict) -> None:
        sp, tp = self.b.config.sequence_parallel, self.mesh.tp_comm
        if tp is not None and sp:  # PrepareModuleInput: Shard(1) -> Replicate
            self.tp_coll("AllGather", self.act_shard, ACT_DTYPE, where)
        self.b.compute(self.rank, ns, f"{block} forward")
        if tp is None:
            return
        if sp:  # wo / w2: RowwiseParallel(output_layouts=Shard(1))
            self.tp_coll("ReduceScatter", self.act_shard, ACT_DTYPE, where)
        else:
            self.tp_coll("AllReduce", self.act, ACT_DTYPE, where)

    def _head_forward(self, where: dict, warmup: bool) -> None:
        cfg, tp = self.b.config, self.mesh.tp_comm
        if tp is not None and cfg.sequence_parallel:
            self.tp_coll("AllGather", self.act_shard, ACT_DTYPE, where)
        head = VOCAB * self.model.hidden // self.mesh.tp
        self.b.compute(self.rank, self.model.forward_ns(head, warmup), "output head")
        if tp is None:
            return
        tokens = SEQ_LEN * MICRO_BATCH
        if cfg.loss_parallel:
            loss = {**where, "phase": "loss_parallel"}
            for _ in ("max", "sum exp", "target logit"):
                self.tp_coll("AllReduce", tokens, FP32, loss)
        else:  # ColwiseParallel(output_layouts=Replicate()): the whole logits
            self.tp_coll("AllGather", tokens * VOCAB // self.mesh.tp, ACT_DTYPE, where)

    # ---- backward ----

    def _backward(self, where: dict, warmup: bool, sync: bool) -> None:
        model, fsdp, tp = self.model, self.fsdp, self.mesh.tp_comm
        bwd = {"phase": "backward", **where}
        head = VOCAB * model.hidden // self.mesh.tp
        self.b.compute(self.rank, model.backward_ns(head, warmup), "output head backward")
        if tp is not None:  # the head's input: from_local's Partial grad, or the gather's RS
            self._tp_input_grad(bwd)
        buckets = self._ddp_buckets(warmup) if self.ddp and sync else []
        ready = (head + model.hidden) * FP32_BYTES
        self._ddp_reduce_ready(buckets, ready, bwd)
        for layer in reversed(range(model.layers)):
            if fsdp:
                fsdp.block_pre_backward(layer, bwd)
            half = model.backward_ns(model.layer_params // self.mesh.tp, warmup) / 2
            self._tp_block_backward(half, "mlp", MLP_COLWISE, bwd)
            self._tp_block_backward(half, "attention", ATTENTION_COLWISE, bwd)
            if fsdp:
                fsdp.block_post_backward(layer, bwd, sync)
            ready += model.layer_params // self.mesh.tp * FP32_BYTES
            self._ddp_reduce_ready(buckets, ready, bwd)
        if tp is not None and self.b.config.sequence_parallel:  # the embedding's RS, reversed
            self.tp_coll("AllGather", self.act_shard, ACT_DTYPE, bwd)
        if fsdp:
            fsdp.root_post_backward(bwd, sync)
        self._ddp_reduce_ready(buckets, self._grad_bytes(), bwd)

    def _tp_input_grad(self, where: dict) -> None:
        if self.b.config.sequence_parallel:
            self.tp_coll("ReduceScatter", self.act_shard, ACT_DTYPE, where)
        else:
            self.tp_coll("AllReduce", self.act, ACT_DTYPE, where)

    def _tp_block_backward(self, ns: float, block: str, colwise: int, where: dict) -> None:
        sp, tp = self.b.config.sequence_parallel, self.mesh.tp_comm
        if tp is not None and sp:  # RowwiseParallel's reduce-scatter, reversed
            self.tp_coll("AllGather", self.act_shard, ACT_DTYPE, where)
        self.b.compute(self.rank, ns, f"{block} backward")
        if tp is None:
            return
        if sp:  # PrepareModuleInput's all-gather, reversed
            self.tp_coll("ReduceScatter", self.act_shard, ACT_DTYPE, where)
        else:  # each ColwiseParallel linear's from_local: Partial -> Replicate
            for _ in range(colwise):
                self.tp_coll("AllReduce", self.act, ACT_DTYPE, where)

    # ---- DDP over dp ----

    def _grad_bytes(self) -> int:
        local = self.model.layers * self.model.layer_params + root_numel(self.model)
        return local // self.mesh.tp * FP32_BYTES

    def _ddp_buckets(self, warmup: bool) -> list[int]:
        first = BUCKET_BYTES if warmup else FIRST_BUCKET_BYTES  # rebuilt after iteration one
        return bucket_sizes(self._grad_bytes(), first, BUCKET_BYTES)

    def _ddp_reduce_ready(self, buckets: list[int], ready: int, where: dict) -> None:
        """All-reduce, in order, every bucket whose gradients are all computed by now."""
        while buckets and self._grad_bytes() - sum(buckets[1:]) <= ready:
            size = buckets.pop(0)
            self.b.collective(
                self.rank, self.mesh.dp_comm, "AllReduce", size // FP32_BYTES, FP32, **where
            )

    # ---- optimizer ----

    def _optimizer(self, step: int) -> None:
        b, rank, model = self.b, self.rank, self.model
        where = {"phase": "clip_grad_norm", "step": step}
        partial_dims = [self.mesh.dp_comm] if self.fsdp else []
        partial_dims.append(self.mesh.tp_comm)
        if "no_clip" in self.b.config.variants:
            partial_dims = []
        for comm in partial_dims:
            if comm is not None:
                b.collective(rank, comm, "AllReduce", 1, FP32, **where)
        b.extra_ops(rank, self.world, step)
        shards = self.mesh.tp * (self.mesh.dp if self.fsdp else 1)
        b.compute(rank, model.optimizer_ns(model.params // shards), "optimizer")
