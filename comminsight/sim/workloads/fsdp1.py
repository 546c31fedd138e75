"""Adversarial sharded data parallelism (attack on the Semantic Engine's Step cut).

- fsdp1_single: PyTorch FSDP1 (torch/distributed/fsdp/fully_sharded_data_parallel.py,
  _runtime_utils.py) wrapping the whole model as ONE FlatParameter (no auto_wrap_policy),
  FULL_SHARD, bf16 params (MixedPrecision), `sync_module_states=True`. Construction:
  `_sync_module_params_and_buffers` broadcasts the module's states from rank 0 in 250 MB
  buckets. Each Step: the root's pre-forward unshard (all-gather of the flat parameter, bf16);
  the root is not resharded after forward (`_reshard_after_forward` is False for the root
  handle), so backward gathers nothing; post-backward reduce-scatter (fp32 gradients); then
  `model.clip_grad_norm_` (FSDP1's: all-reduce of the local norm^2, fp32 1 element) and the
  optimizer on the local shard. The Step's first op is its forward's all-gather, which comes
  right after the previous Step's optimizer scalar.
- verl_max_micro: veRL's dynamic batch size (see training_loops): an int64 MAX all-reduce of the
  micro-batch count, read back, before the Step's first forward.
- no_clip: no clip_grad_norm_.
- mbs8: micro-batch 8.
- limit_all_gathers / forward_prefetch change no collective of a single unit.
- per_layer: auto_wrap_policy per decoder layer besides the root (root keeps its params).
"""

from __future__ import annotations

from comminsight.sim.plan import HostSync, PlanBuilder
from comminsight.sim.workloads.model import ModelShape

FP32, BF16 = "ncclFloat32", "ncclBfloat16"
VARIANTS = ("fsdp1_single", "no_clip", "mbs8", "per_layer", "log_loss", "verl_max_micro")


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    v = set(cfg.variants)
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    n = cfg.ranks
    mbs = 8 if "mbs8" in v else 1
    if "per_layer" in v:
        root = model.params // 10  # embedding + final norm/head
        units = [root] + [(model.params - root) // model.layers] * model.layers
    else:
        units = [model.params]

    def coll(rank, func, count, dtype, phase, step):
        b.collective(rank, world, func, count, dtype, phase=phase, step=step)

    for rank in range(n):
        left = model.params
        while left > 0:
            size = min(left, (250 << 20) // 4)
            coll(rank, "Broadcast", size, FP32, "sync_module_states", None)
            left -= size
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            b.compute(rank, 200_000, "dataloader")
            if "verl_max_micro" in v:
                coll(rank, "AllReduce", 1, "ncclInt64", "max_micro_batches", step)
                b.programs[rank].append(HostSync("num_micro_batches .item()"))
            for unit in units:
                coll(rank, "AllGather", unit // n, BF16, "forward_unshard", step)
                b.compute(rank, mbs * model.forward_ns(unit, warmup), "forward")
            for i, unit in reversed(list(enumerate(units))):
                if i > 0:
                    coll(rank, "AllGather", unit // n, BF16, "backward_unshard", step)
                b.compute(rank, mbs * model.backward_ns(unit, warmup), "backward")
                coll(rank, "ReduceScatter", unit // n, FP32, "backward_reduce", step)
            if "no_clip" not in v:
                coll(rank, "AllReduce", 1, FP32, "clip_grad_norm", step)
                b.programs[rank].append(HostSync("total_norm .item()"))
            b.compute(rank, model.optimizer_ns(model.params // n), "optimizer")
            if "log_loss" in v:
                coll(rank, "AllReduce", 1, FP32, "log_loss", step)
                b.programs[rank].append(HostSync("loss .item()"))
            b.step_end(rank, step)
