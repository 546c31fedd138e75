"""comminsight_step_duration_seconds: each GPU's Steps as a histogram under its process's
labels (metrics level rank), or the node's GPUs of a job together (level job, the default),
taken from the engine's thread once per pass, expiring with the process's series."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from comminsight.agent.metrics.level import RANK
from comminsight.agent.metrics.node import NodeMetrics
from comminsight.agent.state.process_labels import ProcessLabels
from comminsight.agent.steps.step_durations import StepDurations

S = 1_000_000_000
RANK0 = ProcessLabels(
    job_id="job-a",
    host="node1",
    rank="0",
    local_rank="0",
    cuda_device="0",
    uuid="GPU-00000000-0000-0000-0000-000000000001",
)
RANK1 = ProcessLabels(job_id="job-a", host="node1", rank="1", local_rank="1", cuda_device="1")


def samples(metrics: NodeMetrics) -> dict[tuple, float]:
    text = metrics.render().decode()
    (family,) = [
        f
        for f in text_string_to_metric_families(text)
        if f.name == "comminsight_step_duration_seconds"
    ]
    return {
        (s.name.rsplit("_", 1)[-1], s.labels["rank"], s.labels.get("le")): s.value
        for s in family.samples
    }


def test_steps_are_taken_once_and_binned_by_duration():
    new = StepDurations()
    new.add(RANK0, [0.2, 0.3, 12.0])
    new.add(RANK1, [0.2])
    new.add(RANK1, [])
    metrics = NodeMetrics(level=RANK)
    metrics.add_steps(new.take(), now_mono_ns=1 * S)
    assert new.take() == {}  # taken: a second pass adds nothing again
    metrics.add_steps(new.take(), now_mono_ns=2 * S)
    got = samples(metrics)
    assert got[("count", "0", None)] == 3 and got[("sum", "0", None)] == pytest.approx(12.5)
    assert got[("bucket", "0", "0.25")] == 1
    assert got[("bucket", "0", "0.5")] == 2
    assert got[("bucket", "0", "10.0")] == 2
    assert got[("bucket", "0", "30.0")] == 3 and got[("bucket", "0", "+Inf")] == 3
    assert got[("count", "1", None)] == 1


def test_at_the_default_level_the_node_s_gpus_of_a_job_are_one_histogram():
    new = StepDurations()
    new.add(RANK0, [0.2, 0.3, 12.0])
    new.add(RANK1, [0.2])
    new.add(
        ProcessLabels(job_id="job-b", host="node1", rank="2", local_rank="2", cuda_device="2"),
        [1.0],
    )
    metrics = NodeMetrics()
    metrics.add_steps(new.take(), now_mono_ns=1 * S)
    text = metrics.render().decode()
    (family,) = [
        f
        for f in text_string_to_metric_families(text)
        if f.name == "comminsight_step_duration_seconds"
    ]
    got = {
        (s.name.rsplit("_", 1)[-1], s.labels["job_id"], s.labels.get("le")): s.value
        for s in family.samples
    }
    job = {"job_id", "step_id", "array_index", "host", "node", "namespace"}
    assert {frozenset(s.labels) - {"le"} for s in family.samples} == {frozenset(job)}
    assert got[("count", "job-a", None)] == 4
    assert got[("sum", "job-a", None)] == pytest.approx(12.7)
    assert got[("bucket", "job-a", "0.25")] == 2
    assert got[("count", "job-b", None)] == 1


def test_a_gpus_series_expires_with_its_process():
    metrics = NodeMetrics(expire_after_s=10)
    new = StepDurations()
    new.add(RANK0, [1.0])
    new.add(RANK1, [1.0])
    metrics.add_steps(new.take(), now_mono_ns=1 * S)
    running = {(RANK0, 7)}  # rank 0's communicator is live, rank 1's process ended
    metrics.expire(5 * S, running)
    assert set(metrics.steps) == {RANK0, RANK1}
    metrics.expire(12 * S, running)
    assert set(metrics.steps) == {RANK0}  # ended more than 10 s ago
    metrics.expire(100 * S, running)
    assert set(metrics.steps) == {RANK0}  # still running: kept however old its last Step


def test_the_exposition_passes_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (Debian's prometheus package)")
    new = StepDurations()
    new.add(RANK0, [0.2, 0.3])
    metrics = NodeMetrics()
    metrics.add_steps(new.take(), now_mono_ns=S)
    done = subprocess.run(
        [promtool, "check", "metrics"], input=metrics.render(), capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
