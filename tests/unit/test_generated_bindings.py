"""The generated Python bindings load and work: registry, bundled OpenAPI, client, gRPC stubs."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import msgspec
import yaml

from comminsight_gen.registry import PROTOCOLS

ROOT = Path(__file__).resolve().parents[2]


API_JSON = "agent_master_api_v1.json"
MUTATING = {"post", "put", "patch", "delete"}


def bundled_api() -> dict:
    return json.loads(resources.files("comminsight_gen.openapi").joinpath(API_JSON).read_text())


def test_registry_module_matches_registry_yaml():
    reg = yaml.safe_load((ROOT / "protocols/registry.yaml").read_text())["protocols"]
    assert [(p.id, p.version, p.kind, p.status) for p in PROTOCOLS] == [
        (p["id"], p["version"], p["kind"], p["status"]) for p in reg
    ]
    ids = {p.id for p in PROTOCOLS}
    assert ids == {
        "nccl-profiler",
        "shm",
        "fifo-event",
        "config",
        "inspector-log",
        "step-summary",
        "semantic-engine",
        "hang-report",
        "agent-master-api",
        "agent-master-slave",
        "inject-metadata",  # Inject's metadata/ lines: which communicator got which name
        "python-stack",  # a process's Python stacks, captured through Inject on request
        "engine-core",  # the Semantic Engine's C core as its Python side loads it
        "home",  # the home directory's layout: every entry's name
        "metrics",  # the Prometheus families the Agent serves
    }  # the protocols of architecture §5


def test_bundled_openapi_is_self_contained_and_secures_only_mutations():
    spec = bundled_api()
    assert spec["openapi"].startswith("3.1")
    text = json.dumps(spec)
    assert ".schema.json" not in text, "an external $ref survived bundling"
    schemas = spec["components"]["schemas"]
    for ref in _walk_refs(spec):
        assert ref.startswith("#/components/"), f"not a local reference: {ref}"
        _, _, section, name = ref.split("/")
        assert name in spec["components"][section], f"dangling reference {ref}"
    assert {"StepSummary", "HangReport", "Error"} <= set(schemas)
    seen = set()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method not in MUTATING | {"get"}:
                continue
            assert op["operationId"] not in seen
            seen.add(op["operationId"])
            if method in MUTATING:
                assert op["security"] == [{"bearerAuth": []}], f"{method} {path} needs a token"
                assert "401" in op["responses"], f"{method} {path} documents 401"
            else:
                assert op["security"] == [], f"{method} {path} must be open"
    for required in (
        "health",
        "node",
        "communicators",
        "communicators/{comm_id}",
        "inflight",
        "ops/recent",
        "steps",
        "hangs",
        "archive",
    ):
        assert f"/api/v1/{required}" in spec["paths"], required


def _walk_refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _walk_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk_refs(v)


def test_server_models_and_client_agree_on_a_hang_report():
    """The same body decodes through the server-side msgspec model and the generated client."""
    from comminsight_client.models.hang_report import HangReport as ClientHangReport
    from comminsight_gen.models.agent_master_api_v1 import HangReport as ServerHangReport
    from comminsight_gen.models.hang_report_v1 import HangReport

    body = (
        ROOT / "contract-tests/fixtures/json/hang-report/v1/valid/rank-not-joined-open.json"
    ).read_bytes()
    server = msgspec.json.decode(body, type=ServerHangReport)
    assert msgspec.json.decode(body, type=HangReport).report_id == server.report_id
    client = ClientHangReport.from_dict(json.loads(body))
    assert client.to_dict()["report_id"] == server.report_id
    assert json.loads(msgspec.json.encode(server)) == json.loads(body)


def test_client_exposes_every_operation():
    import importlib

    spec = bundled_api()
    for ops in spec["paths"].values():
        for method, op in ops.items():
            if method in MUTATING | {"get"}:
                tag = op["tags"][0]
                module = importlib.import_module(
                    f"comminsight_client.api.{tag}.{op['operationId']}"
                )
                assert callable(module.sync_detailed) and callable(module.asyncio_detailed)


def test_grpc_messages_round_trip_and_service_stub_exists():
    from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
    from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2_grpc as rpc

    batch = pb.NodeStateBatch()
    data = batch.SerializeToString()
    assert pb.NodeStateBatch.FromString(data) == batch
    assert hasattr(rpc, "AgentMasterStub") and hasattr(rpc, "AgentMasterServicer")
    assert pb.DESCRIPTOR.package == "comminsight.agent_master_slave.v1"
    service = pb.DESCRIPTOR.services_by_name["AgentMaster"]
    assert {m.name for m in service.methods} >= {"Register", "StreamNodeState", "Heartbeat"}


def test_protobuf_runtime_floor_covers_the_gencode_version():
    import re

    import google.protobuf

    pb2 = (
        ROOT / "generated/python/comminsight_gen/agent_master_slave/v1/agent_master_slave_pb2.py"
    ).read_text()
    gencode = tuple(
        int(x) for x in re.search(r"Protobuf Python Version: ([\d.]+)", pb2)[1].split(".")
    )
    floor = re.search(r'"protobuf>=([\d.]+)', (ROOT / "pyproject.toml").read_text())[1]
    assert tuple(int(x) for x in floor.split(".")) >= gencode
    assert tuple(int(x) for x in google.protobuf.__version__.split(".")[:3]) >= gencode
