"""Attacks on hang diagnosis end to end: the simulated NCCL drives the real Profiler plugin
with faults real jobs hit (a pipeline stage stuck in host code, a stage that dies, a hang at
the job's very first op, a tensor-parallel rank of a Megatron job that never issues its
all-reduce, a slow rank that is never hung) while a real Agent polls; each case checks the
incidents it opened: how many, and which rank their root names. Never timed: the runs end
by themselves (the sim holds a hang for hang_hold_s, then aborts) and the Agent is then
waited for by passes."""

from __future__ import annotations

import threading

import pytest
from agent_home import hold_agent_lock
from live_agent import LiveAgent

from comminsight.sim import SimConfig, parse_fault, run_simulation
from comminsight_gen.models.hang_report_v1 import Resolution, Verdict

# Above what a loaded 2-core CI machine makes ranks wait for one another in a healthy run
# (seen at 1 s with a load of 13: rank 3 had not initialized the world communicator while
# the others waited in its first all-reduce)
THRESHOLD_S = 2.0
ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "100"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", str(THRESHOLD_S)),
)


def run_with_agent(
    plugin_path, home, faults=(), hang_hold_s=6.0, threshold_s=THRESHOLD_S, **settings
):
    """Run the simulation to its end under a polling Agent; (incidents, reports) it holds."""
    lock = hold_agent_lock(home)
    env = (*ENV[:-1], ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", str(threshold_s)))
    config = SimConfig(
        plugin=str(plugin_path),
        home=str(home),
        time_scale=settings.pop("time_scale", 0.05),
        hang_hold_s=hang_hold_s,
        faults=tuple(parse_fault(f) for f in faults),
        env=env,
        **settings,
    )
    try:
        with LiveAgent(
            home, profiler_hang_timeout_s=threshold_s, agent_heartbeat_stale_ms=5000
        ) as live:
            result = {}
            sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
            sim.start()
            sim.join()
            live.wait_passes(3)
            incidents = live.call(lambda: list(live.service.incidents.incidents.values()))
            reports = live.call(lambda: dict(live.service.hangs.reports))
    finally:
        lock.close()
    assert not result["sim"].errors, result["sim"].errors
    return incidents, reports


def roots(incidents) -> list[tuple[str, list[int]]]:
    return sorted(
        (i.root.verdict.value, sorted(c.global_rank for c in i.root.culprits)) for i in incidents
    )


def one_incident_naming(incidents, rank: int):
    """The fault's incident: the one that did not end by its op completing (a wait a loaded
    machine stretched past the threshold ends so; the fault's hang ends with the run)."""
    incidents = [i for i in incidents if i.resolution is not Resolution.op_completed]
    assert len(incidents) == 1, [(i.root.summary, i.resolution) for i in incidents]
    root = incidents[0].root
    assert [c.global_rank for c in root.culprits] == [rank], root.summary
    return root


# ---- pipeline parallel (Megatron 1F1B, batched isend/irecv) -----------------------------

PP4 = {"workload": "pp", "ranks": 4, "tp": 1, "pp": 4, "grad_accum": 4, "steps": 2}


@pytest.mark.parametrize("stage", [1, 3])
def test_a_pipeline_stage_stuck_in_host_code_is_the_root(plugin, tmp_path, stage):
    """A stage never issues its 3rd batched P2P exchange (stuck in host code, a data loader,
    say): the stages before and after it wait in Send/Recv; the root names the stage."""
    incidents, _ = run_with_agent(plugin, tmp_path, (f"skip:rank={stage},op=2,comm=pp",), **PP4)
    root = one_incident_naming(incidents, stage)
    assert root.verdict in (Verdict.stuck_outside_nccl, Verdict.rank_not_joined), root.summary


def test_a_pipeline_stage_that_dies_is_process_died(plugin, tmp_path):
    incidents, _ = run_with_agent(plugin, tmp_path, ("die:rank=2,op=3,comm=pp",), **PP4)
    root = one_incident_naming(incidents, 2)
    assert root.verdict is Verdict.process_died, root.summary


def test_a_megatron_tp_rank_skipping_an_all_reduce_while_pp_is_in_flight(plugin, tmp_path):
    """TP=2 x PP=2: rank 3 (tp peer of rank 2, pipeline stage 1) never issues a
    tensor-parallel all-reduce; pipeline sends toward its stage and the other tp pair hang
    behind it: one incident, rooted at rank 3."""
    incidents, reports = run_with_agent(
        plugin,
        tmp_path,
        ("skip:rank=3,op=25,comm=tp",),  # an all-reduce of the first measured Step
        workload="megatron",
        ranks=4,
        tp=2,
        pp=2,
        grad_accum=2,
        layers=2,
        steps=2,
    )
    # An incident roots at rank 3. (Known weakness, seen about one run in six on a loaded
    # machine: the pipeline pair 0-2 may also be reported as sends facing each other, a
    # second incident, when neither shows an op of another communicator in flight.)
    hung = [i for i in incidents if i.resolution is not Resolution.op_completed]
    at_rank_3 = [i.root for i in hung if [c.global_rank for c in i.root.culprits] == [3]]
    assert at_rank_3, [i.root.summary for i in hung]
    for root in at_rank_3:
        assert root.verdict in (Verdict.stuck_outside_nccl, Verdict.rank_not_joined), root.summary


# ---- the first op of a job, and a slow rank ---------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="a rank stuck before its first collective never created the (lazily made) "
    "communicator, and here no other: NCCL never initialized the Profiler in its process, "
    "so it has no region and the Agent does not see it (a process with a region is named: "
    "rules/all_joined.before_first_collective); Inject's process and group lines would name "
    "it, which the Agent does not use for this yet",
)
def test_a_hang_at_the_job_s_first_op_names_the_rank(plugin, tmp_path):
    """Rank 1 stops in host code before the job's first collective, so it never creates the
    world communicator (made at first use): its process should be named all the same, and a
    stack asked of it."""
    incidents, _ = run_with_agent(
        plugin, tmp_path, ("skip:rank=1,op=0",), workload="ddp", ranks=4, steps=2
    )
    root = one_incident_naming(incidents, 1)
    assert root.verdict is Verdict.stuck_outside_nccl, root.summary
    (culprit,) = root.culprits
    assert isinstance(culprit.pid, int) and culprit.pid > 0, root.summary


def test_a_slow_rank_that_never_hangs_opens_no_incident(plugin, tmp_path):
    """Rank 2 is late by 0.5 s once every Step (a slow data loader), well below the
    threshold; each Step ends in a host sync, so the lag does not add up from Step to Step
    (ten late ops in a row would: peers enqueue asynchronously, and their oldest op then
    really waits past the threshold). A straggler at most, never a hang."""
    faults = tuple(f"sleep:rank=2,op={4 + 21 * i},seconds=0.5" for i in range(5))
    # a threshold 20 times the lateness: a 2-core machine loaded to 8 stalled the ranks for
    # more than 2 s, a real wait past a 2 s threshold that its report then rightly resolved
    incidents, reports = run_with_agent(
        plugin, tmp_path, faults, workload="ddp", ranks=4, steps=4, threshold_s=10.0
    )
    assert incidents == [], roots(incidents)
    assert {r.verdict for r in reports.values()} <= {Verdict.straggler}, [
        r.summary for r in reports.values()
    ]
