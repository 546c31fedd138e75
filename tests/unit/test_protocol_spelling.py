"""Every string subscript in the product's Python (`row["comm_id"]`, `doc["ci"]`) names a field
of one of the project's protocols, or a key the module owns and lists here. The protocols are
read as they stand (JSON Schemas and OpenAPI properties, C-ABI fields and enums, Protobuf
fields), so a field renamed or removed in a protocol fails here at every module that still
spells the old name, and a misspelled field fails before any record reaches it. Records of the
C-ABI protocols are numpy structured arrays, which take any string: nothing else would tell a
misspelling until that line runs."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "comminsight"

# Keys that belong to the module itself (its own dicts, a library's or the OS's names), each
# module with why; anything else a subscript spells must be a protocol's name.
OWN_KEYS = {
    "__init__.py": {"__version__"},  # the version module's globals
    "agent/api/http_guard.py": {  # its refusal counters, by reason
        "bad_request", "header_timeout", "limit_busy", "limit_client", "limit_idle",
        "limit_stalled", "write_stalled",
    },
    "agent/api/params.py": {"$ref"},  # JSON Schema's keyword
    "agent/core/liveness.py": {"boottime", "monotonic"},  # /proc/<pid>/timens_offsets
    "agent/state/process_labels.py": {"gpu_labels", "job_labels", "rank_labels"},  # $defs
    "agent/master/store.py": {"epoch", "last_applied"},  # its cursor file
    "agent/slave/link.py": {"acked", "sent"},  # its counters
    "agent/slave/outbox.py": {"epoch", "next_seq"},  # its state file
    "cli/client.py": {"return"},  # a function's annotations
    "cli/simulate.py": {  # the simulator's summary
        "abi", "abort_reason", "completed_min", "elapsed_s", "errors", "faults", "ok",
        "ops_completed", "ops_issued", "ops_per_rank", "ops_planned", "plugin_name",
        "rank_results", "run_dir", "steps_completed", "workload",
    },
    "demo/log_checks.py": {"ops_issued"},  # the simulator's summary
    "demo/sim_checks.py": {"fault", "ops_completed", "ops_issued"},  # the simulator's summary
    "demo/simulation.py": {"error"},  # the simulator's summary
    "inject/group_naming.py": {"backend", "backend_options", "pg_options"},  # torch's kwargs
    "inject/metadata.py": {"RANK"},  # the launcher's environment
    "semantic/dask_cluster.py": {"address"},  # Dask's scheduler info
    "semantic/job_ops.py": {"group", "host_issue"},  # its own columns
    "semantic/recovery.py": {"decision_table"},  # its own result
    "sim/abi.py": {"recv_buff", "send_buff"},  # NCCL's ncclInfo-like args
    "sim/config.py": {"env", "faults", "node_homes", "run_as", "variants"},  # its config file
    "sim/forks.py": {"argv", "cwd", "env", "log", "run_as", "umask"},  # a fork's request
    "sim/nccl.py": {"host_api_ns", "host_start_ns", "host_stop_ns"},  # its op timings
    "sim/proxy.py": {"gpu_end_tick", "gpu_start_tick", "kernel_ch_events"},  # its op state
    "sim/rank_process.py": {"at_ns"},  # its event queue
    "sim/summary.py": {"nonzero_returns", "ops_completed", "ops_issued", "ops_planned",
                       "plugin_name"},  # the simulator's summary
    "sim/truth.py": {"run"},  # its ground-truth file
    "sim/workloads/megatron_lm.py": {  # Megatron's group names
        "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", "dist-opt", "dp", "embd", "mp", "pp", "tp",
    },
    "sim/workloads/moe.py": {"micro_batch"},  # its phase table
    "sim/workloads/torch_fsdp2.py": {"dp_replicate", "dp_shard"},  # a device mesh's dims
}  # fmt: skip


def _walk(node: object, out: set[str]) -> None:
    """Property names (JSON Schema, OpenAPI) and `name`s (C-ABI fields, enum members)."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            out.update(node["properties"])
        if isinstance(node.get("name"), str):
            out.add(node["name"])
        for value in node.values():
            _walk(value, out)
    elif isinstance(node, list):
        for value in node:
            _walk(value, out)


# `type name = N;`, `repeated`/`optional` before it, or a map's `map<K, V> name = N;`
_PROTO_FIELD = re.compile(r"^\s*(?:repeated |optional )?(?:map<[^>]*>|[\w.]+) (\w+) = \d+;", re.M)


def protocol_names(root: Path = ROOT / "protocols") -> set[str]:
    names: set[str] = set()
    for path in sorted(root.rglob("*")):
        if "compat-baseline" in path.parts or not path.is_file():
            continue
        if path.suffix == ".json":
            _walk(json.loads(path.read_text()), names)
        elif path.suffix == ".yaml" and path.name != "registry.yaml":
            _walk(yaml.safe_load(path.read_text()), names)
        elif path.suffix == ".proto":
            names.update(_PROTO_FIELD.findall(path.read_text()))
    return names


@cache
def _names() -> frozenset[str]:
    return frozenset(protocol_names())


def misspelled(source: str, own: set[str]) -> list[tuple[int, str]]:
    """(line, key) of every string subscript that is neither a protocol's name nor own."""
    return [
        (node.lineno, node.slice.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
        and node.slice.value not in _names()
        and node.slice.value not in own
    ]


MODULES = sorted(PRODUCT.rglob("*.py"))


def test_the_protocols_give_the_names_of_each_kind():
    names = _names()
    # shm v1 (C-ABI), fifo-event, inspector-log (JSON Schema), agent-master-slave (Protobuf),
    # agent-master-api (OpenAPI), config
    for name in ("heartbeat_mono_ns", "event_seq", "coll_perf", "batch_seq", "same_state_ranks",
                 "COMMINSIGHT_AGENT_LISTEN", "profiler_drops"):  # fmt: skip
        assert name in names, name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PRODUCT)))
def test_every_subscript_names_a_protocols_field_or_the_modules_own_key(path):
    own = OWN_KEYS.get(str(path.relative_to(PRODUCT)), set())
    found = misspelled(path.read_text(), own)
    assert not found, (
        f"{path.relative_to(ROOT)}: subscripts that name no protocol's field {found}; "
        "spell the protocol's name, or list a key the module owns in OWN_KEYS"
    )


def test_every_own_key_is_still_spelled_by_its_module():
    """An entry left behind when the code changed would let a later misspelling through."""
    for module, own in OWN_KEYS.items():
        tree = ast.parse((PRODUCT / module).read_text())
        spelled = {
            n.slice.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
        }
        assert own <= spelled, (module, own - spelled)
        assert not own & _names(), (module, own & _names())  # a protocol's: not its own


def test_a_misspelled_or_renamed_field_is_caught():
    source = 'def f(row, h):\n    return row["comm_idd"], h["heartbeat_mono_ns"], h["pid"]\n'
    assert misspelled(source, set()) == [(2, "comm_idd")]
    assert misspelled(source, {"comm_idd"}) == []
