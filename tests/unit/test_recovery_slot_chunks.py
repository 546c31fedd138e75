"""A dead process's ring is read back in chunks (log_recovery._slots): every ticket once, in
order, across chunk boundaries and the ring's wrap, each slot with its own timing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from comminsight.agent.core import log_recovery
from comminsight.agent.core.inspector_lines import timings
from comminsight_gen.abi import shm_v1


def test_chunks_cover_every_ticket_once_in_order_across_the_wrap():
    cap = 8192
    ring = np.zeros(cap, shm_v1.OP_SLOT_DTYPE)
    ring["seq"] = np.arange(cap)  # slot i holds ticket ... + i: its index, to check the place
    ring["timing_source"] = shm_v1.TimingSource.KERNEL_GPU
    ring["gpu_end_ticks"] = np.arange(cap) * 1000  # a duration of its own per slot
    region = SimpleNamespace(ring=ring, ring_capacity=cap)
    first, end = 3000, 3000 + cap + 100 - 1  # more than a chunk, wrapping, not a multiple
    got = list(log_recovery._slots(region, first, end))
    assert [t for t, _, _ in got] == list(range(first, end))
    assert [int(s["seq"]) for _, s, _ in got] == [t % cap for t in range(first, end)]
    want = timings(ring[np.arange(first, end) % cap])
    assert [timing for _, _, timing in got] == want
    assert len({timing for _, _, timing in got}) == cap  # each slot's own
