"""The master rebuilds (and so diagnoses) the job snapshot no more often than its cost allows:
at least REBUILD_MIN_NS apart, and at least REBUILD_COST_SHARE times the last rebuild's cost,
so that at thousands of ranks the slaves' batches are not starved; a hang event still rebuilds
at the coming pass."""

from __future__ import annotations

import msgspec

from comminsight.agent.master import agent as master_agent
from comminsight.agent.master.agent import MasterAgentService
from comminsight_gen.config_v1 import ConfigV1

MS = 1_000_000


def master(tmp_path) -> MasterAgentService:
    settings = msgspec.convert(
        {
            "home": str(tmp_path),
            "agent_mode": "master",
            "agent_token": "t",
            "agent_master_listen": "127.0.0.1:0",
            "semantic_enable": False,
        },
        ConfigV1,
    )
    return MasterAgentService(settings)


def changed(m: MasterAgentService) -> None:
    m.server.version += 1  # a slave's batch arrived


def test_rebuilds_are_spaced_by_their_own_cost(tmp_path):
    m = master(tmp_path)
    t0 = 10_000 * MS
    first = m.take_snapshot(t0)
    changed(m)
    # cheap rebuilds: REBUILD_MIN_NS apart
    assert m.take_snapshot(t0 + master_agent.REBUILD_MIN_NS - 1) is first
    second = m.take_snapshot(t0 + master_agent.REBUILD_MIN_NS)
    assert second is not first
    # a rebuild that cost 400 ms: the next one waits 3 x 400 ms
    m._rebuild_cost_ns = 400 * MS
    changed(m)
    at = second.taken_mono_ns
    assert m.take_snapshot(at + 1_199 * MS) is second
    third = m.take_snapshot(at + 1_200 * MS)
    assert third is not second
    # a hang event does not wait
    changed(m)
    m._on_fifo_events([])
    assert m.take_snapshot(third.taken_mono_ns + 1 * MS) is not third


def test_a_pass_that_rebuilt_records_what_it_cost(tmp_path):
    m = master(tmp_path)
    m.poll_once()
    assert m._rebuild_cost_ns > 0  # the first pass always builds
    cost = m._rebuild_cost_ns
    m.poll_once()  # nothing changed, too soon: the cached snapshot, the cost kept
    assert m._rebuild_cost_ns == cost
