"""A home whose Profilers leave their SHM files to an Agent (its lock held), and a short
simulated DDP job run into it."""

from __future__ import annotations

import fcntl

from profiler_builds import builds

from comminsight.sim import SimConfig, read_ground_truth, run_simulation

ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"))


def hold_agent_lock(home):
    (home / "metadata").mkdir(parents=True, exist_ok=True)
    f = open(home / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held by the caller
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def run_sim(home, ranks=4, steps=2, time_scale=0.01, env=ENV):
    """A finished DDP job in home through the plain plugin; its ground truth."""
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        workload="ddp",
        ranks=ranks,
        steps=steps,
        time_scale=time_scale,
        env=env,
    )
    result = run_simulation(config)
    assert not result.errors
    return read_ground_truth(result.run_dir)
