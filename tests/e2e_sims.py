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
    gpu_timing: str | None = None,
) -> SimConfig:
    """Four DDP ranks with the fast heartbeat and (by default) 0.5 s hang threshold of E2E_ENV;
    gpu_timing: the Profiler's COMMINSIGHT_PROFILER_GPU_TIMING, where not its default."""
    env = tuple(
        (k, str(threshold_s)) if k == "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S" else (k, v)
        for k, v in E2E_ENV
    )
    if gpu_timing is not None:
        env += (("COMMINSIGHT_PROFILER_GPU_TIMING", gpu_timing),)
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


# `make demo`'s fault: 8 ranks of TP x PP x DP on two simulated nodes, rank 1 skips its 6th
# tensor-parallel all-reduce; the Agent that watches it: a 1 s threshold, liveness on a 5 s
# heartbeat
DEMO_FAULT_AGENT_SETTINGS = {"profiler_hang_timeout_s": 1.0, "agent_heartbeat_stale_ms": 5000}


def demo_fault_config(plugin: Path, home: Path) -> SimConfig:
    return SimConfig(
        plugin=str(plugin),
        home=str(home),
        workload="tp-pp-dp",
        ranks=8,
        nodes=2,
        steps=3,
        time_scale=0.05,
        hang_hold_s=4.0,
        faults=(parse_fault("skip:rank=1,op=5,comm=tp"),),
        env=(
            ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
            ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "100"),
            ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "1"),
        ),
    )
