"""Records the ring overwrote before the log writer's first pass are lost like any others: the
logs say so in a gap line, and the seal's lost_count counts them. The writer once started
reading at what the ring still held, so a burst at start-up (a loaded node, a writer thread
slow to be scheduled) vanished without a trace, communicator inits among it.

The stand-in for NCCL (tests/plugins/late_threads.c) holds every thread the plugin starts
until its burst is published, so the burst comes before the writer's first pass for certain.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from log_files import segment_lines
from profiler_builds import builds, c_driver

ROOT = Path(__file__).resolve().parents[2]
DRIVER_SRC = ROOT / "tests" / "plugins" / "late_threads.c"
RING_SLOTS = 128
BURST = 476
RECORDS = BURST + 4  # and two communicator inits, two finalizes


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return c_driver(DRIVER_SRC, tmp_path_factory.mktemp("late_threads"), "-O1", exports=True)


def run_burst(driver: Path, home: Path) -> list[dict]:
    shm = home.parent / "shm"
    shm.mkdir(mode=0o700)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_SHM_DIR": str(shm),
        "COMMINSIGHT_PROFILER_RING_SLOTS": str(RING_SLOTS),
    }
    proc = subprocess.run(
        [str(driver), str(builds()["plain"].path), str(BURST)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    logs = home / "inspector_logs"
    assert not list(logs.glob("*.jsonl.partial")), "every segment is sealed at the last finalize"
    return [json.loads(raw) for raw in segment_lines(logs)]


def test_records_overwritten_before_the_first_pass_are_in_a_gap_line(driver, tmp_path):
    lines = run_burst(driver, tmp_path / "home")
    ci = [line["ci"] for line in lines if "ci" in line]
    logged = [
        c.get("ring_seq", c.get("q"))  # the compact op lines' key is q
        for c in ci
        if c["kind"] in ("c", "p", "coll", "p2p", "comm_init", "comm_finalize")
    ]
    gaps = [c for c in ci if c["kind"] == "gap"]
    seals = [c for c in ci if c["kind"] == "seal"]
    lost = []
    for gap in gaps:
        assert gap["reason"] == "ring_overwrite", gap
        seqs = range(gap["first_lost_ring_seq"], gap["last_lost_ring_seq"] + 1)
        assert gap["lost_count"] == len(seqs), gap
        lost.extend(seqs)
    # every record of the ring is either on a line or in a gap, once
    assert len(set(logged)) == len(logged) and len(set(lost)) == len(lost)
    assert not set(logged) & set(lost)
    assert set(logged) | set(lost) == set(range(1, RECORDS + 1))
    # the first pass came after the inits and the burst: the ring held only its last
    # RING_SLOTS of those records then, the first ones were lost (the two communicator inits
    # among them). The two finalizes race with that pass: one may overwrite a slot the pass
    # has not read yet (a record lost there too, seen once in a loaded run), but no record a
    # full ring still held after the last one, and nothing after that pass
    assert set(range(1, BURST + 2 - RING_SLOTS + 1)) <= set(lost)
    assert max(lost) <= RECORDS - RING_SLOTS
    assert BURST + 2 - RING_SLOTS <= len(lost) <= RECORDS - RING_SLOTS
    assert sum(s["lost_count"] for s in seals) == len(lost)
