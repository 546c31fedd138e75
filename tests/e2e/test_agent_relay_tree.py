"""A relay between slaves and the master, as separate `comminsight-agent` processes over real
gRPC: three slaves list the relay first and the master second as their parents, the relay
passes up its reduction (classes of ranks in the same state), and the master diagnoses a
fault on one node from it, naming the culprit's rank and node; the hang events reach the
master with the node they came from. When the relay is killed, the slaves move to the master
on their own and the master goes on showing every node."""

from __future__ import annotations

import json
import threading

import pytest
from agent_processes import cli
from multinode_job import NODES, AgentProc, Job, sim_config
from ports import free_port
from waiting import wait_until

from comminsight.sim import run_simulation


@pytest.fixture(scope="module")
def tree(plugin, tmp_path_factory):
    root = tmp_path_factory.mktemp("relay-tree")
    (root / "sim").mkdir()
    master_grpc, relay_grpc = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    agents = []

    def agent(name: str, mode: str, **extra) -> AgentProc:
        home = root / name
        home.mkdir()
        a = AgentProc(home, mode, name, f"127.0.0.1:{free_port()}", extra).start()
        agents.append(a)
        return a

    master = agent("master", "master", COMMINSIGHT_AGENT_MASTER_LISTEN=master_grpc)
    relay = agent(
        "relay-a",
        "relay",
        COMMINSIGHT_AGENT_MASTER_LISTEN=relay_grpc,
        COMMINSIGHT_AGENT_MASTER_ADDR=master_grpc,
    )
    for a in agents:  # the relay up first: a slave that finds it down moves to the master
        a.wait_ready()
    slaves = [
        agent(
            f"node-{i}",
            "slave",
            COMMINSIGHT_AGENT_MASTER_ADDR=f"{relay_grpc},{master_grpc}",
            COMMINSIGHT_SEMANTIC_ENABLE="0",
        )
        for i in range(NODES)
    ]
    try:
        for a in agents:
            a.wait_ready()
        yield master, relay, Job(master, slaves, master_grpc), root
    finally:
        for a in reversed(agents):
            a.stop()


def _culprits(master) -> list[tuple]:
    return [
        (r["verdict"], [(c["comm_rank"], c["node_name"]) for c in r["culprits"]])
        for r in master.get("/api/v1/hangs", status="all").json()["items"]
        if r["culprits"]
    ]


def test_the_master_names_the_culprit_through_the_relay_and_survives_its_death(plugin, tree):
    master, relay, job, root = tree

    def nodes_via(via: list[str]) -> set[str]:
        items = master.get("/api/v1/nodes").json()["items"]
        return {n["node_name"] for n in items if n.get("via", []) == via}

    wait_until(
        lambda: nodes_via(["relay-a"]) == {"node-0", "node-1", "node-2"},
        60,
        lambda: f"the slaves never showed below the relay:\n{relay.log_text()[-3000:]}",
    )
    result = {}
    config = sim_config(plugin, root, job, ("skip:rank=4,op=5",), hold=8.0)
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    sim.start()
    try:
        found = wait_until(
            lambda: ("stuck_outside_nccl", [(4, "node-2")]) in _culprits(master),
            60,
            lambda: (
                f"no verdict through the relay: {_culprits(master)}\n"
                f"{master.log_text()[-2000:]}\n{relay.log_text()[-2000:]}"
            ),
        )
        assert found
        report = next(
            r
            for r in master.get("/api/v1/hangs", status="all").json()["items"]
            if r["verdict"] == "stuck_outside_nccl"
        )
        assert report["diagnosed_by"] == "master" and report["culprits"][0]["global_rank"] == 4
        # the slaves' hang events came up through the relay, kept under their own nodes
        events = root / "master" / "metadata" / "master" / "hang-events"
        wait_until(
            lambda: {p.stem for p in events.glob("node-*.jsonl")},
            30,
            lambda: f"no slave's hang event reached the master: {list(events.iterdir())}",
        )
        assert (
            not (events / "relay-a.jsonl").exists()
            or (events / "relay-a.jsonl").stat().st_size == 0
        )
        relays = [n for n in master.get("/api/v1/nodes").json()["items"] if n["mode"] == "relay"]
        assert [n["node_name"] for n in relays] == ["relay-a"]
        # what a user runs against the master: every node, the ones below the relay too
        out = cli("status", url=f"http://{master.listen}")
        assert out.returncode == 0, out.stderr
        assert all(f"node-{i}" in out.stdout for i in range(NODES)) and "relay-a" in out.stdout
        data = json.loads(cli("status", "--json", url=f"http://{master.listen}").stdout)
        assert {n["node_name"] for n in data["nodes"]} >= {"master", "relay-a", "node-0", "node-2"}
    finally:
        sim.join()
    relay.kill()
    # each slave moves to its next parent, the master, and reports there directly
    wait_until(
        lambda: (
            nodes_via([]) >= {"node-0", "node-1", "node-2"}
            and all(
                n["state"] == "connected"
                for n in master.get("/api/v1/nodes").json()["items"]
                if n["node_name"].startswith("node-")
            )
        ),
        60,
        lambda: (
            f"the slaves did not move to the master: "
            f"{master.get('/api/v1/nodes').json()['items']}\n{job.slaves[0].log_text()[-2000:]}"
        ),
    )
    processes = master.get("/api/v1/health").json()["processes_total"]
    assert processes >= 6, processes
