"""The Semantic Engine reads NVIDIA NCCL Inspector's own logs: op lines without CommInsight's
`ci` part, no issue times, no monotonic clock, "All2All" spelling, "nan" bandwidths. The
inputs are real plugin logs of simulated runs with everything NVIDIA does not write removed,
and with the times NVIDIA would write: an op's only time is when a dump thread wrote its line.
Those dumps are simulated on a clock of their own, so what the engine reads is the same on an
idle machine and a loaded one (the plugin's write times are when its writer thread happened
to wake)."""

from __future__ import annotations

import json

import pytest
from nvidia_logs import as_nvidia
from profiler_builds import builds

from comminsight.semantic.offline import recover_steps
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.step_accuracy import op_identity
from comminsight.sim.truth import read_ground_truth

# ops a simulated dump writes: dumps a few Steps apart, some beating with the Steps (one
# begins at the same op every few Steps, which once merged FSDP's Steps 1-5 into one), and
# dumps inside the Steps
LINES_PER_DUMP = (16, 48, 64, 90)


@pytest.mark.parametrize(
    "workload",
    [
        dict(workload="ddp", ranks=2, steps=6),
        dict(workload="fsdp", ranks=2, steps=6, layers=6, grad_accum=2),
        dict(workload="moe", ranks=2, steps=6, layers=4),
    ],
    ids=["ddp", "fsdp", "moe"],
)
def test_nvidia_inspector_logs_give_the_same_steps(tmp_path, workload):
    home = tmp_path / "home"
    sim = run_simulation(
        SimConfig(
            plugin=str(builds()["plain"].path),
            home=str(home),
            time_scale=0.3,  # the run's own times do not reach the NVIDIA logs
            env=(
                ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
                ("COMMINSIGHT_PROFILER_LOG_FORMAT", "inspector"),  # what as_nvidia rewrites
            ),
            **workload,
        )
    )
    assert not sim.errors
    truths = read_ground_truth(sim.run_dir)
    for lines_per_dump in LINES_PER_DUMP:
        nvidia = tmp_path / f"nvidia-{lines_per_dump}"
        as_nvidia(home / "inspector_logs", nvidia, lines_per_dump)
        _assert_true_steps(recover_steps(nvidia), truths, f"{lines_per_dump} lines a dump")


def _assert_true_steps(result, truths, dumps: str) -> None:
    assert result.problems == []
    assert sorted(g.gpu.global_rank for g in result.gpus) == [0, 1]
    for gpu in result.gpus:
        truth = truths[gpu.gpu.global_rank]
        ids = op_identity(truth)
        expected = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.records["step"]]
        got = [
            (
                (s.first_op.comm_id, s.first_op.func, s.first_op.seq),
                (s.last_op.comm_id, s.last_op.func, s.last_op.seq),
            )
            for s in gpu.summaries
        ]
        assert got == expected, dumps
        assert all("start_mono_ns" not in json.loads(_json(s)) for s in gpu.summaries)
        assert gpu.gpu.pid == truth.run["pid"]


def _json(summary) -> str:
    import msgspec

    return msgspec.json.encode(summary).decode()


def test_a_file_that_is_neither_is_named_and_skipped(tmp_path):
    (tmp_path / "notes.log").write_text("hello\n")
    result = recover_steps(tmp_path)
    assert result.gpus == []
    assert result.problems == [
        f"{tmp_path / 'notes.log'}: neither an inspector_logs segment nor an NVIDIA Inspector "
        "log; skipped"
    ]
