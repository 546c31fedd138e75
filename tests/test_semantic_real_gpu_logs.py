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

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "gpu"


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
        assert rank["method"] == job, rank
    assert run.returncode == 0, run.stdout
