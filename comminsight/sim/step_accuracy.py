"""How right the Semantic Engine's Steps are: simulated training of the layouts LLM training
runs (real plugin, real logs), recovered offline from the logs alone, scored against the
simulator's ground truth.

A true Step is *exact* when, on every rank, the recovered Step with its index begins and
ends on the same ops as the true one. A recovered Step is *wrong* when it is not exactly a
true Step of its rank (other ops, or an index the truth does not have); wrong Steps must
not claim a confidence of 0.9 or more. The suite (`SUITE`) is what `make test` and `make
bench-accuracy` run, each case with commName NULL (PyTorch without Inject) and with Inject's
names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from comminsight.semantic.offline import OfflineResult, recover_steps
from comminsight.sim.accuracy_case import Case
from comminsight.sim.accuracy_variants import VARIANT_CASES
from comminsight.sim.config import SimConfig
from comminsight.sim.launcher import run_simulation
from comminsight.sim.truth import RankTruth, read_ground_truth
from comminsight_gen import home_v1_names as home_names

CONFIDENT = 0.9
ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"),)


BASE_SUITE: list[Case] = [
    # PyTorch DDP: evaluation barriers, accumulation (no_sync), a varying number of
    # micro-batches, fp16 steps whose update GradScaler skips
    Case("ddp", dict(workload="ddp", ranks=4, steps=8, extra_ops_every=3)),
    Case("ddp_accum", dict(workload="ddp", ranks=4, steps=6, grad_accum=3)),
    Case(
        "ddp_dynamic_accum_skipped",
        dict(
            workload="ddp", ranks=4, steps=6, grad_accum=3, dynamic_accum=True, skipped_updates=True
        ),
    ),
    # FSDP2 (one unit per layer), with accumulation and evaluation barriers
    Case("fsdp2", dict(workload="fsdp", ranks=4, steps=6, layers=12, warmup_steps=2)),
    Case(
        "fsdp2_accum_extra",
        dict(workload="fsdp", ranks=4, steps=8, layers=6, grad_accum=2, extra_ops_every=2),
    ),
    # DeepSpeed ZeRO with fp16 loss-scale overflow steps; ZeRO-3's first Step gathers every
    # module while it records its trace, the next checks the trace, later ones prefetch
    Case("zero1", dict(workload="zero", ranks=4, steps=8, zero_stage=1, layers=4)),
    Case("zero2", dict(workload="zero", ranks=4, steps=6, zero_stage=2, layers=4, grad_accum=2)),
    Case("zero3", dict(workload="zero", ranks=4, steps=6, zero_stage=3, layers=4)),
    # Megatron pipeline parallelism: 1F1B and interleaved, every stage
    Case("pp_1f1b_m4", dict(workload="pp", ranks=4, pp=4, tp=1, steps=4, grad_accum=4)),
    Case("pp_1f1b_m8", dict(workload="pp", ranks=8, pp=4, tp=1, steps=4, grad_accum=8)),
    Case(
        "pp_interleaved",
        dict(workload="pp", ranks=4, pp=4, tp=1, steps=4, grad_accum=8, virtual_pp=2, layers=16),
    ),
    # DTensor tensor parallelism x FSDP2 over a DeviceMesh, with accumulation; TP alone
    Case(
        "tp_dp_accum",
        dict(workload="tp-dp", ranks=4, tp=2, steps=5, grad_accum=2),
        time_scale=0.1,
    ),
    Case(
        "tp_only_accum",
        dict(workload="tp-dp", ranks=2, tp=2, steps=5, grad_accum=2),
        time_scale=0.3,
    ),
    # Megatron 3D (TP x PP x DP), distributed optimizer, groups created at first use
    Case("megatron_3d", dict(workload="megatron", ranks=8, pp=2, tp=2, steps=4, grad_accum=4)),
    Case(
        "tp_pp_dp_gpipe",
        dict(workload="tp-pp-dp", ranks=8, steps=6, grad_accum=2, extra_ops_every=2),
        # its warm-up Step is told from the start-up by idle time, which a loaded machine's
        # jitter hides now and then
        timing_told=True,
    ),
    # mixture of experts: router-sized all-to-alls, as a collective and as PyTorch's NCCL
    # backend issues all_to_all_single (grouped Send/Recv)
    Case("moe_alltoall", dict(workload="moe", ranks=4, steps=6, layers=4, extra_ops_every=4)),
    Case(
        "moe_grouped_p2p",
        dict(workload="moe", ranks=4, steps=6, layers=4, moe_alltoall="grouped-p2p"),
    ),
    # RL post-training: rollout (weight sync, generation: a data-dependent number of
    # per-token all-reduces) then PPO optimizer Steps, two per rollout; the run stops in
    # the middle of an iteration
    Case("rl", dict(workload="rl", ranks=4, steps=4)),
    # one process drives two GPUs (JAX, ncclCommInitAll): tensor x data parallel, each rank
    # on its own device and thread, the device known through the process's CUDA runtime
    Case(
        "single_process_multi_gpu",
        dict(
            workload="tp-dp",
            ranks=4,
            tp=2,
            steps=5,
            grad_accum=2,
            ranks_per_process=2,
            cuda_runtime="sim",
        ),
        time_scale=0.1,
    ),
]

# the frameworks' own variants of each family, built from their sources (accuracy_variants)
SUITE: list[Case] = BASE_SUITE + VARIANT_CASES


def op_identity(truth: RankTruth) -> dict[int, tuple]:
    """op_index -> (comm_id, func, seq) as the engine names ops: NCCL's seq for collectives,
    the communicator's P2P counter (Send and Recv together) for P2P."""
    p2p_counter: dict[str, int] = {}
    ids = {}
    for op in truth.ops:
        if op["func"] in ("Send", "Recv"):
            seq = p2p_counter.get(op["comm_id"], 0)
            p2p_counter[op["comm_id"]] = seq + 1
        else:
            seq = op["seq"]
        ids[op["op_index"]] = (op["comm_id"], op["func"], seq)
    return ids


