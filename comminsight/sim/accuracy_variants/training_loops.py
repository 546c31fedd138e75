"""Training loops around data parallelism, as trainers run them (workloads/training_loops.py,
workloads/fsdp1.py): HF Trainer's token counts gathered as a Step begins and its loss and
evaluation gathers after it, Lightning's checkpoint decisions, older Megatron-LM's loss
all-reduced per micro-batch, veRL's micro-batch count agreed on before each optimizer step,
a data loader that stalls, slow first Steps, short and killed runs, and FSDP1 with one flat
parameter or one unit per layer."""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case

FLAT_FORWARD_GATHER = (
    "FSDP1 with one flat parameter under flat host time: the forward's gather right after the "
    "optimizer's norm looks like a sharded update's, and idle time cannot tell (never at "
    "confidence 0.9 or more)"
)


def _case(
    workload: str,
    name: str,
    variants: tuple[str, ...],
    timing: str = "modeled",
    known_gap: str | None = None,
    timing_told: bool = False,
    **more,
) -> Case:
    config = dict(workload=workload, ranks=4, steps=6, variants=variants, timing=timing)
    return Case(name, {**config, **more}, known_gap=known_gap, timing_told=timing_told)


def _loops(name: str, variants: tuple[str, ...], *args, **more) -> Case:
    return _case("training-loops", name, variants, *args, **more)


def _fsdp1(name: str, variants: tuple[str, ...], *args, **more) -> Case:
    return _case("fsdp1", name, variants, *args, layers=4, **more)


CASES: list[Case] = [
    _loops("hf_num_items", ("hf_num_items",)),
    _loops(
        "hf_num_items_accum_noisy",
        ("hf_num_items",),
        "noisy",
        grad_accum=4,
    ),
    _loops(
        "hf_full_accum",
        ("hf_num_items", "hf_log_every_2", "hf_eval_every_3", "lightning_ckpt_every_4"),
        grad_accum=2,
        steps=9,
    ),
    _loops(
        "hf_tokens_seen_accum_flat",
        ("hf_tokens_seen", "hf_log_every_2"),
        "flat",
        grad_accum=3,
    ),
    _loops("hf_log_eval_noisy", ("hf_log_every_2", "hf_eval_every_3"), "noisy", steps=9),
    # the loss logged every Step after it, the token count gathered before the next
    _loops("hf_num_items_log_every_1_flat", ("hf_num_items", "hf_log_every_1"), "flat"),
    _loops("hf_log_every_1_flat", ("hf_log_every_1",), "flat"),
    # a loss all-reduced after each micro-batch's forward, which follows the gradient
    # reductions as an optimizer's scalar would
    _loops("mlm_loss_per_micro", ("mlm_loss_per_micro",), grad_accum=4),
    _loops("mlm_loss_per_micro_flat", ("mlm_loss_per_micro",), "flat", grad_accum=4),
    _loops("mlm_loss_per_micro_accum8_noisy", ("mlm_loss_per_micro",), "noisy", grad_accum=8),
    _loops("lightning_ckpt", ("lightning_ckpt_every_4",), steps=8),
    _loops("stall_every_3", ("stall_every_3", "hf_log_every_2"), steps=9, timing_told=True),
    _loops("slow_first_3", ("hf_num_items",), warmup_steps=3, steps=3),
    _loops("three_steps", (), warmup_steps=0, steps=3),
    _loops("killed_mid_step", ("killed", "hf_num_items"), steps=4),
    _loops("verl_max_micro", ("verl_max_micro",)),
    _loops("verl_max_micro_flat", ("verl_max_micro",), "flat", grad_accum=2),
    # its forward's gather after the optimizer is told from an update's by idle time alone
    _fsdp1("fsdp1_single", ("fsdp1_single",), timing_told=True),
    _fsdp1("fsdp1_single_flat", ("fsdp1_single",), "flat", known_gap=FLAT_FORWARD_GATHER),
    _fsdp1("fsdp1_per_layer", ("per_layer",)),
    # veRL's actor: its count agreed on after the previous Step's clipped norm
    _fsdp1("fsdp1_verl_max_micro", ("per_layer", "verl_max_micro"), grad_accum=2),
]
