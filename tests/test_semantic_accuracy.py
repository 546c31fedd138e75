"""Step recovery against ground truth: simulated training (real plugin, real logs) of every
workload family the engine ships a template for, with gradient accumulation, jittered timings
(the simulator's), extra ops inside Steps, warm-up Steps that differ (DDP's construction-time
buckets) and router-sized all-to-alls (MoE). The engine reads only the inspector_logs; the
simulator's ground truth says where each Step began and ended. Every Step must be found, each
boundary on the true op. Precision, recall and boundary error are printed per workload."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from profiler_builds import builds

from comminsight.semantic.offline import recover_steps
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.truth import RankTruth, read_ground_truth

from conftest import REPORT_LINES

ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"),)


@dataclass(frozen=True)
class Workload:
    name: str
    template: str
    config: dict


WORKLOADS = [
    Workload("ddp", "ddp", dict(workload="ddp", ranks=4, steps=8, extra_ops_every=3)),
    Workload("ddp-grad-accum", "ddp", dict(workload="ddp", ranks=4, steps=6, grad_accum=3)),
    Workload(
        "fsdp-grad-accum-extra",
        "fsdp",
        dict(workload="fsdp", ranks=4, steps=8, layers=6, grad_accum=2, extra_ops_every=2),
    ),
    Workload("fsdp", "fsdp", dict(workload="fsdp", ranks=4, steps=6, layers=12, warmup_steps=2)),
    Workload(
        "tp-pp-dp",
        "tp_pp_dp",
        dict(workload="tp-pp-dp", ranks=8, steps=6, grad_accum=2, extra_ops_every=2),
    ),
    Workload("moe", "moe", dict(workload="moe", ranks=4, steps=6, layers=4, extra_ops_every=4)),
]


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


def score(truths: list[RankTruth], result) -> dict:
    true_steps = predicted = matched = 0
    boundary_errors: list[int] = []
    for gpu in result.gpus:
        truth = truths[gpu.gpu.global_rank]
        ids = op_identity(truth)
        index_of = {v: k for k, v in ids.items()}
        steps = truth.records["step"]
        # (the warm-up flag is the template's tolerance, not the script's: not compared)
        expected = [(ids[s["first_op"]], ids[s["last_op"]]) for s in steps]
        got = [
            (
                (s.first_op.comm_id, s.first_op.func, s.first_op.seq),
                (s.last_op.comm_id, s.last_op.func, s.last_op.seq),
            )
            for s in gpu.summaries
        ]
        true_steps += len(expected)
        predicted += len(got)
        matched += len(set(expected) & set(got))
        for (tf, _), (gf, _) in zip(expected, got, strict=False):
            boundary_errors.append(abs(index_of.get(gf, -(10**9)) - index_of[tf]))
    return {
        "precision": matched / predicted if predicted else 0.0,
        "recall": matched / true_steps if true_steps else 0.0,
        "max_boundary_error_ops": max(boundary_errors, default=0),
        "steps": true_steps,
        "found": predicted,
    }


@pytest.mark.parametrize("workload", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_every_step_is_found_on_its_true_ops(tmp_path, workload):
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        time_scale=0.02,
        env=ENV,
        **workload.config,
    )
    sim = run_simulation(config)
    assert not sim.errors, sim.errors
    truths = read_ground_truth(sim.run_dir)
    result = recover_steps(tmp_path / "inspector_logs")
    assert result.problems == []
    stats = score(truths, result)
    REPORT_LINES.append(
        f"semantic accuracy {workload.name}: precision {stats['precision']:.3f} recall "
        f"{stats['recall']:.3f} max boundary error {stats['max_boundary_error_ops']} ops "
        f"({stats['found']} of {stats['steps']} steps)"
    )
    assert {g.method for g in result.gpus} == {workload.template}
    assert stats["precision"] == stats["recall"] == 1.0, stats
    assert stats["max_boundary_error_ops"] == 0
    for gpu in result.gpus:
        truth = truths[gpu.gpu.global_rank]
        assert [s.step_index for s in gpu.summaries] == list(range(len(truth.records["step"])))
        ops = [op for op in truth.ops if op["completed"]]
        assert sum(s.op_count for s in gpu.summaries) == sum(
            1 for op in ops if op["step"] is not None
        )
        assert sum(s.total_bytes for s in gpu.summaries) == sum(
            op["bytes"] for op in ops if op["step"] is not None
        )


def test_without_a_template_the_period_finds_the_steady_steps(tmp_path):
    from comminsight.semantic.templates import TemplateSet

    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        time_scale=0.02,
        env=ENV,
        workload="fsdp",
        ranks=2,
        steps=6,
        layers=6,
    )
    sim = run_simulation(config)
    assert not sim.errors
    truths = read_ground_truth(sim.run_dir)
    result = recover_steps(tmp_path / "inspector_logs", templates=TemplateSet([], []))
    for gpu in result.gpus:
        assert gpu.method == "period"
        ids = op_identity(truths[gpu.gpu.global_rank])
        steady = [
            (ids[s["first_op"]], ids[s["last_op"]])
            for s in truths[gpu.gpu.global_rank].records["step"]
            if not s["warmup"]
        ]
        got = [
            (
                (s.first_op.comm_id, s.first_op.func, s.first_op.seq),
                (s.last_op.comm_id, s.last_op.func, s.last_op.seq),
            )
            for s in gpu.summaries
        ]
        assert set(steady) <= set(got), (steady, got)
        assert all(s.recovery.method.value == "period" for s in gpu.summaries)
        per_step = 6 + 6 * 2  # an all-gather per layer forward, all-gather + reduce-scatter back
        assert all(s.recovery.period_ops == per_step for s in gpu.summaries)
