"""Incidents: hang reports grouped by cause (incidents.group_reports) on hand-built snapshots
diagnosed for real, their lifecycle in the IncidentStore (open once, update, root change,
merge, resolve on completion, on process end and by an operator, stacks attached), the API,
metrics, and the demo's fault end to end: the simulated NCCL driving the real plugin while
an Agent polls it gives one incident whose root names rank 1, its communicator and op."""

from __future__ import annotations

import json
import threading
import time

import httpx
import jsonschema
import msgspec
import pytest
from agent_home import hold_agent_lock
from e2e_sims import DEMO_FAULT_AGENT_SETTINGS, demo_fault_config
from hang_snapshots import (
    NOW,
    PP,
    REAL,
    TP,
    TP2,
    S,
    member,
    op,
    p2p,
    proc,
    reports_of,
    store_at,
    stuck_at,
    tp_then_dp,
)
from live_agent import LiveAgent

from comminsight.agent.hangs.incident_store import UnknownIncident
from comminsight.agent.hangs.incidents import group_reports, with_roles
from comminsight.sim import run_simulation
from comminsight_gen.models.hang_report_v1 import (
    CauseLink,
    HangReport,
    Incident,
    IncidentStack,
    IncidentStackFrame,
    IncidentStackStatus,
    IncidentStatus,
    ReportStatus,
    Resolution,
    Severity,
    Verdict,
)

SCHEMA = json.loads(
    (
        __import__("pathlib").Path(__file__).parents[2]
        / "protocols/hang-report/v1/hang-report.schema.json"
    ).read_text()
)
INCIDENT_SCHEMA = {**SCHEMA, "$ref": "#/$defs/Incident"}
for key in ("title", "type", "properties", "required", "not", "additionalProperties"):
    INCIDENT_SCHEMA.pop(key, None)


def valid(incident: Incident) -> Incident:
    """The incident as JSON obeys hang-report v1's Incident, combinations included."""
    jsonschema.validate(json.loads(msgspec.json.encode(incident)), INCIDENT_SCHEMA)
    return incident


# ---- scenes: hand-built snapshots, diagnosed for real ----


def tp_then_pp():
    """Rank 1 waits in tp:1 op 5 that rank 0 never issued; rank 2 waits in a Recv from
    rank 1 on pp:2: the pipeline wait follows from the tensor-parallel hang."""
    r0, r1, r2 = proc(0), proc(1), proc(2)
    return [
        member(0, enqueued=5, completed=5, comm_id=TP, name="tp:1", nranks=2, process=r0),
        stuck_at(1, 5, age=4 * S, comm_id=TP, name="tp:1", nranks=2, process=r1),
        member(0, 0, 0, comm_id=PP, name="pp:2", nranks=2, process=r1),
        member(
            1, 0, 0, p2p("Recv", 0), comm_id=PP, name="pp:2", nranks=2, process=r2,
            p2p_enqueued=8, p2p_completed=7,
        ),
    ]  # fmt: skip


def independent_fault(first_rank: int, comm_id: int, name: str):
    """Another tensor-parallel pair, its own rank stuck outside NCCL."""
    a, b = proc(first_rank), proc(first_rank + 1)
    return [
        stuck_at(0, 3, age=4 * S, comm_id=comm_id, name=name, nranks=2, process=a),
        member(1, enqueued=3, completed=3, comm_id=comm_id, name=name, nranks=2, process=b),
    ]


def by_comm(reports: list[HangReport]) -> dict[str, HangReport]:
    return {r.comm.comm_name: r for r in reports}


# ---- grouping ----


@pytest.mark.parametrize(
    "started, link",
    [
        # dp:2 blames rank 0, whose kernel never started there: it waits in tp:1
        (False, CauseLink.culprit_waits),
        # dp:2 blames no one; its rank 0 has had tp:1's op in flight since before
        (True, CauseLink.waited_there_first),
    ],
)
def test_a_hang_behind_a_shared_rank_is_a_consequence_of_the_root(started, link):
    reports = by_comm(reports_of(*tp_then_dp(started)))
    (group,) = group_reports(reports.values())
    assert group.root.report_id == reports["tp:1"].report_id
    [(behind, cause)] = group.consequences
    assert behind.report_id == reports["dp:2"].report_id
    assert cause.report_id == group.root.report_id
    assert cause.link is link
    assert "rank 0 (node-a, pid 1000)" in cause.reason and "tp:1" in cause.reason


