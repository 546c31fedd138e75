"""The Semantic Engine on logs of real training: PyTorch 2.11 DDP and FSDP2 on 2xH200 with
NCCL 2.28.9 and the CommInsight plugin (bench/gpu/run_steps.sh, 2026-11-29), with the jobs' own
optimizer-step markers as ground truth. Every Step must be found, between its markers."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "gpu"


@pytest.mark.parametrize("job", ["ddp", "fsdp"])
def test_every_real_step_is_found_between_its_markers(tmp_path, job):
    with tarfile.open(DATA / f"{job}_h200x2.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu" / "steps_report.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    ranks = [line for line in lines if line["metric"].startswith(f"{job}_rank")]
    assert len(ranks) == 2, run.stdout + run.stderr
    for rank in ranks:
        assert rank["steps_found"] == rank["steps_run"] == 30, rank
        assert rank["inside_marker_interval"] == 30, rank
        assert rank["method"] == "job", rank  # cut job-wide
    assert run.returncode == 0, run.stdout


def test_tensor_and_data_parallel_steps_end_after_the_gradient_all_reduces(tmp_path):
    """A 2 x 2 DeviceMesh job (tp and dp, 4 micro-batches per Step; bench/gpu/run_e2e.sh on
    2xH200, 2026-11-30) with Inject's optimizer-step markers: every rank's 60 Steps are found,
    each issued between its step's markers, by the names Inject gave the mesh's groups."""
    from comminsight.semantic.log_input import read_gpu_logs
    from comminsight.semantic.offline import recover_steps

    with tarfile.open(DATA / "tpdp4_h200x2.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    logs = tmp_path / "tpdp4" / "inspector_logs"
    markers: dict[int, list[int]] = {}
    for path in (tmp_path / "tpdp4" / "metadata" / "inject").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            m = json.loads(line)
            if m["kind"] == "step":
                markers.setdefault(m["pid"], []).append(m["mono_ns"])
    issued = {
        log.stream: {op.ring_seq: op.issue_ns for op in log.ops()} for log in read_gpu_logs(logs)[0]
    }
    result = recover_steps(logs)
    assert result.problems == [] and len(result.gpus) == 4
    for gpu in result.gpus:
        times = sorted(markers[gpu.gpu.pid])
        assert gpu.method == "job"  # cut job-wide; the tp_dp template names the roles
        assert {s.recovery.template_name for s in gpu.summaries} == {"tp_dp"}
        assert len(gpu.summaries) == len(times) == 60
        ops = issued[gpu.stream]
        for i, s in enumerate(gpu.summaries):
            first, last = ops[s.first_op.ring_seq], ops[s.last_op.ring_seq]
            assert i == 0 or times[i - 1] < first, (gpu.gpu.global_rank, i)
            assert last < times[i], (gpu.gpu.global_rank, i)
            assert s.op_count == 70  # 4 x 16 tensor-parallel, then 6 gradient all-reduces
