"""Simulated NCCL: drives a profiler plugin `.so` through the real ABI, without GPUs.

One OS process per simulated rank loads the plugin and replays a training workload's event
trees (GroupApi → CollApi, Group → Coll → KernelCh per channel, P2P, proxy steps) with modeled
timing and optional faults, and writes a per-rank ground truth of what it did (`truth.py`).

    from comminsight.sim import SimConfig, run_simulation, summarize
    result = run_simulation(SimConfig(plugin="dist/libnccl-profiler-comminsight.so", home=home))

Names are imported lazily so that rank processes and the CLI's parser load only what they use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Fault": "comminsight.sim.faults",
    "FaultSpecError": "comminsight.sim.faults",
    "parse_fault": "comminsight.sim.faults",
    "SimConfig": "comminsight.sim.config",
    "SimConfigError": "comminsight.sim.config",
    "SimProgress": "comminsight.sim.launcher",
    "SimResult": "comminsight.sim.launcher",
    "run_simulation": "comminsight.sim.launcher",
    "summarize": "comminsight.sim.summary",
    "read_ground_truth": "comminsight.sim.truth",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
