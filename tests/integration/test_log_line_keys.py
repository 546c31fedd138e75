"""The Profiler's lines of every kind, op lines in both forms (COMMINSIGHT_PROFILER_LOG_FORMAT
compact and inspector), written through the C encoders generated from the schema, carry each
object's keys in the schema's order, nested objects too, and no key the schema lacks: its lines
of simulated jobs through the real plugin (collectives rooted and not, sends and receives,
GPU-timed and not, segments started and sealed, communicators made and finalized). The
Agent's lines for a dead process's records are held to the same order in
tests/unit/test_log_line_forms.py."""

from __future__ import annotations

import json

import pytest
import zstandard
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation
from comminsight_gen.inspector_log_v1_codec import BY_KIND, KEY_ORDER, NESTED, O

# pipeline sends and receives, expert all-to-alls, and the broadcasts DDP starts with (rooted)
WORKLOADS = {"tp-pp-dp": {"ranks": 4}, "moe": {"ranks": 4}, "ddp": {"ranks": 2}}


class Pairs(list):
    """A JSON object as its (key, value) pairs, in the line's order (an array stays a list)."""


def assert_schema_order(name: str, pairs: list, line: bytes) -> set[str]:
    """The keys of one object (as (key, value) pairs, nested objects alike) in the schema's
    order, with the required ones; the keys seen, nested ones too."""
    order, known, required = KEY_ORDER[name]
    keys = [k for k, _ in pairs]
    assert set(keys) <= known and required <= set(keys), (name, line)
    assert keys == [k for k in order if k in keys], (name, line)
    seen = set(keys)
    for key, value in pairs:
        child = NESTED.get(name, {}).get(key)
        if child is None:
            continue
        # an array is a plain list, an object a Pairs: an empty array holds no object
        items = [value] if isinstance(value, Pairs) else value
        for item in items:
            seen |= assert_schema_order(child or BY_KIND[dict(item)["kind"]], item, line)
    return seen


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
        pairs = json.loads(line, object_pairs_hook=Pairs)
        keys_seen |= assert_schema_order(O.INSPECTOR_LOG_RECORD, pairs, line)
        kinds.add(dict(dict(pairs)["ci"])["kind"])
    assert {"segment_start", "seal", "comm_init", "comm_finalize"} <= kinds
    assert {"process", "clock", "communicators", "comm"} <= keys_seen
    if form == "compact":
        assert {"c", "p"} <= kinds and not {"coll", "p2p"} & kinds
        assert {"rt", "pe", "g0", "gd", "hc", "bw", "cn"} <= keys_seen  # optional, present
    else:
        assert {"coll", "p2p"} <= kinds and not {"c", "p"} & kinds
        assert {"root", "comm_name", "gpu_start_globaltimer_ns", "host_complete_mono_ns"} <= (
            keys_seen
        )
