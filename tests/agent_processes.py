"""A real `comminsight-agent` process for a test, waiting for what it makes, and the
`comminsight` CLI run as a user runs it (both forked from a parent that has imported their
code: forked_python)."""

from __future__ import annotations

import os
import subprocess
import sys

import forked_python
import httpx
from e2e_sims import E2E_THRESHOLD_S
from ports import free_port
from waiting import wait_until


def agent_process(home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **env):
    env.setdefault("COMMINSIGHT_AGENT_LISTEN", f"127.0.0.1:{free_port()}")
    return forked_python.popen(
        [sys.executable, "-m", "comminsight.agent.main"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
            "COMMINSIGHT_HOME": str(home),
            "COMMINSIGHT_AGENT_POLL_INTERVAL_MS": "100",
            "COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS": "1000",
            "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S": str(E2E_THRESHOLD_S),
            **env,
        },
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


# An Agent's start-up (imports, its first pass) takes seconds on an idle machine and many
# times that on a loaded one: the deadline only bounds how long a broken start is waited for.
START_DEADLINE_S = 120.0


def wait_for(path, timeout_s: float = START_DEADLINE_S) -> None:
    """Until path exists."""
    wait_until(path.exists, timeout_s, f"{path} to appear")


def api_get(listen: str, path: str, timeout_s: float = START_DEADLINE_S):
    """GET from the agent's API, waiting for it to come up."""

    def answer():
        response = httpx.get(f"http://{listen}{path}", timeout=5)
        return response if response.status_code != 503 else None  # 503 while the first pass runs

    return wait_until(answer, timeout_s, f"an answer from {listen}{path}")


def cli(*args, url=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env["COLUMNS"] = "250"  # wide tables: no wrapped cells in the assertions
    command = [sys.executable, "-m", "comminsight.cli", *args]
    if url:
        command += ["--url", url]
    return forked_python.run(command, capture_output=True, text=True, env=env, timeout=60)
