"""The Profiler's threads keep their periods when the wall clock steps back (NTP does that on
real nodes): the log writer keeps writing and the hang watchdog keeps watching while the
process runs. The stand-in for NCCL (tests/plugins/wall_clock_ahead.c) shows the plugin a
CLOCK_REALTIME an hour ahead of the kernel's, so a wait whose deadline came from the wall clock
would sleep an hour; nothing here needs privilege or touches the machine's clock.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from agent_home import hold_agent_lock
from log_files import segment_data
from profiler_builds import builds, c_driver
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
DRIVER_SRC = ROOT / "tests" / "plugins" / "wall_clock_ahead.c"


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return c_driver(DRIVER_SRC, tmp_path_factory.mktemp("wall_clock_ahead"), "-O1", exports=True)


class StandIn:
    def __init__(self, exe: Path, home: Path, **env: str):
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
            "COMMINSIGHT_HOME": str(home),
            "COMMINSIGHT_AGENT_AUTOSTART": "0",
            "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "50",
            "COMMINSIGHT_PROFILER_LOG_FLUSH_MS": "20",
            **env,
        }
        self.proc = subprocess.Popen(
            [str(exe), str(builds()["plain"].path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=full_env,
        )

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok", f"{command!r} failed"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def log_lines(home: Path) -> list[dict]:
    lines = []
    for _, data in segment_data(home / "inspector_logs"):
        for raw in data.splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                pass  # a line being written right now
    return lines


def kinds(home: Path, kind: str) -> list[dict]:
    """The lines of a kind; "coll" in either form (the compact form's kind is "c")."""
    wanted = ("c", "coll") if kind == "coll" else (kind,)
    return [line for line in log_lines(home) if line.get("ci", {}).get("kind") in wanted]


def test_the_writer_logs_while_running_with_the_wall_clock_behind_its_readings(driver, tmp_path):
    lock = hold_agent_lock(tmp_path)
    job = StandIn(driver, tmp_path)
    try:
        # the writer has made its first pass and gone to sleep
        wait_until(lambda: kinds(tmp_path, "comm_init"), what="the communicator's init line")
        job.send("ops 200")
        wait_until(
            lambda: len(kinds(tmp_path, "coll")) == 200,
            what=lambda: f"200 ops logged while the process runs, {len(kinds(tmp_path, 'coll'))}",
        )
        job.send("ops 200")
        wait_until(
            lambda: len(kinds(tmp_path, "coll")) == 400,
            what=lambda: f"400 ops logged while the process runs, {len(kinds(tmp_path, 'coll'))}",
        )
    finally:
        job.close()
        lock.close()
    assert not kinds(tmp_path, "gap")


def test_the_watchdog_flags_a_hang_with_the_wall_clock_behind_its_readings(driver, tmp_path):
    lock = hold_agent_lock(tmp_path)
    job = StandIn(driver, tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.5")
    try:
        wait_until(lambda: kinds(tmp_path, "comm_init"), what="the communicator's init line")
        job.send("ops 3")
        job.send("stuck")
        hang = wait_until(
            lambda: kinds(tmp_path, "hang_evidence"),
            what="a hang_evidence line for the stuck op while the process runs",
        )
        assert hang[0]["ci"]["seq"] == 3
    finally:
        job.close()
        lock.close()
