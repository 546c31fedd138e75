"""A node's /metrics counters as one agent-master-slave `NodeMetricTotals` message.

A slave sends it with its state rows (slave.agent), the master keeps the latest one per node
(NodeRecord.metric_totals) and exposes the union under a `node` label (master.job_metrics). The
master's own node goes through the same function at scrape time.

The node's metrics (metrics.NodeMetrics) keep one series per process, communicator id and
function; the message sums them over the node's processes per (comm_id, func), with the
communicator's name and its job apart, so that the master can sum one communicator's ops over
nodes by id and keep two jobs' communicators of one name apart. Rows are bounded
(MAX_COMM_OP_ROWS): past it, the remaining communicators are summed per function into
comm_id 0, so a node with thousands of communicators still sends a message of a few KiB.
"""

from __future__ import annotations

from comminsight.agent.metrics.node import NodeMetrics
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

MAX_COMM_OP_ROWS = 512  # the proto's documented bound
# room kept below the bound for the folded rows: one per op function (plus "Unknown")
FOLD_ROOM = len(shm_v1.FUNC_LABELS) + 1
FOLDED_COMM = 0


def node_metric_totals(metrics: NodeMetrics) -> pb.NodeMetricTotals:
    by_comm: dict[int, dict[str, pb.CommOpTotals]] = {}
    for (process, comm_id, func), s in metrics.series.items():
        rows = by_comm.setdefault(comm_id, {})
        row = rows.get(func)
        if row is None:
            row = rows[func] = pb.CommOpTotals(
                comm_id=comm_id, comm_name=metrics.comm_names.get(comm_id, ""), func=func
            )
        row.ops_total += s.ops
        row.bytes_total += s.bytes
        row.latency_seconds_sum += s.latency_sum
        if process.job_id and not row.job_id:  # a communicator is one job's
            row.job_id = process.job_id
    out = pb.NodeMetricTotals(
        profiler_drops=metrics.profiler_counters,
        records_lost_total=metrics.records_lost,
        hangs_open={str(k): int(v) for k, v in metrics.open_hangs.items()},
    )
    folded: dict[str, pb.CommOpTotals] = {}
    for comm_id in sorted(by_comm):  # by comm id: which ones are kept does not flap
        rows = list(by_comm[comm_id].values())
        if len(out.comm_ops) + len(rows) <= MAX_COMM_OP_ROWS - FOLD_ROOM:
            out.comm_ops.extend(sorted(rows, key=lambda r: r.func))
            continue
        out.comms_folded += 1
        for r in rows:
            f = folded.setdefault(r.func, pb.CommOpTotals(comm_id=FOLDED_COMM, func=r.func))
            f.ops_total += r.ops_total
            f.bytes_total += r.bytes_total
            f.latency_seconds_sum += r.latency_seconds_sum
    # expired series (ended processes and communicators) stay in the node's totals, which
    # the master exposes as counters: without them its sums would fall when a series expires
    for func, s in metrics.expired.items():
        f = folded.setdefault(func, pb.CommOpTotals(comm_id=FOLDED_COMM, func=func))
        f.ops_total += s.ops
        f.bytes_total += s.bytes
        f.latency_seconds_sum += s.latency_sum
    out.comm_ops.extend(folded[f] for f in sorted(folded))
    return out
