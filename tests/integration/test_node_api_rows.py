"""A node Agent answers /node, /nodes, /inflight and /communicators from its agent-master-slave
rows, as a master does (api.views), read from each region apart: pids repeat on a node whose
training pods each have a PID namespace of their own, and the rows the wire keys by pid would
join two such processes into one. One reading serves the requests of a pass."""

from __future__ import annotations

import time

import httpx
import pytest
from live_agent import LiveAgent
from test_metrics_fleet import UUID_A, UUID_B, FakeProducer

from comminsight.agent.node import service as service_module
from comminsight.agent.state.process_labels import uuid_text
from comminsight_gen.abi import shm_v1

COMM = 0xC0
NO_FLAGGED_SEQ = (1 << 64) - 1


def waiting(p: FakeProducer, index: int, op_index: int, enqueued_mono_ns: int) -> None:
    """The row waits in all-reduce op_index, enqueued then."""
    row = p.comms[index : index + 1]
    row["coll_enqueued"] = op_index + 1
    row["coll_completed"] = op_index
    row["coll_enqueued_mono_ns"] = enqueued_mono_ns
    row["inflight_count"] = 1
    row["inflight_kind"] = shm_v1.RecordKind.COLL
    row["inflight_func"] = shm_v1.Func.ALL_REDUCE
    row["inflight_datatype"] = shm_v1.Datatype.FLOAT32
    row["inflight_op_index"] = op_index
    row["inflight_seq"] = op_index
    row["inflight_count_elems"] = 256
    row["inflight_bytes"] = 1024
    row["inflight_peer"] = shm_v1.NO_RANK
    row["inflight_enqueue_mono_ns"] = enqueued_mono_ns
    row["hang_flagged_seq"] = NO_FLAGGED_SEQ


@pytest.fixture
def two_pods(tmp_path):
    """Two pods' processes of one job with the same pid (this test's): pod-a drives two GPUs
    (ranks 0 and 1 of the communicator), pod-b one (rank 2), which waits in op 7."""
    home = tmp_path / "home"
    a = FakeProducer(home, "ci-pod-a-7-1.shm", host="pod-a", rank=0, device=0, uuid=UUID_A)
    a.add_comm(0, COMM, "dp", rank=0, nranks=3, device=0, uuid=UUID_A)
    a.add_comm(1, COMM, "dp", rank=1, nranks=3, device=1, uuid=UUID_B)
    b = FakeProducer(home, "ci-pod-b-7-1.shm", host="pod-b", rank=2, local_rank=0)
    b.add_comm(0, COMM, "dp", rank=2, nranks=3)
    waiting(b, 0, 7, time.monotonic_ns() - 2_000_000_000)
    with LiveAgent(home, polling=False) as live:
        yield live


def get(live, path: str) -> dict:
    response = httpx.get(live.base_url + path, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_processes_of_one_pid_in_two_pods_stay_two(two_pods):
    node = get(two_pods, "/api/v1/node")
    procs = {p["global_rank"]: p for p in node["processes"]}
    assert sorted(procs) == [0, 2], node["processes"]
    assert procs[0]["pid"] == procs[2]["pid"]
    assert procs[0]["comm_ids"] == procs[2]["comm_ids"] == [f"{COMM:016x}"]
    (summary,) = get(two_pods, "/api/v1/nodes")["items"]
    assert summary["processes_total"] == 2 and summary["global_ranks"] == [0, 2]


def test_an_op_in_flight_names_the_rank_of_its_own_process(two_pods):
    """pod-b's wait carries pod-b's global rank, not that of pod-a's process of its pid."""
    (op,) = get(two_pods, "/api/v1/inflight")["items"]
    assert (op["comm_rank"], op["global_rank"], op["seq"]) == (2, 2, 7)
    assert op["func"] == "AllReduce" and op["age_ms"] >= 2000


def test_one_reading_serves_the_requests_of_a_pass(two_pods, monkeypatch):
    # how long a reading is kept, set here: the test holds whatever this machine's load
    monkeypatch.setattr(service_module, "OWN_ROWS_REUSE_NS", 3600 * 10**9)
    first = get(two_pods, "/api/v1/node")["now_mono_ns"]
    assert get(two_pods, "/api/v1/node")["now_mono_ns"] == first
    two_pods.service.poll_once()
    after_pass = get(two_pods, "/api/v1/node")["now_mono_ns"]
    assert after_pass > first
    # passes that fail end no pass: a reading older than the bound is read again
    monkeypatch.setattr(service_module, "OWN_ROWS_REUSE_NS", 1)
    assert get(two_pods, "/api/v1/node")["now_mono_ns"] > after_pass


def test_communicators_name_each_rank_by_its_own_gpu(two_pods):
    """pod-a's process drives two GPUs: each of its ranks has its own GPU's UUID (its rows'),
    not the process's first GPU's for both; the communicator holds the three ranks of both
    pods."""
    (comm,) = get(two_pods, "/api/v1/communicators?view=full")["items"]
    ranks = {r["comm_rank"]: r for r in comm["ranks"]}
    assert sorted(ranks) == [0, 1, 2] and comm["complete"]
    gpu_a, gpu_b = uuid_text(UUID_A), uuid_text(UUID_B)
    assert (ranks[0]["device_uuid"], ranks[1]["device_uuid"]) == (gpu_a, gpu_b)
    one = get(two_pods, f"/api/v1/communicators/{COMM:016x}")
    assert [r["device_uuid"] for r in sorted(one["ranks"], key=lambda r: r["comm_rank"])][:2] == [
        gpu_a,
        gpu_b,
    ]
