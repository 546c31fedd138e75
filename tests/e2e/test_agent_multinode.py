"""Multi-node Agent over real gRPC and real HTTP: a master and three slaves as separate
`comminsight-agent` processes on 127.0.0.1, six simulated ranks (two per slave home) driving
the real plugin. The master's API shows the union of the nodes, joins the communicator that
spans them, and diagnoses a fault on one node naming the culprit's rank and node; a slave with
a wrong token is refused and listed; `comminsight status` against the master shows it all."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import threading

import grpc
import pytest
from agent_processes import cli
from multinode_job import NODES, RANKS, sim_config, start_job
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from comminsight.sim import read_ground_truth, run_simulation
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb


@pytest.fixture(scope="module")
def faulty_job(plugin, tmp_path_factory):
    """Rank 4 (on node-2) skips op 5: its peers on every node wait in it."""
    root = tmp_path_factory.mktemp("multinode")
    (root / "sim").mkdir()
    job = start_job(root, NODES, slave_extra={"COMMINSIGHT_SEMANTIC_ENABLE": "0"})
    result = {}
    config = sim_config(plugin, root, job, ("skip:rank=4,op=5",))
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    sim.start()
    try:
        report = wait_until(
            lambda: next(
                (
                    r
                    for r in job.master.get("/api/v1/hangs", status="all").json()["items"]
                    if r["verdict"] == "stuck_outside_nccl" and _waits_in_op_5(r)
                ),
                None,
            ),
            60,
            lambda: f"no verdict from the master:\n{job.master.log_text()[-3000:]}",
        )
        sim.join()
        truths = read_ground_truth(result["sim"].run_dir)
        register_with_wrong_token(job.grpc, "intruder")
        yield job, report, truths
    finally:
        sim.join()
        job.stop()


def register_with_wrong_token(address: str, node: str) -> None:
    request = pb.RegisterRequest(
        protocol_version=pb.PROTOCOL_VERSION_1,
        node=pb.NodeIdentity(node_name=node, host="elsewhere", comminsight_home="/nowhere"),
        stream_epoch=secrets.randbits(64) | 1,
    )
    with grpc.insecure_channel(address) as channel:
        register = channel.unary_unary(
            "/comminsight.agent_master_slave.v1.AgentMaster/Register",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as refused:
            register(request.SerializeToString(), metadata=(("authorization", "Bearer nope"),))
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED


def _waits_in_op_5(report) -> bool:
    """The skipped op, not an earlier wait, and the whole picture: ranks of a loaded machine
    start unevenly, and a rank whose node has not reported it yet is missing from the
    evidence (the report is diagnosed again on every poll, so it fills in)."""
    evidence = report["evidence"]
    return (
        sorted(e["comm_rank"] for e in evidence) == list(range(RANKS))
        and sorted(e["comm_rank"] for e in evidence if e.get("joined")) == [0, 1, 2, 3, 5]
        and any(e.get("last_enqueued", {}).get("seq", -1) >= 5 for e in evidence)
    )


def test_master_lists_every_node_and_the_union_of_their_processes(faulty_job):
    job, _, truths = faulty_job
    nodes = job.master.get("/api/v1/nodes").json()
    by_name = {n["node_name"]: n for n in nodes["items"]}
    # a peer without the token names nobody: the node it claimed to be is not recorded
    assert sorted(by_name) == ["master", "node-0", "node-1", "node-2"]
    assert by_name["master"]["state"] == "local" and by_name["master"]["mode"] == "master"
    for i in range(NODES):
        node = by_name[f"node-{i}"]
        assert node["state"] == "connected" and node["mode"] == "slave", node
        assert node["global_ranks"] == [2 * i, 2 * i + 1]
        assert node["last_applied_batch_seq"] >= 1 and node["rejects_total"] == 0
    health = job.master.get("/api/v1/health").json()
    assert health["mode"] == "master" and health["nodes_total"] == 4
    assert health["nodes_connected"] == 4 and health["processes_total"] == RANKS
    assert any(
        "1 registrations or streams without the token refused" in r for r in health["reasons"]
    )
    # each slave answers for its own node only
    slave_nodes = job.slaves[1].get("/api/v1/nodes").json()["items"]
    assert [n["node_name"] for n in slave_nodes] == ["node-1"]
    assert len(truths) == RANKS


def test_the_communicator_spanning_nodes_is_joined_by_comm_id(faulty_job):
    job, _, truths = faulty_job
    page = job.master.get("/api/v1/communicators").json()
    assert page["total"] == 1
    comm = page["items"][0]
    assert comm["complete"] and comm["ranks_seen"] == list(range(RANKS))
    assert comm["nodes"] == ["node-0", "node-1", "node-2"] and comm["nranks"] == RANKS
    # the master's totals are the union of what each slave reads from its SHM (which counts
    # the ops the aborted ranks force-completed at finalize, unlike the ground truth)
    local = [s.get(f"/api/v1/communicators/{comm['comm_id']}").json() for s in job.slaves]
    assert comm["ops_completed_total"] == sum(c["ops_completed_total"] for c in local)
    assert comm["bytes_completed_total"] == sum(c["bytes_completed_total"] for c in local)
    full = job.master.get(f"/api/v1/communicators/{comm['comm_id']}").json()
    assert [(r["comm_rank"], r["node_name"]) for r in full["ranks"]] == [
        (rank, f"node-{rank // 2}") for rank in range(RANKS)
    ]
    slave_ranks = {r["comm_rank"]: r for c in local for r in c["ranks"]}
    for rank in full["ranks"]:
        mine = slave_ranks[rank["comm_rank"]]
        assert rank["pid"] == mine["pid"] and rank["global_rank"] == mine["global_rank"]
        assert rank["progress"]["collectives"] == mine["progress"]["collectives"]
        issued = [op for op in truths[rank["comm_rank"]].ops]
        assert rank["progress"]["collectives"]["last_enqueued_seq"] == len(issued) - 1
    # a slave sees its two ranks of the same communicator
    local = job.slaves[0].get("/api/v1/communicators").json()["items"][0]
    assert local["comm_id"] == comm["comm_id"] and local["ranks_seen"] == [0, 1]
    assert not local["complete"]


def test_a_fault_on_one_node_is_diagnosed_by_the_master_naming_rank_and_node(faulty_job):
    job, report, _ = faulty_job
    assert report["diagnosed_by"] == "master"
    assert [(c["comm_rank"], c["node_name"]) for c in report["culprits"]] == [(4, "node-2")]
    assert report["culprits"][0]["global_rank"] == 4
    evidence = {e["comm_rank"]: e for e in report["evidence"]}
    assert sorted(evidence) == list(range(RANKS))
    assert {e["node_name"] for e in evidence.values()} == {"node-0", "node-1", "node-2"}
    assert not evidence[4]["joined"] and all(evidence[r]["joined"] for r in (0, 1, 2, 3, 5))
    # the slave of node-0 alone sees only its own ranks: it can never name rank 4
    local = job.slaves[0].get("/api/v1/hangs", status="all").json()["items"]
    assert local, "node-0's ranks waited past the threshold"
    assert all(c["comm_rank"] in (0, 1) for r in local for c in r["culprits"]), local


def test_status_against_the_master_shows_the_whole_job(faulty_job):
    job, _, truths = faulty_job
    url = f"http://{job.master.listen}"
    out = cli("status", url=url)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Nodes of the job: 4" in text and "Processes per node" in text
    nodes_table = text[text.index("Nodes of the job") : text.index("Processes per node")]
    node_rows = {
        line.split("│")[1].strip(): line for line in nodes_table.splitlines() if "│" in line
    }
    assert "local" in node_rows["master"]
    for i in range(NODES):
        assert "connected" in node_rows[f"node-{i}"] and f"{2 * i}-{2 * i + 1}" in text
    assert "intruder" not in node_rows
    assert "Communicators spanning nodes: 1 of 1" in text
    assert "node-0, node-1, node-2" in text
    # every rank's process under its node, as the JSON says and as the sim ran them
    data = json.loads(cli("status", "--json", url=url).stdout)
    assert [n["node_name"] for n in data["nodes"]] == [
        "master",
        "node-0",
        "node-1",
        "node-2",
    ]
    (comm,) = data["communicators"]
    placed = {(r["node_name"], r["pid"], r["global_rank"]) for r in comm["ranks"]}
    assert placed == {(f"node-{t.rank // 2}", t.run["pid"], t.rank) for t in truths}
    processes_table = text[text.index("Processes per node") : text.index("Communicators span")]
    rows = [line.split("│") for line in processes_table.splitlines() if "│" in line]
    listed = {(r[1].strip(), int(r[4])) for r in rows if r[4].strip().isdigit()}
    assert {(node, pid) for node, pid, _ in placed} <= listed


def _samples(text: str, name: str) -> dict[tuple, float]:
    """{label values sorted by label name: value} of one sample name in an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def _by(samples: dict[tuple, float], *keep: str) -> dict[tuple, float]:
    summed: dict[tuple, float] = {}
    for labels, value in samples.items():
        key = tuple(v for k, v in labels if k in keep)
        summed[key] = summed.get(key, 0) + value
    return summed


