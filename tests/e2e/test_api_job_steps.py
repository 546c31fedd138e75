"""GET /api/v1/job-steps over real HTTP: a node Agent answers for the step summaries of its
node; a master (real master and slave processes, gRPC between them) reconciles its own with
a slave's whose Agent started later and numbered the same iterations lower."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from live_agent import LiveAgent
from waiting import wait_until

from comminsight_gen.models.agent_master_api_v1 import JobStepPage

FIXTURE = (
    Path(__file__).parents[2]
    / "contract-tests/fixtures/json/step-summary/v1/valid/job-comm-seqs.json"
)
BASE = json.loads(FIXTURE.read_text())
DP = "d" + "0" * 15  # one data-parallel communicator across the nodes
DP_OPS = 4
LATE = 3  # the second node's Agent saw the job from its 4th iteration on


def summary(host: str, rank: int, iteration: int, local: int, job="job-7", shift=0) -> str:
    first = 10 + iteration * DP_OPS + shift
    record = {
        **BASE,
        "job_id": job,
        "host": host,
        "global_rank": rank,
        "pid": 500 + rank,
        "step_index": local,
        "start_real_ns": 1_000_000 * iteration,
        "end_real_ns": 1_000_000 * iteration + 900_000,
        "comm_seqs": [
            {
                "kind": "coll",
                "comm_id": DP,
                "first_seq": first,
                "last_seq": first + DP_OPS - 1,
                "op_count": DP_OPS,
            }
        ],
    }
    return json.dumps(record) + "\n"


def node_lines(host: str, rank: int, iterations, first_iteration: int, **kw) -> str:
    return "".join(summary(host, rank, it, it - first_iteration, **kw) for it in iterations)


def get(base: str, **params):
    return httpx.get(base + "/api/v1/job-steps", params=params, timeout=30)


def page(response) -> JobStepPage:
    import msgspec

    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=JobStepPage)


@pytest.fixture(scope="module")
def node_agent(tmp_path_factory):
    home = tmp_path_factory.mktemp("job-steps-home")
    with LiveAgent(home, polling=False) as live:
        yield live


def test_a_node_agent_reconciles_the_summaries_it_holds_and_pages_them(node_agent):
    step_dir = node_agent.service.home / "semantics" / "step"
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / "a.jsonl").write_text(node_lines("node-a", 0, range(10), 0))
    (step_dir / "b.jsonl.partial").write_text(
        node_lines("node-b", 1, range(LATE, 10), LATE) + "garbage\n"
    )
    base = node_agent.base_url
    first = page(get(base, limit=4))
    assert first.job_id == "job-7" and [j.job_id for j in first.jobs] == ["job-7"]
    assert {(n.node_name, n.state.value, n.offset) for n in first.nodes} == {
        ("node-a", "reference", 0),
        ("node-b", "linked", LATE),
    }
    assert first.disagreements == [] and first.invalid_lines == 1
    assert first.total == 10 and [s.job_step_index for s in first.items] == [0, 1, 2, 3]
    assert first.next_cursor == "3"
    step3 = first.items[3]
    assert {(g.node_name, g.local_step_index) for g in step3.gpus} == {("node-a", 3), ("node-b", 0)}
    rest = page(get(base, cursor=first.next_cursor, limit=100))
    assert [s.job_step_index for s in rest.items] == list(range(4, 10))
    assert rest.next_cursor is None
    late = page(get(base, since_step=8, job="job-7"))
    assert late.total == 2 and [s.job_step_index for s in late.items] == [8, 9]

    # appended later: read incrementally, one op off on node-b -> named
    with open(step_dir / "b.jsonl.partial", "a") as f:
        f.write(summary("node-b", 1, 10, 10 - LATE, shift=1))
    with open(step_dir / "a.jsonl", "a") as f:
        f.write(summary("node-a", 0, 10, 10))
    after = page(get(base, since_step=10))
    assert [s.job_step_index for s in after.items] == [10]
    [d] = after.disagreements
    assert d.kind.value == "boundary_mismatch" and d.job_step_index == 10 and d.comm_id == DP
    assert {(c.gpu.node_name, c.first_seq) for c in d.spans} == {
        ("node-a", 10 + 10 * DP_OPS),
        ("node-b", 11 + 10 * DP_OPS),
    }


@pytest.mark.parametrize(
    "params, name",
    [
        ({"cursor": "x1"}, "cursor"),
        ({"cursor": "-1"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"since_step": "-3"}, "since_step"),
        ({"job": ""}, "job"),
        ({"job": "has space"}, "job"),
        ({"job": "j" * 257}, "job"),
    ],
)
def test_bad_parameters_are_400_naming_them(node_agent, params, name):
    r = get(node_agent.base_url, **params)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "invalid_parameter" and name in [d["name"] for d in body["details"]]


def test_an_unknown_job_is_404_listing_the_known_ones(node_agent):
    r = get(node_agent.base_url, job="no-such-job")
    assert r.status_code == 404, r.text
    body = r.json()
    assert body["code"] == "not_found" and "no-such-job" in body["message"]
    assert body["details"][0]["name"] == "job"


def test_an_agent_without_summaries_answers_an_empty_job(tmp_path):
    with LiveAgent(tmp_path, polling=False) as live:
        empty = page(get(live.base_url))
    assert empty.job_id is None and empty.jobs == [] and empty.items == [] and empty.total == 0


def test_a_master_reconciles_its_own_steps_with_a_slaves_that_started_later(tmp_path):
    from multinode_job import start_job

    job = start_job(tmp_path, 1)
    try:
        master_steps = job.master.home / "semantics" / "step"
        slave_steps = job.slaves[0].home / "semantics" / "step"
        for d in (master_steps, slave_steps):
            d.mkdir(parents=True, exist_ok=True)
        (master_steps / "live-master.jsonl.partial").write_text(
            node_lines("master", 0, range(12), 0)
        )
        (slave_steps / "live-node-0.jsonl.partial").write_text(
            node_lines("node-0", 1, range(LATE, 12), LATE)
        )

        def reconciled():
            r = job.master.get("/api/v1/job-steps", limit=100)
            p = page(r)
            states = {(n.node_name, n.state.value, n.offset) for n in p.nodes}
            return p if ("node-0", "linked", LATE) in states else None

        p = wait_until(reconciled, 60, lambda: job.master.get("/api/v1/job-steps").text)
        assert ("master", "reference", 0) in {
            (n.node_name, n.state.value, n.offset) for n in p.nodes
        }
        assert p.disagreements == []
        assert [s.job_step_index for s in p.items] == list(range(12))
        both = [s for s in p.items if len(s.gpus) == 2]
        assert [s.job_step_index for s in both] == list(range(LATE, 12))
        assert all(
            {(g.node_name, g.local_step_index) for g in s.gpus}
            == {("master", s.job_step_index), ("node-0", s.job_step_index - LATE)}
            for s in both
        )
        # the slave's own Agent answers for its node only
        own = page(job.slaves[0].get("/api/v1/job-steps"))
        assert {n.node_name for n in own.nodes} == {"node-0"}
    finally:
        job.stop()


def test_a_master_expects_steps_from_every_node_whose_processes_run_the_job():
    from types import SimpleNamespace

    from comminsight.agent.master.agent import MasterApi
    from comminsight.agent.master.job_view import NodeRecord
    from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
    from comminsight_gen.models.agent_master_api_v1 import AgentMode

    nodes = {}
    for name, jobs in (("n1", ["job-7"]), ("n2", ["job-7", ""]), ("n3", [])):
        record = NodeRecord(name, AgentMode.slave)
        for pid, job_id in enumerate(jobs, 1):
            record.rows.processes[(pid, 0)] = pb.ProcessInfo(pid=pid, job_id=job_id)
        nodes[name] = record
    api = MasterApi.__new__(MasterApi)
    api.service = SimpleNamespace(nodes=nodes)
    assert api.job_nodes() == {"job-7": frozenset({"n1", "n2"}), None: frozenset({"n2"})}


def test_the_live_engines_summaries_carry_spans_that_reconcile_on_their_node(tmp_path):
    """Simulated NCCL -> real plugin -> SHM -> the Agent's live engines: every summary has
    comm_seqs, and the node's ranks agree on every Step of the data-parallel job."""
    from agent_home import hold_agent_lock, run_sim

    lock = hold_agent_lock(tmp_path)
    truths = run_sim(tmp_path)
    with LiveAgent(tmp_path) as live:
        engine = live.service.engine
        wait_until(
            lambda: engine.idle() and engine.steps_written >= len(truths),
            60,
            lambda: f"the engine's summaries ({engine.steps_written} written)",
        )
        steps = httpx.get(live.base_url + "/api/v1/steps", params={"limit": 1000}).json()
        answer = page(get(live.base_url, limit=1000))
    lock.close()
    assert steps["items"] and all(s["comm_seqs"] for s in steps["items"])
    assert [(n.state.value, n.offset, n.gpus) for n in answer.nodes] == [
        ("reference", 0, len(truths))
    ]
    assert answer.disagreements == []
    indices = sorted({s["step_index"] for s in steps["items"]})
    assert [s.job_step_index for s in answer.items] == indices
    for item in answer.items:
        assert {g.local_step_index for g in item.gpus} == {item.job_step_index}
