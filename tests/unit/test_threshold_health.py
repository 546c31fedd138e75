"""The hang threshold in health (core.threshold_health) and the file the Agent publishes it in
(core.agent_settings): which processes' watchdogs use another value than the verdicts, said
by pid, rank, value and why; a process that follows the file judged only once it has surely
read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from comminsight.agent.core import agent_settings
from comminsight.agent.core.threshold_health import Publication, threshold_health
from comminsight_gen.abi import shm_v1
from comminsight_gen.models import agent_master_api_v1 as api

Source = shm_v1.ThresholdSource


@dataclass
class Region:
    header: dict


@dataclass
class Producer:
    """What threshold_health reads of a ProducerSet's producer."""

    region: Region
    gone_since_mono_ns: int | None = None
    closed: bool = False


@dataclass
class Node:
    producers: dict = field(default_factory=dict)

    def add(self, pid: int, ms: int, source: int, own_ms=None, own_source=None, **kw) -> Producer:
        header = {
            "pid": pid,
            "rank": kw.pop("rank", pid - 100),
            "hostname": b"node-a",
            "hang_threshold_ms": ms,
            "hang_threshold_source": source,
            "own_hang_threshold_ms": ms if own_ms is None else own_ms,
            "own_hang_threshold_source": source if own_source is None else own_source,
            "agent_settings_refused": kw.pop("refused", 0),
            "heartbeat_count": kw.pop("heartbeats", 10),
        }
        p = Producer(Region(header), **kw)
        self.producers[("shm", pid)] = p
        return p


def published(node: Node) -> Publication:
    pub = Publication(ok=True)
    pub.note(node.producers)
    return pub


def beat(p: Producer, n: int = 2) -> None:
    p.region.header["heartbeat_count"] += n


def test_every_process_on_the_agents_value_agrees():
    node = Node()
    for pid in (100, 101):
        node.add(pid, 2000, Source.AGENT, own_ms=300_000, own_source=Source.DEFAULT)
    pub = published(node)
    for p in node.producers.values():
        beat(p)
    health, reasons = threshold_health(node.producers, 2000, pub)
    assert (health.processes_agreeing, health.processes_differing, health.differing) == (2, 0, [])
    assert health.verdict_threshold_ms == 2000 and health.published
    assert reasons == []


def test_a_process_with_its_own_environment_value_is_named_at_once():
    node = Node()
    node.add(100, 30_000, Source.ENVIRONMENT)
    node.add(101, 2000, Source.AGENT, own_ms=300_000, own_source=Source.DEFAULT)
    pub = published(node)
    beat(node.producers[("shm", 101)])
    health, reasons = threshold_health(node.producers, 2000, pub)
    assert (health.processes_agreeing, health.processes_differing) == (1, 1)
    (d,) = health.differing
    assert (d.pid, d.global_rank, d.host) == (100, 0, "node-a")
    assert (d.watchdog_threshold_ms, d.source) == (30_000, api.ThresholdSource.environment)
    assert (d.own_threshold_ms, d.own_source) == (30_000, api.ThresholdSource.environment)
    (said,) = reasons
    assert said == (
        "hang threshold: verdicts use the Agent's 2 s (its COMMINSIGHT_PROFILER_HANG_TIMEOUT_S); "
        "1 profiled process(es) watch with another: 30 s set in the process's own environment, "
        "kept over the Agent's: pid 100 (rank 0)"
    )


def test_a_process_that_follows_the_file_is_judged_after_two_heartbeats_since_noted():
    """Noted at count 10: at 11 it may have looked at the file before it was published; at
    12 it surely looked after."""
    node = Node()
    p = node.add(100, 300_000, Source.DEFAULT)
    pub = published(node)
    beat(p, 1)
    assert threshold_health(node.producers, 2000, pub)[0].processes_differing == 0
    beat(p, 1)
    health, reasons = threshold_health(node.producers, 2000, pub)
    (d,) = health.differing
    assert (d.source, d.watchdog_threshold_ms) == (api.ThresholdSource.default, 300_000)
    assert "300 s its own (default), not the Agent's: pid 100 (rank 0)" in reasons[0]


def test_a_process_not_noted_yet_is_not_judged():
    node = Node()
    pub = published(node)
    node.add(100, 300_000, Source.FILE, heartbeats=50)
    health, _ = threshold_health(node.producers, 2000, pub)
    assert (health.processes_agreeing, health.processes_differing) == (0, 0)


def test_a_refused_file_is_said():
    node = Node()
    p = node.add(100, 300_000, Source.DEFAULT, refused=3)
    pub = published(node)
    beat(p)
    health, reasons = threshold_health(node.producers, 2000, pub)
    assert health.differing[0].agent_file_refused == 3
    assert "300 s its own (default): it refused the Agent's file (its log says why)" in reasons[0]


def test_an_older_profiler_says_no_own_value_and_never_follows():
    node = Node()
    node.add(100, 300_000, Source.UNKNOWN, own_ms=0)
    health, reasons = threshold_health(node.producers, 2000, published(node))
    (d,) = health.differing
    assert d.own_threshold_ms is None and d.source is api.ThresholdSource.unknown
    assert "of a Profiler too old to follow the Agent's: pid 100" in reasons[0]


def test_an_unpublished_threshold_is_said_and_every_process_judged_at_once():
    node = Node()
    node.add(100, 300_000, Source.DEFAULT)
    pub = Publication(ok=False, error="cannot write /h/metadata/agent-settings: No space")
    health, reasons = threshold_health(node.producers, 2000, pub)
    assert not health.published and health.processes_differing == 1
    assert reasons[0] == (
        "the hang threshold is not published to the Profilers (cannot write "
        "/h/metadata/agent-settings: No space): their watchdogs keep their own values"
    )


def test_ended_processes_and_many_alike_ones():
    node = Node()
    node.add(99, 5, Source.ENVIRONMENT, gone_since_mono_ns=1)
    node.add(98, 5, Source.ENVIRONMENT, closed=True)
    for pid in range(100, 110):
        node.add(pid, 0, Source.ENVIRONMENT)
    health, reasons = threshold_health(node.producers, 2000, published(node))
    assert health.processes_differing == 10
    assert [d.pid for d in health.differing] == list(range(100, 110))
    assert "off (0) set in the process's own environment" in reasons[0]
    assert reasons[0].endswith("pid 107 (rank 7) and 2 more")


def test_noted_heartbeats_forget_producers_gone():
    node = Node()
    node.add(100, 2000, Source.AGENT)
    pub = published(node)
    node.producers.clear()
    pub.note(node.producers)
    assert pub.heartbeats == {}


def test_the_published_text_reads_back_as_the_same_value(tmp_path):
    for value in (2, 0.5, 300.0, 0.1, 86400.0):
        agent_settings.publish(tmp_path, value)
        text = agent_settings.settings_path(tmp_path).read_text()
        (line,) = [x for x in text.splitlines() if not x.startswith("#")]
        key, _, written = line.partition("=")
        assert key == "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S" and float(written) == value
        assert int(float(written) * 1000) == int(value * 1000)
    assert agent_settings.settings_path(tmp_path).stat().st_mode & 0o777 == 0o600
    agent_settings.withdraw(tmp_path)
    agent_settings.withdraw(tmp_path)  # gone already: nothing to do
    assert not agent_settings.settings_path(tmp_path).exists()