def test_master_metrics_carry_every_node_under_a_node_label(faulty_job):
    job, _, _ = faulty_job

    pairs = (  # (a slave's own series, the master's node-labelled one, the label they share)
        ("comminsight_ops_total", "comminsight_job_ops_total", "op_type"),
        ("comminsight_op_bytes_total", "comminsight_job_op_bytes_total", "op_type"),
        ("comminsight_profiler_drops_total", "comminsight_job_profiler_drops_total", "reason"),
        ("comminsight_hangs_open", "comminsight_job_node_hangs_open", "verdict"),
    )

    def consistent():
        """The slaves' own /metrics and the master's node-labelled series agree (slaves send
        their totals every report interval; the job may have just ended)."""
        master = job.master.get("/metrics").text
        mine = [s.get("/metrics").text for s in job.slaves]
        for own, job_wide, label in pairs:
            want = {
                (f"node-{i}", *key): v
                for i, text in enumerate(mine)
                for key, v in _by(_samples(text, own), label).items()
            }
            got = _by(_samples(master, job_wide), "node", label)
            if {k: v for k, v in got.items() if k[0] != "master"} != want:
                return None
            if own == "comminsight_ops_total" and not want:
                return None
        return master, mine

    master, mine = wait_until(
        consistent,
        60,
        lambda: f"master and slaves disagree:\n{job.master.get('/metrics').text[-4000:]}",
    )
    # one communicator spans the three nodes: its job-wide count is the sum of theirs
    comm = _by(_samples(master, "comminsight_job_comm_ops_total"), "comm")
    per_node = [_by(_samples(t, "comminsight_ops_total"), "comm") for t in mine]
    assert comm == {("default_pg:0",): sum(p[("default_pg:0",)] for p in per_node)}
    assert comm[("default_pg:0",)] > 0
    states = _by(_samples(master, "comminsight_job_nodes"), "state")
    assert states[("connected",)] == 3 and states[("local",)] == 1
    assert states.get(("rejected",), 0) == 0  # a peer without the token is no node
    # the refused stranger has no series of its own
    assert "intruder" not in master
    assert _by(_samples(master, "comminsight_job_hang_events_total"), "node")[("node-0",)] >= 1
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (Debian's prometheus package)")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=master, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
