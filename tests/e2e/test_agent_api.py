"""The Agent Master API over real HTTP: simulated NCCL -> real plugin -> SHM -> AgentService ->
aiohttp on 127.0.0.1. What the API and /metrics report equals what the simulation issued;
bad requests, auth and missing resources get the API's Error body."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import httpx
import msgspec
import pytest
from agent_home import ENV, hold_agent_lock, run_sim
from home_files import FIXTURES
from live_agent import LiveAgent
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from comminsight.agent.api.params import openapi_document
from comminsight.log_segments import segments_in
from comminsight_gen.models.hang_report_v1 import HangReport

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def idle_agent(tmp_path_factory):
    """An agent that made one pass over an empty home and then only serves: hang reports the
    tests add stay as they are (a polling agent would resolve them, their communicator being
    nowhere on this node)."""
    with LiveAgent(tmp_path_factory.mktemp("idle-home"), polling=False, agent_token=TOKEN) as live:
        yield live


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    home = tmp_path_factory.mktemp("api-home")
    lock = hold_agent_lock(home)  # producers leave their SHM files to an agent
    # Steps enough for the job's cycle to show (two Steps after a warm-up one do not); every
    # op timed on the GPU, whatever the default: the recent ops are checked against the
    # simulated kernels' spans to the nanosecond, in the order the kernels completed
    truths = run_sim(home, steps=6, env=(*ENV, ("COMMINSIGHT_PROFILER_GPU_TIMING", "all")))
    # a garbage file and a truncated copy of a real one, among the real ones
    real = sorted((home / "shms").glob("*.shm"))[0]
    (home / "shms" / "ci-garbage-1-1.shm").write_bytes(b"not a profiler region" * 300)
    (home / "shms" / "ci-truncated-2-2.shm").write_bytes(real.read_bytes()[:5000])
    with LiveAgent(home, agent_token=TOKEN, agent_recent_ops=50) as live:
        live.wait_passes(2)
        yield live, truths
    lock.close()


def get(live, path, **params):
    return httpx.get(live.base_url + path, params=params, timeout=30)


def completed_ops(truths):
    return [op for t in truths for op in t.ops if op["completed"]]


def assert_error(response, status, code, name=None):
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["message"]
    if name is not None:
        assert name in [d["name"] for d in body["details"]], body


def test_health_and_node_list_every_profiled_process(agent):
    live, truths = agent
    health = get(live, "/api/v1/health").json()
    assert health["processes_total"] == len(truths) and health["communicators_total"] == 1
    assert health["open_hangs"] == 0 and health["nodes_total"] == 1
    assert health["status"] == "degraded"  # the simulated ranks have exited
    assert any("exited" in reason for reason in health["reasons"])
    quarantined = [r for r in health["reasons"] if "quarantined" in r]
    assert len(quarantined) == 2, health["reasons"]
    assert any("ci-garbage-1-1.shm" in r for r in quarantined)
    assert any("ci-truncated-2-2.shm" in r for r in quarantined)
    node = get(live, "/api/v1/node").json()
    assert sorted(p["global_rank"] for p in node["processes"]) == list(range(len(truths)))
    assert {p["pid"] for p in node["processes"]} == {t.run["pid"] for t in truths}
    assert all(p["ingest_state"] == "draining" and not p["alive"] for p in node["processes"])
    assert all(p["records_overwritten_total"] == 0 for p in node["processes"])
    nodes = get(live, "/api/v1/nodes").json()
    assert [n["node_name"] for n in nodes["items"]] == [node["node_name"]]
    assert get(live, "/api/v1/nodes", state="connected").json()["total"] == 0


def test_communicator_totals_equal_the_simulation(agent):
    live, truths = agent
    ops = completed_ops(truths)
    page = get(live, "/api/v1/communicators").json()
    assert page["total"] == len({op["comm_id"] for op in ops})
    comm = page["items"][0]
    assert comm["ranks"] is None  # summary view by default in the list
    assert comm["ops_completed_total"] == len(ops)
    assert comm["bytes_completed_total"] == sum(op["bytes"] for op in ops)
    assert comm["complete"] and comm["ranks_seen"] == list(range(len(truths)))
    assert comm["state"] == "finalized" and comm["name"] == "default_pg:0"
    full = get(live, f"/api/v1/communicators/{comm['comm_id']}").json()
    for rank in full["ranks"]:
        mine = [op for op in truths[rank["comm_rank"]].ops if op["completed"]]
        assert rank["progress"]["collectives"]["last_completed_seq"] == len(mine) - 1
        assert rank["progress"]["inflight_count"] == 0
    assert get(live, "/api/v1/communicators", name_contains="nope").json()["total"] == 0
    assert get(live, "/api/v1/communicators", state="active").json()["total"] == 0
    assert get(live, "/api/v1/communicators", rank=0).json()["total"] == 1
    after = get(live, "/api/v1/communicators", cursor=comm["comm_id"]).json()
    assert after["items"] == [] and after["next_cursor"] is None


def test_recent_ops_are_the_newest_completed_ops_of_each_rank(agent):
    live, truths = agent
    for rank, truth in enumerate(truths):
        expected = [op for op in truth.ops if op["completed"]][-50:][::-1]
        got = get(live, "/api/v1/ops/recent", rank=rank, limit=1000).json()["items"]
        assert len(got) == 50  # agent_recent_ops per process
        assert [(o["func"], o["size_bytes"], o["count"]) for o in got] == [
            (op["func"], op["bytes"], op["count"]) for op in expected
        ]
        assert all(o["global_rank"] == rank and o["timing_source"] == "kernel_gpu" for o in got)
        # latencies: the GPU span the simulated kernels took, to the nanosecond
        for o, op in zip(got, expected, strict=True):
            assert (o["gpu_start_ns"], o["gpu_end_ns"]) == (
                op["gpu_start_tick"],
                op["gpu_end_tick"],
            )
            assert o["duration_us"] == pytest.approx(
                (op["gpu_end_tick"] - op["gpu_start_tick"]) / 1e3
            )
            assert o["busbw_gbs"] > 0 and o["seq"] == op["seq"]
    in_window = [op for t in truths for op in [o for o in t.ops if o["completed"]][-50:]]
    for func in ("AllReduce", "Broadcast"):
        got = get(live, "/api/v1/ops/recent", func=func, limit=1000).json()["items"]
        assert len(got) == sum(1 for op in in_window if op["func"] == func)
        assert all(o["func"] == func for o in got)
        assert all(o["root"] == 0 for o in got if func == "Broadcast")
    assert get(live, "/api/v1/ops/recent", func="Gather").json()["items"] == []
    assert len(get(live, "/api/v1/ops/recent", limit=7).json()["items"]) == 7


def test_nothing_in_flight_after_a_clean_run(agent):
    live, _ = agent
    body = get(live, "/api/v1/inflight").json()
    assert body["items"] == [] and body["total"] == 0


def test_metrics_count_what_the_simulation_completed_and_pass_promtool(agent):
    live, truths = agent
    response = get(live, "/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    samples = [s for s in families["comminsight_ops"].samples if s.name == "comminsight_ops_total"]
    by_func = Counter()
    for s in samples:
        assert s.labels["comm"] == "default_pg:0"
        by_func[s.labels["op_type"]] += s.value
    assert by_func == Counter(op["func"] for op in completed_ops(truths))
    refused = families["comminsight_agent_shm_files_refused"].samples[0]
    assert refused.value == 2  # the garbage and the truncated file; the rest were served
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=response.text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_openapi_document_is_the_bundled_protocol(agent):
    live, _ = agent
    assert get(live, "/openapi.json").json() == openapi_document()


@pytest.mark.parametrize(
    "path, params, name",
    [
        ("/api/v1/communicators/ABCDEF0123456789", {}, "comm_id"),
        ("/api/v1/communicators/123", {}, "comm_id"),
        ("/api/v1/communicators", {"limit": "0"}, "limit"),
        ("/api/v1/communicators", {"limit": "ten"}, "limit"),
        ("/api/v1/communicators", {"state": "sleeping"}, "state"),
        ("/api/v1/communicators", {"cursor": "xyz"}, "cursor"),
        ("/api/v1/inflight", {"min_age_ms": "-5"}, "min_age_ms"),
        ("/api/v1/inflight", {"rank": "1.5"}, "rank"),
        ("/api/v1/ops/recent", {"func": "All Reduce"}, "func"),
        ("/api/v1/ops/recent", {"limit": "1001"}, "limit"),
        ("/api/v1/steps", {"cursor": "3-4"}, "cursor"),
        ("/api/v1/steps", {"since_step": "99999999999999999999"}, "since_step"),
        ("/api/v1/hangs", {"status": "closed"}, "status"),
        ("/api/v1/hangs/..bad", {}, "report_id"),
        ("/api/v1/nodes", {"cursor": "-node"}, "cursor"),
    ],
)
def test_malformed_ids_and_query_values_are_400_naming_the_parameter(agent, path, params, name):
    live, _ = agent
    assert_error(get(live, path, **params), 400, "invalid_parameter", name)


def test_a_repeated_parameter_and_unknown_things_are_refused(agent):
    live, _ = agent
    r = httpx.get(live.base_url + "/api/v1/inflight?limit=1&limit=2")
    assert_error(r, 400, "invalid_parameter", "limit")
    assert_error(get(live, "/api/v1/communicators/0123456789abcdef"), 404, "not_found", "comm_id")
    assert_error(get(live, "/api/v1/hangs/no-such-report"), 404, "not_found", "report_id")
    assert_error(get(live, "/api/v1/nothing-here"), 404, "not_found")
    r = httpx.delete(live.base_url + "/api/v1/health")
    assert r.status_code == 405 and r.json()["code"] == "invalid_parameter"


def add_report(live, name: str) -> HangReport:
    report = msgspec.json.decode(
        (FIXTURES / "hang-report" / "v1" / "valid" / name).read_bytes(), type=HangReport
    )
    live.call(live.service.hangs.save, report)
    return report


def resolve(live, report_id, headers=None, **kwargs):
    return httpx.post(
        f"{live.base_url}/api/v1/hangs/{report_id}/resolve",
        headers=headers or {},
        timeout=30,
        **kwargs,
    )


def test_resolve_needs_the_bearer_token(idle_agent):
    live = idle_agent
    report = add_report(live, "rank-not-joined-open.json")
    rid = report.report_id
    for headers, reason in [
        ({}, "required"),
        ({"Authorization": TOKEN}, "must be"),
        ({"Authorization": "Basic dXNlcjpwdw=="}, "must be"),
        ({"Authorization": "Bearer wrong"}, "does not match"),
    ]:
        r = resolve(live, rid, headers)
        assert_error(r, 401, "unauthorized", "Authorization")
        assert r.headers["WWW-Authenticate"] == 'Bearer realm="comminsight"'
        assert reason in r.json()["details"][0]["reason"]
    listed = get(live, "/api/v1/hangs").json()
    assert [h["report_id"] for h in listed["items"]] == [rid]  # still open


def test_an_operator_resolves_a_report_once(idle_agent):
    live = idle_agent
    report = add_report(live, "rank-not-joined-open.json")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    bad = resolve(live, report.report_id, {**auth, "Content-Type": "application/json"}, content="{")
    assert_error(bad, 400, "malformed_body")
    extra = resolve(live, report.report_id, auth, json={"note": "x", "why": "y"})
    assert_error(extra, 422, "unprocessable")
    long_note = resolve(live, report.report_id, auth, json={"note": "n" * 2000})
    assert_error(long_note, 422, "unprocessable", "/note")
    done = resolve(live, report.report_id, auth, json={"note": "restarted the job"})
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["status"] == "resolved" and body["resolution"] == "operator"
    assert body["resolution_note"] == "restarted the job"
    again = resolve(live, report.report_id, auth)
    assert again.json() == body  # idempotent
    assert get(live, "/api/v1/hangs").json()["total"] == 0
    assert get(live, "/api/v1/hangs", status="resolved").json()["items"][0] == body
    on_disk = json.loads(
        (live.service.home / "metadata" / "hangs" / f"{report.report_id}.json").read_text()
    )
    assert on_disk["resolution"] == "operator"
    # diagnosis finding the same hang again does not reopen what an operator closed
    assert live.call(live.service.hangs.save, report) is False
    assert get(live, f"/api/v1/hangs/{report.report_id}").json()["status"] == "resolved"


def test_mutations_are_forbidden_without_a_configured_token(tmp_path):
    with LiveAgent(tmp_path) as live:
        r = httpx.post(live.base_url + "/api/v1/archive/flush", headers={"Authorization": "x"})
        assert_error(r, 403, "forbidden")
        assert "COMMINSIGHT_AGENT_TOKEN" in r.json()["message"]
        assert_error(resolve(live, "any-report"), 403, "forbidden")


def wait_for_the_engine(live, truths) -> None:
    """Until the semantic engine has closed every exited rank's stream."""
    engine = live.service.engine
    wait_until(
        lambda: engine.idle() and engine.steps_written >= len(truths),
        60,
        lambda: f"the engine's summaries ({engine.steps_written} written)",
    )


