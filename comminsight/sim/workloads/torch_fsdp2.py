"""FSDP2 (`fully_shard`) training as PyTorch and torchtitan issue it (the `fsdp` workload's
variants): `fully_shard` on each decoder block, then on the root (embedding, final norm,
output head), driven by fsdp2.Fsdp2Model.

Read from pytorch/pytorch `torch/distributed/fsdp/_fully_shard/`:

- `_fsdp_state.py` `_lazy_init`: the root's param group gets `post_forward_mesh_info = None`
  (the root is not resharded after forward, it would be all-gathered again for backward).
  So per Step the FIRST op is the root's all-gather (bf16 `param_dtype`, count = its shard),
  issued by the root's pre-forward before any block; blocks follow in forward order.
- `_fsdp_param_group.py`: `pre_forward` unshards (all-gather of the group's shards);
  `post_forward` reshards when `reshard_after_forward` (True by default; False keeps the
  block for backward, so backward gathers nothing); `pre_backward` unshards and prefetches
  the module before it in `post_forward_order`; `post_backward` reshards and, when
  `reduce_grads`, reduce-scatters the gradients (`_fsdp_collectives.py` `foreach_reduce`,
  fp32 `reduce_dtype`) and, under HSDP (2-D mesh replicate x shard), all-reduces the
  reduce-scatter's output across the replicate group right after it. The root's
  gradients are reduced last, from `_root_post_backward_final_callback`, which also reshards
  the root, so the next forward gathers it again.
- `fully_shard.set_requires_gradient_sync(False)` (accumulation micro-batches): sets
  `reduce_grads` and `all_reduce_grads` False: no reduce-scatter, no all-reduce; gathers are
  unchanged (`reshard_after_backward` stays True).
- `torch/nn/utils/clip_grad.py` with DTensor gradients: the total norm is a `_NormPartial`
  DTensor; making it usable (`full_tensor()` in torchtitan's `dist_utils.clip_grad_norm_`)
  all-reduces one fp32 element over the shard dimension, after backward, before
  `optimizer.step()`.
- torchtitan `train.py` `train_step`: micro-batches, `clip_grad_norm_`, `optimizers.step()`,
  `lr_schedulers.step()`, then, when `metrics_processor.should_log(step)` (step == 1 or
  step % log_freq == 0, 1-based), `dist_mean` and `dist_max` of the loss over the dp mesh
  (`dist_utils._dist_reduce`: `funcol.all_reduce` of one fp32 element, AVG then MAX, each read
  with `.item()`). `parallelize_llama` keeps the last block unsharded after forward
  (`reshard_after_forward = layer_id < len(layers) - 1`).
"""

from __future__ import annotations

from functools import partial

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.comm_groups import device_mesh, new_groups
from comminsight.sim.workloads.fsdp2 import Fsdp2Model
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.model import ModelShape

FP32 = "ncclFloat32"
LOG_FREQ = 5  # torchtitan metrics.log_freq
REPLICAS = 2  # HSDP: the replicate dimension

VARIANTS = ("fully_shard", "clip_grad_norm", "no_reshard", "hsdp", "torchtitan", "log_loss")


def _block(b: PlanBuilder, rank: int, ns: float, label: str, _layer: int) -> None:
    b.compute(rank, ns, label)


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    variants = set(cfg.variants)
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    hsdp = "hsdp" in variants and cfg.ranks % REPLICAS == 0 and cfg.ranks > REPLICAS
    if hsdp:
        shape = (REPLICAS, cfg.ranks // REPLICAS)
        mesh = device_mesh(b, world, shape, ("dp_replicate", "dp_shard"), ("dp", "dp"))
        flat = new_groups(b, "dp", "mesh_dp_cp", [tuple(range(cfg.ranks))])
        shard_comms, replicate_comms = mesh["dp_shard"], mesh["dp_replicate"]
        loss_comms = flat
    else:
        shard_comms = loss_comms = dict.fromkeys(range(cfg.ranks), world)
        replicate_comms = {}
    titan = "torchtitan" in variants
    clip = "clip_grad_norm" in variants or titan
    log_loss = "log_loss" in variants
    for rank in range(cfg.ranks):
        shard = shard_comms[rank]
        fsdp = Fsdp2Model(
            b,
            rank,
            shard,
            model,
            shard.nranks,
            reshard_last_block=not titan,
            reshard_after_forward="no_reshard" not in variants,
            replicate=replicate_comms.get(rank),
        )
        b.barrier(rank, world)
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            micros = accumulation.micro_batches(cfg, step)
            layer_ns = model.forward_ns(model.layer_params, warmup)
            for micro in range(micros):
                sync = micro == micros - 1  # set_requires_gradient_sync(False) otherwise
                fwd = {"phase": "forward", "step": step, "micro_batch": micro}
                bwd = {"phase": "backward", "step": step, "micro_batch": micro}
                fsdp.forward(fwd, partial(_block, b, rank, layer_ns, "forward"))
                fsdp.backward(bwd, partial(_block, b, rank, 2 * layer_ns, "backward"), sync)
            if clip:
                b.collective(rank, shard, "AllReduce", 1, FP32, phase="clip_grad_norm", step=step)
            b.compute(rank, model.optimizer_ns(model.params // shard.nranks), "optimizer")
            b.extra_ops(rank, world, step)
            if log_loss and (step + 1 == 1 or (step + 1) % LOG_FREQ == 0):
                for _reduce in ("AVG", "MAX"):
                    comm = loss_comms[rank]
                    b.collective(rank, comm, "AllReduce", 1, FP32, phase="log_loss", step=step)
                    wait_for_gpu(b, rank, "loss .item()")
            b.step_end(rank, step)
