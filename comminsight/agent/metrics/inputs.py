"""Prometheus families of what the Agent's inputs refused, dropped and did: the hang-event
FIFO, the SHM files and rings, the recovery of dead processes' records and Inject's
metadata. Every label is a short reason from a fixed set, never a file name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from comminsight.agent.core.fifo_reader import HangEventFifo
from comminsight.agent.core.inject_names import InjectNames
from comminsight.agent.core.producers import ProducerSet


@dataclass
class AgentInputs:
    fifo: HangEventFifo
    producers: ProducerSet
    inject: InjectNames


def _by_reason(name: str, help_text: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=["reason"])
    for reason, value in sorted(counts.items()):
        family.add_metric([reason], value)
    return family


def families(inputs: AgentInputs) -> Iterable:
    stats = inputs.fifo.stats
    yield _by_reason(
        "comminsight_agent_fifo_events_rejected",
        "Malformed hang-event FIFO input: bad ABI version or size, bytes without a magic",
        stats.rejected_by_reason,
    )
    yield CounterMetricFamily(
        "comminsight_agent_fifo_bytes_discarded",
        "Bytes of hang-event FIFO input skipped to find the next event",
        value=stats.bytes_discarded,
    )
    yield CounterMetricFamily(
        "comminsight_agent_fifo_events_evicted",
        "Hang events pushed out of the Agent's bounded store of recent events",
        value=stats.evicted,
    )
    yield _by_reason(
        "comminsight_agent_fifo_refused",
        "Hang-event FIFOs refused: not a FIFO, another owner's, writable by others, a link",
        inputs.fifo.refused,
    )
    counters = inputs.producers.counters
    yield _by_reason(
        "comminsight_agent_shm_refusals",
        "SHM files refused and quarantined, by reason",
        counters.refused_by_reason,
    )
    producers = inputs.producers.producers.values()
    yield GaugeMetricFamily(
        "comminsight_agent_shm_rings_unread",
        "Producers whose ring breaks the protocol and is no longer read",
        value=sum(1 for p in producers if p.problem),
    )
    yield GaugeMetricFamily(
        "comminsight_agent_shm_comm_rows_invalid",
        "Communicator table rows that break the protocol, ignored",
        value=sum(p.region.bad_rows for p in producers),
    )
    yield CounterMetricFamily(
        "comminsight_agent_shm_slots_copied",
        "Ring slots the Agent copied (the work of its passes)",
        value=counters.slots_copied,
    )
    yield CounterMetricFamily(
        "comminsight_agent_shm_seqs_read",
        "Ring slot sequence words the Agent examined (the work of its passes)",
        value=counters.seqs_read,
    )
    yield CounterMetricFamily(
        "comminsight_agent_records_recovered",
        "Ring records of dead processes written to their logs from SHM",
        value=counters.records_recovered,
    )
    yield CounterMetricFamily(
        "comminsight_agent_recovery_failures",
        "Attempts to write dead processes' unwritten records to their logs that failed "
        "(those failing for want of space are retried)",
        value=counters.recovery_failures,
    )
    yield CounterMetricFamily(
        "comminsight_agent_records_unrecovered",
        "Ring records of dead processes retired without reaching their logs",
        value=counters.records_unrecovered,
    )
    yield _by_reason(
        "comminsight_agent_shm_slots_rejected",
        "Ring records dropped because a field is out of its range, by field",
        counters.slots_rejected_by_reason,
    )
    yield _by_reason(
        "comminsight_agent_inject_lines_rejected",
        "Inject metadata lines refused: too long, invalid, unreadable",
        inputs.inject.rejected,
    )