def test_archive_status_and_flush(agent):
    live, truths = agent
    wait_for_the_engine(live, truths)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert_error(httpx.post(live.base_url + "/api/v1/archive/flush"), 401, "unauthorized")
    flushed = httpx.post(live.base_url + "/api/v1/archive/flush", headers=auth)
    assert flushed.status_code == 202 and set(flushed.json()) == {
        "queued_files",
        "queued_bytes",
        "requested_real_ns",
        "already_running",
    }
    status = get(live, "/api/v1/archive").json()
    home = live.service.home
    # sealed segments and the engine's sealed step summaries (the ranks have exited)
    sealed = segments_in(home / "inspector_logs")
    sealed += list((home / "semantics" / "step").glob("*.jsonl"))
    assert status["provider"] == "local"
    assert status["url"] == str(live.service.home / "archives")
    assert status["disk_used_bytes"] >= sum(p.stat().st_size for p in sealed)
    assert status["failed_uploads_total"] == 0 and status["last_error"] is None

    def flushed() -> dict | None:  # the flush runs in the background
        status = get(live, "/api/v1/archive").json()
        return status if status["pending_files"] == 0 and not status["flush_in_progress"] else None

    status = wait_until(flushed, 60, lambda: f"the flush done: {get(live, '/api/v1/archive').text}")
    assert status["uploaded_files_total"] == len(sealed) > 0


