"""The whole /metrics page, built from fixed inputs through the collectors the Agent registers,
held to golden files (tests/data/metrics/), and every family of it to the metrics protocol
(protocols/metrics/v1): what is served is what the schema declares - each family's name,
type, HELP and label names - no more and no less.

A page that changed on purpose is rewritten with COMMINSIGHT_UPDATE_GOLDEN=1; the diff of the
golden file is then the change a dashboard or an alert sees.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from comminsight.agent.api.http_guard import ConnectionGuard
from comminsight.agent.archive.archiver import Archiver
from comminsight.agent.hangs.stack_capture import StackCapture
from comminsight.agent.master.grpc_service import AgentMasterServer
from comminsight.agent.master.job_metrics import JobMetrics
from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.metrics.engine import SemanticEngineMetrics
from comminsight.agent.metrics.inputs import AgentInputs
from comminsight.agent.metrics.node import NodeMetrics
from comminsight.agent.metrics.stacks import StackCaptureMetrics
from comminsight.agent.metrics.totals import node_metric_totals
from comminsight.agent.receivers.fifo_reader import HangEventFifo
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.process_labels import LABEL_NAMES, ProcessLabels
from comminsight.agent.steps.step_durations import StepTimes
from comminsight_gen import metrics_v1
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.hang_report_v1 import Incident

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "metrics"
UPDATE = os.environ.get("COMMINSIGHT_UPDATE_GOLDEN") == "1"
# what describes the machine or the build, not this page: the Agent's own process and Python,
# and the version and commit of comminsight_build_info
_PLATFORM = re.compile(r"^(# (HELP|TYPE) )?(process|python)_\S*.*\n", re.M)
_BUILD = re.compile(r'^(comminsight_build_info\{.*)git_commit="[^"]*"(.*)version="[^"]*"', re.M)

RANKS = [
    ProcessLabels(
        "job-7",
        "3",
        "",
        "node-a",
        "k8s-a",
        "ml",
        f"trainer-{r}",
        "main",
        str(8 + r),  # rank, local rank, GPU index and CUDA ordinal all differ: a page with
        str(r),  # two of them swapped is not the golden one
        str(4 + r),
        "0",
        f"GPU-0000000{r}-0000-0000-0000-000000000000",
    )
    for r in range(2)
]
TP, DP = 0x95781991FD8F8E0C, 0x7445270F57FEF2F7


def _slots(rank: int) -> np.ndarray:
    """A rank's ops: four all-reduces on its data-parallel communicator, timed on the GPU, of
    sizes across the size buckets, and a send and receive on an unnamed communicator,
    timed by their host calls."""
    n = 6
    r = np.zeros(n, shm_v1.OP_SLOT_DTYPE)
    r["seq"] = np.arange(1, n + 1)
    r["kind"] = [shm_v1.RecordKind.COLL] * 4 + [shm_v1.RecordKind.P2P] * 2
    r["func"] = [shm_v1.Func.ALL_REDUCE] * 4 + [shm_v1.Func.SEND, shm_v1.Func.RECV]
    r["comm_id"] = [DP] * 4 + [TP] * 2
    r["rank"], r["nranks"] = rank, 2
    r["peer"] = [shm_v1.NO_RANK] * 4 + [1 - rank] * 2
    r["op_seq"] = np.arange(n)
    r["bytes"] = [4, 1 << 20, 64 << 20, 1 << 30, 8 << 20, 8 << 20]
    start = 1_000_000_000 + np.arange(n) * 50_000_000
    r["host_start_mono_ns"] = start
    r["host_stop_mono_ns"] = start + 20_000
    r["complete_mono_ns"] = start + (1 + np.arange(n)) * 1_000_000 * (1 + rank)
    r["timing_source"] = [shm_v1.TimingSource.KERNEL_GPU] * 4 + [
        shm_v1.TimingSource.COLLECTIVE_CPU
    ] * 2
    r["gpu_start_ticks"] = start
    r["gpu_end_ticks"] = r["complete_mono_ns"]
    return r


def _incident() -> Incident:
    return msgspec.convert(
        {
            "schema_version": 1,
            "incident_id": "inc-1",
            "diagnosed_by": "node-a",
            "status": "open",
            "severity": "critical",
            "job_id": "job-7",
            "root": {
                "report_id": "r-1",
                "verdict": "rank_not_joined",
                "comm": {"comm_id": f"{TP:016x}", "nranks": 2, "comm_name": "tensor_parallel:0"},
                "culprits": [
                    {
                        "comm_rank": 1,
                        "node_name": "node-a",
                        "reason": "x",
                        "global_rank": 1,
                        "host": "node-a",
                    }
                ],
                "summary": "rank 1 never joined AllReduce #5",
                "op": {
                    "kind": "coll",
                    "func": "AllReduce",
                    "seq": 5,
                    "count": 1,
                    "datatype": "ncclFloat32",
                    "size_bytes": 4,
                },
            },
            "consequences": [],
            "root_changes": [],
            "opened_mono_ns": 1,
            "opened_real_ns": 1,
            "updated_real_ns": 1,
            "stacks": [],
        },
        Incident,
    )


class _Collector:
    """A collector method called on a stand-in of its object: the families of a part too big
    to build here (the archive's uploader, the master's gRPC server) from the fields they
    read."""

    def __init__(self, collect) -> None:
        self.collect = collect


def node_registry(level: str, home: Path) -> CollectorRegistry:
    """A node Agent's registry as the service builds it, holding fixed values."""
    m = NodeMetrics(level=level)
    m.comm_names[DP] = "default_pg:0"
    for rank, labels in enumerate(RANKS):
        m.add_records(_slots(rank), labels, now_mono_ns=2_000_000_000)
        m.inflight_age_s[(*labels.values(), "default_pg:0")] = 1.5 + rank
        steps = StepTimes()
        steps.add([0.25, 0.5 + rank])
        m.add_steps({labels: steps}, now_mono_ns=2_000_000_000)
    for i, reason in enumerate(m.profiler_counters):
        m.profiler_counters[reason] = i
    m.records_lost, m.files_refused, m.producers, m.lag_s = 7, 1, 2, 0.016
    m.open_hangs = {"rank_not_joined": 1}
    m.open_incidents = {"rank_not_joined": 1}
    m.open_incident_roots = [_incident()]
    m.incidents_opened = {"rank_not_joined": 2}
    m.engine_steps, m.engine_records_dropped, m.engine_records_queued = 11, 0, 3
    m.semantic = SemanticEngineMetrics(
        failures={"ValueError": 1},
        restarts={"ValueError": 1},
        lag_s=0.2,
        gpus={"running": 2, "backing_off": 0, "finished": 0},
        replay_records=40,
        engine_ops=9,
        cuts=4,
        ops_unsettled=0,
        cuts_contradicting=1,
    )
    inputs = AgentInputs(HangEventFifo(home), ProducerSet(home), InjectNames(home))
    inputs.fifo.stats.rejected_by_reason["no_magic"] = 1
    inputs.fifo.refused["not_fifo"] = 1
    inputs.producers.counters.refused_by_reason["abi_version"] = 1
    inputs.producers.counters.slots_rejected_by_reason["func"] = 2
    inputs.inject.rejected["invalid"] = 1
    m.inputs = inputs
    capture = StackCapture(home)
    capture.outcomes["captured"] = 1
    m.registry.register(StackCaptureMetrics(capture))
    guard = ConnectionGuard(max_connections=64, header_timeout_s=5.0)
    guard.closed["header_timeout"] = 1
    guard.accept_errors["EMFILE"] = 1
    m.registry.register(guard)
    archiver = SimpleNamespace(local=SimpleNamespace(refused_total=1))
    m.registry.register(_Collector(lambda: Archiver.collect(archiver)))
    return m


