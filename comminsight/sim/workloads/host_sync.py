"""Where a training script makes the host wait for its GPU outside a Step's end: `.item()`,
`.cpu()`, `torch.isfinite(t)` in an `if`, a blocking copy. The simulated rank then drains its
GPU queue before its next call, exactly as `torch.distributed.barrier()` does in the plan."""

from __future__ import annotations

from comminsight.sim.plan import HostSync, PlanBuilder


def wait_for_gpu(b: PlanBuilder, rank: int, label: str) -> None:
    b.programs[rank].append(HostSync(label))