def test_steps_are_served_from_the_summary_files_with_keyset_pages(idle_agent):
    live = idle_agent
    step_dir = live.service.home / "semantics" / "step"
    step_dir.mkdir(parents=True, exist_ok=True)
    fixture = FIXTURES / "step-summary" / "v1" / "valid" / "ddp-warmup-anomalies.json"
    base = json.loads(fixture.read_text())
    lines = []
    for step in range(3):
        for rank in (1, 0):
            lines.append(json.dumps({**base, "step_index": step, "global_rank": rank}))
    lines.insert(2, '{"not": "a step summary"}')
    (step_dir / "rank-all.jsonl").write_text("\n".join(lines) + "\n")
    first = get(live, "/api/v1/steps", limit=4).json()
    assert first["total"] == 6
    assert [(s["step_index"], s["global_rank"]) for s in first["items"]] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert first["next_cursor"] == "1:1"
    rest = get(live, "/api/v1/steps", limit=4, cursor=first["next_cursor"]).json()
    assert [(s["step_index"], s["global_rank"]) for s in rest["items"]] == [(2, 0), (2, 1)]
    assert rest["next_cursor"] is None
    only = get(live, "/api/v1/steps", rank=1, since_step=1).json()
    assert [(s["step_index"], s["global_rank"]) for s in only["items"]] == [(1, 1), (2, 1)]
    assert live.service.step_files.invalid_lines() == 1


