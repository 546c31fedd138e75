"""Variants of the data-parallel family (DDP and FSDP2), as PyTorch and torchtitan issue them
(workloads/torch_ddp.py and workloads/torch_fsdp2.py cite the sources read): DDP's
construction checks, single first-iteration bucket and the bucket rebuild's two broadcasts at
the start of the second iteration, buffer broadcasts, find_unused_parameters' used-map
all-reduce, an evaluation pass every 5 Steps; FSDP2's root all-gather that opens each Step,
clip_grad_norm_'s all-reduce, reshard_after_forward=False, HSDP's replica all-reduces,
torchtitan's loss logging. Timing varies across them: modeled, noisy and flat."""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case

CASES: list[Case] = [
    # DDP: the rebuild broadcasts open Step 1
    Case(
        "ddp_rebuild_buckets",
        dict(workload="ddp", ranks=4, steps=6, variants=("rebuild_buckets",), timing="flat"),
    ),
    Case(
        "ddp_rebuild_buffers_accum",
        dict(
            workload="ddp",
            ranks=4,
            steps=5,
            grad_accum=3,
            variants=("rebuild_buckets", "broadcast_buffers"),
            timing="noisy",
        ),
    ),
    Case(
        "ddp_find_unused_accum",
        dict(
            workload="ddp",
            ranks=4,
            steps=6,
            grad_accum=2,
            variants=("find_unused_parameters", "broadcast_buffers"),
        ),
    ),
    # DDP with an evaluation pass after every 5th Step
    Case(
        "ddp_eval_every_5",
        dict(
            workload="ddp",
            ranks=4,
            steps=14,
            model_params=50_000_000,
            layers=4,
            variants=("rebuild_buckets", "broadcast_buffers", "eval_every_5"),
        ),
    ),
    Case(
        "ddp_eval_every_5_flat",
        dict(
            workload="ddp",
            ranks=4,
            steps=14,
            model_params=50_000_000,
            layers=4,
            variants=("rebuild_buckets", "eval_every_5"),
            timing="flat",
        ),
    ),
    # FSDP2: the root's all-gather opens every Step (and every micro-batch)
    Case(
        "fsdp2_fully_shard",
        dict(workload="fsdp", ranks=4, steps=6, layers=6, variants=("fully_shard",), timing="flat"),
    ),
    Case(
        "fsdp2_clip_accum",
        dict(
            workload="fsdp",
            ranks=4,
            steps=6,
            layers=4,
            grad_accum=2,
            variants=("clip_grad_norm",),
            timing="noisy",
        ),
    ),
    Case(
        "fsdp2_no_reshard_clip",
        dict(
            workload="fsdp", ranks=4, steps=6, layers=4, variants=("no_reshard", "clip_grad_norm")
        ),
    ),
    Case(
        "fsdp2_hsdp_torchtitan",
        dict(
            workload="fsdp",
            ranks=8,
            steps=10,
            layers=4,
            variants=("hsdp", "torchtitan", "log_loss"),
            timing="noisy",
        ),
    ),
    Case(
        "fsdp2_torchtitan_log",
        dict(
            workload="fsdp",
            ranks=4,
            steps=10,
            layers=4,
            variants=("torchtitan", "log_loss"),
            timing="flat",
        ),
    ),
]
