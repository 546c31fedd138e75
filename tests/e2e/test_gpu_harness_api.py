"""The GPU harness reads the Agent through the generated API client (bench/gpu/agent_api.py).
It runs only on the GPU machine, so here it reads a real Agent serving `make demo`'s fault:
every page it asks for decodes into the generated models, and the drivers' own views of a
report and an incident come out of them with the values the Agent holds."""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path

import pytest
from agent_home import hold_agent_lock
from e2e_sims import DEMO_FAULT_AGENT_SETTINGS, demo_fault_config
from live_agent import LiveAgent

from comminsight.sim import run_simulation

GPU_HARNESS = Path(__file__).resolve().parents[2] / "bench" / "gpu"


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(GPU_HARNESS))
    try:
        yield (
            importlib.import_module("agent_api"),
            importlib.import_module("e2e_driver"),
            importlib.import_module("faults_driver"),
        )
    finally:
        sys.path.remove(str(GPU_HARNESS))


def test_the_harness_reads_hangs_incidents_steps_and_communicators_of_a_real_agent(
    plugin, tmp_path, harness
):
    agent_api, e2e_driver, faults_driver = harness
    lock = hold_agent_lock(tmp_path)
    config = demo_fault_config(plugin, tmp_path)
    with LiveAgent(tmp_path, **DEMO_FAULT_AGENT_SETTINGS) as live:
        result = {}
        sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
        sim.start()
        sim.join()
        live.wait_passes(3)
        url = live.base_url
        held_reports = live.call(lambda: dict(live.service.hangs.reports))
        held_incidents = live.call(lambda: list(live.service.incidents.incidents.values()))

        health = agent_api.health(url)
        reports = agent_api.hang_reports(url)
        incidents = agent_api.incidents(url)
        rooted = [i for i in incidents if [c.global_rank for c in i.root.culprits] == [1]]
        detail = agent_api.incident_detail(url, rooted[0].incident_id) if rooted else None
        missing = agent_api.incident_detail(url, "no-such-incident")
        steps = agent_api.steps_total(url)
        comms = agent_api.communicators(url)
    lock.close()
    assert not result["sim"].errors, result["sim"].errors

    assert health is not None and health.status.value in ("ok", "degraded")
    assert {r.report_id for r in reports} == set(held_reports)
    # the API lists newest first; a loaded machine may add an incident of its own
    assert {i.incident_id for i in incidents} == {i.incident_id for i in held_incidents}
    assert rooted, [(i.root.summary, i.resolution) for i in incidents]
    incident = rooted[0]
    assert detail is not None and detail.incident.incident_id == incident.incident_id
    assert {r.report_id for r in detail.reports} <= set(held_reports)
    assert missing is None, "an incident the Agent does not hold is None, not an error page"
    assert isinstance(steps, int) and steps >= 0
    assert {c.comm_id for c in comms} >= {r.comm.comm_id for r in reports}
    assert all(c.ranks for c in comms), "the full view lists each communicator's ranks"

    # the drivers' views of what they read
    root = next(r for r in reports if r.report_id == incident.root.report_id)
    seen = e2e_driver.report_seen(
        root.report_id, {"report": root, "first_seen_mono_ns": 0}, root, 0
    )
    assert seen["culprits"] == [c.comm_rank for c in root.culprits]
    assert seen["verdict"] == root.verdict.value and seen["comm_name"] == root.comm.comm_name
    assert seen["op"]["func"] == "AllReduce"
    # the culprit's stack entry (why none could be taken: no Inject in a simulated rank)
    assert 1 in {s.rank for s in incident.stacks}
    assert faults_driver.stacks_cover_culprits(incident)
    incident.stacks = []
    assert not faults_driver.stacks_cover_culprits(incident)


def test_an_agent_that_does_not_answer_is_unreachable_for_every_read(harness):
    agent_api, _, _ = harness
    url = "http://127.0.0.1:9"  # discard: nothing listens
    for read in (agent_api.health, agent_api.hang_reports, agent_api.incidents):
        with pytest.raises(agent_api.UNREACHABLE):
            read(url)