def test_the_semantic_engine_writes_step_summaries_the_api_serves(agent):
    live, truths = agent
    engine = live.service.engine
    assert engine.name == "semantic engine"
    wait_for_the_engine(live, truths)
    page = get(live, "/api/v1/steps", limit=1000).json()
    assert {s["produced_by"]["mode"] for s in page["items"]} == {"live"}
    assert page["total"] == sum(len(t.records["step"]) for t in truths)
    for rank, truth in enumerate(truths):
        mine = [s for s in page["items"] if s["global_rank"] == rank]
        assert len(mine) == len(truth.records["step"]), (rank, mine)
        ops = [op for op in truth.ops if op["completed"] and op["step"] is not None]
        assert sum(s["op_count"] for s in mine) == len(ops)
        assert sum(s["total_bytes"] for s in mine) == sum(op["bytes"] for op in ops)
    assert engine.dropped_records == 0
    live.wait_passes(2)
    families = {f.name: f for f in text_string_to_metric_families(get(live, "/metrics").text)}
    assert families["comminsight_engine_steps"].samples[0].value == page["total"]
    assert families["comminsight_engine_records_dropped"].samples[0].value == 0
    # the node's GPUs' Steps under their job and host (the default metrics level): as many
    # as they wrote, as long as they took
    durations = {
        s.name: s
        for s in families["comminsight_step_duration_seconds"].samples
        if s.labels.get("le") in (None, "+Inf")
    }
    assert "rank" not in durations["comminsight_step_duration_seconds_count"].labels
    assert durations["comminsight_step_duration_seconds_count"].value == page["total"]
    assert durations["comminsight_step_duration_seconds_bucket"].value == page["total"]
    assert durations["comminsight_step_duration_seconds_sum"].value == pytest.approx(
        sum(s["duration_ns"] for s in page["items"]) / 1e9
    )


def test_with_the_engine_off_the_hook_only_counts(tmp_path):
    lock = hold_agent_lock(tmp_path)
    truths = run_sim(tmp_path)
    with LiveAgent(tmp_path, semantic_enable=False) as live:
        live.wait_passes(2)
        engine = live.service.engine
        assert engine.name.startswith("pass-through")
        by_rank = {gpu.global_rank: n for gpu, n in engine.records_by_gpu.items()}
        assert by_rank == {r: len(completed_ops([t])) for r, t in enumerate(truths)}
        assert {gpu.global_rank for gpu in engine.finished_gpus} == set(range(len(truths)))
        assert get(live, "/api/v1/steps").json()["total"] == 0
    lock.close()
