"""/metrics content: op counts and bytes equal what the simulation completed; the exposition
parses and passes `promtool check metrics`."""

from __future__ import annotations

import bisect
import shutil
import subprocess
import time
from collections import Counter

import numpy as np
import pytest
from agent_home import hold_agent_lock, run_sim
from prometheus_client.parser import text_string_to_metric_families

from comminsight.agent.metrics.node import (
    BUSBW_BUCKETS_GBS,
    LATENCY_BUCKETS_S,
    NodeMetrics,
    size_bucket,
    update_from_producers,
)
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.process_labels import NO_PROCESS
from comminsight.slot_timing import bus_bandwidth_gbs, durations_s
from comminsight_gen.abi import shm_v1


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """One simulated job's /metrics exposition: the tests only read it, so they share the run."""
    home = tmp_path_factory.mktemp("metrics-home")
    lock = hold_agent_lock(home)
    truths = run_sim(home)
    producers = ProducerSet(home)
    metrics = NodeMetrics()
    batches = producers.poll(time.monotonic_ns())
    update_from_producers(metrics, producers, batches, time.monotonic_ns())
    lock.close()
    return truths, metrics.render().decode()


def test_op_counts_and_bytes_equal_the_simulation(scraped):
    truths, text = scraped
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


def test_exposition_passes_promtool(scraped):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is required (Debian's prometheus package: scripts/install-debian-packages.sh)"
        )
    _, text = scraped
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def random_slots(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros(n, dtype=shm_v1.OP_SLOT_DTYPE)
    r["kind"] = rng.choice([1, 2, 3, 4], n, p=[0.7, 0.2, 0.05, 0.05])
    r["comm_id"] = rng.choice([5, 2**63 + 7, 99], n)
    r["func"] = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 200], n)
    r["bytes"] = rng.integers(0, 2**30, n)
    r["nranks"] = rng.integers(1, 16, n)
    r["timing_source"] = rng.integers(0, 4, n)
    r["host_start_mono_ns"] = rng.integers(0, 10**9, n)
    r["complete_mono_ns"] = r["host_start_mono_ns"] + rng.integers(0, 10**9, n)
    r["gpu_start_ticks"] = rng.integers(0, 10**9, n)
    r["gpu_end_ticks"] = r["gpu_start_ticks"] + rng.integers(0, 10**8, n)
    return r


def test_batched_grouping_equals_a_record_by_record_fold():
    """add_records groups with bincounts; fold the same records one by one, plainly, and
    every series (counts, bytes, latency and bus-bandwidth histograms) must agree."""
    records = random_slots(5000)
    metrics = NodeMetrics()
    for chunk in np.array_split(records, 3):
        metrics.add_records(chunk)
    expected: dict = {}
    for rec in records:
        if rec["kind"] not in (shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P):
            continue
        one = rec.reshape(1)
        seconds = float(durations_s(one)[0])
        busbw = float(bus_bandwidth_gbs(one, np.array([seconds]))[0])
        func = {int(k): v for k, v in shm_v1.FUNC_LABELS.items()}.get(int(rec["func"]), "Unknown")
        key = (NO_PROCESS, int(rec["comm_id"]), func)
        e = expected.setdefault(key, {"ops": 0, "bytes": 0, "lat": Counter(), "bw": Counter()})
        e["ops"] += 1
        e["bytes"] += int(rec["bytes"])
        e["lat"][bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        size = int(size_bucket(one["bytes"])[0])
        e["bw"][(size, bisect.bisect_left(BUSBW_BUCKETS_GBS, busbw))] += 1
    assert set(metrics.series) == set(expected)
    for key, e in expected.items():
        s = metrics.series[key]
        assert (s.ops, s.bytes) == (e["ops"], e["bytes"]), key
        assert dict(enumerate(s.latency.tolist())) == {
            i: e["lat"].get(i, 0) for i in range(len(s.latency))
        }
        got_bw = {(i, j): int(c) for (i, j), c in np.ndenumerate(s.busbw) if c}
        assert got_bw == dict(e["bw"]), key
