"""/metrics for a fleet: at metrics level rank every process's series says whose it is (job,
host, ranks, GPU and its UUID); at level job (the default) a node's ranks of a job fold into
series that do not grow with the ranks, one per-rank series kept; two jobs' communicators of
one name stay apart, series of processes and
communicators that ended expire after COMMINSIGHT_AGENT_METRICS_EXPIRE_S (timed by the
passes' clock, which the tests set), drop totals stay exact while producers come and go, and
the route serves build info, process metrics, OpenMetrics on request, gzip on request and
HEAD.

Producers are SHM regions this test writes itself (header, communicator table, ring), read
by the Agent's own ProducerSet and ingest pass."""

from __future__ import annotations

import gzip
import mmap
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from agent_home import hold_agent_lock
from live_agent import LiveAgent
from profiler_builds import builds
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

import comminsight
from comminsight.agent.master.job_metrics import JobMetrics
from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.metrics.level import JOB, RANK
from comminsight.agent.metrics.node import NodeMetrics, update_from_producers, wants_openmetrics
from comminsight.agent.metrics.totals import node_metric_totals
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.placement import Placement
from comminsight.agent.state.process_labels import uuid_text
from comminsight.agent.state.workload_identity import Workload, WorkloadLookup
from comminsight.build_identity import UNKNOWN, git_commit
from comminsight.config import ConfigError, load_settings
from comminsight.shm_reader import COMM, HEADER, SLOT, ShmRegion, record_text
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api

S = 1_000_000_000
# what the ranks of one job on one node share (process_labels.JOB_LABELS)
JOB_LABELS = ("job_id", "step_id", "array_index", "host", "node", "namespace")
T0 = 10**15  # the passes' clock: any monotonic time, far from this machine's
UUID_A = bytes(range(16))
UUID_B = bytes(range(16, 32))
COMM_SLOTS, RING_SLOTS = 4, 64


