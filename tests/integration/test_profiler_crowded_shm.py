"""The Profiler on a node whose SHM file system is small: a container's /dev/shm is 64 MiB.

Eight processes, each leaving its region behind (SIGKILLed: nothing removes it), in a 64 MiB
tmpfs mounted in a private mount namespace. With the default ring each region was 16.2 MiB:
the fourth process found no room, its SHM was disabled and the Agent never saw it. Now each
sizes its ring to its share of the file system, says so on stderr and in its header, and all
eight are there.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from private_tmpfs import in_private_tmpfs, popen_in_private_tmpfs, skip_without_private_tmpfs
from profiler_builds import builds
from waiting import wait_until

from comminsight.shm_reader import ShmError, ShmRegion
from comminsight_gen.abi import shm_v1

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "hostile_scenarios.py"
PROCESSES = 8
MIB = 1024 * 1024


def scenario_env(home: Path, shm_dir: Path) -> dict:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_SHM_DIR": str(shm_dir),
        "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "50",
        "PYTHONPATH": str(ROOT / "tests"),
        "SCENARIO_OPS": "4",
        **builds()["plain"].env,
    }


def run_in_small_tmpfs(tmp_path: Path, size: str, script: str) -> subprocess.CompletedProcess:
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir(exist_ok=True)
    skip_without_private_tmpfs(shm_dir)
    return subprocess.run(
        in_private_tmpfs(shm_dir, size, script),
        env=scenario_env(tmp_path / "home", shm_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_eight_processes_fit_a_64_mib_tmpfs_each_saying_it_sized_down(tmp_path):
    shm_dir, out = tmp_path / "shm", tmp_path / "headers"
    out.mkdir()
    one = f"{shlex.quote(sys.executable)} {SCENARIOS} killed {builds()['plain'].path}"
    # each process is killed with its region in place; their headers are copied out before
    # the namespace, and the tmpfs with it, goes
    script = (
        f"for i in $(seq {PROCESSES}); do {one} >> {out}/facts 2>> {out}/stderr; done; "
        f'for f in {shm_dir}/*.shm; do head -c 4096 "$f" > {out}/$(basename "$f").hdr; done; '
        f"df -B1 --output=size {shm_dir} | tail -1 > {out}/size"
    )
    proc = run_in_small_tmpfs(tmp_path, "64m", script)
    assert proc.returncode == 0, proc.stderr
    stderr = (out / "stderr").read_text()
    assert "SHM disabled" not in stderr, stderr[-3000:]
    facts = [json.loads(line) for line in (out / "facts").read_text().splitlines()]
    assert len(facts) == PROCESSES  # each found its region and printed it
    headers = [
        np.frombuffer(p.read_bytes(), dtype=shm_v1.HEADER_DTYPE, count=1)[0]
        for p in sorted(out.glob("*.hdr"))
    ]
    assert {int(h["pid"]) for h in headers} == {f["pid"] for f in facts}
    fs_bytes = int((out / "size").read_text())
    assert fs_bytes == 64 * MIB
    assert all(int(h["file_size"]) <= fs_bytes // PROCESSES for h in headers)
    for h in headers:  # sized down, and the header says from what and why
        assert int(h["ring_slots_configured"]) == 65536
        assert 64 <= int(h["ring_capacity"]) < 65536
        assert int(h["shm_dir_bytes"]) == fs_bytes and int(h["sizing_local_ranks"]) == 8
        assert 0 < int(h["shm_dir_free_bytes"]) <= fs_bytes
    assert stderr.count("SHM ring sized down from 65536 to") == PROCESSES


def test_a_roomy_file_system_keeps_the_configured_ring(tmp_path):
    """On a file system with room (a host's /dev/shm is half of its memory), nothing changes."""
    out = tmp_path / "headers"
    out.mkdir()
    one = f"{shlex.quote(sys.executable)} {SCENARIOS} killed {builds()['plain'].path}"
    script = (
        f"{one} > {out}/facts 2> {out}/stderr; "
        f'for f in {tmp_path / "shm"}/*.shm; do head -c 4096 "$f" > {out}/one.hdr; done'
    )
    proc = run_in_small_tmpfs(tmp_path, "1g", script)
    assert proc.returncode == 0, proc.stderr
    h = np.frombuffer((out / "one.hdr").read_bytes(), dtype=shm_v1.HEADER_DTYPE, count=1)[0]
    assert int(h["ring_capacity"]) == int(h["ring_slots_configured"]) == 65536
    assert "sized down" not in (out / "stderr").read_text()


def test_a_full_file_system_puts_the_region_in_memory_where_it_is_found_all_the_same(tmp_path):
    """A tmpfs too small for any region: the Profiler keeps its region in a memfd at the
    configured ring size, <home>/shms/ links to it through /proc, and the process reads its
    own records back through that link as an Agent does. Its exit removes the link."""
    out = tmp_path / "out"
    out.mkdir()
    one = f"{shlex.quote(sys.executable)} {SCENARIOS} train {builds()['plain'].path}"
    proc = run_in_small_tmpfs(tmp_path, "64k", f"{one} > {out}/facts 2> {out}/stderr")
    assert proc.returncode == 0, proc.stderr
    stderr = (out / "stderr").read_text()
    assert "SHM disabled" not in stderr and "it lives in this process's memory instead" in stderr
    facts = json.loads((out / "facts").read_text())
    assert facts["shm"] and facts["seqs"][1:] == list(range(facts["ops_issued"]))
    assert list((tmp_path / "home" / "shms").glob("*.shm")) == []


def test_a_memfd_link_left_by_an_earlier_process_of_the_pid_is_not_read_twice(tmp_path):
    """A SIGKILLed process leaves its memfd link; should its pid come back with a region in
    the same descriptor number, that old link would lead to the new process's region, which
    its own link names already. The region says which link is its own."""
    release = tmp_path / "release"
    one = [sys.executable, str(SCENARIOS), "train", str(builds()["plain"].path)]
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    skip_without_private_tmpfs(shm_dir)
    env = {**scenario_env(tmp_path / "home", shm_dir), "SCENARIO_HOLD_FILE": str(release)}
    job = popen_in_private_tmpfs(shm_dir, "64k", one, env)
    try:
        shms = tmp_path / "home" / "shms"
        wait_until(lambda: list(shms.glob("*.shm")), 120, "the process's region link")
        (own,) = shms.glob("*.shm")
        # its own link: read, once the region is made (the link comes first)
        assert wait_until(lambda: ShmRegion(own).header["pid"], 120, "its region made") > 0
        pid = own.name.split("-")[-2]
        earlier = shms / f"ci-vm-{pid}-1.shm"  # an earlier process's name, the same target
        earlier.symlink_to(os.readlink(own))
        with pytest.raises(ShmError, match="the pid was reused") as e:
            ShmRegion(earlier)
        assert e.value.missing  # its link goes, as a dead process's does
    finally:
        release.touch()
        job.communicate(timeout=120)
    assert job.returncode == 0
