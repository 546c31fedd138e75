"""Pipeline parallelism as Megatron-LM runs it with its default data-parallel settings.

Stages exchange activations and gradients by Megatron-core's 1F1B schedule
(`forward_backward_pipelining_without_interleaving`) or, with `virtual_pp` > 1 model chunks
per stage, its interleaved 1F1B (`forward_backward_pipelining_with_interleaving`): every
exchange is one `batch_isend_irecv` (one NCCL group on the pipeline group's communicator)
followed by a host synchronize (see `pipeline_schedule`). Tensor parallelism all-reduces
twice per layer forward and twice backward (`megatron_lm` has the details).

Megatron's defaults for the rest: no `--overlap-grad-reduce` and no distributed optimizer,
so DDP keeps one gradient bucket per model chunk and `finalize_model_grads` all-reduces it
over data-parallel after the last backward (`_ParamAndGradBucketGroup.start_grad_sync`,
synchronous), then all-reduces the tied embedding's gradient between the first and last
stage; the fp16 optimizer (`Float16OptimizerWithFloat16Params`) all-reduces found-inf and the
gradient norm on the model-parallel group, `train_step` reduces its success flag and the norm
there too, and the last stage all-reduces the loss over data-parallel.
"""

from __future__ import annotations

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads.megatron_lm import Flavour, build_megatron
from comminsight.sim.workloads.model import ModelShape

FLAVOUR = Flavour(distributed_optimizer=False, overlap_grad_reduce=False)


def build(b: PlanBuilder, model: ModelShape) -> None:
    build_megatron(b, model, FLAVOUR)
