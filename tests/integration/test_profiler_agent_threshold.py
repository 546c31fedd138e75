"""One hang threshold per job, the Profiler's side: its watchdog follows the value the Agent
publishes in <home>/metadata/agent-settings, unless the key is in the process's own
environment, and goes back to its own when the file goes; a file that is not the Agent's own
valid one (a link, a FIFO, another's writable file, garbage, a value out of range, too long)
changes nothing but a counter, said once. The real plugin in every build (plain, ASan+UBSan,
TSan), driven through the profiler ABI (agent_settings_scenarios.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from profiler_builds import run_scenario

from comminsight_gen.abi import shm_v1

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "agent_settings_scenarios.py"
BUILDS = ["plain", "asan", "tsan"]
Source = shm_v1.ThresholdSource
DEFAULT_MS = 300_000  # the key's default, 300 s


def run(scenario: str, build: str, home: Path, **env) -> dict:
    return run_scenario(scenario, build, home, script=SCRIPT, **env)


@pytest.mark.parametrize("build", BUILDS)
def test_the_watchdog_follows_the_agents_threshold_and_goes_back_to_its_own(build, tmp_path):
    out = run("follows_the_agent", build, tmp_path)
    own = {"own_hang_threshold_ms": DEFAULT_MS, "own_hang_threshold_source": Source.DEFAULT}
    assert out["before"] == {
        **own,
        "hang_threshold_ms": DEFAULT_MS,
        "hang_threshold_source": Source.DEFAULT,
        "agent_settings_refused": 0,
        "hangs_flagged": 0,
        "fifo_events_written": 0,
        "fifo_events_dropped": 0,
    }
    assert out["published"] == {
        **own,
        "hang_threshold_ms": 300,
        "hang_threshold_source": Source.AGENT,
        "agent_settings_refused": 0,
        "hangs_flagged": 0,
        "fifo_events_written": 0,
        "fifo_events_dropped": 0,
    }
    # the stuck op was flagged by the Agent's 0.3 s, never reached by its own 300 s
    assert out["flagged"]["hangs_flagged"] == 1
    events = out["flagged"]["fifo_events_written"] + out["flagged"]["fifo_events_dropped"]
    assert events == 1  # the hang event (nobody reads the FIFO here: dropped, counted)
    assert out["republished"]["hang_threshold_ms"] == 7500
    # a threshold raised over the stuck op's age finishes nothing: no "cleared" event
    again = out["republished"]["fifo_events_written"] + out["republished"]["fifo_events_dropped"]
    assert again == 1
    assert out["withdrawn"]["hang_threshold_ms"] == DEFAULT_MS
    assert out["withdrawn"]["hang_threshold_source"] == Source.DEFAULT
    assert out["withdrawn"]["agent_settings_refused"] == 0


def test_a_threshold_in_the_processs_own_environment_is_kept(tmp_path):
    out = run("environment_kept", "plain", tmp_path, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="45")
    assert out["after"] == {
        "hang_threshold_ms": 45_000,
        "hang_threshold_source": Source.ENVIRONMENT,
        "own_hang_threshold_ms": 45_000,
        "own_hang_threshold_source": Source.ENVIRONMENT,
        "agent_settings_refused": 0,
        "hangs_flagged": 0,
        "fifo_events_written": 0,
        "fifo_events_dropped": 0,
    }


def test_a_threshold_from_the_configuration_file_gives_way_to_the_agents(tmp_path):
    (tmp_path / "etc").mkdir(mode=0o700)
    (tmp_path / "etc" / "comminsight.conf").write_text("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=45\n")
    out = run("follows_the_agent", "plain", tmp_path)
    assert (out["before"]["own_hang_threshold_ms"], out["before"]["own_hang_threshold_source"]) == (
        45_000,
        Source.FILE,
    )
    assert out["published"]["hang_threshold_source"] == Source.AGENT
    assert out["withdrawn"]["hang_threshold_ms"] == 45_000


@pytest.mark.parametrize("build", BUILDS)
def test_a_file_not_the_agents_own_valid_one_changes_nothing_but_a_counter(build, tmp_path):
    out = run("hostile_files", build, tmp_path)
    steps = out["steps"]
    assert list(steps) == [
        "garbage",
        "no_key",
        "negative",
        "nan",
        "too_large",
        "huge_file",
        "writable_by_others",
        "link",
        "fifo",
    ]
    for n, (name, header) in enumerate(steps.items(), 1):
        assert (header["hang_threshold_ms"], header["hang_threshold_source"]) == (
            400,
            Source.AGENT,
        ), name
        assert header["agent_settings_refused"] == n, name
    refusals = [line for line in out["stderr"].splitlines() if "agent-settings refused" in line]
    assert len(refusals) == 1, out["stderr"]
    assert "holds a NUL byte" in refusals[0] and "keeps 0.400 s" in refusals[0]
