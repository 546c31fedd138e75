"""The bounds of the job-wide metrics: a node's NodeMetricTotals folds the communicators past
MAX_COMM_OP_ROWS into comm_id 0 without losing a count, and the master's exposition keeps at
most MAX_COMM_LABELS communicator labels, joining a communicator by id when only some nodes
know its name. (The live three-slave test checks the values against the slaves' own
/metrics.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from comminsight.agent.master import job_metrics
from comminsight.agent.master.job_metrics import JobMetrics
from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.metrics.node import NodeMetrics, _Series
from comminsight.agent.metrics.totals import MAX_COMM_OP_ROWS, node_metric_totals
from comminsight.agent.state.process_labels import NO_PROCESS
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api


def node_metrics(n_comms: int, funcs=("AllReduce", "Broadcast")) -> NodeMetrics:
    m = NodeMetrics()
    for c in range(1, n_comms + 1):
        if c % 2:
            m.comm_names[c] = f"pg:{c}"
        for f in funcs:
            m.series[(NO_PROCESS, c, f)] = _Series(ops=c, bytes=1000 * c, latency_sum=0.5)
    m.profiler_counters["fifo_events_dropped"] = 3
    m.open_hangs = {"rank_not_joined": 2}
    return m


def test_rows_past_the_bound_are_folded_into_comm_0_and_nothing_is_lost():
    metrics = node_metrics(1000)
    totals = node_metric_totals(metrics)
    assert len(totals.comm_ops) <= MAX_COMM_OP_ROWS
    assert totals.ByteSize() < 64 * 1024
    assert totals.comms_folded > 0
    folded = [r for r in totals.comm_ops if r.comm_id == 0]
    assert sorted(r.func for r in folded) == ["AllReduce", "Broadcast"]
    assert sum(r.ops_total for r in totals.comm_ops) == 2 * sum(range(1, 1001))
    assert sum(r.bytes_total for r in totals.comm_ops) == 2 * 1000 * sum(range(1, 1001))
    kept = {r.comm_id for r in totals.comm_ops if r.comm_id}
    assert len(kept) + totals.comms_folded == 1000 and kept == set(range(1, len(kept) + 1))
    named = {r.comm_id: r.comm_name for r in totals.comm_ops if r.comm_id}
    assert named[1] == "pg:1" and named[2] == ""  # comm 2 has no name: its id is the label
    assert dict(totals.profiler_drops)["fifo_events_dropped"] == 3
    assert dict(totals.hangs_open) == {"rank_not_joined": 2}


def exposition(nodes: dict[str, NodeRecord]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        JobMetrics(nodes, lambda: pb.NodeMetricTotals(), lambda _node: 0, lambda: 10**12)
    )
    return generate_latest(registry).decode()


def slave(name: str, totals: pb.NodeMetricTotals) -> NodeRecord:
    node = NodeRecord(name, api.AgentMode.slave, state=api.NodeState.connected)
    node.identity = pb.NodeIdentity(node_name=name)
    node.last_seen_mono_ns = 10**12
    node.metric_totals = totals
    return node


def comm_ops(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "comminsight_job_comm_ops_total":
                out[s.labels["comm"]] = out.get(s.labels["comm"], 0) + s.value
    return out


def test_a_communicator_is_joined_by_id_and_comm_labels_are_bounded(monkeypatch):
    monkeypatch.setattr(job_metrics, "MAX_COMM_LABELS", 3)
    a = pb.NodeMetricTotals(
        comm_ops=[
            pb.CommOpTotals(comm_id=7, comm_name="tp:0", func="AllReduce", ops_total=5),
            pb.CommOpTotals(comm_id=1, func="Send", ops_total=1),
            pb.CommOpTotals(comm_id=2, func="Send", ops_total=2),
        ]
    )
    b = pb.NodeMetricTotals(  # saw comm 7 before its name: the label is still the name
        comm_ops=[
            pb.CommOpTotals(comm_id=7, func="AllReduce", ops_total=6),
            pb.CommOpTotals(comm_id=9, func="Recv", ops_total=4),
            pb.CommOpTotals(comm_id=0, func="Recv", ops_total=8),  # b's own folded rows
        ]
    )
    nodes = {"a": slave("a", a), "b": slave("b", b)}
    nodes["stranger"] = NodeRecord("stranger", api.AgentMode.slave, state=api.NodeState.rejected)
    text = exposition(nodes)
    assert comm_ops(text) == {
        "0000000000000001": 1,
        "0000000000000002": 2,
        "tp:0": 11,
        "other": 12,  # comm 9 past the bound of 3, and b's folded rows
    }
    assert "stranger" not in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (Debian's prometheus package)")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
