"""Attack the Semantic Engine's "never wrong when sure" with adversarial workloads.

    .venv/bin/python tests/attack_steps/run_attack.py [--only NAME ...] [--seeds N] [--names on|off|both]

Each case simulates one of comminsight/sim/workloads/adv_*.py through the real plugin, then
scores offline (recover_steps) and live (replay_live) Steps against the ground truth. The
adversarial workloads are registered without touching shared files: this directory's
site/sitecustomize.py, put on PYTHONPATH, registers them in this process and in every rank
process (the launcher starts rank processes as new interpreters when a sitecustomize is on
PYTHONPATH, so they run it too).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SITE = HERE / "site"
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
ADV_WORKLOADS = ("adv-loops", "adv-sharded")

os.environ["ADV_ATTACK_WORKLOADS"] = ",".join(ADV_WORKLOADS)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SITE), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
)
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("adv_attack_site", SITE / "sitecustomize.py")
_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_site)

from comminsight.semantic.live_replay import replay_live  # noqa: E402
from comminsight.semantic.offline import recover_steps  # noqa: E402
from comminsight.sim.accuracy_case import Case  # noqa: E402
from comminsight.sim.step_accuracy import score, simulate_case  # noqa: E402


def loops(name, variants, timing="modeled", **kw):
    config = dict(workload="adv-loops", ranks=4, steps=6, variants=tuple(variants), timing=timing)
    config.update(kw)
    return Case(name, config)


def sharded(name, variants, timing="modeled", **kw):
    config = dict(workload="adv-sharded", ranks=4, steps=6, layers=4, variants=tuple(variants))
    config.update(timing=timing, **kw)
    return Case(name, config)


CASES = [
    # transformers Trainer + accelerate DDP
    loops("hf_num_items", ["hf_num_items"]),
    loops("hf_num_items_flat", ["hf_num_items"], "flat"),
    loops("hf_num_items_accum", ["hf_num_items"], grad_accum=4),
    loops("hf_num_items_accum_noisy", ["hf_num_items"], "noisy", grad_accum=4),
    loops(
        "hf_full_accum",
        ["hf_num_items", "hf_log_every_2", "hf_eval_every_3", "lightning_ckpt_every_4"],
        grad_accum=2,
        steps=9,
    ),
    loops(
        "hf_full_accum_flat",
        ["hf_num_items", "hf_log_every_2", "hf_eval_every_3"],
        "flat",
        grad_accum=2,
        steps=9,
    ),
    loops("hf_tokens_seen", ["hf_tokens_seen"]),
    loops("hf_tokens_seen_accum", ["hf_tokens_seen"], grad_accum=3),
    loops("hf_tokens_seen_accum_flat", ["hf_tokens_seen", "hf_log_every_2"], "flat", grad_accum=3),
    loops("hf_log_eval_noisy", ["hf_log_every_2", "hf_eval_every_3"], "noisy", steps=9),
    # Megatron-LM's per-micro-batch loss all-reduce
    loops("mlm_loss_per_micro", ["mlm_loss_per_micro"], grad_accum=4),
    loops("mlm_loss_per_micro_flat", ["mlm_loss_per_micro"], "flat", grad_accum=4),
    loops("mlm_loss_per_micro_1", ["mlm_loss_per_micro"]),
    loops("mlm_loss_per_micro_1_flat", ["mlm_loss_per_micro"], "flat"),
    # Lightning checkpoints, data loader stalls, slow first Steps, short and killed runs
    loops("lightning_ckpt", ["lightning_ckpt_every_4"], steps=8),
    loops("stall_every_3", ["stall_every_3", "hf_log_every_2"], steps=9),
    loops("stall_mid_accum", ["stall_mid"], grad_accum=3),
    loops("slow_first_3", ["hf_num_items"], warmup_steps=3, steps=3),
    loops("three_steps", [], warmup_steps=0, steps=3),
    loops("one_step", [], warmup_steps=0, steps=1),
    loops("one_step_num_items", ["hf_num_items"], warmup_steps=0, steps=1),
    loops("killed_mid_step", ["killed", "hf_num_items"], steps=4),
    loops("killed_mid_step_plain", ["killed"], steps=4, grad_accum=2),
    loops("hf_num_items_mbs8", ["hf_num_items", "mbs8"]),
    loops("hf_num_items_mbs8_accum", ["hf_num_items", "mbs8"], grad_accum=2),
    loops("hf_num_items_mbs8_noisy", ["hf_num_items", "mbs8"], "noisy"),
    loops("hf_tokens_seen_mbs8", ["hf_tokens_seen", "mbs8"]),
    loops("hf_full_mbs8", ["hf_num_items", "mbs8", "hf_log_every_2", "hf_eval_every_3"], steps=9),
    loops("mlm_loss_per_micro_mbs8", ["mlm_loss_per_micro", "mbs8"], grad_accum=4),
    loops("mlm_loss_per_micro_1_mbs8", ["mlm_loss_per_micro", "mbs8"]),
    sharded("fsdp1_single", ["fsdp1_single"]),
    sharded("fsdp1_single_mbs8", ["fsdp1_single", "mbs8"]),
    sharded("fsdp1_single_flat", ["fsdp1_single"], "flat"),
    sharded("fsdp1_single_noclip", ["fsdp1_single", "no_clip"]),
    sharded("fsdp1_single_noisy", ["fsdp1_single", "mbs8"], "noisy"),
    sharded("fsdp1_single_log", ["fsdp1_single", "log_loss", "mbs8"]),
    sharded("fsdp1_per_layer", ["per_layer"]),
    sharded("fsdp1_per_layer_flat", ["per_layer"], "flat"),
    loops("verl_max_micro", ["verl_max_micro"]),
    loops("verl_max_micro_mbs8", ["verl_max_micro", "mbs8"]),
    loops("verl_max_micro_dyn", ["verl_max_micro"], grad_accum=3, dynamic_accum=True),
    loops("verl_max_micro_dyn_noisy", ["verl_max_micro"], "noisy", grad_accum=3, dynamic_accum=True),
    loops("verl_max_micro_flat", ["verl_max_micro"], "flat", grad_accum=2),
    sharded("fsdp1_verl_max_micro", ["fsdp1_single", "verl_max_micro"]),
    sharded("fsdp1_verl_max_micro_mbs8", ["fsdp1_single", "verl_max_micro", "mbs8"]),
    sharded("fsdp1_per_layer_verl", ["per_layer", "verl_max_micro", "mbs8"]),
    loops("one_bucket_no_setup_flat", ["no_setup", "no_first_bucket"], "flat", model_params=20_000_000),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--names", choices=("on", "off", "both"), default="both")
    parser.add_argument("--keep", help="keep the logs under this directory")
    args = parser.parse_args()
    namings = {"on": (True,), "off": (False,), "both": (True, False)}[args.names]
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        for seed in range(args.seeds):
            for names in namings:
                if args.keep:
                    home = Path(args.keep) / f"{case.name}-s{seed}-{'names' if names else 'null'}"
                    home.mkdir(parents=True, exist_ok=True)
                    ctx = None
                else:
                    ctx = tempfile.TemporaryDirectory()
                    home = Path(ctx.name)
                try:
                    truths = simulate_case(case, str(PLUGIN), home, names, seed=seed)
                    for t in truths:  # a Step killed before its first op has none to score
                        t.records["step"] = [
                            st for st in t.records["step"] if st["first_op"] is not None
                        ]
                    logs = home / "inspector_logs"
                    off = score(truths, recover_steps(logs))
                    live = score(truths, replay_live(logs))
                finally:
                    if ctx is not None:
                        ctx.cleanup()
                out = {
                    "case": case.name,
                    "seed": seed,
                    "names": names,
                    "timing": case.config.get("timing", "modeled"),
                    "offline": [off.exact_steps, off.true_steps, off.wrong, off.wrong_confident],
                    "live": [live.exact_steps, live.true_steps, live.wrong, live.wrong_confident],
                }
                print(json.dumps(out), flush=True)
                for tag, s in (("offline", off), ("live", live)):
                    for w in s.first_wrong[:3]:
                        print(f"   {tag}: {w}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