def master_registry() -> CollectorRegistry:
    """A master's own families: the job's nodes, its refusals and its stack requests."""
    local = NodeMetrics()
    local.add_records(_slots(0), RANKS[0], now_mono_ns=2_000_000_000)
    local.comm_names[DP] = "default_pg:0"
    local.open_hangs = {"rank_not_joined": 1}
    local.profiler_counters["log_records_lost"] = 4
    local.records_lost = 2
    slave = NodeRecord("node-b", api.AgentMode.slave, state=api.NodeState.connected)
    slave.identity = pb.NodeIdentity(node_name="node-b")
    slave.last_seen_mono_ns = 9 * 10**11
    slave.metric_totals = node_metric_totals(local)
    slave.counters.outbox_events_dropped_total = 1
    me = NodeRecord("node-a", api.AgentMode.master, state=api.NodeState.connected)
    me.local = True
    me.last_seen_mono_ns = 10**12
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        JobMetrics(
            {"node-a": me, "node-b": slave},
            lambda: node_metric_totals(local),
            lambda _node: 3,
            lambda: 10**12,
        )
    )
    server = SimpleNamespace(
        unauthenticated_rejects=1,
        stacks=SimpleNamespace(outcomes={"answered": 1, "timeout": 0}, open={}),
    )
    registry.register(_Collector(lambda: AgentMasterServer.collect(server)))
    return registry


