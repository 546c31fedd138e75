"""schemathesis against the live Agent Master API (127.0.0.1, a background thread of this
process): every operation of the protocol document, positive and negative cases, stateful
links, all checks (server errors, status codes, content types, headers, response schemas,
rejection of invalid data, ignored auth). Zero failures allowed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agent_home import hold_agent_lock
from e2e_sims import e2e_sim_config
from home_files import write_step_summaries
from live_agent import LiveAgent

from comminsight.sim import run_simulation

TOKEN = "schemathesis-token"


@pytest.mark.slow
def test_schemathesis_finds_nothing(plugin, tmp_path):
    lock = hold_agent_lock(tmp_path)
    write_step_summaries(tmp_path)
    st = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert st, "schemathesis is pinned in requirements/dev.txt"
    # passes every 100 ms (not 20): the job is over before the requests begin, and the API
    # is still asked while passes run, at a fifth of the CPU they took from it
    with LiveAgent(
        tmp_path, agent_token=TOKEN, profiler_hang_timeout_s=0.5, agent_poll_interval_ms=100
    ) as live:
        # data behind every endpoint: communicators, ops, hang reports (a rank dies)
        assert not run_simulation(e2e_sim_config(plugin, tmp_path, ("die:rank=2,op=5",))).errors
        live.wait_passes(2)
        assert live.service.hangs.reports, "the dead rank was not reported"
        result = subprocess.run(
            [
                st,
                "run",
                f"{live.base_url}/openapi.json",
                "--checks",
                "all",
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                # per operation in the fuzzing phase (every one of the 18 is fuzzed; the
                # coverage phase's cases do not depend on it)
                "--max-examples",
                "20",
                # one worker: CPython 3.11.7's ast.parse is not thread-safe (hypothesis calls
                # it to describe filters), which made a 2-worker run fail in the tool itself
                "--workers",
                "1",
                "--request-timeout",
                "20",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    lock.close()
    report = result.stdout[-8000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    print(report[-1500:])  # what was generated and checked, for the log
