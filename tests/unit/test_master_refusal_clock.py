"""How long the master's health names a refusal of a peer without the token: measured on the
monotonic clock, so that a step of the wall clock neither hides it at once nor keeps it for
hours."""

from __future__ import annotations

import time

from test_agent_master_rebuild import master

from comminsight.agent.master import agent as master_agent
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb


def test_a_refusal_without_the_token_stays_recent_by_the_monotonic_clock(tmp_path, monkeypatch):
    m = master(tmp_path)
    m.server.note_unauthenticated(pb.Reject(message="no token"), "ipv4:10.0.0.9:4242")
    real, mono = time.time_ns(), time.monotonic_ns()

    def refused_is_shown() -> bool:
        return any("without the token refused" in r for r in m.health().reasons)

    assert refused_is_shown()
    for step in (-3600, 3600):  # the wall clock stepped (NTP) back or ahead by an hour
        monkeypatch.setattr(time, "time_ns", lambda step=step: real + step * 10**9)
        assert refused_is_shown(), step
    late = mono + master_agent.RECENT_REFUSAL_NS + 1
    monkeypatch.setattr(time, "monotonic_ns", lambda: late)
    assert not refused_is_shown()
