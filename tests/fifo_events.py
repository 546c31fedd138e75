"""Hang events as the Profiler's watchdog writes them to the FIFO (fifo-event v1), built by
hand: a suspected hang of an all-reduce unless the fields say otherwise."""

from __future__ import annotations

import numpy as np

from comminsight.agent.receivers.fifo_reader import EVENT_SIZE
from comminsight_gen.abi import fifo_event_v1, shm_v1


def event_bytes(**fields) -> bytes:
    e = np.zeros(1, dtype=fifo_event_v1.EVENT_DTYPE)
    e["magic"] = fifo_event_v1.MAGIC
    e["abi_version"] = fifo_event_v1.PROTOCOL_VERSION
    e["event_size"] = EVENT_SIZE
    e["event_type"] = fifo_event_v1.EventType.HANG_SUSPECTED
    e["op_kind"] = shm_v1.RecordKind.COLL
    e["func"] = shm_v1.Func.ALL_REDUCE
    e["peer"] = -1
    for name, value in fields.items():
        e[name] = value
    return e.tobytes()
