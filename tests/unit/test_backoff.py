"""The one backoff schedule the Agent's retries share (archive uploads, the slave's link)."""

import pytest

from comminsight.backoff import Backoff, jitter


def test_the_wait_doubles_from_the_base_up_to_the_cap():
    b = Backoff(base_s=0.2, cap_s=1.0)
    assert [b.delay(n) for n in range(1, 6)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])
    assert b.delay(0) == 0.2  # no failure counted yet: the base, never less
    assert b.delay(10_000) == 1.0  # no overflow however long the outage


def test_jitter_stays_in_the_later_half_of_the_wait():
    waits = [jitter(2.0) for _ in range(1000)]
    assert all(1.0 <= w <= 2.0 for w in waits)
    assert len(set(waits)) > 1
    assert all(0.1 <= Backoff(0.2, 1.0).jittered(1) <= 0.2 for _ in range(100))
