"""A restarted Agent's engine names a GPU's roles with the template that named them before.

Live, the template that names a GPU's roles is chosen once, from its first ops (live_cut).
An Agent started again went on from its checkpoint and chose again, from the ops after it:
on a Megatron job (bench/live_restart_attack.py) it chose `ddp` for a pipeline rank whose
uninterrupted engine had chosen none, and every later summary named other roles.
"""

from __future__ import annotations

import json

import numpy as np
from engine_inputs import BUCKETS, COMMS, GPU, TEMPLATES, ddp_slots

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.semantic_hook import CHECKPOINT_NAME, SemanticEngineHook

PEER = GpuStream("node", 4343, 1_000, 1, 1)
STEPS = 240


def rank_slots(rank: int) -> np.ndarray:
    slots = ddp_slots(STEPS)
    slots["rank"] = rank
    return slots


SLOTS = {GPU: rank_slots(0), PEER: rank_slots(1)}


def cutting_hook(home, role_template) -> SemanticEngineHook:
    """A hook whose cut places Steps from the first ops on, naming roles with role_template."""
    hook = SemanticEngineHook(home, TEMPLATES, checkpoint_s=3600)
    hook.live_cut.first_ops, hook.live_cut.min_new_ops = 0, 40
    hook.live_cut.role_template = role_template
    return hook


def take(hook: SemanticEngineHook, first_step: int, end_step: int) -> None:
    for k in range(first_step, end_step, 2):
        for gpu, s in SLOTS.items():
            ops = s[k * len(BUCKETS) : min(k + 2, end_step) * len(BUCKETS)]
            hook._take(gpu, "ops", (ops, COMMS))


def roles_by(hook: SemanticEngineHook) -> dict:
    """The template naming each tracked GPU's roles (its name), None for none."""
    out = {}
    for gpu in SLOTS:
        g = hook.live_cut._gpus[gpu]
        assert g.roles_named
        template = g.engine.runner.template
        out[gpu] = None if template is None else template.name
    return out


def by_name(name: str):
    return next(t for t in TEMPLATES.templates if t.name == name)


def checkpointed(hook: SemanticEngineHook) -> list[dict]:
    return json.loads((hook.out_dir / CHECKPOINT_NAME).read_bytes())["gpus"]


def test_the_template_that_named_the_roles_is_kept_across_a_restart(tmp_path):
    first = cutting_hook(tmp_path, lambda batches: by_name("ddp"))
    take(first, 0, 120)
    assert roles_by(first) == {GPU: "ddp", PEER: "ddp"}
    first._save_checkpoint()
    assert {g["template_name"] for g in checkpointed(first)} == {"ddp"}
    first.stop()
    # the ops after the checkpoint would fit another template
    second = cutting_hook(tmp_path, lambda batches: by_name("fsdp"))
    take(second, 0, STEPS)
    assert roles_by(second) == {GPU: "ddp", PEER: "ddp"}
    second.stop()


def test_roles_named_by_no_template_stay_unnamed_across_a_restart(tmp_path):
    first = cutting_hook(tmp_path, lambda batches: None)
    take(first, 0, 120)
    assert roles_by(first) == {GPU: None, PEER: None}
    first._save_checkpoint()
    assert all("template_name" not in g for g in checkpointed(first))
    first.stop()
    second = cutting_hook(tmp_path, lambda batches: by_name("ddp"))
    take(second, 0, STEPS)
    assert roles_by(second) == {GPU: None, PEER: None}
    second.stop()


def test_a_gpu_that_placed_nothing_before_the_restart_names_its_roles_then(tmp_path):
    first = cutting_hook(tmp_path, lambda batches: None)
    first._save_checkpoint()  # before any op: nothing of the GPUs in it
    first.stop()
    second = cutting_hook(tmp_path, lambda batches: by_name("ddp"))
    take(second, 0, 120)
    assert roles_by(second) == {GPU: "ddp", PEER: "ddp"}
    second.stop()
