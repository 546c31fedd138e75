"""The simulated jobs end-to-end hang tests run: four DDP ranks with a fast heartbeat and a
short hang threshold, and the threshold a healthy run is judged with."""

from __future__ import annotations

from pathlib import Path

from comminsight.sim import SimConfig, parse_fault

E2E_THRESHOLD_S = 0.5

E2E_ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", str(E2E_THRESHOLD_S)),
)


def e2e_sim_config(
    plugin: Path,
    home: Path,
    faults: tuple[str, ...],
    steps: int = 2,
    time_scale: float = 0.02,
    threshold_s: float = E2E_THRESHOLD_S,
) -> SimConfig:
    """Four DDP ranks with the fast heartbeat and (by default) 0.5 s hang threshold of E2E_ENV."""
    env = tuple(
        (k, str(threshold_s)) if k == "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S" else (k, v)
        for k, v in E2E_ENV
    )
    return SimConfig(
        plugin=str(plugin),
        home=str(home),
        workload="ddp",
        ranks=4,
        steps=steps,
        time_scale=time_scale,
        hang_hold_s=3.0,
        faults=tuple(parse_fault(f) for f in faults),
        env=env,
    )


# A healthy run is judged with a threshold no scheduling delay of a loaded machine reaches: a
# rank starved of the CPU for longer than the fault tests' 0.5 s is late, and rightly reported.
HEALTHY_THRESHOLD_S = 30.0