def test_a_pipeline_wait_on_a_blocked_peer_is_a_p2p_consequence():
    reports = by_comm(reports_of(*tp_then_pp()))
    (group,) = group_reports(reports.values())
    assert group.root.comm.comm_name == "tp:1"
    assert group.root.verdict is Verdict.stuck_outside_nccl
    [(behind, cause)] = group.consequences
    assert behind.comm.comm_name == "pp:2" and cause.link is CauseLink.p2p_peer
    assert "rank 1 (node-a, pid 1001)" in cause.reason


def test_two_independent_faults_are_two_incidents():
    reports = reports_of(*tp_then_dp(), *independent_fault(5, TP2, "tp:9"))
    groups = group_reports(reports)
    assert len(groups) == 2
    roots = {g.root.comm.comm_name: g for g in groups}
    assert set(roots) == {"tp:1", "tp:9"}
    assert [r.comm.comm_name for r, _ in roots["tp:1"].consequences] == ["dp:2"]
    assert roots["tp:9"].consequences == []


def test_a_report_waiting_for_ranks_without_data_joins_the_only_root():
    """A single-node communicator whose rank 0 never created it: whoever that is, every other
    process the reports show is behind the tp:1 root (or its culprit)."""
    lazy = member(1, 1, 0, op(0, NOW - 3 * S), comm_id=PP, name="dp:7", nranks=2, process=proc(4))
    reports = by_comm(reports_of(*tp_then_dp(), lazy))
    assert reports["dp:7"].culprits[0].pid is msgspec.UNSET  # no data: unidentified
    (group,) = group_reports(reports.values())
    causes = {r.comm.comm_name: c for r, c in group.consequences}
    assert causes["dp:7"].link is CauseLink.missing_member
    assert causes["dp:7"].report_id == reports["tp:1"].report_id


def test_a_report_without_data_between_two_roots_stays_its_own():
    lazy = member(1, 1, 0, op(0, NOW - 3 * S), comm_id=PP, name="dp:7", nranks=2, process=proc(4))
    reports = reports_of(*tp_then_dp(), *independent_fault(5, TP2, "tp:9"), lazy)
    groups = group_reports(reports)
    assert sorted(g.root.comm.comm_name for g in groups) == ["dp:7", "tp:1", "tp:9"]


def test_reports_blaming_ranks_that_wait_on_each_other_have_one_root():
    """Rank 0 waits in tp op 5 for rank 1; rank 1 waits in a pp Recv for rank 0: each report
    blames a rank waiting in the other's op. The loop is cut at one root."""
    r0, r1 = proc(0), proc(1)
    reports = reports_of(
        stuck_at(0, 5, age=4 * S, comm_id=TP, name="tp:1", nranks=2, process=r0),
        member(1, 5, 5, comm_id=TP, name="tp:1", nranks=2, process=r1, p2p_enqueued=1),
        member(0, 0, 0, comm_id=PP, name="pp:2", nranks=2, process=r0),
        member(
            1, 0, 0, p2p("Recv", 0), comm_id=PP, name="pp:2", nranks=2, process=r1,
            p2p_enqueued=8, p2p_completed=7,
        ),
    )  # fmt: skip
    assert len(reports) == 2
    (group,) = group_reports(reports)
    assert len(group.consequences) == 1


def test_stragglers_and_resolved_reports_join_no_incident():
    reports = reports_of(*tp_then_dp())
    resolved = [msgspec.structs.replace(r, status=ReportStatus.resolved) for r in reports]
    assert group_reports(resolved) == []


def test_only_the_root_pages():
    reports = reports_of(*tp_then_dp(), *independent_fault(5, TP2, "tp:9"))
    roles = {r.comm.comm_name: r.severity for r in with_roles(reports, group_reports(reports))}
    assert roles == {"tp:1": Severity.critical, "tp:9": Severity.critical, "dp:2": Severity.info}


