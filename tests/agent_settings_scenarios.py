"""Scenarios for tests/integration/test_profiler_agent_threshold.py: the real plugin, driven
through the profiler ABI in a fresh process each, following the hang threshold the Agent
publishes in <home>/metadata/agent-settings (profiler/src/agent_settings.c).

    python tests/agent_settings_scenarios.py SCENARIO PLUGIN.so

The scenario plays the Agent by writing the file as the Agent does (agent_settings.publish).
Each prints one JSON object. Waits poll for a condition with a generous deadline; none is a
measurement.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from plugin_scenarios import Driver, home, region, settled
from waiting import wait_until

from comminsight.agent.core import agent_settings
from comminsight_gen.abi import shm_v1

DEADLINE_S = 90.0
FIELDS = (
    "hang_threshold_ms",
    "hang_threshold_source",
    "own_hang_threshold_ms",
    "own_hang_threshold_source",
    "agent_settings_refused",
    "hangs_flagged",
    "fifo_events_written",
    "fifo_events_dropped",
)


def threshold(r) -> dict:
    return {n: int(r.header[n]) for n in FIELDS}


def published(s: float) -> None:
    agent_settings.publish(home(), s)


def settings_file() -> Path:
    return agent_settings.settings_path(home())


def replace_with(write) -> None:
    """A new version of the file, by rename as every writer must: write(path) fills it."""
    path = settings_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name("agent-settings.new")
    write(temp)
    os.replace(temp, path)


def until_threshold(r, ms: int, source: int) -> dict:
    return wait_until(
        lambda: (
            threshold(r)
            if (int(r.header["hang_threshold_ms"]), int(r.header["hang_threshold_source"]))
            == (ms, source)
            else None
        ),
        DEADLINE_S,
        lambda: f"threshold {ms} ms from source {source}; header {threshold(r)}",
    )


def stuck(d: Driver, ctx, seq: int) -> None:
    """A collective that never completes."""
    d.coll(ctx, seq, finish=False)


# ---- scenarios ----


def follows_the_agent(d: Driver) -> dict:
    """No threshold of its own in the environment: the watchdog takes the Agent's (and flags a
    stuck op by it), follows a new value, and goes back to its own when the file is gone."""
    ctx = d.init(0xA1).context
    r = region()
    out = {"before": threshold(settled(r))}
    published(0.3)
    out["published"] = until_threshold(r, 300, shm_v1.ThresholdSource.AGENT)
    stuck(d, ctx, 0)
    wait_until(lambda: int(r.header["hangs_flagged"]), DEADLINE_S, "the stuck op flagged")
    out["flagged"] = threshold(r)
    published(7.5)
    until_threshold(r, 7500, shm_v1.ThresholdSource.AGENT)
    out["republished"] = threshold(settled(r))  # a watchdog scan by the higher threshold
    settings_file().unlink()
    own = out["before"]
    out["withdrawn"] = until_threshold(
        r, own["own_hang_threshold_ms"], own["own_hang_threshold_source"]
    )
    d.abi.finalize(ctx)
    return out


def environment_kept(d: Driver) -> dict:
    """COMMINSIGHT_PROFILER_HANG_TIMEOUT_S in the process's own environment is kept: the file
    is neither followed nor counted as refused."""
    published(0.3)
    ctx = d.init(0xA2).context
    r = region()
    settled(settled(r))
    out = {"after": threshold(r)}
    d.abi.finalize(ctx)
    return out


def hostile_files(d: Driver) -> dict:
    """Every file that is not the Agent's own valid one changes nothing but a counter: the
    watchdog keeps the last value it took (the Agent's 0.4 s), and stderr says so once."""
    saved = os.dup(2)
    out: dict = {"steps": {}}
    with tempfile.TemporaryFile() as err:
        os.dup2(err.fileno(), 2)
        try:
            ctx = d.init(0xA3).context
            r = region()
            published(0.4)
            until_threshold(r, 400, shm_v1.ThresholdSource.AGENT)
            elsewhere = home() / "elsewhere"
            elsewhere.write_text(f"{agent_settings.HANG_TIMEOUT_KEY}=0.2\n")
            key = agent_settings.HANG_TIMEOUT_KEY
            steps = {
                "garbage": lambda p: p.write_bytes(b"\x00\xffnot a setting\n"),
                "no_key": lambda p: p.write_text("COMMINSIGHT_PROFILER_EVENT_MASK=6\n"),
                "negative": lambda p: p.write_text(f"{key}=-1\n"),
                "nan": lambda p: p.write_text(f"{key}=nan\n"),
                "too_large": lambda p: p.write_text(f"{key}=1e9\n"),
                "huge_file": lambda p: p.write_text(f"{key}=0.2\n" + "#" * (1 << 20)),
                "writable_by_others": lambda p: (p.write_text(f"{key}=0.2\n"), p.chmod(0o666)),
                "link": lambda p: p.symlink_to(elsewhere),
                "fifo": lambda p: os.mkfifo(p, 0o600),
            }
            for name, write in steps.items():
                before = int(r.header["agent_settings_refused"])
                replace_with(write)
                wait_until(
                    lambda b=before: int(r.header["agent_settings_refused"]) > b,
                    DEADLINE_S,
                    f"the {name} file refused",
                )
                out["steps"][name] = threshold(r)
            d.abi.finalize(ctx)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        out["stderr"] = err.read().decode(errors="replace")
    return out


SCENARIOS = {f.__name__: f for f in (follows_the_agent, environment_kept, hostile_files)}

if __name__ == "__main__":
    scenario, plugin = sys.argv[1], sys.argv[2]
    version = int(os.environ.get("SCENARIO_ABI", "5"))
    result = SCENARIOS[scenario](Driver(plugin, version))
    print(json.dumps(result))
    sys.stdout.flush()
