"""The Profiler's op lines, in both forms (COMMINSIGHT_PROFILER_LOG_FORMAT compact and
inspector), written through the C encoders generated from the schema, carry each object's keys
in the schema's order and no key the schema lacks: its lines of simulated jobs through the
real plugin (collectives rooted and not, sends and receives, GPU-timed and not). The Agent's
lines for a dead process's records are held to the same order in
tests/unit/test_log_line_forms.py."""

from __future__ import annotations

import json

import pytest
import zstandard
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation
from comminsight_gen.inspector_log_v1_codec import BY_KIND, KEY_ORDER, O

# pipeline sends and receives, expert all-to-alls, and the broadcasts DDP starts with (rooted)
WORKLOADS = {"tp-pp-dp": {"ranks": 4}, "moe": {"ranks": 4}, "ddp": {"ranks": 2}}
# the line's objects by their key in it (ci: by its kind)
OBJECTS = {
    "header": O.HEADER,
    "metadata": O.METADATA,
    "coll_perf": O.COLL_PERF,
    "p2p_perf": O.P2P_PERF,
}


def assert_schema_order(name: str, pairs: list, line: bytes) -> set[str]:
    """The keys of one object (as (key, value) pairs, nested objects alike) in the schema's
    order, with the required ones; the keys seen, nested ones too."""
    order, known, required = KEY_ORDER[name]
    keys = [k for k, _ in pairs]
    assert set(keys) <= known and required <= set(keys), (name, line)
    assert keys == [k for k in order if k in keys], (name, line)
    seen = set(keys)
    for key, value in pairs:
        if key == "ci":
            seen |= assert_schema_order(BY_KIND[dict(value)["kind"]], value, line)
        elif key in OBJECTS:
            seen |= assert_schema_order(OBJECTS[key], value, line)
    return seen


def op_line(line: bytes) -> list | None:
    pairs = json.loads(line, object_pairs_hook=list)
    ci = dict(pairs).get("ci")
    return pairs if ci is not None and dict(ci).get("kind") in BY_KIND else None


@pytest.fixture(scope="module", params=["compact", "inspector"])
def profiler_lines(request, tmp_path_factory) -> tuple[str, list[bytes]]:
    out = []
    for workload, shape in WORKLOADS.items():
        home = tmp_path_factory.mktemp(f"{workload}-{request.param}")
        sim = run_simulation(
            SimConfig(
                plugin=str(builds()["plain"].path),
                home=str(home),
                workload=workload,
                steps=2,
                time_scale=0.01,
                env=(
                    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
                    ("COMMINSIGHT_PROFILER_LOG_FORMAT", request.param),
                ),
                **shape,
            )
        )
        assert not sim.errors, sim.errors
        for path in sorted((home / "inspector_logs").iterdir()):
            data = path.read_bytes()
            if path.suffix == ".zst":
                data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
            out += data.splitlines()
    return request.param, out


def test_the_profiler_writes_the_schema_s_keys_in_its_order(profiler_lines):
    form, lines = profiler_lines
    kinds, keys_seen = set(), set()
    for line in lines:
        pairs = op_line(line)
        if pairs is None:
            continue
        keys_seen |= assert_schema_order(O.INSPECTOR_LOG_RECORD, pairs, line)
        kinds.add(dict(dict(pairs)["ci"])["kind"])
    if form == "compact":
        assert kinds == {"c", "p"}
        assert {"rt", "pe", "g0", "gd", "hc", "bw", "cn"} <= keys_seen  # optional, present
    else:
        assert kinds == {"coll", "p2p"}
        assert {"root", "comm_name", "gpu_start_globaltimer_ns", "host_complete_mono_ns"} <= (
            keys_seen
        )