# ---- lifecycle ----


def resolved(report: HangReport, why: Resolution) -> HangReport:
    return msgspec.structs.replace(
        report,
        status=ReportStatus.resolved,
        resolution=why,
        resolved_mono_ns=NOW + S,
        resolved_real_ns=REAL + S,
    )


def test_an_incident_opens_once_and_updates_as_reports_join(tmp_path):
    store = store_at(tmp_path)
    first = reports_of(*tp_then_dp()[:2])  # the tp hang alone
    (opened,) = store.update(group_reports(first), {}, NOW, REAL)
    valid(opened)
    assert opened.status is IncidentStatus.open and opened.consequences == []
    assert store.update(group_reports(first), {}, NOW + S, REAL + S) == []  # nothing new
    both = reports_of(*tp_then_dp())
    (updated,) = store.update(group_reports(both), {}, NOW + 2 * S, REAL + 2 * S)
    assert updated.incident_id == opened.incident_id
    assert [c.comm.comm_name for c in updated.consequences] == ["dp:2"]
    assert updated.updated_real_ns == REAL + 2 * S and updated.opened_real_ns == REAL
    assert store.opened_total == {"stuck_outside_nccl": 1}
    assert list(store.incidents) == [opened.incident_id]


def test_the_root_changes_when_better_evidence_arrives_and_says_why(tmp_path):
    """The dp report is seen first and opens the incident as its root; when the tp report
    arrives, the dp report's rank turns out to be stuck in tp's op: tp becomes the root."""
    store = store_at(tmp_path)
    reports = by_comm(reports_of(*tp_then_dp()))
    (opened,) = store.update(group_reports([reports["dp:2"]]), {}, NOW, REAL)
    assert opened.root.comm.comm_name == "dp:2"
    (changed,) = store.update(group_reports(reports.values()), {}, NOW + S, REAL + S)
    valid(changed)
    assert changed.incident_id == opened.incident_id
    assert changed.root.comm.comm_name == "tp:1"
    [change] = changed.root_changes
    assert change.from_report_id == reports["dp:2"].report_id
    assert change.to_report_id == reports["tp:1"].report_id
    assert "follows from" in change.reason and "tp:1" in change.reason


def test_two_incidents_shown_to_share_a_cause_merge_into_the_older(tmp_path):
    store = store_at(tmp_path)
    reports = by_comm(reports_of(*tp_then_dp()))
    store.update(group_reports([reports["tp:1"]]), {}, NOW, REAL)
    # the dp report alone, later: its own incident for now
    both_alone = group_reports([reports["tp:1"]]) + group_reports([reports["dp:2"]])
    store.update(both_alone, {}, NOW + S, REAL + S)
    assert len(store.incidents) == 2
    store.update(group_reports(reports.values()), {}, NOW + 2 * S, REAL + 2 * S)
    kept = [i for i in store.incidents.values() if i.status is IncidentStatus.open]
    gone = [i for i in store.incidents.values() if i.status is IncidentStatus.resolved]
    assert len(kept) == 1 and len(gone) == 1
    assert kept[0].root.comm.comm_name == "tp:1"
    assert [c.comm.comm_name for c in kept[0].consequences] == ["dp:2"]
    valid(gone[0])
    assert gone[0].resolution is Resolution.superseded
    assert gone[0].merged_into == kept[0].incident_id


@pytest.mark.parametrize("why", [Resolution.op_completed, Resolution.comm_finalized])
def test_an_incident_resolves_when_its_root_does(tmp_path, why):
    store = store_at(tmp_path)
    reports = reports_of(*tp_then_dp())
    (opened,) = store.update(group_reports(reports), {}, NOW, REAL)
    held = {r.report_id: resolved(r, why) for r in reports}
    (closed,) = store.update([], held, NOW + S, REAL + S)
    valid(closed)
    assert closed.incident_id == opened.incident_id
    assert closed.status is IncidentStatus.resolved and closed.resolution is why
    assert closed.resolved_real_ns == REAL + S
    again = store.update(group_reports(reports), {}, NOW + 2 * S, REAL + 2 * S)
    if why is Resolution.comm_finalized:
        # its processes ended: reports of it still open are the teardown's rest, no new cause
        assert again == []
    else:
        # the same reports later open a new incident: a resolved one never reopens
        assert [i.incident_id for i in again] == [f"{opened.incident_id}-2"]


