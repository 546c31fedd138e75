"""Prometheus families of this Agent's Python stack requests (stack_capture): what became of
each request, how many signals went to training processes, and how many answers are awaited.

A collector of its own, registered beside NodeMetrics: the counts live in the StackCapture
that sends the signals and are read at scrape time. Labels are bounded: `outcome` takes only
stack_capture.OUTCOMES, every one present from the start (a rate of zero is an answer).
"""

from __future__ import annotations

from collections.abc import Iterable

from comminsight.agent.core.metric_family import metric_family
from comminsight.agent.hangs.stack_capture import OUTCOMES, StackCapture
from comminsight_gen import metrics_v1


class StackCaptureMetrics:
    def __init__(self, capture: StackCapture) -> None:
        self.capture = capture

    def collect(self) -> Iterable:
        requests = metric_family(metrics_v1.STACK_REQUESTS_TOTAL)
        for outcome in OUTCOMES:
            requests.add_metric([outcome], self.capture.outcomes.get(outcome, 0))
        yield requests
        yield metric_family(metrics_v1.STACK_SIGNALS_TOTAL, value=self.capture.signals_sent)
        yield metric_family(metrics_v1.STACK_REQUESTS_PENDING, value=self.capture.pending)
