"""How right the Semantic Engine's Steps are on the layouts LLM training runs.

Every case of the accuracy suite (comminsight.sim.step_accuracy: DDP, FSDP2, ZeRO 1-3,
pipeline 1F1B and interleaved, TP + DP, Megatron 3D, MoE, RL, ...) is simulated through the
real plugin with commName NULL and with Inject's names, for each --seeds seed (the
simulator's timing jitter and, where the workload draws them, overflow steps, router sizes,
micro-batch counts), and its Steps recovered offline from the logs alone; and again live: the
same logs replayed the way the Agent's engine meets the ops (small chunks, GPU after GPU,
through the node's live cut: comminsight.semantic.live_replay).

exact_fraction_<workload>: the fraction of true Steps whose first and last op are right on
every rank, over all runs of the workload. wrong_steps_at_confidence_ge_0.9: recovered
Steps, over the whole suite, that are not a true Step of their rank yet claim confidence
0.9 or more (must be 0). exact_fraction_live_<workload> and
wrong_steps_live_at_confidence_ge_0.9: the same of the live replay.

Prints JSON lines {"bench","metric","value","unit"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from comminsight.semantic.live_replay import replay_live
from comminsight.semantic.offline import recover_steps
from comminsight.sim.step_accuracy import SUITE, Score, score, simulate_case

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"


def line(metric: str, value, unit: str, **extra) -> None:
    print(
        json.dumps(
            {"bench": "step_accuracy", "metric": metric, "value": value, "unit": unit, **extra}
        ),
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds per case and naming")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    args = parser.parse_args()
    total, total_live = Score(), Score()
    for case in SUITE:
        if args.only and case.name not in args.only:
            continue
        offline, live = Score(), Score()
        for seed in range(args.seeds):
            for names in (True, False):
                with tempfile.TemporaryDirectory() as tmp:
                    truths = simulate_case(case, str(PLUGIN), Path(tmp), names, seed=seed)
                    logs = Path(tmp) / "inspector_logs"
                    offline.add(score(truths, recover_steps(logs)))
                    live.add(score(truths, replay_live(logs)))
        total.add(offline)
        total_live.add(live)
        for name, got in ((case.name, offline), (f"live_{case.name}", live)):
            line(
                f"exact_fraction_{name}",
                round(got.exact_fraction, 4),
                "ratio",
                true_steps=got.true_steps,
                wrong_steps=got.wrong,
                runs=2 * args.seeds,
            )
            for wrong in got.first_wrong[:2]:
                print(f"  {name}: {wrong}", file=sys.stderr)
    line("wrong_steps_at_confidence_ge_0.9", total.wrong_confident, "count")
    line("exact_fraction_all", round(total.exact_fraction, 4), "ratio", true_steps=total.true_steps)
    line("wrong_steps_live_at_confidence_ge_0.9", total_live.wrong_confident, "count")
    line(
        "exact_fraction_live_all",
        round(total_live.exact_fraction, 4),
        "ratio",
        true_steps=total_live.true_steps,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
