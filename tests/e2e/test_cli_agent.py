"""`comminsight status|comms|inflight|hangs|steps` as a user runs them: a real CLI process
talking to a live agent through the generated client."""

from __future__ import annotations

import json
import os
import sys

import forked_python
import msgspec
import pytest
from agent_home import hold_agent_lock, run_sim
from agent_processes import cli
from home_files import FIXTURES, write_step_summaries
from live_agent import LiveAgent

from comminsight_gen.models.hang_report_v1 import HangReport

# a minute or more of simulated jobs and Agents: scheduled first (conftest)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli-home")
    lock = hold_agent_lock(home)
    truths = run_sim(home)
    write_step_summaries(home)
    with LiveAgent(home, polling=False) as live:
        report = msgspec.json.decode(
            (FIXTURES / "hang-report" / "v1" / "valid" / "rank-not-joined-open.json").read_bytes(),
            type=HangReport,
        )
        live.call(live.service.hangs.save, report)
        yield live, truths, report
    lock.close()


def test_status_shows_health_and_processes(agent):
    live, truths, _ = agent
    out = cli("status", url=live.base_url)
    assert out.returncode == 0, out.stderr
    assert "Profiled processes" in out.stdout and "degraded" in out.stdout
    assert all(str(t.run["pid"]) in out.stdout for t in truths)
    data = json.loads(cli("status", "--json", url=live.base_url).stdout)
    assert data["health"]["processes_total"] == len(truths)
    assert sorted(p["global_rank"] for p in data["node"]["processes"]) == [0, 1, 2, 3]


def test_comms_shows_the_communicator_totals(agent):
    live, truths, _ = agent
    completed = [op for t in truths for op in t.ops if op["completed"]]
    out = cli("comms", "--full", url=live.base_url)
    assert out.returncode == 0, out.stderr
    assert "default_pg:0" in out.stdout and str(len(completed)) in out.stdout
    data = json.loads(cli("comms", "--json", url=live.base_url).stdout)
    assert [c["ops_completed_total"] for c in data] == [len(completed)]
    assert data[0]["ranks"] is None
    assert json.loads(cli("comms", "--json", "--state", "active", url=live.base_url).stdout) == []


def test_inflight_hangs_and_steps(agent):
    live, _, report = agent
    out = cli("inflight", url=live.base_url)
    assert out.returncode == 0 and "In flight: 0" in out.stdout
    out = cli("hangs", url=live.base_url)
    assert out.returncode == 0 and "rank_not_joined" in out.stdout
    one = json.loads(cli("hangs", "--id", report.report_id, "--json", url=live.base_url).stdout)
    assert one["report_id"] == report.report_id
    detail = cli("hangs", "--id", report.report_id, url=live.base_url)
    assert "Evidence per rank" in detail.stdout
    steps = json.loads(cli("steps", "--rank", "2", "--json", url=live.base_url).stdout)
    assert steps["total"] == 5 and {s["global_rank"] for s in steps["items"]} == {2}
    assert "Step summaries: 20" in cli("steps", url=live.base_url).stdout


def test_errors_are_named_and_exit_1(agent):
    live, _, _ = agent
    missing = cli("hangs", "--id", "no-such-report", url=live.base_url)
    assert missing.returncode == 1 and "404 not_found" in missing.stderr
    bad = cli("hangs", "--id", "bad id", url=live.base_url)
    assert bad.returncode == 1 and "invalid_parameter" in bad.stderr
    down = cli("status", url="http://127.0.0.1:9")
    assert down.returncode == 1 and "cannot reach the agent at http://127.0.0.1:9" in down.stderr


def test_incidents_root_first_consequences_folded_tree_and_one(agent):
    from comminsight.agent.hangs.incidents import group_reports
    from comminsight_gen.models.hang_report_v1 import (
        IncidentStack,
        IncidentStackFrame,
        IncidentStackStatus,
    )

    live, _, report = agent
    (incident,) = live.call(
        live.service.incidents.update, group_reports([report]), {}, 1, report.detected_real_ns
    )
    frame = IncidentStackFrame(file="train.py", line=76, function="main", code="time.sleep(30)")
    stack = IncidentStack(
        rank=5,
        host="node-a02",
        pid=7711,
        status=IncidentStackStatus.captured,
        captured_at_real_ns=report.detected_real_ns,
        frames=[frame],
    )
    live.call(
        live.service.incidents.attach_stacks, incident.incident_id, [stack], incident.opened_real_ns
    )
    out = cli("incidents", url=live.base_url)
    assert out.returncode == 0, out.stderr
    assert "Incidents (open): 1" in out.stdout and incident.incident_id in out.stdout
    assert (
        "root cause: rank 2 (node-a02, pid 7711) on default_pg:0, AllReduce seq 18607: "
        "rank_not_joined" in out.stdout
    )
    assert "rank_not_joined" in out.stdout
    # a narrow pipe: every line fits, nothing is cut (wrapped at spaces, long words folded)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}

    def narrow(*args: str) -> str:
        done = forked_python.run(
            [sys.executable, "-m", "comminsight.cli", "incidents", *args, "--url", live.base_url],
            capture_output=True,
            text=True,
            env={**env, "COLUMNS": "40"},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    table = narrow("--tree")
    assert max(len(line) for line in table.splitlines()) <= 40
    assert squeezed(report.summary) in squeezed(table)
    assert squeezed(f"{report.report_id} (root)") in squeezed(table)
    # whole, one to a line, in plain format
    row = next(
        line for line in narrow("--format", "plain").splitlines() if "\t" + report.report_id in line
    )
    assert f"\t{report.summary}\t" in row
    detail = cli("incidents", "--id", incident.incident_id, url=live.base_url)
    assert "Evidence of the root" in detail.stdout
    assert "rank 5 (node-a02, pid 7711) at train.py:76 in main: time.sleep(30)" in detail.stdout
    body = json.loads(
        cli("incidents", "--id", incident.incident_id, "--json", url=live.base_url).stdout
    )
    assert body["incident"]["incident_id"] == incident.incident_id
    assert [r["report_id"] for r in body["reports"]] == [report.report_id]
    missing = cli("incidents", "--id", "inc-nope", url=live.base_url)
    assert missing.returncode == 1 and "404 not_found" in missing.stderr


def squeezed(text: str) -> str:
    """`text` without whitespace: what is left of it however a table format wrapped it."""
    return "".join(text.split())
