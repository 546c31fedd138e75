"""RL post-training as veRL, OpenRLHF and TRL run it (workloads/rl.py, rl_openrlhf.py,
rl_trl.py cite what was read). A Step is one optimizer step of the actor; the weight sync and
rollout that feed an iteration belong to its first Step, wherever the framework issues the
sync (before the rollout, or right after the previous update)."""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case

SYNC_AFTER_UPDATE = (
    "the weights veRL's checkpoint engine syncs once before the loop (its start-up) look like "
    "the sync that begins every later iteration: the first Step is taken to begin with them "
    "(never at confidence 0.9 or more)"
)

CASES: list[Case] = [
    # OpenRLHF: actor (FSDP2) on ranks 0-1, one vLLM engine (TP 2) on ranks 2-3; the
    # weights leave actor rank 0 right after training, the actor then idles while the
    # engines generate: the sync looks like the end of the previous Step
    Case(
        "rl_openrlhf",
        dict(workload="rl", ranks=4, rollout_tp=2, steps=4, variants=("openrlhf",)),
    ),
    # two engines (TP 2), four actor ranks, accumulation 2, noisy host
    Case(
        "rl_openrlhf_accum_noisy",
        dict(
            workload="rl",
            ranks=8,
            rollout_tp=2,
            steps=4,
            grad_accum=2,
            timing="noisy",
            variants=("openrlhf",),
        ),
    ),
    # veRL's checkpoint engine: the sync right after the update, then the driver's gap
    Case(
        "rl_verl_sync_after_update",
        dict(workload="rl", ranks=4, steps=5, variants=("verl_sync_after_update",)),
        known_gap=SYNC_AFTER_UPDATE,
    ),
    # veRL ppo_epochs 2 x 2 mini-batches (clip on), dynamic micro-batches, flat host time
    Case(
        "rl_verl_ppo_epochs_flat",
        dict(
            workload="rl",
            ranks=4,
            steps=7,
            grad_accum=2,
            dynamic_accum=True,
            timing="flat",
            variants=("ppo_epochs_2",),
        ),
    ),
    # TRL GRPO, colocated vLLM (TP 1) under DDP: no NCCL for the weight sync, each Step
    # opens with the rewards' and logs' all-gathers
    Case(
        "rl_trl_grpo",
        dict(workload="rl", ranks=4, steps=5, grad_accum=2, variants=("trl_grpo",)),
    ),
    Case(
        "rl_trl_grpo_flat",
        dict(workload="rl", ranks=4, steps=5, grad_accum=4, timing="flat", variants=("trl_grpo",)),
    ),
]
"""Variants of this family, as the frameworks issue them."""
