"""The demo's `comminsight-agent`: a real Agent process for one demo home, started as a user
would start it, on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
# The Agent's settings for the demo: the Profiler's 1 s hang threshold, and liveness judged on
# a 5 s heartbeat, which a loaded machine's scheduling delays do not reach (a rank thought dead
# is blamed for the hang instead of the one that skipped the op).
AGENT_SETTINGS = {
    "COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS": "5000",
    "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S": "1",
}


class AgentDidNotStart(RuntimeError):
    pass


@dataclass
class DemoAgent:
    url: str
    pid: int
    log: Path
    returncode: int | None = None  # once stopped


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_agent(home: Path, console: Console) -> Iterator[DemoAgent]:
    """`comminsight-agent` for `home`, its log in <home>/agent.log; stopped with SIGTERM on
    leaving (its exit status then in `returncode`). AgentDidNotStart when its API does not
    answer within START_TIMEOUT_S."""
    port = free_port()
    # the demo's own settings only: none of the caller's COMMINSIGHT_* (another home, a token,
    # a master to report to) leaks into the demo's Agent
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.update(
        COMMINSIGHT_HOME=str(home),
        COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{port}",
        **AGENT_SETTINGS,
    )
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "agent.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "comminsight.agent.main"], env=env, stdout=log, stderr=log
        )
        agent = DemoAgent(f"http://127.0.0.1:{port}", process.pid, log_path)
        try:
            wait_until_healthy(agent, process)
            console.print(f"comminsight-agent (pid {agent.pid}) serves {agent.url}")
            yield agent
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                agent.returncode = process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until_healthy(agent: DemoAgent, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            health = httpx.get(f"{agent.url}/api/v1/health", timeout=2, trust_env=False)
            if health.status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            raise AgentDidNotStart(
                f"comminsight-agent exited with status {process.returncode} before its API "
                f"answered; see {agent.log}"
            )
        if time.monotonic() > deadline:
            raise AgentDidNotStart(
                f"comminsight-agent's API did not answer within {START_TIMEOUT_S:.0f} s; "
                f"see {agent.log}"
            )
        time.sleep(0.05)
