"""Megatron-LM 3D parallelism (TP x PP x DP) as large GPT runs use it: the distributed
optimizer (--use-distributed-optimizer) with --overlap-grad-reduce.

Against the `pp` workload (Megatron's defaults) this changes the data-parallel traffic:

- gradients are reduce-scattered, not all-reduced, bucket by bucket (the first stage's first
  chunk in buckets of max(40M, 1M x dp) parameters, the shared embedding alone, each padded
  to lcm(dp, 128)); DDP's backward hooks launch them inside the last micro-batch's backward
  on the first stage, the other stages call `start_grad_sync` once their backwards are done
  (`config.grad_sync_func`, --align-grad-reduce), and the interleaved schedule does it per
  chunk `pp_rank` steps after that chunk's last backward. The first iteration launches the
  hooks' buckets at `finish_grad_sync` instead: DDP learns then how many gradients each
  bucket waits for.
- the optimizer's found-inf and gradient-norm all-reduces run on the distributed-optimizer
  instance group (every rank), and after the step each bucket's updated parameters are
  all-gathered over data-parallel (`DistributedOptimizer.step_with_ready_grads`).

With `sequence_parallel` (and tp > 1) tensor parallelism all-gathers and reduce-scatters
sequence shards instead of all-reducing, P2P tensors are the sequence shard, and
`finalize_model_grads` all-reduces the layernorm gradients on TP.

Communicators are created at first use, as PyTorch does when no device is bound at
`init_process_group`: the pipeline group's at the first P2P exchange, the data-parallel one at
the first gradient bucket, the model-parallel one at `train_step`'s reductions. See
`megatron_lm` for every call and the Megatron-LM functions it stands for.
"""

from __future__ import annotations

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads.megatron_lm import Flavour, build_megatron
from comminsight.sim.workloads.model import ModelShape

FLAVOUR = Flavour(distributed_optimizer=True, overlap_grad_reduce=True)
# framework behaviours a config turns on by name (`megatron_lm` says what each one issues)
VARIANTS = (
    "overlap_param_gather",
    "fp16_overflow",
    "overflow_spikes",
    "no_clip",
    "log_num_zeros",
    "timers_l1",
    "log_interval_2",
    "log_interval_3",
    "log_interval_4",
    "ddp_bucket_10m",
)


def build(b: PlanBuilder, model: ModelShape) -> None:
    build_megatron(b, model, FLAVOUR)
