"""Variants of this family, as the frameworks issue them.

DeepSpeed ZeRO-1/2 with fp16 loss scaling (`zero` workload variants: one optimizer group or
Hugging Face's two, reduce vs reduce-scatter vs per-destination reduce of gradient buckets,
overlap_comm's backward hooks, the legacy sharded parameter all-gather, frequent overflow
steps) and Megatron-LM TP x PP x DP with the distributed optimizer (`megatron` workload
variants: overlap_param_gather, fp16 overflow steps, clip off, zero counting, smaller DDP
buckets, level-1 timer barriers, log-interval barrier and timer all-gather), each under one of
the timing profiles.
"""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case

TIMERS_OVERLAP_GAP = (
    "with level-1 timers, the parameter all-gather overlapped into the forward and two "
    "micro-batches, the all-gather of every bucket after the loop (disable_forward_pre_hook) "
    "is taken into the last Step: its last repetition lacks the barrier that would open the "
    "next Step, so it reads as cut short (never at confidence 0.9 or more)"
)
TIMERS_OVERFLOW_GAP = (
    "with level-1 timers and fp16 overflow steps, a skipped update also skips the "
    "optimizer's later timer barriers: the skipped Steps are cut elsewhere than the others "
    "(never at confidence 0.9 or more)"
)

ZERO = dict(workload="zero", layers=4)
MEGATRON = dict(workload="megatron", ranks=8, tp=2, pp=2)
# level-1 timers (a barrier before every phase), the timers gathered every second Step
TIMERS_VARIANTS = ("timers_l1", "log_interval_2")
TIMERS_LOG = dict(MEGATRON, steps=6, grad_accum=4, precision="bf16", variants=TIMERS_VARIANTS)

CASES: list[Case] = [
    # ---- DeepSpeed ZeRO-1, fp16 with overflow steps ----
    Case(
        "zero1_single_group_flat",
        dict(ZERO, ranks=4, steps=8, zero_stage=1, variants=("single_param_group",), timing="flat"),
    ),
    Case(
        "zero1_overlap_spikes_noisy",
        dict(
            ZERO,
            ranks=4,
            steps=8,
            zero_stage=1,
            reduce_bucket_size=20_000_000,
            variants=("overlap_comm", "overflow_spikes"),
            timing="noisy",
        ),
    ),
    Case(
        "zero1_legacy_ag_reduce",
        dict(
            ZERO,
            ranks=8,
            steps=8,
            zero_stage=1,
            reduce_bucket_size=20_000_000,
            variants=("legacy_allgather", "no_multi_rank_bucket"),
        ),
    ),
    Case(
        "zero1_allreduce_spikes_flat",
        dict(
            ZERO,
            ranks=2,
            steps=8,
            zero_stage=1,
            variants=("no_reduce_scatter", "single_param_group", "overflow_spikes"),
            timing="flat",
        ),
    ),
    # ---- DeepSpeed ZeRO-2 with gradient accumulation ----
    Case(
        "zero2_accum_buckets_flat",
        dict(
            ZERO,
            ranks=4,
            steps=6,
            zero_stage=2,
            grad_accum=3,
            reduce_bucket_size=20_000_000,
            timing="flat",
        ),
    ),
    Case(
        "zero2_accum_allreduce_spikes_noisy",
        dict(
            ZERO,
            ranks=4,
            steps=6,
            zero_stage=2,
            grad_accum=2,
            variants=("no_reduce_scatter", "overflow_spikes"),
            timing="noisy",
        ),
    ),
    Case(
        "zero2_dynamic_accum_single_legacy",
        dict(
            ZERO,
            ranks=8,
            steps=6,
            zero_stage=2,
            grad_accum=2,
            dynamic_accum=True,
            reduce_bucket_size=50_000_000,
            variants=("single_param_group", "legacy_allgather"),
        ),
    ),
    Case(
        "zero2_accum_reduce_flat",
        dict(
            ZERO,
            ranks=4,
            steps=6,
            zero_stage=2,
            grad_accum=2,
            reduce_bucket_size=20_000_000,
            variants=("no_multi_rank_bucket", "overflow_spikes"),
            timing="flat",
        ),
    ),
    # ---- Megatron-LM TP x PP x DP, distributed optimizer ----
    Case(
        "megatron_distopt_overflow_flat",
        dict(MEGATRON, steps=8, grad_accum=4, variants=("fp16_overflow",), timing="flat"),
    ),
    Case(
        "megatron_distopt_overlap_pg_bf16_noisy",
        dict(
            MEGATRON,
            steps=6,
            grad_accum=4,
            precision="bf16",
            variants=("overlap_param_gather",),
            timing="noisy",
        ),
        timing_told=True,
    ),
    Case(
        "megatron_distopt_overlap_pg_fp16",
        dict(MEGATRON, steps=8, grad_accum=4, variants=("overlap_param_gather", "fp16_overflow")),
    ),
    Case("megatron_distopt_timers_log", TIMERS_LOG),
    Case("megatron_distopt_timers_log_flat", dict(TIMERS_LOG, timing="flat")),
    Case(
        "megatron_distopt_timers_overlap_pg_accum2",
        dict(
            TIMERS_LOG,
            steps=8,
            grad_accum=2,
            variants=(*TIMERS_VARIANTS, "overlap_param_gather"),
        ),
        known_gap=TIMERS_OVERLAP_GAP,
    ),
    Case(
        "megatron_distopt_timers_fp16_overflow",
        dict(
            TIMERS_LOG,
            steps=8,
            precision="fp16",
            variants=(*TIMERS_VARIANTS, "fp16_overflow"),
        ),
        known_gap=TIMERS_OVERFLOW_GAP,
    ),
    Case(
        "megatron_distopt_timers_pp4_log3_noisy",
        dict(
            MEGATRON,
            pp=4,
            steps=7,
            grad_accum=4,
            variants=("timers_l1", "log_interval_3", "overlap_param_gather"),
            timing="noisy",
        ),
    ),
    Case(
        "megatron_distopt_buckets_noclip_noisy",
        dict(
            MEGATRON,
            steps=8,
            grad_accum=4,
            variants=("ddp_bucket_10m", "no_clip", "log_num_zeros", "fp16_overflow"),
            timing="noisy",
        ),
    ),
    Case(
        "megatron_distopt_pp4_log_spikes",
        dict(
            workload="megatron",
            ranks=8,
            tp=1,
            pp=4,
            steps=8,
            grad_accum=4,
            variants=("log_interval_3", "overflow_spikes", "ddp_bucket_10m"),
        ),
        # four stages' idle time places its boundaries on a loaded machine's mercy
        timing_told=True,
    ),
]