def test_an_operator_resolves_an_incident_once(tmp_path):
    store = store_at(tmp_path)
    (opened,) = store.update(group_reports(reports_of(*tp_then_dp())), {}, NOW, REAL)
    closed = store.resolve_by_operator(opened.incident_id, "restarted the job", NOW + S, REAL + S)
    valid(closed)
    assert closed.resolution is Resolution.operator
    assert closed.resolution_note == "restarted the job"
    assert store.resolve_by_operator(opened.incident_id, "again", NOW, REAL) == closed
    with pytest.raises(UnknownIncident, match="no incident nope"):
        store.resolve_by_operator("nope", None, NOW, REAL)


def stack(rank: int, pid: int, **kw) -> IncidentStack:
    return IncidentStack(
        rank=rank,
        host="node-a",
        pid=pid,
        status=IncidentStackStatus.captured,
        captured_at_real_ns=REAL,
        thread_id=1,
        frames=[
            IncidentStackFrame(file="train.py", line=76, function="main", code="time.sleep(9)")
        ],
        **kw,
    )


def test_stacks_attach_to_an_incident_and_survive_a_restart(tmp_path):
    store = store_at(tmp_path)
    (opened,) = store.update(group_reports(reports_of(*tp_then_dp())), {}, NOW, REAL)
    seen = []
    store.subscribe(seen.append)
    with_stack = store.attach_stacks(opened.incident_id, [stack(1, 1001)], REAL + S)
    valid(with_stack)
    assert [s.pid for s in with_stack.stacks] == [1001]
    replaced = store.attach_stacks(opened.incident_id, [stack(1, 1001)], REAL + 2 * S)
    assert len(replaced.stacks) == 1  # one entry per process and thread
    with pytest.raises(UnknownIncident):
        store.attach_stacks("nope", [stack(1, 1001)], REAL)
    with pytest.raises(ValueError, match="at most 256"):
        store.attach_stacks(opened.incident_id, [stack(1, p) for p in range(2, 300)], REAL)
    assert len(store.incidents[opened.incident_id].stacks) == 1  # nothing lost
    again = store_at(tmp_path)
    again.load()
    assert again.incidents == store.incidents
    assert seen == []  # stacks are no new root


def test_an_invalid_incident_file_is_set_aside_and_named(tmp_path):
    store = store_at(tmp_path)
    (opened,) = store.update(group_reports(reports_of(*tp_then_dp())), {}, NOW, REAL)
    (store.dir / "inc-garbage.json").write_text("{not json")
    again = store_at(tmp_path)
    again.load()
    assert list(again.incidents) == [opened.incident_id]
    assert list(again.errors) == ["inc-garbage.json"]
    assert (store.dir / "invalid" / "inc-garbage.json").exists()


def test_new_roots_are_announced_to_subscribers(tmp_path):
    store = store_at(tmp_path)
    seen = []
    store.subscribe(seen.append)
    store.subscribe(lambda incident: 1 / 0)  # a broken listener stops nothing
    reports = by_comm(reports_of(*tp_then_dp()))
    store.update(group_reports([reports["dp:2"]]), {}, NOW, REAL)
    store.update(group_reports(reports.values()), {}, NOW + S, REAL + S)
    assert [i.root.comm.comm_name for i in seen] == ["dp:2", "tp:1"]


# ---- the Agent: API, metrics and the demo's fault through the real plugin ----

TOKEN = "incident-token"


@pytest.fixture
def agent_with_incident(tmp_path):
    lock = hold_agent_lock(tmp_path)
    with LiveAgent(tmp_path, polling=False, agent_token=TOKEN) as live:
        reports = with_roles(reports_of(*tp_then_dp()), group_reports(reports_of(*tp_then_dp())))

        def put():
            for r in reports:
                live.service.hangs.save(r)
            groups = group_reports(reports)
            live.service.incidents.update(groups, live.service.hangs.reports, NOW, REAL)
            live.service.metrics.open_incidents = live.service.incidents.open_by_verdict()
            live.service.metrics.incidents_opened = live.service.incidents.opened_total

        live.call(put)
        yield live, reports
    lock.close()


