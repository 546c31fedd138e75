"""RingCursor against a hand-built ring: wrap-around, lapping, slots still being written and
slots overwritten under the reader. (The pipeline tests read real rings; these pin the edges.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from comminsight.shm_reader import BUSY, SLOT, RingCursor

CAP = 8


def ring_region():
    ring = np.zeros(CAP, dtype=SLOT)
    return SimpleNamespace(header={"ring_head": 0}, ring_capacity=CAP, ring=ring)


def publish(region, first: int, end: int) -> None:
    """Write tickets [first, end) as the Profiler does: slot seq = ticket + 1, op_seq = ticket."""
    for t in range(first, end):
        slot = region.ring[t % CAP]
        slot["seq"] = t + 1
        slot["op_seq"] = t
    region.header["ring_head"] = end


def test_reads_across_the_wrap_in_ticket_order():
    r = ring_region()
    cursor = RingCursor(r)
    publish(r, 0, 5)
    assert list(cursor.poll()["op_seq"]) == [0, 1, 2, 3, 4]
    assert len(cursor.poll()) == 0
    publish(r, 5, 12)  # tickets 5..11 sit in slots 5,6,7,0,1,2,3
    got = cursor.poll()
    assert list(got["op_seq"]) == list(range(5, 12)) and cursor.lost == 0


def test_a_batch_bound_splits_a_wrapping_read():
    r = ring_region()
    cursor = RingCursor(r)
    publish(r, 0, 6)
    cursor.poll()
    publish(r, 6, 13)
    assert list(cursor.poll(3)["op_seq"]) == [6, 7, 8]
    assert list(cursor.poll(3)["op_seq"]) == [9, 10, 11]
    assert list(cursor.poll(3)["op_seq"]) == [12]


def test_lapped_reader_counts_what_it_lost():
    r = ring_region()
    cursor = RingCursor(r)
    publish(r, 0, 20)
    got = cursor.poll()
    assert list(got["op_seq"]) == list(range(12, 20))
    assert cursor.lost == 12 and cursor.lost_ranges == [(1, 12)]


def test_stops_before_a_slot_not_yet_written():
    r = ring_region()
    cursor = RingCursor(r)
    publish(r, 0, 6)
    r.ring[3]["seq"] = 3 | int(BUSY)  # ticket 3 claimed, its writer not done (old seq + busy)
    assert list(cursor.poll()["op_seq"]) == [0, 1, 2]
    r.ring[3]["seq"] = 4  # committed
    assert list(cursor.poll()["op_seq"]) == [3, 4, 5] and cursor.lost == 0


def test_a_slot_already_rewritten_for_a_later_ticket_is_lost_not_misread():
    r = ring_region()
    cursor = RingCursor(r)
    publish(r, 0, 6)
    r.ring[2]["seq"] = 2 + CAP + 1  # ticket 10 took slot 2 before we read ticket 2
    got = cursor.poll()
    assert list(got["op_seq"]) == [0, 1, 3, 4, 5]
    assert cursor.lost == 1 and cursor.lost_ranges == [(3, 3)]
