"""valgrind's memcheck finds no error in the Profiler driven by the C hot-path driver.

The driver (profiler/bench/hot_path.c) replays NCCL's event trees from C, so memcheck sees
only the plugin and the driver, not an interpreter. Definite leaks count as errors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from profiler_builds import builds, hot_path_driver

from comminsight.log_segments import segments_in

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return hot_path_driver(tmp_path_factory.mktemp("valgrind"), optimize="-O1")


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [[], ["--threads", "2"], ["--kernelch-thread"]],
    ids=["one-thread", "two-comms", "proxy-thread"],
)
def test_memcheck_clean(driver, mode, tmp_path):
    if shutil.which("valgrind") is None:
        pytest.fail("valgrind is required (scripts/install-debian-packages.sh installs it)")
    env = {
        **os.environ,
        "COMMINSIGHT_HOME": str(tmp_path),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_RING_SLOTS": "1024",
        "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "20",
        "COMMINSIGHT_PROFILER_LOG_FLUSH_MS": "10",
    }
    proc = subprocess.run(
        [
            "valgrind",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--quiet",
            str(driver),
            str(builds()["plain"].path),
            "--n",
            "3000",
            "--warmup",
            "100",
            *mode,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert segments_in(tmp_path / "inspector_logs"), "the run left no sealed log"
