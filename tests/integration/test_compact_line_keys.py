"""The Profiler's compact op lines (kinds c and p), written through the C encoder generated
from the schema, carry the schema's keys in the schema's order: its lines of simulated jobs
through the real plugin (collectives rooted and not, sends and receives, GPU-timed and not).
The Agent's lines for a dead process's records are held to the same order in
tests/unit/test_log_line_forms.py."""

from __future__ import annotations

import json

import pytest
import zstandard
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation
from comminsight_gen.inspector_log_v1_codec import KEYS_BY_KIND

# pipeline sends and receives, expert all-to-alls, and the broadcasts DDP starts with (rooted)
WORKLOADS = {"tp-pp-dp": {"ranks": 4}, "moe": {"ranks": 4}, "ddp": {"ranks": 2}}


def _ci_keys(line: bytes) -> tuple[str, list[str]] | None:
    pairs = json.loads(line, object_pairs_hook=list)
    ci = dict(pairs).get("ci")
    if ci is None or dict(ci).get("kind") not in KEYS_BY_KIND:
        return None
    assert [k for k, _ in pairs] == ["ci"], line  # the compact form is the ci object alone
    return dict(ci)["kind"], [k for k, _ in ci]


def _assert_schema_order(kind: str, keys: list[str], line: bytes) -> None:
    order, known, required = KEYS_BY_KIND[kind]
    assert set(keys) <= known and required <= set(keys), line
    assert keys == [k for k in order if k in keys], line


@pytest.fixture(scope="module")
def profiler_lines(tmp_path_factory) -> list[bytes]:
    out = []
    for workload, shape in WORKLOADS.items():
        home = tmp_path_factory.mktemp(workload)
        sim = run_simulation(
            SimConfig(
                plugin=str(builds()["plain"].path),
                home=str(home),
                workload=workload,
                steps=2,
                time_scale=0.01,
                env=(
                    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
                    ("COMMINSIGHT_PROFILER_LOG_FORMAT", "compact"),
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
    return out


def test_the_profiler_writes_the_schema_s_keys_in_its_order(profiler_lines):
    kinds, keys_seen = set(), set()
    for line in profiler_lines:
        found = _ci_keys(line)
        if found is None:
            continue
        kind, keys = found
        _assert_schema_order(kind, keys, line)
        kinds.add(kind)
        keys_seen |= set(keys)
    assert kinds == {"c", "p"}
    assert {"rt", "pe", "g0", "gd", "hc", "bw", "cn"} <= keys_seen  # optional ones, present
