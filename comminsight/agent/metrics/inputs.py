"""Prometheus families of what the Agent's inputs refused, dropped and did: the hang-event
FIFO, the SHM files and rings, the recovery of dead processes' records and Inject's
metadata. Every label is a short reason from a fixed set, never a file name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from comminsight.agent.core.metric_family import counts_family, metric_family
from comminsight.agent.receivers.fifo_reader import HangEventFifo
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.receivers.producers import ProducerSet
from comminsight_gen import metrics_v1


@dataclass
class AgentInputs:
    fifo: HangEventFifo
    producers: ProducerSet
    inject: InjectNames


def families(inputs: AgentInputs) -> Iterable:
    stats = inputs.fifo.stats
    yield counts_family(metrics_v1.AGENT_FIFO_EVENTS_REJECTED_TOTAL, stats.rejected_by_reason)
    yield metric_family(metrics_v1.AGENT_FIFO_BYTES_DISCARDED_TOTAL, value=stats.bytes_discarded)
    yield metric_family(metrics_v1.AGENT_FIFO_EVENTS_EVICTED_TOTAL, value=stats.evicted)
    yield counts_family(metrics_v1.AGENT_FIFO_REFUSED_TOTAL, inputs.fifo.refused)
    counters = inputs.producers.counters
    yield counts_family(metrics_v1.AGENT_SHM_REFUSALS_TOTAL, counters.refused_by_reason)
    producers = inputs.producers.producers.values()
    yield metric_family(
        metrics_v1.AGENT_SHM_RINGS_UNREAD, value=sum(1 for p in producers if p.problem)
    )
    yield metric_family(
        metrics_v1.AGENT_SHM_COMM_ROWS_INVALID, value=sum(p.region.bad_rows for p in producers)
    )
    yield metric_family(metrics_v1.AGENT_SHM_SLOTS_COPIED_TOTAL, value=counters.slots_copied)
    yield metric_family(metrics_v1.AGENT_SHM_SEQS_READ_TOTAL, value=counters.seqs_read)
    yield metric_family(metrics_v1.AGENT_RECORDS_RECOVERED_TOTAL, value=counters.records_recovered)
    yield metric_family(metrics_v1.AGENT_RECOVERY_FAILURES_TOTAL, value=counters.recovery_failures)
    yield metric_family(
        metrics_v1.AGENT_RECORDS_UNRECOVERED_TOTAL, value=counters.records_unrecovered
    )
    yield counts_family(
        metrics_v1.AGENT_SHM_SLOTS_REJECTED_TOTAL, counters.slots_rejected_by_reason
    )
    yield counts_family(metrics_v1.AGENT_INJECT_LINES_REJECTED_TOTAL, inputs.inject.rejected)
