"""The metric totals of every node below a relay, summed into one NodeMetricTotals: what the
relay passes up in place of one message per node, so that the master's job-wide /metrics
carries a series per relay and communicator, not per node.

Rows sum by (communicator, function, job); past the message's bound (MAX_COMM_OP_ROWS) the
remaining communicators are summed per function into comm_id 0, as a node's own are.
"""

from __future__ import annotations

from collections.abc import Iterable

from comminsight.agent.metrics.totals import FOLD_ROOM, FOLDED_COMM, MAX_COMM_OP_ROWS
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb


def summed_totals(parts: Iterable[pb.NodeMetricTotals]) -> pb.NodeMetricTotals:
    rows: dict[tuple[int, str, str], pb.CommOpTotals] = {}
    out = pb.NodeMetricTotals()
    for part in parts:
        for r in part.comm_ops:
            key = (r.comm_id, r.func, r.job_id)
            row = rows.get(key)
            if row is None:
                row = rows[key] = pb.CommOpTotals(
                    comm_id=r.comm_id, comm_name=r.comm_name, func=r.func, job_id=r.job_id
                )
            row.ops_total += r.ops_total
            row.bytes_total += r.bytes_total
            row.latency_seconds_sum += r.latency_seconds_sum
            if r.comm_name and not row.comm_name:
                row.comm_name = r.comm_name
        for reason, count in part.profiler_drops.items():
            out.profiler_drops[reason] += count
        for verdict, count in part.hangs_open.items():
            out.hangs_open[verdict] += count
        out.records_lost_total += part.records_lost_total
        out.comms_folded += part.comms_folded
    comms = sorted({key[0] for key in rows if key[0] != FOLDED_COMM})
    kept: set[int] = set()
    room = MAX_COMM_OP_ROWS - FOLD_ROOM
    used = 0
    per_comm: dict[int, int] = {}
    for key in rows:
        per_comm[key[0]] = per_comm.get(key[0], 0) + 1
    for comm_id in comms:  # by comm id: which ones are kept does not flap
        if used + per_comm[comm_id] <= room:
            kept.add(comm_id)
            used += per_comm[comm_id]
        else:
            out.comms_folded += 1
    folded: dict[str, pb.CommOpTotals] = {}
    for key in sorted(rows):
        row = rows[key]
        if key[0] in kept:
            out.comm_ops.append(row)
            continue
        f = folded.setdefault(row.func, pb.CommOpTotals(comm_id=FOLDED_COMM, func=row.func))
        f.ops_total += row.ops_total
        f.bytes_total += row.bytes_total
        f.latency_seconds_sum += row.latency_seconds_sum
    out.comm_ops.extend(folded[f] for f in sorted(folded))
    return out