@dataclass
class Score:
    true_steps: int = 0
    exact_steps: int = 0  # true Steps right on every rank
    wrong_confident: int = 0  # recovered Steps that are wrong at confidence >= CONFIDENT
    wrong: int = 0
    step_counts: dict[int, int] = field(default_factory=dict)  # rank -> Steps recovered
    first_wrong: list[str] = field(default_factory=list)

    @property
    def exact_fraction(self) -> float:
        return self.exact_steps / self.true_steps if self.true_steps else 1.0

    def add(self, other: Score) -> None:
        self.true_steps += other.true_steps
        self.exact_steps += other.exact_steps
        self.wrong_confident += other.wrong_confident
        self.wrong += other.wrong
        self.first_wrong += other.first_wrong[: max(0, 5 - len(self.first_wrong))]


def score(truths: list[RankTruth], result: OfflineResult) -> Score:
    s = Score()
    by_rank = {g.gpu.global_rank: g for g in result.gpus}
    right_everywhere: dict[int, bool] = {}
    for truth in truths:
        ids = op_identity(truth)
        expected = {
            k: (ids[st["first_op"]], ids[st["last_op"]])
            for k, st in enumerate(truth.records["step"])
        }
        for k in expected:
            right_everywhere.setdefault(k, True)
        gpu = by_rank.get(truth.rank)
        got = {}
        for summary in gpu.summaries if gpu is not None else []:
            got[summary.step_index] = (
                (summary.first_op.comm_id, summary.first_op.func, summary.first_op.seq),
                (summary.last_op.comm_id, summary.last_op.func, summary.last_op.seq),
            )
            if expected.get(summary.step_index) != got[summary.step_index]:
                s.wrong += 1
                if summary.recovery.confidence >= CONFIDENT:
                    s.wrong_confident += 1
                if len(s.first_wrong) < 5:
                    s.first_wrong.append(
                        f"rank {truth.rank} step {summary.step_index}: got "
                        f"{got[summary.step_index]}, true {expected.get(summary.step_index)} "
                        f"(confidence {summary.recovery.confidence})"
                    )
        for k, want in expected.items():
            if got.get(k) != want:
                right_everywhere[k] = False
        if expected:  # (a rollout engine's ranks take no Step: they count only if wrong)
            s.step_counts[truth.rank] = len(got)
    s.true_steps = len(right_everywhere)
    s.exact_steps = sum(right_everywhere.values())
    return s


def run_case(case: Case, plugin: str, home: Path, comm_names: bool, seed: int = 0) -> Score:
    """Simulate the case under `home`, recover its Steps from the logs, score them."""
    truths = simulate_case(case, plugin, home, comm_names, seed)
    return score(truths, recover_steps(home / home_names.INSPECTOR_LOGS))


def simulate_case(
    case: Case, plugin: str, home: Path, comm_names: bool, seed: int = 0
) -> list[RankTruth]:
    """Simulate the case under `home` (logs in home/inspector_logs); its ground truth."""
    config = SimConfig(
        plugin=plugin,
        home=str(home),
        time_scale=case.time_scale,
        env=ENV,
        comm_names=comm_names,
        seed=seed,
        **case.config,
    )
    sim = run_simulation(config)
    if sim.errors:
        raise RuntimeError(f"simulation of {case.name} failed: {sim.errors}")
    return read_ground_truth(sim.run_dir)
