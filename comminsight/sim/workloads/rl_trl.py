"""RL post-training as TRL's GRPOTrainer runs it with vLLM colocated (`vllm_mode="colocate"`,
`vllm_tensor_parallel_size=1`) under accelerate's DDP (the `rl` workload's `trl_grpo`
variant).

Read in TRL: trl/trainer/grpo_trainer.py (`_prepare_inputs`, `_generate_and_score_completions`,
`_move_model_to_vllm`, `_calculate_rewards`), and transformers' Trainer training loop
(`_inner_training_loop`, `_maybe_log_save_evaluate`).

Every rank is a trainer process with its own vLLM engine on the same GPU. A Step is one
optimizer step (the Trainer's `global_step`); with `steps_per_generation` =
`gradient_accumulation_steps` (`grad_accum`) and `num_iterations` 1, every Step generates:
1. `_move_model_to_vllm`: neither ZeRO-3 nor FSDP, so every rank loads its own parameters
   into its engine (`llm_model.load_weights`): no NCCL at all.
2. Generation on the rank's own engine (TP 1): no NCCL.
3. `_calculate_rewards` ends with `gather(rewards_per_func)` (all-gather, fp32, completions x
   reward functions); metrics: `accelerator.gather` of the completion lengths (int64) and of
   the EOS flags (bool), each read on the host; the logged prompts and completions with
   `gather_object` (all_gather_object: the sizes, then the pickled bytes, whose size depends
   on the text generated).
4. The old log-probs (`vllm_importance_sampling_correction`): a forward pass, no NCCL.
5. `gradient_accumulation_steps` micro-batches: forward, backward; DDP all-reduces its
   gradient buckets only in the last (accelerate's `accumulate` runs the others under
   `no_sync`); `clip_grad_norm_` on replicated gradients (local, no collective); the optimizer.
6. Logging (`logging_steps: 1`, as GRPO recipes set it): `_nested_gather(tr_loss)` (an
   all-gather of one fp32) read on the host.
Start-up: DDP's construction broadcasts the parameters from rank 0 (250 MB chunks); accelerate
`wait_for_everyone` after vLLM is built (a barrier).
"""

from __future__ import annotations

import random

from comminsight.sim.plan import PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.ddp import (
    BROADCAST_BYTES,
    BUCKET_BYTES,
    FIRST_BUCKET_BYTES,
    bucket_sizes,
)
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.model import HBM_BYTES_PER_S, ModelShape
from comminsight.sim.workloads.rl import DECODE_STEP_OVERHEAD_NS, PROMPTS_PER_RANK, response_lengths

FP32, INT64, BYTES = "ncclFloat32", "ncclInt64", "ncclInt8"
REWARD_FUNCS = 2  # e.g. accuracy and format rewards
NUM_GENERATIONS = 4  # completions per prompt
CHARS_PER_TOKEN = 4
PICKLE_OVERHEAD = 64


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    grad_bytes = model.params * 4
    for rank in range(cfg.ranks):
        where = {"phase": "ddp_init", "step": None}
        for size in bucket_sizes(grad_bytes, BROADCAST_BYTES, BROADCAST_BYTES):
            b.collective(rank, world, "Broadcast", size // 4, FP32, root=0, **where)
        b.barrier(rank, world)  # accelerator.wait_for_everyone() after vLLM
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            b.step_begin(rank, step, warmup)
            _generate_and_score(b, model, rank, world, step)
            micros = accumulation.micro_batches(cfg, step)
            first = BUCKET_BYTES if warmup else FIRST_BUCKET_BYTES
            for micro in range(micros):
                where = {"step": step, "micro_batch": micro}
                b.compute(rank, model.forward_ns(model.params, warmup), "forward")
                b.compute(rank, model.backward_ns(model.params, warmup), "backward")
                if micro == micros - 1:
                    for size in bucket_sizes(grad_bytes, first, BUCKET_BYTES):
                        b.collective(
                            rank, world, "AllReduce", size // 4, FP32, phase="backward", **where
                        )
            b.extra_ops(rank, world, step)
            b.compute(rank, model.optimizer_ns(model.params), "optimizer")
            b.collective(rank, world, "AllGather", 1, FP32, phase="log", step=step)
            wait_for_gpu(b, rank, "tr_loss .item()")
            b.step_end(rank, step)


def _generate_and_score(b: PlanBuilder, model: ModelShape, rank: int, world, step: int) -> None:
    cfg = b.config
    where = {"phase": "rollout", "step": step}
    b.compute(rank, model.params * 4 / HBM_BYTES_PER_S * 1e9, "load_weights into vLLM")
    n = PROMPTS_PER_RANK * NUM_GENERATIONS // 4 or 1
    lengths = response_lengths(cfg.seed, step, rank, n, cfg.response_length)
    per_token = model.params * 2 / HBM_BYTES_PER_S * 1e9 + DECODE_STEP_OVERHEAD_NS
    b.compute(rank, max(lengths) * per_token, "vLLM generate")
    b.compute(rank, 5_000_000, "reward functions")
    b.collective(rank, world, "AllGather", n * REWARD_FUNCS, FP32, **where)
    b.collective(rank, world, "AllGather", n, INT64, **where)  # completion lengths
    wait_for_gpu(b, rank, "completion lengths .item()")
    b.collective(rank, world, "AllGather", n, BYTES, **where)  # EOS flags (bool)
    wait_for_gpu(b, rank, "clipped ratio .item()")
    # gather_object: every rank pads to the largest pickle of the job
    texts = {
        "prompts": [
            random.Random(f"{cfg.seed}/trl/prompt/{step}/{r}").randint(300, 900)
            for r in range(cfg.ranks)
        ],
        "completions": [
            sum(response_lengths(cfg.seed, step, r, n, cfg.response_length)) * CHARS_PER_TOKEN
            for r in range(cfg.ranks)
        ],
    }
    for sizes in texts.values():
        b.collective(rank, world, "AllGather", 1, INT64, **where)
        wait_for_gpu(b, rank, "object sizes")
        b.collective(rank, world, "AllGather", max(sizes) + PICKLE_OVERHEAD, BYTES, **where)
        wait_for_gpu(b, rank, "unpickle")
    b.compute(rank, model.forward_ns(model.params), "old log-probs forward")
