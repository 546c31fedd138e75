"""/metrics content: op counts and bytes equal what the simulation completed; the exposition
parses and passes `promtool check metrics`."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_agent_producers import hold_agent_lock, run_sim

from comminsight.agent.metrics import NodeMetrics, update_from_producers
from comminsight.agent.producers import ProducerSet


def scrape(tmp_path):
    lock = hold_agent_lock(tmp_path)
    truths = run_sim(tmp_path)
    producers = ProducerSet(tmp_path)
    metrics = NodeMetrics()
    batches = producers.poll(time.monotonic_ns())
    update_from_producers(metrics, producers, batches, time.monotonic_ns())
    lock.close()
    return truths, metrics.render().decode()


def test_op_counts_and_bytes_equal_the_simulation(tmp_path):
    truths, text = scrape(tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    ops = families["comminsight_ops"]
    total_ops = sum(s.value for s in ops.samples if s.name == "comminsight_ops_total")
    completed = [op for t in truths for op in t.ops if op["completed"]]
    assert total_ops == len(completed)
    total_bytes = sum(
        s.value
        for s in families["comminsight_op_bytes"].samples
        if s.name == "comminsight_op_bytes_total"
    )
    assert total_bytes == sum(op["bytes"] for op in completed)
    op_types = {s.labels["op_type"] for s in ops.samples}
    assert op_types == {op["func"] for op in completed}
    comms = {s.labels["comm"] for s in ops.samples}
    assert len(comms) == len({op["comm_id"] for op in completed})  # bounded: one per communicator
    latency_count = sum(
        s.value
        for s in families["comminsight_op_latency_seconds"].samples
        if s.name == "comminsight_op_latency_seconds_count"
    )
    assert latency_count == len(completed)


def test_exposition_passes_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is required (Debian's prometheus package: scripts/install-debian-packages.sh)"
        )
    _, text = scrape(tmp_path)
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
