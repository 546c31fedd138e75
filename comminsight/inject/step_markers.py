"""Optimizer-step markers (COMMINSIGHT_INJECT_STEP_MARKERS, on by default): the Semantic
Engine's strongest evidence of where a Step ends (comminsight/semantic/step_markers.py).

A global post-hook on every `torch.optim.Optimizer.step` appends a `step` line with
CLOCK_MONOTONIC (`time.monotonic_ns`, the clock the Profiler stamps ops with) taken on the host
when `step()` returns. It does not synchronize the GPU: a marker says where the host finished
issuing a step, the same host clock as the ops' enqueue times, and training runs at its speed.
With several optimizers every one of them marks (`optimizer` and its per-class count say which).
"""

from __future__ import annotations

import time

from . import state
from .metadata import F, MetadataFile, V, global_rank


class StepMarkers:
    def __init__(self, sink: MetadataFile):
        self.sink = sink
        self.counts: dict[str, int] = {}
        self.handle = None

    def on_step(self, optimizer, args, kwargs) -> None:
        now = time.monotonic_ns()
        try:
            name = type(optimizer).__name__
            index = self.counts.get(name, 0)
            self.counts[name] = index + 1
            rank = global_rank()  # read per step: a launcher may export it after import
            self.sink.write(
                V.STEP, **{F.MONO_NS: now, F.RANK: rank, F.OPTIMIZER: name, F.INDEX: index}
            )
        except Exception as e:  # a marker is never worth a failed step
            state.warn_once("step-markers", f"step markers stopped: {type(e).__name__}: {e}")
            self.remove()

    def install(self, optim_module) -> bool:
        """Register on `torch.optim.optimizer`; False when this torch has no global step hook."""
        register = getattr(optim_module, "register_optimizer_step_post_hook", None)
        if register is None:
            return False
        self.handle = register(self.on_step)
        return True

    def remove(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
