"""Training loops as real trainers run them around DDP-style data parallelism (HF Trainer,
Lightning, older Megatron-LM, veRL's actor), each behaviour a variant: the extra
collectives they issue at a Step's edges are what tell, or hide, where Steps begin.

- hf_num_items: transformers Trainer (>= 4.46) `get_batch_samples`: at the start of every
  accumulation cycle, before the first forward, `self.accelerator.gather(num_items_in_batch)`
  (all_gather_into_tensor, int64, 1 element per rank), with `.sum().item()` in several
  releases (host sync). Begins its Step.
- hf_tokens_seen: `include_num_input_tokens_seen`: each micro-batch, before its forward,
  `self.accelerator.gather(torch.tensor(input_tokens)).sum().item()` (int64 all-gather, host
  waits). Begins (or is inside) its Step.
- hf_log_every_2: `_maybe_log_save_evaluate` every logging_steps: `_nested_gather(tr_loss)
  .mean().item()` (fp32 all-gather of 1, host waits); belongs to the Step it follows.
- hf_log_every_1: the same with logging_steps=1 (every Step).
- hf_eval_every_3: evaluation_loop: per eval batch a DDP forward under no_grad and
  `gather_function(losses.repeat(bs))` (fp32 all-gather of bs); belongs to the Step before.
- lightning_ckpt_every_4: Lightning ModelCheckpoint(every_n_train_steps):
  `strategy.reduce_boolean_decision` (int64 all-reduce of 1, .item()) then
  `Trainer.save_checkpoint` -> `strategy.barrier("Trainer.save_checkpoint")`.
- mlm_loss_per_micro: Megatron-LM (<= core 0.5) pretrain_gpt loss_func
  `average_losses_across_data_parallel_group([loss])`: an fp32 all-reduce of 1 after every
  micro-batch's forward, before its backward (no host sync).
- stall_every_3: the data loader stalls (40 ms) before every 3rd Step's first batch.
- stall_mid: the data loader stalls (40 ms) fetching micro-batch 1 of every Step.
- killed: the job is killed in the last Step halfway through its gradient all-reduces.
- verl_max_micro: veRL dp_actor `update_policy` with use_dynamic_bsz: each optimizer step's
  `rearrange_micro_batches` all-reduces its micro-batch count with MAX over the dp group
  (int64, 1 element) and reads it back (`.cpu().item()`) before the first forward (begins
  its Step).
- mbs8: micro-batch 8 (forward/backward 8x longer than the optimizer's update).
- no_setup: no construction broadcast (model loaded identically from a checkpoint).
"""

from __future__ import annotations

from comminsight.sim.plan import HostSync, PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.ddp import bucket_sizes
from comminsight.sim.workloads.model import ModelShape

FP32, INT64 = "ncclFloat32", "ncclInt64"
STALL_NS = 40_000_000
EVAL_BATCHES = 3
EVAL_BS = 8

VARIANTS = (
    "hf_num_items",
    "hf_tokens_seen",
    "hf_log_every_2",
    "hf_log_every_1",
    "hf_eval_every_3",
    "lightning_ckpt_every_4",
    "mlm_loss_per_micro",
    "stall_every_3",
    "stall_mid",
    "killed",
    "no_setup",
    "no_first_bucket",
    "mbs8",
    "verl_max_micro",
)


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    v = set(cfg.variants)
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    grad_bytes = model.params * 4
    if "no_first_bucket" in v:
        buckets = bucket_sizes(grad_bytes, 25 << 20, 25 << 20)
    else:
        buckets = bucket_sizes(grad_bytes, 1 << 20, 25 << 20)

    mbs = 8 if "mbs8" in v else 1

    def coll(rank, func, count, dtype, phase, step, micro=None):
        b.collective(rank, world, func, count, dtype, phase=phase, step=step, micro_batch=micro)

    def sync(rank, label):
        b.programs[rank].append(HostSync(label))

    for rank in range(cfg.ranks):
        if "no_setup" not in v:
            for size in bucket_sizes(grad_bytes, 250 << 20, 250 << 20):
                coll(rank, "Broadcast", size // 4, FP32, "sync_module_states", None)
        for step in range(cfg.total_steps):
            warmup = step < cfg.warmup_steps
            steady = step - cfg.warmup_steps
            last = step == cfg.total_steps - 1
            b.step_begin(rank, step, warmup)
            if "stall_every_3" in v and step % 3 == 2:
                b.compute(rank, STALL_NS, "dataloader stall")
            b.compute(rank, 200_000, "dataloader")
            if "hf_num_items" in v:
                coll(rank, "AllGather", 1, INT64, "num_items_in_batch", step)
                sync(rank, "num_items .item()")
            if "verl_max_micro" in v:
                coll(rank, "AllReduce", 1, INT64, "max_micro_batches", step)
                sync(rank, "num_micro_batches .cpu().item()")
            micros = accumulation.micro_batches(cfg, step)
            for micro in range(micros):
                if "stall_mid" in v and micro == 1:
                    b.compute(rank, STALL_NS, "dataloader stall")
                if "hf_tokens_seen" in v:
                    coll(rank, "AllGather", 1, INT64, "tokens_seen", step, micro)
                    sync(rank, "tokens_seen .item()")
                b.compute(rank, mbs * model.forward_ns(model.params, warmup), "forward")
                if "mlm_loss_per_micro" in v:
                    coll(rank, "AllReduce", 1, FP32, "loss_average", step, micro)
                grad_sync = micro == micros - 1
                killed_here = "killed" in v and last and grad_sync
                for size in buckets[: len(buckets) // 2] if killed_here else buckets:
                    share = size / grad_bytes
                    backward = mbs * model.backward_ns(model.params, warmup) * share
                    b.compute(rank, backward, "backward")
                    if grad_sync:
                        coll(rank, "AllReduce", size // 4, FP32, "backward", step, micro)
            if "killed" in v and last:
                continue
            b.compute(rank, model.optimizer_ns(model.params), "optimizer")
            if ("hf_log_every_2" in v and step % 2 == 1) or "hf_log_every_1" in v:
                coll(rank, "AllGather", 1, FP32, "log_loss", step)
                sync(rank, "tr_loss .item()")
            if "hf_eval_every_3" in v and steady >= 0 and steady % 3 == 2:
                for _ in range(EVAL_BATCHES):
                    b.compute(rank, model.forward_ns(model.params), "eval forward")
                    coll(rank, "AllGather", EVAL_BS, FP32, "eval_loss", step)
                sync(rank, "eval metrics")
            if "lightning_ckpt_every_4" in v and steady >= 0 and steady % 4 == 3:
                coll(rank, "AllReduce", 1, INT64, "reduce_boolean_decision", step)
                sync(rank, "decision .item()")
                b.compute(rank, 5_000_000, "torch.save")
                coll(rank, "AllReduce", 1, FP32, "barrier", step)
                sync(rank, "barrier")
            b.step_end(rank, step)
