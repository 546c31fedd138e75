"""What the Agent's inputs add to `/api/v1/health`: a hang-event FIFO that was refused,
replaced or not opened, rejected FIFO input, SHM producers whose ring or comm table breaks the
protocol, recovered or unrecoverable records of dead processes, refused Inject metadata.
Each reason names the file and what was wrong with it."""

from __future__ import annotations

import time

from comminsight.agent.receivers.fifo_reader import HangEventFifo
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.receivers.producers import ProducerSet

MAX_NAMED = 16  # files named per kind of problem (the metrics count all)


def input_reasons(
    fifo: HangEventFifo,
    fifo_error: str | None,
    producers: ProducerSet,
    inject: InjectNames,
) -> list[str]:
    reasons = []
    if fifo_error:
        reasons.append(f"hang events are not received: {fifo_error}")
    reasons += fifo.problems(time.monotonic())
    reasons += producers.problems()[:MAX_NAMED]
    for name, why in sorted(inject.errors.items())[:MAX_NAMED]:
        reasons.append(f"inject metadata {inject.dir / name}: {why}")
    return reasons
