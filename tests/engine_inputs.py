"""What the Semantic Engine's tests feed it: a synthetic DDP job (four gradient buckets and a
loss all-reduce per Step) as shm v1 op slots, the way the live hook takes them from the Agent,
and the inspector_logs of a simulated TP+PP+DP run through the real plugin, the way the
offline engine reads them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from profiler_builds import builds

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.semantic.live_cut import CUT_EVERY_CONTEXT, MAX_CONTEXT_OPS, MIN_NEW_OPS
from comminsight.semantic.ops import WINDOW
from comminsight.semantic.shm_input import CommInfo
from comminsight.semantic.templates import load_templates
from comminsight.sim import SimConfig, run_simulation
from comminsight_gen.abi import shm_v1

BUCKETS = (25 << 20, 25 << 20, 25 << 20, 10 << 20, 4)  # bytes of each all-reduce of a Step
COMM_ID = 0x1234
COMMS = {COMM_ID: CommInfo("default_pg:0", 1)}
GPU = GpuStream("node", 4242, 1_000, 0, 0)
TEMPLATES = load_templates()
# The most ops the engine holds unplaced here: the reorder window, and what waits for the
# node's cut (a cut runs every MIN_NEW_OPS new ops, more with a long context, and places only
# what the cut before it put in the same Steps, before the last Step begun)
UNSETTLED = (
    WINDOW + 2 * max(MIN_NEW_OPS, 2 * MAX_CONTEXT_OPS // CUT_EVERY_CONTEXT) + 2 * len(BUCKETS)
)
# the same for a run shorter than MIN_NEW_OPS * CUT_EVERY_CONTEXT ops: cuts every MIN_NEW_OPS
UNSETTLED_SHORT = WINDOW + 2 * MIN_NEW_OPS + 2 * len(BUCKETS)


def ddp_slots(steps: int) -> np.ndarray:
    n = steps * len(BUCKETS)
    r = np.zeros(n, shm_v1.OP_SLOT_DTYPE)
    r["seq"] = np.arange(1, n + 1)  # ring sequence numbers start at 1
    r["kind"] = shm_v1.RecordKind.COLL
    r["func"] = shm_v1.Func.ALL_REDUCE
    r["timing_source"] = shm_v1.TimingSource.COLLECTIVE_CPU
    r["comm_id"] = COMM_ID
    r["rank"], r["nranks"], r["peer"] = 0, 2, shm_v1.NO_RANK
    r["op_seq"] = np.arange(n)
    r["bytes"] = np.tile(BUCKETS, steps)
    step, k = np.divmod(np.arange(n), len(BUCKETS))
    start = 1_000_000_000 + step * 100_000_000 + k * 10_000_000
    r["host_start_mono_ns"] = start
    # untimed on the GPU (KernelCh off): the Profiler completes the op at its host stop
    r["host_stop_mono_ns"] = r["complete_mono_ns"] = start + 5_000_000
    return r


def batches(slots: np.ndarray, size: int):
    for i in range(0, len(slots), size):
        yield slots[i : i + size]


def tp_pp_dp_logs(
    home: Path, ranks: int, steps: int, log_format: str = "compact", abi: int = 5
) -> Path:
    """The inspector_logs of a simulated TP+PP+DP run through the real plugin, its op lines
    in `log_format` (COMMINSIGHT_PROFILER_LOG_FORMAT); with abi 7, every call tagged with its
    step and every collective with a kernel variant (user_tag, kernel_variant)."""
    sim = run_simulation(
        SimConfig(
            plugin=str(builds()["plain"].path),
            home=str(home),
            workload="tp-pp-dp",
            ranks=ranks,
            steps=steps,
            abi=abi,
            user_tags=abi >= 7,
            time_scale=0.02,
            env=(
                ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
                ("COMMINSIGHT_PROFILER_LOG_FORMAT", log_format),
            ),
        )
    )
    assert not sim.errors
    return home / "inspector_logs"
