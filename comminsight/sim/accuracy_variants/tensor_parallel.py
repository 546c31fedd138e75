"""Tensor parallelism alone (dp = 1): PyTorch DTensor (workloads/tp_dp.py) and Megatron-LM
(workloads/megatron_lm.py with pp = 1). A Step is `grad_accum` micro-batches of TP
all-reduces (or sequence-parallel all-gathers and reduce-scatters), then the optimizer:
with clipping a scalar all-reduce on the TP group ends it, without clipping nothing does."""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case

UNTELLABLE = (
    "TP alone without clipping under flat host time: a Step's last micro-batch issues "
    "exactly what the others do and idles no longer, so where Steps begin cannot be told; "
    "the engine must say so (confidence < 0.9)"
)


def _tp(steps: int = 5, accum: int = 2, **more) -> dict:
    return dict(workload="tp-dp", ranks=2, tp=2, steps=steps, grad_accum=accum, **more)


CASES: list[Case] = [
    # the outside finding: 2 ranks, DTensor TP, accumulation 2, no clipping
    Case("tp_only_no_clip_accum2", _tp(variants=("no_clip",)), time_scale=0.3, timing_told=True),
    Case(
        "tp_only_no_clip_accum4_noisy",
        _tp(accum=4, timing="noisy", variants=("no_clip",)),
        time_scale=0.3,
        timing_told=True,
    ),
    # the PyTorch TP tutorial: no loss_parallel (the head all-gathers the logits), no clip
    Case(
        "tp_only_tutorial_no_clip",
        _tp(loss_parallel=False, variants=("no_clip",)),
        time_scale=0.3,
        timing_told=True,
    ),
    Case(
        "tp_only_no_clip_flat",
        _tp(timing="flat", variants=("no_clip",)),
        known_gap=UNTELLABLE,
        time_scale=0.3,
    ),
    # clip_grad_norm_ on: the norm's all-reduce ends every Step
    Case("tp_only_clip_accum4_noisy", _tp(accum=4, timing="noisy"), time_scale=0.3),
    Case("tp_only_clip_accum2_flat", _tp(timing="flat"), time_scale=0.3),
    # torchtitan's plan: SequenceParallel (all-gathers and reduce-scatters), clip on / off
    Case("tp_only_sp_accum2", _tp(sequence_parallel=True), time_scale=0.3, timing_told=True),
    Case(
        "tp_only_sp_no_clip_accum4",
        _tp(accum=4, sequence_parallel=True, variants=("no_clip",)),
        time_scale=0.3,
        timing_told=True,
    ),
    # Megatron-LM, TP 2 alone (pp 1, dp 1): get_batch broadcasts, fused QKV/FC1, vocab-
    # parallel cross-entropy, clip_grads' norm over the model-parallel group
    Case(
        "tp_only_megatron_accum2",
        dict(workload="megatron", ranks=2, tp=2, pp=1, steps=5, grad_accum=2, precision="bf16"),
        time_scale=0.3,
        timing_told=True,
    ),
    Case(
        "tp_only_megatron_accum4_flat",
        dict(
            workload="megatron",
            ranks=2,
            tp=2,
            pp=1,
            steps=4,
            grad_accum=4,
            precision="bf16",
            timing="flat",
        ),
        time_scale=0.3,
        # under flat host time its cycle's phase is a tie that the GPU's own time breaks
        timing_told=True,
    ),
]
"""Variants of this family, as the frameworks issue them."""
