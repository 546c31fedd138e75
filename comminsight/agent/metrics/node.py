"""Prometheus metrics of the node, computed from ingested op records in batches.

Records arrive by the hundred thousand per second, so nothing here is per-record Python: a
batch (one producer's) is grouped with numpy (by communicator and op type) and added to plain
arrays; the exposition is built at scrape time by a custom collector. A series belongs to a
process, named by the labels a fleet joins on (process_labels: job, host, ranks, GPU and its
UUID), never by its pid. Label sets are bounded: op type (a few NCCL functions), communicator
(its name, or its id when unnamed), message-size bucket (fixed), never a sequence number or a
timestamp; and the series of a process or communicator that ended expire after
COMMINSIGHT_AGENT_METRICS_EXPIRE_S, so jobs coming and going do not grow the exposition.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from comminsight.agent.core.metric_family import counts_family, metric_family
from comminsight.agent.metrics import engine as engine_metrics
from comminsight.agent.metrics import inputs as input_metrics
from comminsight.agent.metrics.build_info import build_info_family
from comminsight.agent.metrics.incidents import incident_family
from comminsight.agent.metrics.level import JOB, RANK, check_level, fold
from comminsight.agent.metrics.profiler_drops import ProfilerDropTotals
from comminsight.agent.receivers.producer_clock import on_reader_clock
from comminsight.agent.state.placement import Placement
from comminsight.agent.state.process_labels import (
    JOB_LABELS,
    NO_PROCESS,
    RANK_LABELS,
    ProcessLabels,
    ProducerLabels,
)
from comminsight.agent.steps.step_durations import STEP_BUCKETS_S, StepTimes
from comminsight.shm_reader import COMM, op_records, record_text
from comminsight.slot_timing import bus_bandwidth_gbs, durations_s
from comminsight_gen import metrics_v1
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.hang_report_v1 import Incident

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
    "log_compress_errors",
)

_FUNC_LABELS = {int(k): v for k, v in shm_v1.FUNC_LABELS.items()}
_FUNC_CODES = 256  # func is a u8 in the op slot
DEFAULT_EXPIRE_S = 600.0  # COMMINSIGHT_AGENT_METRICS_EXPIRE_S's default
_NO_ROWS = np.zeros(0, dtype=COMM)
SeriesKey = tuple[ProcessLabels, int, str]  # (process, comm_id, op type)


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
    seen_mono_ns: int = 0  # the last pass its process and communicator were live

    def plus(self, other: _Series) -> _Series:
        """A new series, the sum of both (two communicators of one label, at scrape time)."""
        return _Series(
            self.ops + other.ops,
            self.bytes + other.bytes,
            self.latency + other.latency,
            self.latency_sum + other.latency_sum,
            self.busbw + other.busbw,
            self.busbw_sum + other.busbw_sum,
            max(self.seen_mono_ns, other.seen_mono_ns),
        )


class NodeMetrics:
    """Accumulates ingest results; `render()` gives the Prometheus text exposition."""

    def __init__(self, expire_after_s: float = DEFAULT_EXPIRE_S, level: str = JOB) -> None:
        self.expire_after_ns = int(expire_after_s * 1e9)
        self.level = check_level(level)
        # where the node's processes run (node, pod, GPU index): none, the labels the headers
        # give alone; the Agent sets its node's
        self.placement: Placement | None = None
        self.series: dict[SeriesKey, _Series] = {}
        self.comm_names: dict[int, str] = {}
        # (process labels..., comm label) -> age of its oldest op in flight
        self.inflight_age_s: dict[tuple[str, ...], float] = {}
        # op type -> what the expired series counted, so the node's totals for the master
        # (metric_totals) keep growing when series go
        self.expired: dict[str, _Series] = {}
        # Expired parts of a sum that goes on (a rank's seconds over its communicators; at
        # level job a node's ranks of a job): kept in that sum while it has a live part, so
        # a counter never goes back (Prometheus reads a fall as a reset). By label values;
        # dropped once their job has no live series on this node.
        self.retired: dict[tuple[str, ...], _Series] = {}
        self.retired_steps: dict[tuple[str, ...], StepTimes] = {}
        self.drops = ProfilerDropTotals(PROFILER_COUNTERS)
        self.profiler_counters: dict[str, int] = dict.fromkeys(PROFILER_COUNTERS, 0)
        self.records_lost = 0
        self.files_refused = 0
        self.producers = 0
        self.lag_s = 0.0
        self.open_hangs: dict[str, int] = {}  # verdict -> open hang reports
        self.open_incidents: dict[str, int] = {}  # root verdict -> open incidents
        self.open_incident_roots: list[Incident] = []  # the open incidents themselves
        self.incidents_opened: dict[str, int] = {}  # root verdict -> incidents opened
        # the Semantic Engine's counters (None while it is off)
        self.engine_steps: int | None = None
        self.steps: dict[ProcessLabels, StepTimes] = {}  # each GPU's Step durations
        self.engine_records_dropped = 0
        self.engine_records_queued = 0
        self.semantic: engine_metrics.SemanticEngineMetrics | None = None  # while it runs
        self.inputs: input_metrics.AgentInputs | None = None  # set by the service
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        # the Agent's own CPU, memory, descriptors and Python (process_*, python_info)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def comm_label(self, comm_id: int) -> str:
        return self.comm_names.get(comm_id) or f"{comm_id:016x}"

    def add_records(
        self, records: np.ndarray, process: ProcessLabels = NO_PROCESS, now_mono_ns: int = 0
    ) -> None:
        """Fold a batch of one process's records into its series. Grouped with bincounts over
        one small group index (communicator x func) rather than a loop per group: ingest runs
        at millions of records a second (bench/agent_ingest.py)."""
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
            func = _FUNC_LABELS.get(key % _FUNC_CODES, "Unknown")
            s = self.series.setdefault((process, comm_id, func), _Series())
            s.seen_mono_ns = max(s.seen_mono_ns, now_mono_ns)
            s.ops += int(counts[i])
            s.bytes += int(nbytes[i])
            s.latency += latency[i]
            s.latency_sum += float(latency_sum[i])
            s.busbw += busbw_hist[i]
            s.busbw_sum += busbw_sum[i]

    def add_steps(self, new: dict[ProcessLabels, StepTimes], now_mono_ns: int) -> None:
        """Steps the live engine wrote since the last pass (steps.step_durations.StepDurations)."""
        for labels, times in new.items():
            series = self.steps.setdefault(labels, StepTimes())
            series.merge(times)
            series.seen_mono_ns = now_mono_ns

    def expire(self, now_mono_ns: int, live: set[tuple[ProcessLabels, int]]) -> None:
        """Mark the series of live (process labels, communicator) pairs seen now and drop the
        ones not seen for longer than the expiry: their process ended or their communicator
        was finalized. Names of communicators no series or live process uses go too."""
        for key, s in self.series.items():
            if (key[0], key[1]) in live:
                s.seen_mono_ns = now_mono_ns
        stale = [
            key
            for key, s in self.series.items()
            if now_mono_ns - s.seen_mono_ns > self.expire_after_ns
        ]
        for key in stale:
            s = self.series.pop(key)
            expired = self.expired.setdefault(key[2], _Series())
            expired.ops += s.ops
            expired.bytes += s.bytes
            expired.latency_sum += s.latency_sum
            labelled = (*key[0].values(), self.comm_label(key[1]), key[2])
            before = self.retired.get(labelled)
            self.retired[labelled] = s if before is None else before.plus(s)
        running = {labels for labels, _ in live}
        for labels, times in list(self.steps.items()):
            if labels in running:
                times.seen_mono_ns = now_mono_ns
            elif now_mono_ns - times.seen_mono_ns > self.expire_after_ns:
                del self.steps[labels]
                ended = labels.values()
                before = self.retired_steps.get(ended)
                self.retired_steps[ended] = times if before is None else before.plus(times)
        jobs = {p.job() for p, _, _ in self.series}
        self.retired = {k: v for k, v in self.retired.items() if k[:JOB_LABELS] in jobs}
        step_jobs = {labels.job() for labels in self.steps}
        self.retired_steps = {
            k: v for k, v in self.retired_steps.items() if k[:JOB_LABELS] in step_jobs
        }
        used = {comm_id for _, comm_id, _ in self.series} | {comm_id for _, comm_id in live}
        for comm_id in self.comm_names.keys() - used:
            del self.comm_names[comm_id]

    def labelled_series(self) -> dict[tuple[str, ...], _Series]:
        """The series by their label values (process labels, comm, op type): communicators
        that share a name in one process (one recreated under its old name) are one series."""
        out: dict[tuple[str, ...], _Series] = {}
        for (process, comm_id, func), s in self.series.items():
            key = (*process.values(), self.comm_label(comm_id), func)
            same = out.get(key)
            out[key] = s if same is None else same.plus(s)
        return out

    # ---- prometheus_client collector protocol ----

    def collect(self) -> Iterable:
        yield build_info_family()
        yield from self._op_families()
        yield self._rank_seconds_family()
        yield self._inflight_family()
        yield self._steps_family()
        yield counts_family(metrics_v1.PROFILER_DROPS_TOTAL, self.profiler_counters)
        yield metric_family(metrics_v1.AGENT_RECORDS_LOST_TOTAL, value=self.records_lost)
        yield metric_family(metrics_v1.AGENT_SHM_FILES_REFUSED_TOTAL, value=self.files_refused)
        yield metric_family(metrics_v1.AGENT_PRODUCERS, value=self.producers)
        yield counts_family(metrics_v1.HANGS_OPEN, self.open_hangs)
        yield counts_family(metrics_v1.INCIDENTS_OPEN, self.open_incidents)
        yield incident_family(self.open_incident_roots)
        yield counts_family(metrics_v1.INCIDENTS_TOTAL, self.incidents_opened)
        if self.engine_steps is not None:
            yield metric_family(metrics_v1.ENGINE_STEPS_TOTAL, value=self.engine_steps)
            yield metric_family(
                metrics_v1.ENGINE_RECORDS_DROPPED_TOTAL, value=self.engine_records_dropped
            )
            yield metric_family(metrics_v1.ENGINE_RECORDS_QUEUED, value=self.engine_records_queued)
        if self.semantic is not None:
            yield from engine_metrics.families(self.semantic)
        if self.inputs is not None:
            yield from input_metrics.families(self.inputs)
        yield metric_family(metrics_v1.AGENT_LAG_SECONDS, value=self.lag_s)

    def _op_families(self) -> Iterable:
        """Operations, bytes, latency and bus bandwidth: per process at level rank; at level
        job the node's ranks of a job folded, the histograms per op type alone."""
        series = self.labelled_series()  # (*process labels, comm, op type)
        if self.level == RANK:
            # a communicator recreated under its old name is one series with the expired one
            counted = timed = fold(series, lambda k: k, self.retired)
        else:
            counted = fold(series, lambda k: (*k[:JOB_LABELS], k[-2], k[-1]), self.retired)
            timed = fold(series, lambda k: (*k[:JOB_LABELS], k[-1]), self.retired)
        ops = metric_family(metrics_v1.OPS_TOTAL, self.level)
        nbytes = metric_family(metrics_v1.OP_BYTES_TOTAL, self.level)
        for key, s in sorted(counted.items()):
            ops.add_metric(list(key), s.ops)
            nbytes.add_metric(list(key), s.bytes)
        latency = metric_family(metrics_v1.OP_LATENCY_SECONDS, self.level)
        busbw = metric_family(metrics_v1.OP_BUSBW_GBS, self.level)
        # at level job the bandwidth histogram keeps its sum and count alone (the +Inf
        # bucket): the mean per size bucket is what the rules and the dashboard read, and its
        # buckets were half of a node's series
        busbw_edges = BUSBW_BUCKETS_GBS if self.level == RANK else ()
        for key, s in sorted(timed.items()):
            values = list(key)
            latency.add_metric(values, _buckets(LATENCY_BUCKETS_S, s.latency), s.latency_sum)
            for b, (_, size_name) in enumerate(SIZE_BUCKETS):
                counts = s.busbw[b] if busbw_edges else s.busbw[b].sum(keepdims=True)
                if counts.sum():
                    busbw.add_metric(
                        [*values, size_name],
                        _buckets(busbw_edges, counts),
                        float(s.busbw_sum[b]),
                    )
        yield from (ops, nbytes, latency, busbw)

    def _rank_seconds_family(self) -> CounterMetricFamily:
        """Each rank's seconds in completed operations, at every level: the one per-rank
        series a fleet keeps, enough to see which rank is slow."""
        family = metric_family(metrics_v1.RANK_OP_SECONDS_TOTAL, self.level)
        per_rank = fold(self.labelled_series(), lambda k: k[:RANK_LABELS], self.retired)
        for key, s in sorted(per_rank.items()):
            family.add_metric(list(key), s.latency_sum)
        return family

    def _inflight_family(self) -> GaugeMetricFamily:
        age = metric_family(metrics_v1.INFLIGHT_AGE_SECONDS, self.level)
        ages = self.inflight_age_s  # (*process labels, comm)
        if self.level == JOB:
            folded: dict[tuple[str, ...], float] = {}
            for key, value in ages.items():
                short = (*key[:JOB_LABELS], key[-1])
                folded[short] = max(folded.get(short, 0.0), value)
            ages = folded
        for key, value in sorted(ages.items()):
            age.add_metric(list(key), value)
        return age

    def _steps_family(self) -> HistogramMetricFamily:
        steps = metric_family(metrics_v1.STEP_DURATION_SECONDS, self.level)
        times = {labels.values(): t for labels, t in self.steps.items()}
        if self.level == JOB:
            times = fold(times, lambda k: k[:JOB_LABELS], self.retired_steps)
        for key, t in sorted(times.items()):
            steps.add_metric(list(key), _buckets(STEP_BUCKETS_S, t.buckets), t.sum_s)
        return steps

    def render(self) -> bytes:
        """The Prometheus text format 0.0.4."""
        return generate_latest(self.registry)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """(body, content type) in the format an Accept header asks for: OpenMetrics 1.0.0
        when it accepts application/openmetrics-text, else the text format 0.0.4."""
        if wants_openmetrics(accept):
            return openmetrics.generate_latest(self.registry), OPENMETRICS_CONTENT_TYPE
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4


OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header accepts OpenMetrics (any version: 1.0.0 is what is served;
    a media range with q=0 refuses it)."""
    for media_range in (accept or "").split(","):
        media_type, *params = (p.strip() for p in media_range.split(";"))
        if media_type.lower() != "application/openmetrics-text":
            continue
        q = next((p.split("=", 1)[1] for p in params if p.lower().startswith("q=")), "1")
        try:
            if float(q) > 0:
                return True
        except ValueError:  # a malformed q: the range is ignored
            continue
    return False


def _buckets(edges: tuple, counts: np.ndarray) -> list[tuple[str, float]]:
    cumulative = np.cumsum(counts)
    out = [(_le(e), float(c)) for e, c in zip(edges, cumulative[:-1], strict=True)]
    out.append(("+Inf", float(cumulative[-1])))
    return out


def _le(edge: float) -> str:
    return repr(float(edge))


@dataclass(frozen=True)
class _ProducerView:
    """What the metrics take from a producer's region in one pass."""

    labels: ProducerLabels
    names: tuple[tuple[int, str], ...]  # (comm_id, name) of its named rows in use
    # (labels, comm_id, its op in flight's enqueue time on the reader's clock, or None) of
    # its ACTIVE rows
    members: tuple[tuple[ProcessLabels, int, int | None], ...]


