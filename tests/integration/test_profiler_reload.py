"""NCCL unloads the profiler plugin when a process's last communicator is destroyed and loads
it again for the next one; elastic and RL jobs do that all the time. Each unload must leave
nothing behind in the training process: threads joined, the region unmapped (and removed, or
left closed for the Agent to retire), descriptors closed, heap freed.

profiler/bench/reload_cycles.c does what NCCL does, cycle after cycle (dlopen, two
communicators with a few ops, finalize, dlclose), and measures the process after a few warm-up
cycles and again after the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from agent_home import hold_agent_lock
from profiler_builds import builds, c_driver
from waiting import wait_until

from comminsight.agent.receivers.producers import ProducerSet
from comminsight.log_segments import read_segment, segments_in
from comminsight.shm_reader import ShmRegion
from comminsight_gen.abi import shm_v1

ROOT = Path(__file__).resolve().parents[2]
DRIVER_SRC = ROOT / "profiler" / "bench" / "reload_cycles.c"
CYCLES = 20
OPS = 8  # per communicator and cycle; two communicators per cycle
WARM = 3
# What glibc may still allocate for itself across dlopen/dlclose (link maps, dtv slots): a
# few KiB. One cycle of the leak was the pool, the log writer's 1 MiB buffer and the
# communicator array.
HEAP_SLACK = 256 * 1024
# A malloc arena may be made by a later cycle's thread that starts while another still holds
# one: a mapping or two, once. The leak was about two per cycle.
MAPS_SLACK = 2


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return c_driver(DRIVER_SRC, tmp_path_factory.mktemp("reload_cycles"), "-O1")


def reload_cycles(
    driver: Path, home: Path, shm_dir: Path, cycles: int = CYCLES, build: str = "plain", **env
) -> dict:
    b = builds()[build]
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_SHM_DIR": str(shm_dir),
        "COMMINSIGHT_PROFILER_RING_SLOTS": "256",
        "COMMINSIGHT_PROFILER_EVENT_POOL": "256",
        **b.env,
        **env,
    }
    proc = subprocess.run(
        [str(driver), str(b.path), str(cycles), str(OPS), str(WARM)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr[
        -4000:
    ]
    out = json.loads(proc.stdout)
    assert out["unloaded"], f"the plugin stayed loaded after dlclose: {proc.stderr[-2000:]}"
    return out


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, shm = tmp_path / "home", tmp_path / "shm"
    home.mkdir(mode=0o700)
    shm.mkdir(mode=0o700)
    return home, shm


def assert_process_flat(first: dict, last: dict) -> None:
    assert last["fds"] == first["fds"], (first, last)
    assert last["threads"] == first["threads"], (first, last)
    assert last["maps"] - first["maps"] <= MAPS_SLACK, (first, last)
    assert last["heap_bytes"] - first["heap_bytes"] <= HEAP_SLACK, (first, last)


def coll_lines(home: Path) -> int:
    n = 0
    for path in segments_in(home / "inspector_logs"):
        for raw in read_segment(path).splitlines():
            n += json.loads(raw).get("ci", {}).get("kind") in ("c", "coll")  # either form
    return n


def test_unloading_the_plugin_leaves_nothing_behind(driver, tmp_path):
    home, shm = dirs(tmp_path)
    out = reload_cycles(driver, home, shm)
    first, last = out["first"], out["last"]
    assert_process_flat(first, last)
    # no Agent runs: every region was removed, and no mapping of one is left
    assert last["shm_files"] == first["shm_files"] == 0, (first, last)
    assert last["home_shm_files"] == first["home_shm_files"] == 0, (first, last)
    assert last["rss_shmem_kib"] == first["rss_shmem_kib"], (first, last)
    # and every cycle's ops reached the logs
    assert coll_lines(home) == (WARM + CYCLES) * 2 * OPS


def test_unloading_the_plugin_frees_every_allocation_under_asan(driver, tmp_path):
    """LeakSanitizer at the driver's exit: whatever an unloaded library still held is
    unreachable by then, and reported."""
    home, shm = dirs(tmp_path)
    reload_cycles(
        driver,
        home,
        shm,
        cycles=4,
        build="asan",
        ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=23",
    )


def test_with_an_agent_each_unload_leaves_its_closed_region_to_the_agent(driver, tmp_path):
    home, shm = dirs(tmp_path)
    lock = hold_agent_lock(home)
    try:
        out = reload_cycles(driver, home, shm)
    finally:
        lock.close()
    assert_process_flat(out["first"], out["last"])
    regions = sorted((home / "shms").glob("*.shm"))
    assert len(regions) == WARM + CYCLES == out["last"]["home_shm_files"]
    for path in regions:
        region = ShmRegion(path, shm_dir=str(shm))
        try:
            assert int(region.header["state"]) == shm_v1.FileState.CLOSED, path
        finally:
            region.close()
    # the Agent reads what each one holds and retires it: nothing is left in either directory
    producers = ProducerSet(home, shm_dir=str(shm))
    try:
        wait_until(
            lambda: (
                producers.poll(time.monotonic_ns()) is not None
                and not list((home / "shms").glob("*.shm"))
                and not list(shm.iterdir())
            ),
            what=lambda: f"the Agent retires every closed region: {sorted(os.listdir(shm))}",
        )
    finally:
        producers.close()
    assert producers.counters.producers_retired == WARM + CYCLES
    assert producers.counters.records >= (WARM + CYCLES) * 2 * OPS
    assert coll_lines(home) == (WARM + CYCLES) * 2 * OPS