def test_the_api_serves_incidents_with_their_reports_and_resolves_them(agent_with_incident):
    live, reports = agent_with_incident
    url = live.base_url
    listed = httpx.get(f"{url}/api/v1/incidents").json()
    assert listed["total"] == 1
    incident_id = listed["items"][0]["incident_id"]
    detail = httpx.get(f"{url}/api/v1/incidents/{incident_id}").json()
    assert [r["comm"]["comm_name"] for r in detail["reports"]] == ["tp:1", "dp:2"]
    assert [r["severity"] for r in detail["reports"]] == ["critical", "info"]
    missing = httpx.get(f"{url}/api/v1/incidents/inc-nope")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    bad = httpx.get(f"{url}/api/v1/incidents/bad%20id")
    assert bad.status_code == 400 and bad.json()["details"][0]["name"] == "incident_id"
    resolve = f"{url}/api/v1/incidents/{incident_id}/resolve"
    assert httpx.post(resolve).status_code == 401
    garbage = httpx.post(
        resolve,
        content=b'{"note": 5}',
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert garbage.status_code == 422 and "ResolveIncidentRequest" in garbage.json()["message"]
    assert httpx.get(f"{url}/api/v1/incidents").json()["total"] == 1  # still open
    done = httpx.post(
        resolve, json={"note": "fixed rank 1"}, headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert done["status"] == "resolved" and done["resolution"] == "operator"
    assert httpx.get(f"{url}/api/v1/incidents").json()["total"] == 0
    hangs = httpx.get(f"{url}/api/v1/hangs", params={"status": "all"}).json()["items"]
    assert {h["resolution"] for h in hangs} == {"operator"}  # its reports with it
    assert {h["resolution_note"] for h in hangs} == {"fixed rank 1"}


def test_metrics_count_open_incidents_by_root_verdict(agent_with_incident):
    from prometheus_client.parser import text_string_to_metric_families

    live, _ = agent_with_incident
    text = httpx.get(f"{live.base_url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in families["comminsight_incidents_open"].samples] == [
        ({"verdict": "stuck_outside_nccl"}, 1.0)
    ]
    opened = [s for s in families["comminsight_incidents"].samples if s.name.endswith("_total")]
    assert [(s.labels, s.value) for s in opened] == [({"verdict": "stuck_outside_nccl"}, 1.0)]
    assert "do not page" in families["comminsight_incidents_open"].documentation


@pytest.mark.slow
def test_the_demo_fault_gives_one_incident_rooted_at_rank_1(plugin, tmp_path):
    """`make demo`'s fault: 8 ranks of TP x PP x DP on two simulated nodes, rank 1 skips its
    6th tensor-parallel all-reduce. Every communicator that hangs is reported; all the
    reports form one incident whose root names rank 1, tensor_parallel and the AllReduce."""
    lock = hold_agent_lock(tmp_path)
    config = demo_fault_config(plugin, tmp_path)
    with LiveAgent(tmp_path, **DEMO_FAULT_AGENT_SETTINGS) as live:
        result = {}
        sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
        sim.start()
        sim.join()
        live.wait_passes(3)
        incidents = live.call(lambda: list(live.service.incidents.incidents.values()))
        reports = live.call(lambda: dict(live.service.hangs.reports))
    lock.close()
    assert not result["sim"].errors, result["sim"].errors
    assert len(reports) >= 2, [r.summary for r in reports.values()]
    assert len(incidents) == 1, [(i.root.summary, i.resolution) for i in incidents]
    incident = valid(incidents[0])
    root = incident.root
    assert [c.global_rank for c in root.culprits] == [1]
    assert root.comm.comm_name.startswith("tensor_parallel") and root.op.func == "AllReduce"
    grouped = {root.report_id, *(c.report_id for c in incident.consequences)}
    assert grouped == set(reports), "every report belongs to the one incident"
    assert [r.severity for r in reports.values()].count(Severity.critical) == 1
    assert time.time_ns() >= incident.opened_real_ns
