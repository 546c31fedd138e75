"""Prometheus metrics of the node, computed from ingested op records in batches.

Records arrive by the hundred thousand per second, so nothing here is per-record Python: a
batch is grouped with numpy (by communicator and op type) and added to plain arrays; the
exposition is built at scrape time by a custom collector. Label sets are bounded: op type (a
few NCCL functions), communicator (its name, or its id when unnamed; one per communicator this
node has seen), message-size bucket (fixed); never a sequence number or a timestamp.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import generate_latest

from comminsight.agent import engine_metrics, input_metrics
from comminsight.shm_reader import op_records, record_text
from comminsight.slot_timing import bus_bandwidth_gbs, durations_s
from comminsight_gen.abi import shm_v1

LATENCY_BUCKETS_S = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)
BUSBW_BUCKETS_GBS = (1, 5, 10, 25, 50, 100, 200, 300, 400, 600, 900)
SIZE_BUCKETS = (
    (65536, "le_64KiB"),
    (1 << 20, "le_1MiB"),
    (16 << 20, "le_16MiB"),
    (256 << 20, "le_256MiB"),
    (None, "gt_256MiB"),
)
PROFILER_COUNTERS = (
    "records_dropped_busy",
    "events_dropped_pool",
    "comms_dropped",
    "events_unknown",
    "fifo_events_dropped",
    "log_records_lost",
    "log_records_dropped",
    "log_write_errors",
)

_FUNC_LABELS = {int(k): v for k, v in shm_v1.FUNC_LABELS.items()}
_FUNC_CODES = 256  # func is a u8 in the op slot


def size_bucket(nbytes: np.ndarray) -> np.ndarray:
    """Index into SIZE_BUCKETS for every message size."""
    edges = np.array([b for b, _ in SIZE_BUCKETS if b is not None], dtype=np.uint64)
    return np.searchsorted(edges, nbytes, side="left")


@dataclass
class _Series:
    """Everything kept for one (communicator, op type)."""

    ops: int = 0
    bytes: int = 0
    latency: np.ndarray = field(
        default_factory=lambda: np.zeros(len(LATENCY_BUCKETS_S) + 1, np.int64)
    )
    latency_sum: float = 0.0
    busbw: np.ndarray = field(
        default_factory=lambda: np.zeros((len(SIZE_BUCKETS), len(BUSBW_BUCKETS_GBS) + 1), np.int64)
    )
    busbw_sum: np.ndarray = field(default_factory=lambda: np.zeros(len(SIZE_BUCKETS)))


class NodeMetrics:
    """Accumulates ingest results; `render()` gives the Prometheus text exposition."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], _Series] = {}
        self.comm_names: dict[int, str] = {}
        self.inflight_age_s: dict[str, float] = {}
        self.profiler_counters: dict[str, int] = dict.fromkeys(PROFILER_COUNTERS, 0)
        self.records_lost = 0
        self.files_refused = 0
        self.producers = 0
        self.lag_s = 0.0
        self.open_hangs: dict[str, int] = {}  # verdict -> open hang reports
        self.open_incidents: dict[str, int] = {}  # root verdict -> open incidents
        self.incidents_opened: dict[str, int] = {}  # root verdict -> incidents opened
        # the Semantic Engine's counters (None while it is off)
        self.engine_steps: int | None = None
        self.engine_records_dropped = 0
        self.engine_records_queued = 0
        self.semantic: engine_metrics.SemanticEngineMetrics | None = None  # while it runs
        self.inputs: input_metrics.AgentInputs | None = None  # set by the service
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def comm_label(self, comm_id: int) -> str:
        return self.comm_names.get(comm_id) or f"{comm_id:016x}"

    def add_records(self, records: np.ndarray) -> None:
        """Fold a batch into the series. Grouped with bincounts over one small group index
        (communicator x func) rather than a loop per group: ingest runs at millions of records
        a second (bench/agent_ingest.py)."""
        ops = op_records(records)
        if not len(ops):
            return
        seconds = durations_s(ops)
        busbw = bus_bandwidth_gbs(ops, seconds)
        sizes = size_bucket(ops["bytes"])
        comms, comm_of = np.unique(ops["comm_id"], return_inverse=True)
        keys, group = np.unique(
            comm_of.reshape(-1).astype(np.int64) * _FUNC_CODES + ops["func"], return_inverse=True
        )
        group = group.reshape(-1)
        n = len(keys)
        n_lat, n_size, n_bw = (
            len(LATENCY_BUCKETS_S) + 1,
            len(SIZE_BUCKETS),
            len(BUSBW_BUCKETS_GBS) + 1,
        )
        counts = np.bincount(group, minlength=n)
        # float64 sums are exact below 2**53 bytes per batch (65536 records of 128 TiB each)
        nbytes = np.bincount(group, weights=ops["bytes"].astype(np.float64), minlength=n)
        latency = np.bincount(
            group * n_lat + np.searchsorted(LATENCY_BUCKETS_S, seconds, side="left"),
            minlength=n * n_lat,
        ).reshape(n, n_lat)
        latency_sum = np.bincount(group, weights=seconds, minlength=n)
        size_group = group * n_size + sizes
        busbw_hist = np.bincount(
            size_group * n_bw + np.searchsorted(BUSBW_BUCKETS_GBS, busbw, side="left"),
            minlength=n * n_size * n_bw,
        ).reshape(n, n_size, n_bw)
        busbw_sum = np.bincount(size_group, weights=busbw, minlength=n * n_size).reshape(n, n_size)
        for i, key in enumerate(keys.tolist()):
            comm_id = int(comms[key // _FUNC_CODES])
            label = (self.comm_label(comm_id), _FUNC_LABELS.get(key % _FUNC_CODES, "Unknown"))
            s = self.series.setdefault(label, _Series())
            s.ops += int(counts[i])
            s.bytes += int(nbytes[i])
            s.latency += latency[i]
            s.latency_sum += float(latency_sum[i])
            s.busbw += busbw_hist[i]
            s.busbw_sum += busbw_sum[i]

    # ---- prometheus_client collector protocol ----

    def collect(self) -> Iterable:
        ops = CounterMetricFamily(
            "comminsight_ops", "Completed NCCL operations", labels=["comm", "op_type"]
        )
        nbytes = CounterMetricFamily(
            "comminsight_op_bytes",
            "Message bytes of completed operations",
            labels=["comm", "op_type"],
        )
        latency = HistogramMetricFamily(
            "comminsight_op_latency_seconds",
            "Operation duration (GPU span where measured)",
            labels=["comm", "op_type"],
        )
        busbw = HistogramMetricFamily(
            "comminsight_op_busbw_gbs",
            "Bus bandwidth per operation (GB/s)",
            labels=["comm", "op_type", "size"],
        )
        for (comm, op_type), s in sorted(self.series.items()):
            ops.add_metric([comm, op_type], s.ops)
            nbytes.add_metric([comm, op_type], s.bytes)
            latency.add_metric(
                [comm, op_type], _buckets(LATENCY_BUCKETS_S, s.latency), s.latency_sum
            )
            for b, (_, size_name) in enumerate(SIZE_BUCKETS):
                if s.busbw[b].sum():
                    busbw.add_metric(
                        [comm, op_type, size_name],
                        _buckets(BUSBW_BUCKETS_GBS, s.busbw[b]),
                        float(s.busbw_sum[b]),
                    )
        yield from (ops, nbytes, latency, busbw)
        age = GaugeMetricFamily(
            "comminsight_inflight_age_seconds",
            "Age of the oldest operation in flight",
            labels=["comm"],
        )
        for comm, value in sorted(self.inflight_age_s.items()):
            age.add_metric([comm], value)
        yield age
        drops = CounterMetricFamily(
            "comminsight_profiler_drops",
            "What the Profilers of this node dropped and counted",
            labels=["reason"],
        )
        for reason, value in sorted(self.profiler_counters.items()):
            drops.add_metric([reason], value)
        yield drops
        yield CounterMetricFamily(
            "comminsight_agent_records_lost",
            "Records the ring overwrote before the Agent read them",
            value=self.records_lost,
        )
        yield CounterMetricFamily(
            "comminsight_agent_shm_files_refused",
            "SHM files refused (unknown ABI or corrupt) and quarantined",
            value=self.files_refused,
        )
        yield GaugeMetricFamily(
            "comminsight_agent_producers", "Profiler processes being read", value=self.producers
        )
        hangs = GaugeMetricFamily(
            "comminsight_hangs_open",
            "Open hang reports of this node's diagnosis, by verdict",
            labels=["verdict"],
        )
        for verdict, count in sorted(self.open_hangs.items()):
            hangs.add_metric([verdict], count)
        yield hangs
        incidents = GaugeMetricFamily(
            "comminsight_incidents_open",
            "Open incidents (one per fault) by their root report's verdict: alert on this. "
            "Reports blocked behind a root are folded into its incident as consequences "
            "(severity info) and do not page",
            labels=["verdict"],
        )
        for verdict, count in sorted(self.open_incidents.items()):
            incidents.add_metric([verdict], count)
        yield incidents
        opened = CounterMetricFamily(
            "comminsight_incidents",
            "Incidents opened by this Agent by their root report's verdict (consequences "
            "join an incident and open none)",
            labels=["verdict"],
        )
        for verdict, count in sorted(self.incidents_opened.items()):
            opened.add_metric([verdict], count)
        yield opened
        if self.engine_steps is not None:
            yield CounterMetricFamily(
                "comminsight_engine_steps",
                "Step summaries the Semantic Engine wrote",
                value=self.engine_steps,
            )
            yield CounterMetricFamily(
                "comminsight_engine_records_dropped",
                "Op records the Semantic Engine could not take (its queue was full)",
                value=self.engine_records_dropped,
            )
            yield GaugeMetricFamily(
                "comminsight_engine_records_queued",
                "Op records waiting for the Semantic Engine",
                value=self.engine_records_queued,
            )
        if self.semantic is not None:
            yield from engine_metrics.families(self.semantic)
        if self.inputs is not None:
            yield from input_metrics.families(self.inputs)
        yield GaugeMetricFamily(
            "comminsight_agent_lag_seconds",
            "Completion-to-ingest delay of the newest record read",
            value=self.lag_s,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _buckets(edges: tuple, counts: np.ndarray) -> list[tuple[str, float]]:
    cumulative = np.cumsum(counts)
    out = [(_le(e), float(c)) for e, c in zip(edges, cumulative[:-1], strict=True)]
    out.append(("+Inf", float(cumulative[-1])))
    return out


def _le(edge: float) -> str:
    return repr(float(edge))


def update_from_producers(metrics: NodeMetrics, producers, batches, now_mono_ns: int) -> None:
    """Fold one ingest pass (comminsight.agent.producers) into the node's metrics."""
    ages: dict[str, float] = {}
    totals = dict.fromkeys(PROFILER_COUNTERS, 0)
    for producer in producers.producers.values():
        for row in producer.region.comm_entries():
            state = int(row["state"])
            if state == shm_v1.CommState.FREE:
                continue
            comm_id = int(row["comm_id"])
            name = record_text(row["name"])
            if name:  # finalized rows too: an agent may start after the job ended
                metrics.comm_names.setdefault(comm_id, name)
            if state != shm_v1.CommState.ACTIVE:
                continue
            if int(row["inflight_count"]) and int(row["inflight_kind"]):
                age = max(0, now_mono_ns - int(row["inflight_enqueue_mono_ns"])) / 1e9
                label = metrics.comm_label(comm_id)
                ages[label] = max(ages.get(label, 0.0), age)
        for name in PROFILER_COUNTERS:
            totals[name] += producer.region.counter(name)
    for batch in batches:
        metrics.add_records(batch.records)
        newest = int(batch.records["complete_mono_ns"].max())
        if newest:
            metrics.lag_s = max(0.0, (now_mono_ns - newest) / 1e9)
    metrics.inflight_age_s = ages
    # Producers retire: keep their last counts by only ever raising the totals.
    for name, value in totals.items():
        metrics.profiler_counters[name] = max(metrics.profiler_counters[name], value)
    metrics.records_lost = producers.counters.records_lost
    metrics.files_refused = producers.counters.files_refused
    metrics.producers = len(producers.producers)