def _producer_view(producer, placement: Placement | None) -> _ProducerView:
    rows = producer.region.comm_entries()
    who = ProducerLabels(producer.region.header, rows, placement)
    offset = producer.region.mono_offset_ns
    names, members = [], []
    for row in rows:
        state = int(row["state"])
        if state == shm_v1.CommState.FREE:
            continue
        comm_id = int(row["comm_id"])
        name = record_text(row["name"])
        if name:
            names.append((comm_id, name))
        if state != shm_v1.CommState.ACTIVE:
            continue
        enqueued = None
        if int(row["inflight_count"]) and int(row["inflight_kind"]):
            enqueued = on_reader_clock(int(row["inflight_enqueue_mono_ns"]), offset)
        members.append((who.of_member(comm_id, int(row["rank"])), comm_id, enqueued))
    return _ProducerView(who, tuple(names), tuple(members))


# Released regions' views (their processes ended: nothing in them changes again): a node
# remembers up to 64 ended processes, and reading each one's rows on every pass was a large
# share of an idle Agent's CPU.
_RELEASED_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def update_from_producers(metrics: NodeMetrics, producers, batches, now_mono_ns: int) -> None:
    """Fold one ingest pass (comminsight.agent.receivers.producers) into the node's metrics;
    now_mono_ns is the pass's clock, which also times the expiry of ended series."""
    ages: dict[tuple[str, ...], float] = {}
    live: set[tuple[ProcessLabels, int]] = set()  # (labels, comm) of running communicators
    labels_of: dict[int, ProducerLabels] = {}
    for producer in producers.producers.values():
        view = _RELEASED_VIEWS.get(producer.region) if producer.released else None
        if view is None:
            view = _producer_view(producer, metrics.placement)
            if producer.released:  # nothing in it changes again
                _RELEASED_VIEWS[producer.region] = view
        labels_of[id(producer)] = view.labels
        for comm_id, name in view.names:  # finalized rows too: an agent may start after the
            metrics.comm_names.setdefault(comm_id, name)  # job ended
        running = producer.gone_since_mono_ns is None
        for labels, comm_id, enqueued in view.members:
            if running:
                live.add((labels, comm_id))
            if enqueued is not None:
                age = max(0, now_mono_ns - enqueued) / 1e9
                key = (*labels.values(), metrics.comm_label(comm_id))
                ages[key] = max(ages.get(key, 0.0), age)
    for batch in batches:
        who = labels_of.get(id(batch.producer))
        if who is None:  # retired by this very pass (a broken ring): its header's copy
            header = batch.producer.final_header
            who = (
                ProducerLabels(header, _NO_ROWS, metrics.placement) if header is not None else None
            )
        parts = who.partition(batch.records) if who else [(NO_PROCESS, batch.records)]
        for labels, records in parts:
            metrics.add_records(records, labels, now_mono_ns)
        newest = on_reader_clock(
            int(batch.records["complete_mono_ns"].max()), batch.producer.region.mono_offset_ns
        )
        if newest:
            metrics.lag_s = max(0.0, (now_mono_ns - newest) / 1e9)
    metrics.inflight_age_s = ages
    metrics.profiler_counters = metrics.drops.update(
        producers.producers.values(), producers.retired_in_pass
    )
    metrics.expire(now_mono_ns, live)
    metrics.records_lost = producers.counters.records_lost
    metrics.files_refused = producers.counters.files_refused
    metrics.producers = len(producers.producers)
