"""Prometheus families of this Agent's Python stack requests (stack_capture): what became of
each request, how many signals went to training processes, and how many answers are awaited.

A collector of its own, registered beside NodeMetrics: the counts live in the StackCapture
that sends the signals and are read at scrape time. Labels are bounded: `outcome` takes only
stack_capture.OUTCOMES, every one present from the start (a rate of zero is an answer).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from comminsight.agent.hangs.stack_capture import OUTCOMES, StackCapture


class StackCaptureMetrics:
    def __init__(self, capture: StackCapture) -> None:
        self.capture = capture

    def collect(self) -> Iterable:
        requests = CounterMetricFamily(
            "comminsight_stack_requests",
            "Requests for a training process's Python stacks on this node, by outcome: "
            "captured, rate_limited (answered from the signal sent within "
            "COMMINSIGHT_AGENT_STACK_INTERVAL_S, no new one), unavailable_no_inject (never "
            "signalled), refused (Inject's announcement forbids the signal), process_gone, "
            "timeout, error",
            labels=["outcome"],
        )
        for outcome in OUTCOMES:
            requests.add_metric([outcome], self.capture.outcomes.get(outcome, 0))
        yield requests
        yield CounterMetricFamily(
            "comminsight_stack_signals",
            "Stack signals this Agent sent to training processes (at most one per process "
            "per COMMINSIGHT_AGENT_STACK_INTERVAL_S)",
            value=self.capture.signals_sent,
        )
        yield GaugeMetricFamily(
            "comminsight_stack_requests_pending",
            "Stack signals sent whose answer is still awaited (each for at most "
            "COMMINSIGHT_AGENT_STACK_TIMEOUT_S)",
            value=self.capture.pending,
        )
