"""The master's job-wide series in /metrics, beside its own node's (metrics.NodeMetrics):
every node's metric totals (agent-master-slave NodeMetricTotals) under a `node` label, each
communicator's ops summed over the nodes it spans, and the state of every node's link.

Label sets stay bounded: per node, one series per op function, drop reason and hang verdict
(tens); per communicator, one per op function, for at most MAX_COMM_LABELS communicators of
the job (the rest summed under comm="other"), under the `job_id` its processes gave, so two
jobs' communicators of one name stay apart; never a pid, rank or sequence number. Refused
nodes that never registered carry no series of their own (only the count by state), so
strangers with wrong tokens cannot grow the exposition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from comminsight.agent.core.metric_family import metric_family
from comminsight.agent.master.job_view import NodeRecord, counted_sources
from comminsight_gen import metrics_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api

MAX_COMM_LABELS = 1024
OTHER = "other"


@dataclass
class _Sums:
    ops: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, row: pb.CommOpTotals) -> None:
        self.ops += row.ops_total
        self.bytes += row.bytes_total
        self.seconds += row.latency_seconds_sum


def comm_label(comm_id: int, name: str) -> str:
    """As the node's own metrics label it; comm_id 0 is what nodes folded past their bound."""
    if comm_id == 0:
        return OTHER
    return name or f"{comm_id:016x}"


class JobMetrics:
    """A prometheus_client collector over the master's NodeRecords. `local_totals` gives the
    master's own node's totals at scrape time; `hang_events` the hang events the master
    received from a node (master.store, which survives restarts)."""

    def __init__(
        self,
        nodes: dict[str, NodeRecord],
        local_totals: Callable[[], pb.NodeMetricTotals],
        hang_events: Callable[[str], int],
        now_mono_ns: Callable[[], int],
    ) -> None:
        self.nodes = nodes
        self.local_totals = local_totals
        self.hang_events = hang_events
        self.now_mono_ns = now_mono_ns

    def _totals(self) -> Iterable[tuple[str, pb.NodeMetricTotals]]:
        # a node counted once: one that reports through a relay now is in the relay's totals
        counted = {n.name for n in counted_sources(self.nodes.values(), self.now_mono_ns())[0]}
        for name in sorted(self.nodes):
            node = self.nodes[name]
            if name not in counted:
                continue
            totals = self.local_totals() if node.local else node.metric_totals
            if totals is not None:
                yield name, totals

    def collect(self) -> Iterable:
        ops = metric_family(metrics_v1.JOB_OPS_TOTAL)
        nbytes = metric_family(metrics_v1.JOB_OP_BYTES_TOTAL)
        seconds = metric_family(metrics_v1.JOB_OP_SECONDS_TOTAL)
        drops = metric_family(metrics_v1.JOB_PROFILER_DROPS_TOTAL)
        lost = metric_family(metrics_v1.JOB_RECORDS_LOST_TOTAL)
        hangs = metric_family(metrics_v1.JOB_NODE_HANGS_OPEN)
        comms: dict[tuple[str, int, str], dict[str, _Sums]] = {}
        for name, totals in self._totals():
            per_func: dict[str, _Sums] = {}
            for row in totals.comm_ops:
                per_func.setdefault(row.func, _Sums()).add(row)
                key = (row.job_id, row.comm_id, row.comm_name)
                comms.setdefault(key, {}).setdefault(row.func, _Sums()).add(row)
            for func, s in sorted(per_func.items()):
                ops.add_metric([name, func], s.ops)
                nbytes.add_metric([name, func], s.bytes)
                seconds.add_metric([name, func], s.seconds)
            for reason, value in sorted(totals.profiler_drops.items()):
                drops.add_metric([name, reason], value)
            lost.add_metric([name], totals.records_lost_total)
            for verdict, value in sorted(totals.hangs_open.items()):
                hangs.add_metric([name, verdict], value)
        yield from (ops, nbytes, seconds, drops, lost, hangs)
        yield from self._comm_families(comms)
        yield from self._link_families()

    def _comm_families(self, comms: dict[tuple[str, int, str], dict[str, _Sums]]) -> Iterable:
        ops = metric_family(metrics_v1.JOB_COMM_OPS_TOTAL)
        nbytes = metric_family(metrics_v1.JOB_COMM_OP_BYTES_TOTAL)
        # One communicator may come with its name (or job) from one node and without from
        # another (a node that saw no name yet): one label set per comm_id, with its name and
        # job when any node knows them.
        names: dict[int, str] = {}
        jobs: dict[int, str] = {}
        for job_id, comm_id, name in comms:
            if name:
                names.setdefault(comm_id, name)
            if job_id:
                jobs.setdefault(comm_id, job_id)
        labelled: dict[tuple[str, str], dict[str, _Sums]] = {}
        kept = sorted({c for _, c, _ in comms if c})[:MAX_COMM_LABELS]
        kept_set = set(kept)
        for (_, comm_id, _), per_func in comms.items():
            label = comm_label(comm_id, names.get(comm_id, "")) if comm_id in kept_set else OTHER
            target = labelled.setdefault((jobs.get(comm_id, ""), label), {})
            for func, s in per_func.items():
                t = target.setdefault(func, _Sums())
                t.ops, t.bytes, t.seconds = t.ops + s.ops, t.bytes + s.bytes, t.seconds + s.seconds
        for (job_id, label), per_func in sorted(labelled.items()):
            for func, s in sorted(per_func.items()):
                ops.add_metric([job_id, label, func], s.ops)
                nbytes.add_metric([job_id, label, func], s.bytes)
        yield from (ops, nbytes)

    def _link_families(self) -> Iterable:
        states = metric_family(metrics_v1.JOB_NODES)
        counts = dict.fromkeys((s.value for s in api.NodeState), 0)
        for node in self.nodes.values():
            counts[node.state.value] += 1
        for state, count in sorted(counts.items()):
            states.add_metric([state], count)
        yield states
        age = metric_family(metrics_v1.JOB_NODE_LAST_SEEN_AGE_SECONDS)
        events = metric_family(metrics_v1.JOB_HANG_EVENTS_TOTAL)
        dropped = metric_family(metrics_v1.JOB_OUTBOX_EVENTS_DROPPED_TOTAL)
        now = self.now_mono_ns()
        for name in sorted(self.nodes):
            node = self.nodes[name]
            if node.identity is None and not node.local:  # never registered: no own series
                continue
            if node.last_seen_mono_ns is not None:
                age.add_metric([name], max(0, now - node.last_seen_mono_ns) / 1e9)
            if not node.local:
                events.add_metric([name], self.hang_events(name))
                dropped.add_metric([name], node.counters.outbox_events_dropped_total)
        yield from (age, events, dropped)
