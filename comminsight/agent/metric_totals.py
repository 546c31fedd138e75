"""A node's /metrics counters as one agent-master-slave `NodeMetricTotals` message.

A slave sends it with its state rows (slave_agent), the master keeps the latest one per node
(NodeRecord.metric_totals) and exposes the union under a `node` label (job_metrics). The
master's own node goes through the same function at scrape time.

The node's metrics (metrics.NodeMetrics) key their series by communicator *label* (its name,
or its id in hex while it has none); the message carries the id and the name apart, so that
the master can sum one communicator's ops over nodes by id. Rows are bounded
(MAX_COMM_OP_ROWS): past it, the remaining communicators are summed per function into
comm_id 0, so a node with thousands of communicators still sends a message of a few KiB.
"""

from __future__ import annotations

from comminsight.agent.metrics import NodeMetrics
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

MAX_COMM_OP_ROWS = 512  # the proto's documented bound
# room kept below the bound for the folded rows: one per op function (plus "Unknown")
FOLD_ROOM = len(shm_v1.FUNC_LABELS) + 1
FOLDED_COMM = 0


def _comm_of(label: str, ids_by_name: dict[str, int]) -> tuple[int, str]:
    """(comm_id, name) of a series label; labels come from comm_names or are the hex id."""
    if label in ids_by_name:
        return ids_by_name[label], label
    try:
        return int(label, 16), ""
    except ValueError:  # cannot happen for labels NodeMetrics made; kept, not guessed
        return FOLDED_COMM, label


def node_metric_totals(metrics: NodeMetrics) -> pb.NodeMetricTotals:
    ids_by_name: dict[str, int] = {}
    for comm_id, name in sorted(metrics.comm_names.items()):
        ids_by_name.setdefault(name, comm_id)
    by_comm: dict[tuple[int, str], list[pb.CommOpTotals]] = {}
    for (label, func), s in metrics.series.items():
        comm_id, name = _comm_of(label, ids_by_name)
        by_comm.setdefault((comm_id, name), []).append(
            pb.CommOpTotals(
                comm_id=comm_id,
                comm_name=name,
                func=func,
                ops_total=s.ops,
                bytes_total=s.bytes,
                latency_seconds_sum=s.latency_sum,
            )
        )
    out = pb.NodeMetricTotals(
        profiler_drops=metrics.profiler_counters,
        records_lost_total=metrics.records_lost,
        hangs_open={str(k): int(v) for k, v in metrics.open_hangs.items()},
    )
    folded: dict[str, pb.CommOpTotals] = {}
    for key in sorted(by_comm):  # by comm id: which ones are kept does not flap
        rows = by_comm[key]
        if len(out.comm_ops) + len(rows) <= MAX_COMM_OP_ROWS - FOLD_ROOM:
            out.comm_ops.extend(sorted(rows, key=lambda r: r.func))
            continue
        out.comms_folded += 1
        for r in rows:
            f = folded.setdefault(r.func, pb.CommOpTotals(comm_id=FOLDED_COMM, func=r.func))
            f.ops_total += r.ops_total
            f.bytes_total += r.bytes_total
            f.latency_seconds_sum += r.latency_seconds_sum
    out.comm_ops.extend(folded[f] for f in sorted(folded))
    return out
