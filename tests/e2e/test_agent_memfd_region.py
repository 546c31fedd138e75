"""A process whose SHM file system has no room is still seen by the Agent.

The process runs in a private mount namespace whose tmpfs (its COMMINSIGHT_PROFILER_SHM_DIR)
is too small for any region, as a crowded container's /dev/shm is: its Profiler keeps the
region in a memfd and links <home>/shms/ to it through /proc. An Agent outside the namespace,
on the same home, reads it there: the communicator and every op. Once the process ends, its
link is gone and nothing is refused.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from agent_processes import agent_process, api_get
from ports import free_port
from private_tmpfs import popen_in_private_tmpfs, skip_without_private_tmpfs
from profiler_builds import builds
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "hostile_scenarios.py"
OPS = 4


@pytest.mark.timeout(300)  # a hang guard
def test_an_agent_reads_a_region_that_lives_in_its_process_memory(tmp_path):
    home, shm_dir, release = tmp_path / "home", tmp_path / "shm", tmp_path / "release"
    shm_dir.mkdir()
    skip_without_private_tmpfs(shm_dir)
    listen = f"127.0.0.1:{free_port()}"
    agent = agent_process(
        home, COMMINSIGHT_AGENT_LISTEN=listen, COMMINSIGHT_PROFILER_SHM_DIR=str(shm_dir)
    )
    job = None
    try:
        api_get(listen, "/api/v1/health")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
            "COMMINSIGHT_HOME": str(home),
            "COMMINSIGHT_AGENT_AUTOSTART": "0",
            "COMMINSIGHT_PROFILER_SHM_DIR": str(shm_dir),
            "PYTHONPATH": str(ROOT / "tests"),
            "SCENARIO_OPS": str(OPS),
            "SCENARIO_HOLD_FILE": str(release),
            **builds()["plain"].env,
        }
        train = [sys.executable, str(SCENARIOS), "train", str(builds()["plain"].path)]
        job = popen_in_private_tmpfs(shm_dir, "64k", train, env)

        def ops_seen():
            page = httpx.get(f"http://{listen}/api/v1/communicators", timeout=5).json()
            return page["total"] == 1 and page["items"][0]["ops_completed_total"] == OPS

        wait_until(ops_seen, 120, f"the Agent to see the {OPS} ops of the process")
        release.touch()
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
        assert "it lives in this process's memory instead" in err and "SHM disabled" not in err
        health = api_get(listen, "/api/v1/health").json()
        assert not [r for r in health["reasons"] if "SHM" in r or "quarantin" in r], health
        wait_until(lambda: not list((home / "shms").glob("*.shm")), 60, "the link to go")
    finally:
        release.touch()
        if job is not None and job.poll() is None:
            job.kill()
        agent.send_signal(signal.SIGTERM)
        stderr = agent.communicate(timeout=60)[1]
    assert agent.returncode == 0, stderr[-3000:]
    assert "refusing" not in stderr, stderr[-3000:]
