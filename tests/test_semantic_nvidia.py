"""The Semantic Engine reads NVIDIA NCCL Inspector's own logs: op lines without CommInsight's
`ci` part, no issue times, no monotonic clock, "All2All" spelling, "nan" bandwidths. The
inputs are real plugin logs of simulated runs with everything NVIDIA does not write removed."""

from __future__ import annotations

import json

import pytest
from profiler_builds import builds
from test_semantic_accuracy import op_identity

from comminsight.semantic.offline import recover_steps
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.truth import read_ground_truth


def as_nvidia(src_dir, dst_dir) -> None:
    """One NVIDIA-style file per process, its op lines in the order they were written."""
    dst_dir.mkdir()
    by_process: dict[tuple, list[str]] = {}
    for segment in sorted(src_dir.glob("*.jsonl")):
        for line in segment.read_text().splitlines():
            record = json.loads(line)
            if "header" not in record:
                continue
            record.pop("ci")
            perf = record.get("coll_perf")
            if perf is not None and perf["coll"] == "AlltoAll":
                perf["coll"] = "All2All"
            if perf is not None and perf["coll_busbw_gbs"] == 0:
                perf["coll_busbw_gbs"] = "nan"  # as NVIDIA's writer does for 0/0
            if record["header"]["comm_name"] is None:
                record["header"]["comm_name"] = "unknown"
            meta = record["metadata"]
            by_process.setdefault((meta["hostname"], meta["pid"]), []).append(json.dumps(record))
    for (host, pid), lines in by_process.items():
        (dst_dir / f"nccl-inspector-{host}-pid{pid}.log").write_text("\n".join(lines) + "\n")


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
            # NVIDIA's logs have no issue times: an op's end is the time its line was dumped,
            # so the idle gaps that place Steps are written-out gaps, small beside a busy
            # machine's delays at short time scales: at 0.02 one CI run cut FSDP's
            # micro-batches as Steps, at 0.1 one fresh-clone run merged FSDP's Steps 1-5 into
            # one; 0.3 makes every modeled gap 15x the 0.02 one
            time_scale=0.3,
            env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
            **workload,
        )
    )
    assert not sim.errors
    truths = read_ground_truth(sim.run_dir)
    nvidia = tmp_path / "nvidia"
    as_nvidia(home / "inspector_logs", nvidia)
    result = recover_steps(nvidia)
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
        assert got == expected
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