def _start_ticks() -> int:
    stat = Path("/proc/self/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 1 :].split()[19])


class FakeProducer:
    """A Profiler's region as the Profiler lays it out, written by the test: by default it
    names this test process as its producer, so the Agent takes it for a running one."""

    def __init__(
        self,
        home: Path,
        name: str,
        job_id: str = "job-1",
        host: str = "node-a",
        rank: int = 0,
        local_rank: int = 0,
        device: int = 0,
        uuid: bytes = UUID_A,
    ) -> None:
        comm_off = HEADER.itemsize
        ring_off = comm_off + COMM_SLOTS * COMM.itemsize
        size = ring_off + RING_SLOTS * SLOT.itemsize
        shms = home / "shms"
        shms.mkdir(parents=True, exist_ok=True)
        fd = os.open(shms / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, size)
        self._map = mmap.mmap(fd, size)
        os.close(fd)
        self.header = np.frombuffer(self._map, HEADER, 1)
        self.comms = np.frombuffer(self._map, COMM, COMM_SLOTS, comm_off)
        self.ring = np.frombuffer(self._map, SLOT, RING_SLOTS, ring_off)
        self.head = 0
        h = self.header
        for field, value in {
            "magic": shm_v1.MAGIC,
            "abi_version": shm_v1.PROTOCOL_VERSION,
            "header_size": HEADER.itemsize,
            "file_size": size,
            "comm_table_offset": comm_off,
            "comm_capacity": COMM_SLOTS,
            "comm_entry_size": COMM.itemsize,
            "ring_offset": ring_off,
            "ring_capacity": RING_SLOTS,
            "slot_size": SLOT.itemsize,
            "pid": os.getpid(),
            "uid": os.getuid(),
            "rank": rank,
            "local_rank": local_rank,
            "world_size": 8,
            "local_world_size": 8,
            "cuda_device": device,
            "start_real_ns": time.time_ns(),
            "start_mono_ns": time.monotonic_ns(),
            "process_start_ticks": _start_ticks(),
            "hostname": host.encode(),
            "job_id": job_id.encode(),
        }.items():
            h[field] = value
        h["cuda_uuid"] = np.frombuffer(uuid, np.uint8)
        h["state"] = shm_v1.FileState.LIVE

    def add_comm(
        self,
        index: int,
        comm_id: int,
        name: str = "",
        rank: int = 0,
        nranks: int = 8,
        device: int | None = None,
        uuid: bytes | None = None,
    ) -> None:
        row = self.comms[index : index + 1]
        row["generation"] = 1
        row["comm_id"] = comm_id
        row["rank"] = rank
        row["nranks"] = nranks
        row["nnodes"] = 1
        row["local_rank"] = int(self.header["local_rank"][0])
        row["cuda_device"] = int(self.header["cuda_device"][0]) if device is None else device
        row["cuda_uuid"] = np.frombuffer(
            uuid if uuid is not None else bytes(self.header["cuda_uuid"][0]), np.uint8
        )
        self.name(index, name)
        row["state"] = shm_v1.CommState.ACTIVE

    def name(self, index: int, name: str) -> None:
        self.comms["name"][index] = name.encode()
        self.comms["name_source"][index] = shm_v1.NameSource.NCCL if name else 0

    def finalize(self, index: int) -> None:
        self.comms["state"][index] = shm_v1.CommState.FINALIZED

    def publish(self, comm_id: int, n: int, nbytes: int = 1024, rank: int = 0) -> None:
        """n completed all-reduces of one communicator member, as the ring carries them."""
        for _ in range(n):
            slot = self.ring[self.head % RING_SLOTS : self.head % RING_SLOTS + 1]
            slot[0] = np.zeros((), SLOT)
            slot["kind"] = shm_v1.RecordKind.COLL
            slot["func"] = shm_v1.Func.ALL_REDUCE
            slot["comm_id"] = comm_id
            slot["rank"] = rank
            slot["nranks"] = 8
            slot["peer"] = shm_v1.NO_RANK
            slot["bytes"] = nbytes
            slot["seq"] = self.head + 1
            self.head += 1
        self.header["ring_head"] = self.head

    def count(self, counter: str, value: int) -> None:
        self.header[counter] = value

    def end(self) -> None:
        """The process ended cleanly: its region is CLOSED."""
        self.header["state"] = shm_v1.FileState.CLOSED


class Node:
    """The Agent's ingest of one home, pass by pass, on the test's clock; at metrics level
    rank unless told (most tests here are about each process's labels)."""

    def __init__(
        self,
        home: Path,
        expire_s: float = 60.0,
        retire_after_s: float = 0.0,
        level: str = RANK,
        placement: Placement | None = None,
    ) -> None:
        self.producers = ProducerSet(home)
        self.metrics = NodeMetrics(expire_after_s=expire_s, level=level)
        self.metrics.placement = placement
        self.retire_after_ns = int(retire_after_s * S)

    def run_pass(self, now: int) -> None:
        batches = self.producers.poll(now, retire_after_ns=self.retire_after_ns)
        update_from_producers(self.metrics, self.producers, batches, now)

    def samples(self, name: str) -> list:
        text = self.metrics.render().decode()
        return [
            s
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        ]

    def ops(self) -> dict[tuple, float]:
        keys = ("job_id", "host", "rank", "local_rank", "cuda_device", "UUID", "comm")
        return {
            tuple(s.labels[k] for k in keys): s.value for s in self.samples("comminsight_ops_total")
        }

    def close(self) -> None:
        self.producers.close()


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.close()


UUID_A_TEXT = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


class FakeGpus:
    """The node's GPU indexes as DCGM numbers them, by UUID (gpu_index's answer)."""

    def __init__(self, indexes: dict[str, str]) -> None:
        self.indexes = indexes

    def index_of(self, uuid: str) -> str:
        return self.indexes.get(uuid, "")


class FakeWorkloads:
    """Every process in one pod (workload_identity's answer)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.asked: list[tuple[int, int, int]] = []

    def of_pid(self, pid: int, start_ticks: int = 0, pid_namespace: int = 0) -> Workload:
        self.asked.append((pid, start_ticks, pid_namespace))
        return self.workload


def test_a_process_series_carries_its_job_node_pod_ranks_gpu_and_uuid(tmp_path):
    pod = Workload(pod="train-0", namespace="team-a", container="trainer")
    placement = Placement("node-7", "k8s-node-7", FakeWorkloads(pod), FakeGpus({UUID_A_TEXT: "3"}))
    node = Node(tmp_path, placement=placement)
    p = FakeProducer(tmp_path, "a.shm", job_id="slurm-4242", host="train-0", rank=9, local_rank=1)
    p.header["slurm_step_id"] = b"2"
    p.header["slurm_array_task_id"] = b"17"
    p.add_comm(0, 0xABC, "default_pg:0")
    p.publish(0xABC, 5)
    node.run_pass(T0)
    (sample,) = node.samples("comminsight_ops_total")
    assert sample.labels == {
        "job_id": "slurm-4242",
        "step_id": "2",
        "array_index": "17",
        # the node, not the process's own host name (in Kubernetes its pod's)
        "host": "node-7",
        "node": "k8s-node-7",
        "namespace": "team-a",
        "pod": "train-0",
        "container": "trainer",
        "rank": "9",
        "local_rank": "1",
        # DCGM's index of the GPU on the node; the CUDA ordinal inside the process apart
        "gpu": "3",
        "cuda_device": "0",
        "UUID": UUID_A_TEXT,
        "comm": "default_pg:0",
        "op_type": "AllReduce",
    }
    node.close()
    assert sample.value == 5
    for name in ("comminsight_op_bytes_total", "comminsight_op_latency_seconds_count"):
        (s,) = node.samples(name)
        assert s.labels["job_id"] == "slurm-4242" and s.labels["UUID"] == UUID_A_TEXT


def test_in_a_kubernetes_pod_the_series_names_pod_namespace_container_and_node(tmp_path):
    """The node as the DaemonSet sets it up: the Downward API's node name in the Agent's
    environment, the host's /proc (hostPID) and the kubelet's log tree, here fake trees."""
    pod_uid = "6d2d4a8c-9f0e-4c1b-8a3e-2f5b7c9d1e0f"
    container_id = "a" * 64
    proc, logs = tmp_path / "proc", tmp_path / "log"
    cgroup = proc / str(os.getpid()) / "cgroup"
    cgroup.parent.mkdir(parents=True)
    # this process stands for the producer: its start time is the one the region records
    (cgroup.parent / "stat").write_bytes(Path(f"/proc/{os.getpid()}/stat").read_bytes())
    slice_ = "kubepods.slice/kubepods-burstable.slice"
    cgroup.write_text(
        f"0::/{slice_}/kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice/"
        f"cri-containerd-{container_id}.scope\n"
    )
    (logs / "containers").mkdir(parents=True)
    (logs / "containers" / f"llama-worker-3_team-a_trainer-{container_id}.log").symlink_to(
        f"/var/log/pods/team-a_llama-worker-3_{pod_uid}/trainer/0.log"
    )
    (logs / "pods" / f"team-a_llama-worker-3_{pod_uid}").mkdir(parents=True)
    (tmp_path / "comminsight.conf").write_text("")
    settings = load_settings(
        env={
            "COMMINSIGHT_HOME": str(tmp_path / "home"),
            "COMMINSIGHT_AGENT_NODE_NAME": "gpu-node-7",
            "COMMINSIGHT_AGENT_KUBERNETES_NODE": "gpu-node-7.cluster.local",
        },
        conf_path=(tmp_path / "comminsight.conf"),
    )
    placement = Placement(
        settings.agent_node_name,
        settings.agent_kubernetes_node,
        WorkloadLookup(proc_root=proc, log_root=logs, relist_after_s=0),
        FakeGpus({UUID_A_TEXT: "5"}),
    )
    node = Node(tmp_path / "home", level=JOB, placement=placement)
    p = FakeProducer(tmp_path / "home", "a.shm", host="llama-worker-3")
    p.add_comm(0, 0xABC, "default_pg:0")
    p.publish(0xABC, 4)
    node.run_pass(T0)
    (seconds,) = node.samples("comminsight_rank_op_seconds_total")
    assert {k: seconds.labels[k] for k in ("host", "node", "namespace", "pod", "container")} == {
        "host": "gpu-node-7",
        "node": "gpu-node-7.cluster.local",
        "namespace": "team-a",
        "pod": "llama-worker-3",
        "container": "trainer",
    }
    (ops,) = node.samples("comminsight_ops_total")  # a job's series: its namespace and node
    assert ops.labels["namespace"] == "team-a" and ops.labels["node"] == "gpu-node-7.cluster.local"
    assert "pod" not in ops.labels  # pods of one job fold at the default level
    node.close()


def test_outside_kubernetes_the_workload_labels_are_empty_not_guessed(tmp_path):
    proc = tmp_path / "proc"
    (proc / str(os.getpid())).mkdir(parents=True)
    (proc / str(os.getpid()) / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3\n")
    placement = Placement("node-a", "", WorkloadLookup(proc, tmp_path / "log"), FakeGpus({}))
    node = Node(tmp_path / "home", placement=placement)
    p = FakeProducer(tmp_path / "home", "a.shm")
    p.add_comm(0, 7, "pg")
    p.publish(7, 1)
    node.run_pass(T0)
    (sample,) = node.samples("comminsight_ops_total")
    assert [sample.labels[k] for k in ("node", "namespace", "pod", "container", "gpu")] == [""] * 5
    assert sample.labels["cuda_device"] == "0" and sample.labels["UUID"] == UUID_A_TEXT
    node.close()


def test_the_age_of_an_op_in_flight_is_per_process(tmp_path, node):
    for rank in (0, 1):
        p = FakeProducer(tmp_path, f"r{rank}.shm", rank=rank, local_rank=rank, device=rank)
        p.add_comm(0, 0x5, "default_pg:0", rank=rank)
        p.comms["inflight_count"][0] = 1
        p.comms["inflight_kind"][0] = shm_v1.RecordKind.COLL
        p.comms["inflight_enqueue_mono_ns"][0] = T0 - (rank + 1) * S
    node.run_pass(T0)
    ages = {
        (s.labels["rank"], s.labels["cuda_device"], s.labels["comm"]): s.value
        for s in node.samples("comminsight_inflight_age_seconds")
    }
    assert ages == {("0", "0", "default_pg:0"): 1.0, ("1", "1", "default_pg:0"): 2.0}


def test_unset_ranks_and_an_unknown_gpu_are_empty_labels(tmp_path, node):
    p = FakeProducer(tmp_path, "a.shm", rank=-1, local_rank=-1, device=-1, uuid=bytes(16))
    p.add_comm(0, 7)
    p.publish(7, 2)
    node.run_pass(T0)
    (sample,) = node.samples("comminsight_ops_total")
    unknown = ("rank", "local_rank", "gpu", "cuda_device", "UUID", "pod")
    assert [sample.labels[k] for k in unknown] == [""] * len(unknown)
    assert sample.labels["comm"] == f"{7:016x}"  # no name: its id


def test_a_job_id_that_is_not_utf8_still_makes_a_valid_exposition(tmp_path, node):
    p = FakeProducer(tmp_path, "a.shm")
    p.header["job_id"] = b'\xff\xfe"job\\\n'
    p.add_comm(0, 7, "pg")
    p.publish(7, 1)
    node.run_pass(T0)
    (sample,) = node.samples("comminsight_ops_total")  # the text parses back
    assert sample.labels["job_id"] == '\ufffd\ufffd"job\\\n'


def test_two_jobs_with_the_same_communicator_name_stay_separate_series(tmp_path, node):
    a = FakeProducer(tmp_path, "a.shm", job_id="job-a")
    b = FakeProducer(tmp_path, "b.shm", job_id="job-b")
    a.add_comm(0, 0x1111, "default_pg:0")
    b.add_comm(0, 0x2222, "default_pg:0")
    a.publish(0x1111, 3)
    b.publish(0x2222, 4)
    node.run_pass(T0)
    ops = {k[0]: v for k, v in node.ops().items() if k[-1] == "default_pg:0"}
    assert ops == {"job-a": 3, "job-b": 4}


def test_a_process_driving_several_gpus_labels_each_members_gpu(tmp_path, node):
    p = FakeProducer(tmp_path, "a.shm", device=0, uuid=UUID_A)
    p.add_comm(0, 0x10, "world", rank=0, device=0, uuid=UUID_A)
    p.add_comm(1, 0x10, "world", rank=1, device=1, uuid=UUID_B)
    p.publish(0x10, 2, rank=0)
    p.publish(0x10, 5, rank=1)
    node.run_pass(T0)
    by_gpu = {(k[4], k[5]): v for k, v in node.ops().items()}
    assert by_gpu == {("0", UUID_A_TEXT): 2, ("1", uuid_text(UUID_B)): 5}


# ---- metrics level job (the default) ----


def eight_ranks(home: Path, job_id: str = "job-1", ranks: int = 8) -> list[FakeProducer]:
    """A node's ranks of one job: each in the job's tensor-parallel communicator and its own
    data-parallel one, the latter with an op in flight rank seconds old."""
    out = []
    for rank in range(ranks):
        p = FakeProducer(home, f"{job_id}-r{rank}.shm", job_id=job_id, rank=rank, device=rank)
        p.add_comm(0, 0x7000, "tp:0", rank=rank)
        p.add_comm(1, 0x8000 + rank, f"dp:{rank}", rank=0)
        p.publish(0x7000, 3, nbytes=1 << 20, rank=rank)
        p.publish(0x8000 + rank, 2, nbytes=64 << 20, rank=0)
        p.comms["inflight_count"][1] = 1
        p.comms["inflight_kind"][1] = shm_v1.RecordKind.COLL
        p.comms["inflight_enqueue_mono_ns"][1] = T0 - (rank + 1) * S
        out.append(p)
    return out


def family_labels(node: Node, name: str) -> set[frozenset]:
    return {frozenset(s.labels) - {"le"} for s in node.samples(name)}


def test_at_the_default_level_a_nodes_ranks_of_a_job_fold_into_its_series(tmp_path):
    node = Node(tmp_path, level=JOB)
    eight_ranks(tmp_path)
    node.run_pass(T0)
    ops = {
        (s.labels["job_id"], s.labels["host"], s.labels["comm"]): s.value
        for s in node.samples("comminsight_ops_total")
    }
    assert ops[("job-1", "node-a", "tp:0")] == 8 * 3  # the eight ranks' ops of one comm
    assert ops[("job-1", "node-a", "dp:5")] == 2
    assert family_labels(node, "comminsight_ops_total") == {
        frozenset({*JOB_LABELS, "comm", "op_type"})
    }
    # histograms per job and op type: no rank, no communicator
    assert family_labels(node, "comminsight_op_latency_seconds_bucket") == {
        frozenset({*JOB_LABELS, "op_type"})
    }
    (count,) = node.samples("comminsight_op_latency_seconds_count")
    assert count.value == 8 * 5
    busbw = {s.labels["size"] for s in node.samples("comminsight_op_busbw_gbs_count")}
    assert busbw == {"le_1MiB", "le_256MiB"}
    # the oldest op in flight of the node's ranks, per communicator
    ages = {s.labels["comm"]: s.value for s in node.samples("comminsight_inflight_age_seconds")}
    assert ages["dp:7"] == 8.0 and ages["dp:0"] == 1.0 and "tp:0" not in ages
    # and one series per rank: its seconds in NCCL
    seconds = node.samples("comminsight_rank_op_seconds_total")
    assert sorted(int(s.labels["rank"]) for s in seconds) == list(range(8))
    assert family_labels(node, "comminsight_rank_op_seconds_total") == {
        frozenset({*JOB_LABELS, "pod", "container", "rank"})
    }


def test_at_the_default_level_two_jobs_stay_apart(tmp_path):
    node = Node(tmp_path, level=JOB)
    eight_ranks(tmp_path, "job-a", ranks=2)
    eight_ranks(tmp_path, "job-b", ranks=3)
    node.run_pass(T0)
    counts = {
        s.labels["job_id"]: s.value for s in node.samples("comminsight_op_latency_seconds_count")
    }
    assert counts == {"job-a": 2 * 5, "job-b": 3 * 5}


def op_series(
    node: Node, level_names=("comminsight_op_latency_seconds", "comminsight_op_busbw_gbs")
) -> int:
    text = node.metrics.render().decode()
    return sum(
        len(f.samples) for f in text_string_to_metric_families(text) if f.name in level_names
    )


def test_the_histograms_do_not_grow_with_the_ranks_at_the_default_level(tmp_path):
    """The histograms are most of a page: per job and op type at level job, so a node of 8
    ranks has as many as a node of 2; at level rank 4 times as many."""
    sizes = {}
    for level in (JOB, RANK):
        for ranks in (2, 8):
            home = tmp_path / f"{level}-{ranks}"
            node = Node(home, level=level)
            eight_ranks(home, ranks=ranks)
            node.run_pass(T0)
            sizes[(level, ranks)] = op_series(node)
            node.close()
    assert sizes[(JOB, 8)] == sizes[(JOB, 2)] > 0
    assert sizes[(RANK, 8)] == 4 * sizes[(RANK, 2)]


def test_the_level_key_refuses_other_values(tmp_path):
    env = {"COMMINSIGHT_HOME": str(tmp_path)}
    assert load_settings(env).agent_metrics_level == "job"
    assert (
        load_settings({**env, "COMMINSIGHT_AGENT_METRICS_LEVEL": "rank"}).agent_metrics_level
        == "rank"
    )
    for bad in ("", "gpu", "Rank", "job "):
        with pytest.raises(ConfigError, match="COMMINSIGHT_AGENT_METRICS_LEVEL"):
            load_settings({**env, "COMMINSIGHT_AGENT_METRICS_LEVEL": bad})
    with pytest.raises(ValueError, match="metrics level 'gpu'"):
        NodeMetrics(level="gpu")


def test_uuid_text_is_what_nvidia_smi_prints_and_empty_when_unknown():
    assert uuid_text(UUID_A) == UUID_A_TEXT
    assert uuid_text(bytes(16)) == ""
    assert uuid_text(b"short") == ""


def test_series_of_an_ended_process_expire_after_the_configured_time_not_before(tmp_path):
    node = Node(tmp_path, expire_s=30, retire_after_s=0)
    p = FakeProducer(tmp_path, "a.shm")
    p.add_comm(0, 0x1, "default_pg:0")
    p.publish(0x1, 3)
    node.run_pass(T0)
    p.end()
    node.run_pass(T0 + 1 * S)  # gone and drained: retired
    assert not node.producers.producers
    node.run_pass(T0 + 30 * S)  # last live at T0: exactly the expiry, kept
    assert list(node.ops().values()) == [3]
    node.run_pass(T0 + 30 * S + 1)
    assert node.ops() == {} and node.samples("comminsight_op_bytes_total") == []
    assert node.metrics.comm_names == {}  # its name is forgotten with it
    node.close()


def test_the_exposition_shrinks_back_once_short_jobs_have_ended(tmp_path):
    node = Node(tmp_path, expire_s=30)
    node.run_pass(T0)
    before = len(node.metrics.render().splitlines())
    now = T0
    for job in range(3):
        p = FakeProducer(tmp_path, f"job{job}.shm", job_id=f"job-{job}")
        p.add_comm(0, 0x100 + job, "default_pg:0")
        p.add_comm(1, 0x200 + job)  # an unnamed one too
        p.publish(0x100 + job, 4)
        p.publish(0x200 + job, 2)
        now += S
        node.run_pass(now)
        p.end()
        now += S
        node.run_pass(now)
    assert len(node.metrics.render().splitlines()) > before
    node.run_pass(now + 31 * S)
    assert len(node.metrics.render().splitlines()) == before
    assert node.metrics.series == {} and node.metrics.comm_names == {}
    node.close()


def test_series_of_a_running_idle_communicator_do_not_expire(tmp_path):
    node = Node(tmp_path, expire_s=30)
    p = FakeProducer(tmp_path, "a.shm")
    p.add_comm(0, 0x1, "default_pg:0")
    p.publish(0x1, 3)
    node.run_pass(T0)
    node.run_pass(T0 + 3600 * S)  # no op for an hour: the communicator still runs
    assert list(node.ops().values()) == [3]
    node.close()


def test_a_finalized_communicator_of_a_running_process_expires(tmp_path):
    node = Node(tmp_path, expire_s=30)
    p = FakeProducer(tmp_path, "a.shm")
    p.add_comm(0, 0x1, "short-lived")
    p.add_comm(1, 0x2, "default_pg:0")
    p.publish(0x1, 3)
    p.publish(0x2, 4)
    node.run_pass(T0)
    p.finalize(0)
    node.run_pass(T0 + 10 * S)
    assert {k[-1] for k in node.ops()} == {"short-lived", "default_pg:0"}
    node.run_pass(T0 + 30 * S + 1)
    assert {k[-1]: v for k, v in node.ops().items()} == {"default_pg:0": 4}
    node.close()


@pytest.mark.parametrize("level", [JOB, RANK])
def test_a_sum_never_falls_when_a_part_of_it_expires(tmp_path, level):
    """A rank's seconds sum its communicators, and at level job the histograms sum the node's
    ranks: a communicator finalized in a running process, and a rank that ended while the
    job's other rank runs on, expire, yet every series that stays keeps counting them (a
    counter that fell would read as a reset: rate() would spike). Once the job has nothing
    live on the node, its series go."""
    node = Node(tmp_path, expire_s=30, level=level)
    a = FakeProducer(tmp_path, "a.shm", rank=0)
    b = FakeProducer(tmp_path, "b.shm", rank=1, local_rank=1, device=1)
    a.add_comm(0, 0x1, "short-lived")
    a.add_comm(1, 0x2, "default_pg:0")
    b.add_comm(0, 0x2, "default_pg:0", rank=1)
    a.publish(0x1, 3)
    a.publish(0x2, 4)
    b.publish(0x2, 5, rank=1)

    def values() -> dict[str, dict]:
        out: dict[str, dict] = {}
        for name in ("comminsight_rank_op_seconds_total", "comminsight_op_latency_seconds_count"):
            out[name] = {tuple(sorted(s.labels.items())): s.value for s in node.samples(name)}
        return out

    node.run_pass(T0)
    before = values()
    a.finalize(0)
    b.end()
    node.run_pass(T0 + 31 * S)  # short-lived and rank 1's process are past the expiry
    after = values()
    assert after["comminsight_rank_op_seconds_total"], after
    for name, series in after.items():
        for key, value in series.items():
            assert value >= before[name].get(key, 0), (name, key, before[name].get(key), value)
    if level == JOB:  # the job's latency series still counts all 12 ops
        assert list(after["comminsight_op_latency_seconds_count"].values()) == [12]
    a.end()
    node.run_pass(T0 + 62 * S)
    assert node.samples("comminsight_rank_op_seconds_total") == []
    assert node.metrics.retired == {}
    node.close()


def test_a_communicator_recreated_under_its_old_name_keeps_counting_the_old_one(tmp_path):
    """At level rank a process's communicators of one name are one series: when the
    destroyed one expires, the series keeps its ops (a fall would read as a reset)."""
    node = Node(tmp_path, expire_s=30)
    p = FakeProducer(tmp_path, "a.shm")
    p.add_comm(0, 0x1, "default_pg:0")
    p.publish(0x1, 3)
    node.run_pass(T0)
    p.finalize(0)
    p.add_comm(1, 0x2, "default_pg:0")
    p.publish(0x2, 4)
    node.run_pass(T0 + 10 * S)
    assert {k[-1]: v for k, v in node.ops().items()} == {"default_pg:0": 7}
    node.run_pass(T0 + 31 * S)  # the destroyed one is past the expiry
    assert {k[-1]: v for k, v in node.ops().items()} == {"default_pg:0": 7}
    node.close()


def test_a_communicator_named_late_leaves_no_series_under_its_id(tmp_path):
    node = Node(tmp_path, expire_s=30)
    p = FakeProducer(tmp_path, "a.shm")
    p.add_comm(0, 0xBEEF)
    p.publish(0xBEEF, 2)
    node.run_pass(T0)
    assert {k[-1] for k in node.ops()} == {f"{0xBEEF:016x}"}
    p.name(0, "tp:0")  # Inject registered its name after its first ops
    p.publish(0xBEEF, 3)
    node.run_pass(T0 + S)
    assert {k[-1]: v for k, v in node.ops().items()} == {"tp:0": 5}
    node.close()


def test_expired_series_stay_counted_in_the_totals_the_master_exposes(tmp_path):
    node = Node(tmp_path, expire_s=30)
    p = FakeProducer(tmp_path, "a.shm")
    p.add_comm(0, 0x1, "default_pg:0")
    p.publish(0x1, 3)
    node.run_pass(T0)
    p.end()
    node.run_pass(T0 + S)
    node.run_pass(T0 + 60 * S)
    assert node.ops() == {}
    totals = node_metric_totals(node.metrics)
    assert sum(r.ops_total for r in totals.comm_ops) == 3  # the master's counters never fall
    assert all(r.comm_id == 0 for r in totals.comm_ops) and totals.comms_folded == 0
    node.close()


def test_expiry_key_refuses_values_out_of_range(tmp_path):
    env = {"COMMINSIGHT_HOME": str(tmp_path)}
    assert load_settings(env).agent_metrics_expire_s == 600.0
    settings = load_settings({**env, "COMMINSIGHT_AGENT_METRICS_EXPIRE_S": "45"})
    assert settings.agent_metrics_expire_s == 45.0
    for bad in ("0", "-5", "abc", "1e9"):
        with pytest.raises(ConfigError, match="COMMINSIGHT_AGENT_METRICS_EXPIRE_S"):
            load_settings({**env, "COMMINSIGHT_AGENT_METRICS_EXPIRE_S": bad})


def drops(node: Node) -> float:
    samples = node.samples("comminsight_profiler_drops_total")
    return {s.labels["reason"]: s.value for s in samples}["records_dropped_busy"]


def test_drops_of_a_retired_producer_are_added_to_later_producers_drops(tmp_path, node):
    old = FakeProducer(tmp_path, "old.shm")
    old.count("records_dropped_busy", 100)
    node.run_pass(T0)
    assert drops(node) == 100
    old.count("records_dropped_busy", 150)  # dropped more just before it ended
    old.end()
    node.run_pass(T0 + S)  # gone, drained and retired in this one pass
    assert not node.producers.producers
    assert drops(node) == 150
    new = FakeProducer(tmp_path, "new.shm")
    new.count("records_dropped_busy", 7)
    node.run_pass(T0 + 2 * S)
    assert drops(node) == 157  # max(old, sum) said 150
    new.count("records_dropped_busy", 9)
    node.run_pass(T0 + 3 * S)
    assert drops(node) == 159
    assert dict(node_metric_totals(node.metrics).profiler_drops)["records_dropped_busy"] == 159


def test_a_producer_found_and_retired_in_one_pass_still_counts_its_drops(tmp_path, node):
    p = FakeProducer(tmp_path, "a.shm")
    p.count("records_dropped_busy", 12)
    p.end()
    node.run_pass(T0)
    assert not node.producers.producers and drops(node) == 12


def test_a_drop_counter_that_goes_back_does_not_lower_the_total(tmp_path, node):
    p = FakeProducer(tmp_path, "a.shm")
    p.count("records_dropped_busy", 50)
    node.run_pass(T0)
    p.count("records_dropped_busy", 10)  # a region rewriting its own header
    node.run_pass(T0 + S)
    assert drops(node) == 50
    p.end()
    node.run_pass(T0 + 2 * S)
    assert drops(node) == 50


def test_the_master_keeps_two_jobs_communicators_of_one_name_apart():
    def slave(name: str, job_id: str, comm_id: int, ops: int) -> NodeRecord:
        node = NodeRecord(name, api.AgentMode.slave, state=api.NodeState.connected)
        node.identity = pb.NodeIdentity(node_name=name)
        node.last_seen_mono_ns = 10**12
        node.metric_totals = pb.NodeMetricTotals(
            comm_ops=[
                pb.CommOpTotals(
                    comm_id=comm_id,
                    comm_name="default_pg:0",
                    func="AllReduce",
                    ops_total=ops,
                    job_id=job_id,
                )
            ]
        )
        return node

    nodes = {"a": slave("a", "job-a", 1, 3), "b": slave("b", "job-b", 2, 4)}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobMetrics(nodes, pb.NodeMetricTotals, lambda _n: 0, lambda: 10**12))
    text = generate_latest(registry).decode()
    got = {
        (s.labels["job_id"], s.labels["comm"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "comminsight_job_comm_ops_total"
    }
    assert got == {("job-a", "default_pg:0"): 3, ("job-b", "default_pg:0"): 4}


def test_node_totals_carry_each_communicators_job(tmp_path, node):
    a = FakeProducer(tmp_path, "a.shm", job_id="job-a")
    a.add_comm(0, 0x1111, "default_pg:0")
    a.publish(0x1111, 3)
    node.run_pass(T0)
    (row,) = node_metric_totals(node.metrics).comm_ops
    assert (row.comm_id, row.comm_name, row.job_id, row.ops_total) == (
        0x1111,
        "default_pg:0",
        "job-a",
        3,
    )


# ---- the job id the Profiler writes -------------------------------------------------------

JOB_VARS = (
    "COMMINSIGHT_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "JOB_ID",
    "JOB_COMPLETION_INDEX",
)


def region_job_ids(home: Path) -> set[str]:
    out = set()
    for path in (home / "shms").glob("*.shm"):
        region = ShmRegion(path)
        out.add(record_text(region.header["job_id"]))
        region.close()
    return out


def profile_one_rank(home: Path, env: dict[str, str], uts_host: str | None = None) -> None:
    """A one-rank simulated job with the real plugin (ranks inherit this environment, as under
    a launcher); uts_host: its host name, set in a UTS namespace of its own (root only)."""
    command = [
        sys.executable,
        "-m",
        "comminsight.cli",
        "sim",
        "--plugin",
        str(builds()["plain"].path),
        "--home",
        str(home),
        "--ranks",
        "1",
        "--steps",
        "1",
        "--time-scale",
        "0.01",
        "--env",
        "COMMINSIGHT_AGENT_AUTOSTART=0",
    ]
    if uts_host is not None:
        command = [
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            uts_host,
            *command,
        ]
    clean = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    done = subprocess.run(command, env={**clean, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "env, job_id",
    [
        ({"SLURM_JOB_ID": "777"}, "777"),
        ({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "777"}, "777"),  # torchrun's default
        ({"TORCHELASTIC_RUN_ID": "rdzv-5", "SLURM_JOB_ID": "777"}, "rdzv-5"),
        ({"COMMINSIGHT_JOB_ID": "mine", "SLURM_JOB_ID": "777"}, "mine"),
        ({"TORCHELASTIC_RUN_ID": "none"}, ""),
        ({"JOB_ID": "sge-1"}, "sge-1"),
        ({"JOB_COMPLETION_INDEX": "3"}, ""),  # this host is not named <job>-3
        ({"SLURM_JOB_ID": "x" * 100}, "x" * 63),  # truncated to the field
    ],
)
def test_the_profiler_takes_the_job_id_from_the_scheduler(tmp_path, env, job_id):
    lock = hold_agent_lock(tmp_path)
    profile_one_rank(tmp_path, env)
    assert region_job_ids(tmp_path) == {job_id}
    lock.close()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="naming the host in a UTS namespace needs root and unshare",
)
@pytest.mark.parametrize(
    "host, index, job_id",
    [
        ("trainer-job-3", "3", "trainer-job"),
        ("trainer-job-3", "13", ""),
        ("trainer-job-3", "3x", ""),
        ("3", "3", ""),  # nothing before the index
    ],
)
def test_a_kubernetes_indexed_jobs_name_comes_from_its_pod_host_name(tmp_path, host, index, job_id):
    lock = hold_agent_lock(tmp_path)
    profile_one_rank(tmp_path, {"JOB_COMPLETION_INDEX": index}, uts_host=host)
    assert region_job_ids(tmp_path) == {job_id}
    lock.close()


# ---- build info ---------------------------------------------------------------------------


def test_build_info_names_the_version_commit_and_protocols(node):
    (info,) = node.samples("comminsight_build_info")
    assert info.value == 1
    assert info.labels["version"] == comminsight.__version__
    assert info.labels["shm_abi"] == str(shm_v1.PROTOCOL_VERSION)
    assert info.labels["agent_master_slave"] == "1"
    repo = Path(comminsight.__file__).resolve().parent.parent
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode == 0:
        assert info.labels["git_commit"] == head.stdout.strip()
    else:
        assert info.labels["git_commit"] == UNKNOWN


def test_git_commit_reads_loose_and_packed_refs_and_refuses_garbage(tmp_path):
    sha = "0123456789abcdef0123456789abcdef01234567"
    git = tmp_path / "repo" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    package = tmp_path / "repo" / "pkg"
    package.mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text(f"# pack-refs\n{sha} refs/heads/main\n")
    assert git_commit(package) == sha
    (git / "refs" / "heads" / "main").write_text(sha.replace("0", "f") + "\n")
    assert git_commit(package) == sha.replace("0", "f")
    (git / "HEAD").write_text("not a ref or a sha")
    assert git_commit(package) == UNKNOWN
    (git / "HEAD").write_text("ref: refs/heads/gone\n")
    (git / "packed-refs").unlink()
    assert git_commit(package) == UNKNOWN


def test_the_agents_process_metrics_are_exposed(node):
    names = {f.name for f in text_string_to_metric_families(node.metrics.render().decode())}
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "python_info"} <= names


# ---- the HTTP route -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "accept, openmetrics",
    [
        (None, False),
        ("*/*", False),
        ("text/plain; version=0.0.4", False),
        ("application/openmetrics-text", True),
        ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
        ("Application/OpenMetrics-Text;version=0.0.1;q=0.5", True),
        # Prometheus 3's scrape header
        (
            "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
            "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            True,
        ),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=zero, text/plain", False),
        (",;;,", False),
    ],
)
def test_openmetrics_is_negotiated_from_the_accept_header(accept, openmetrics):
    assert wants_openmetrics(accept) is openmetrics


@pytest.fixture
def live(tmp_path):
    p = FakeProducer(tmp_path, "a.shm", job_id="job-a", host="gpu-1", rank=3, local_rank=3)
    p.add_comm(0, 0x1111, "default_pg:0")
    p.publish(0x1111, 6)
    with LiveAgent(tmp_path, polling=False) as agent:
        yield agent


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (Debian's prometheus package)")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_route_serves_the_text_format_by_default_and_it_passes_promtool(live):
    response = httpx.get(f"{live.base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in response.text
    (ops,) = [
        s
        for f in text_string_to_metric_families(response.text)
        for s in f.samples
        if s.name == "comminsight_ops_total"
    ]
    assert ops.labels == {
        "job_id": "job-a",
        "step_id": "",
        "array_index": "",
        # the Agent's node (its COMMINSIGHT_AGENT_NODE_NAME), whatever the process calls itself
        "host": live.service.node_name,
        "node": "",
        "namespace": "",
        "comm": "default_pg:0",
        "op_type": "AllReduce",
    }
    assert ops.value == 6
    promtool_check(response.text)


def test_the_route_serves_openmetrics_when_asked(live):
    response = httpx.get(
        f"{live.base_url}/metrics", headers={"Accept": "application/openmetrics-text"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(
        "application/openmetrics-text; version=1.0.0"
    )
    assert response.text.endswith("# EOF\n")
    # the OpenMetrics parser is strict: metadata, suffixes, histograms, the final # EOF
    families = {f.name: f for f in openmetrics_families(response.text)}
    assert families["comminsight_build_info"].samples[0].value == 1
    (ops,) = families["comminsight_ops"].samples
    assert (ops.labels["job_id"], ops.labels["comm"], ops.value) == ("job-a", "default_pg:0", 6)
    # and the same samples as the text format
    text = httpx.get(f"{live.base_url}/metrics").text
    text_ops = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "comminsight_ops_total"
    ]
    assert [(s.labels, s.value) for s in text_ops] == [(ops.labels, ops.value)]


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"),
    [
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("*", True),
        ("identity", False),
        ("gzip;q=0", False),
        ("gzip;q=zero", False),
        ("*;q=0.5, gzip;q=0", False),
        ("deflate", False),
    ],
)
def test_the_route_gzips_when_the_client_accepts_it(live, accept_encoding, gzipped):
    url = f"{live.base_url}/metrics"
    with httpx.Client() as client:
        plain = client.get(url, headers={"Accept-Encoding": "identity"})
        request = client.build_request("GET", url, headers={"Accept-Encoding": accept_encoding})
        response = client.send(request, stream=True)
        raw = b"".join(response.iter_raw())
        response.close()
    assert response.status_code == 200
    assert (response.headers.get("content-encoding") == "gzip") is gzipped
    body = gzip.decompress(raw) if gzipped else raw
    if gzipped:
        assert len(raw) < len(body)
    # the same page either way (the process metrics' values move between two scrapes)
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert names == {f.name for f in text_string_to_metric_families(plain.text)}


def test_head_answers_the_headers_without_a_body(live):
    for path in ("/metrics", "/api/v1/health"):
        head = httpx.head(f"{live.base_url}{path}")
        get = httpx.get(f"{live.base_url}{path}")
        assert head.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-type"] == get.headers["content-type"]