def page(registry: CollectorRegistry) -> str:
    text = generate_latest(registry).decode()
    text = _PLATFORM.sub("", text)
    return _BUILD.sub(r'\1git_commit="COMMIT"\2version="VERSION"', text)


PAGES = {
    "node_job.prom": lambda home: page(node_registry("job", home).registry),
    "node_rank.prom": lambda home: page(node_registry("rank", home).registry),
    "master.prom": lambda _home: page(master_registry()),
}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_page_is_the_golden_one(name, tmp_path):
    text = PAGES[name](tmp_path)
    golden = GOLDEN / name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with COMMINSIGHT_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"/metrics changed from {golden}: if on purpose, rerun with COMMINSIGHT_UPDATE_GOLDEN=1 "
        "and commit the golden file's diff"
    )


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_family_served_is_the_schema_s_and_every_one_is_served(tmp_path):
    served: dict = {}
    for name, make in PAGES.items():
        for family in _families(make(tmp_path / name)).values():
            served.setdefault(family.name, []).append((name, family))
    specs = {spec.family: spec for spec in metrics_v1.METRICS.values()}
    assert sorted(served.keys() - specs.keys()) == []
    assert sorted(specs.keys() - served.keys()) == []
    for family_name, seen in served.items():
        spec = specs[family_name]
        for page_name, family in seen:
            level = "rank" if page_name == "node_rank.prom" else "job"
            assert family.type == spec.type, family_name
            assert family.documentation == spec.help, family_name
            assert family.samples, f"{family_name} has no sample on {page_name}: no label seen"
            for sample in family.samples:
                labels = sorted(k for k in sample.labels if k != "le")
                assert labels == sorted(spec.label_names(level)), (family_name, page_name)


def test_the_process_labels_are_the_schema_s_groups_in_order():
    """A series' label values are ProcessLabels.values(), in LABEL_NAMES' order: its fields
    must be the label names, and values() must give them in that order."""
    fields = list(ProcessLabels.__dataclass_fields__)
    assert [f.lower() for f in LABEL_NAMES] == fields
    assert ProcessLabels(*fields).values() == tuple(fields)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_promtool_accepts_the_golden_page(name):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is required (Debian's prometheus package: scripts/install-debian-packages.sh)"
        )
    done = subprocess.run(
        [promtool, "check", "metrics"],
        input=(GOLDEN / name).read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_spells_a_metric_name_itself():
    """Family names come from the generated specs alone: a string literal that is a family's
    name (or one of its samples') anywhere in the product is a copy that can drift."""
    root = Path(__file__).resolve().parents[2] / "comminsight"
    names = set()
    for spec in metrics_v1.METRICS.values():
        names |= {spec.family, spec.exposed}
        names |= {spec.family + suffix for suffix in ("_bucket", "_sum", "_count", "_created")}
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.value}")
    assert found == []
