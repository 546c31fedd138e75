"""ZeRO-3's parameter fetching, as DeepSpeed's PartitionedParameterCoordinator does it
(deepspeed/runtime/zero/partitioned_param_coordinator.py), reduced to what decides the
all-gathers: which parameters each module's hook gathers, in which coalesced call, when.

- Every module with parameters of its own gathers the ones not already available before it
  runs, in one `all_gather_coalesced` (one ncclAllGather of the summed per-rank partitions),
  forward and again backward.
- The first forward+backward records the module order (the trace); the forward pre-hook's
  `reset_step` checks it against rank 0 (`assert_ints_same_as_other_ranks`: a broadcast of the
  list's length, then of the list, each read back by the host) and, from the next pass on,
  every fetch also prefetches the next parameters in the trace up to
  `stage3_prefetch_bucket_size` elements in one more coalesced all-gather, while fewer than
  `stage3_max_live_parameters` elements are gathered. Parameters the prefetcher passes over
  because they are still available are kept for that later use, so on a model small next to
  that limit the first forward of a pass gathers everything and backward gathers nothing.
- After a module runs its parameters are released unless they are persistent (fewer than
  `stage3_param_persistence_threshold` elements: the norms), prefetched for a later use, or
  used again within `stage3_max_reuse_distance` elements of the trace; without a trace
  everything is released. The optimizer step releases all of them and, when it applies an
  update, gathers the persistent ones back in one call.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass

from comminsight.sim.workloads.transformer_params import OwningModule, ParamTensor

PERSISTENCE_THRESHOLD = 100_000  # stage3_param_persistence_threshold's default


@dataclass(frozen=True)
class Gather:
    """One coalesced all-gather: each rank contributes `count` elements."""

    count: int
    params: int  # how many parameters it brings


class ParameterCoordinator:
    def __init__(
        self,
        modules: list[OwningModule],
        world: int,
        prefetch_bucket: int,
        max_reuse_distance: int,
        max_live_parameters: int,
    ):
        self.world = world
        self.prefetch_bucket = prefetch_bucket
        self.max_reuse_distance = max_reuse_distance
        self.max_live_parameters = max_live_parameters
        self.persistent = [p for m in modules for p in m.params if p.numel < PERSISTENCE_THRESHOLD]
        self.available: set[str] = set()
        self.mode = "invalid"  # -> record (first pass) -> complete
        self.recorded: list[OwningModule] = []
        self.order: tuple[OwningModule, ...] = ()
        self.param_order: tuple[tuple[ParamTensor, int], ...] = ()
        self.queue: deque = deque()
        self.fetched_for: dict[str, int] = defaultdict(lambda: -(10**10))
        self.step_id = 0
        self.n_available = 0

    def partition(self, param: ParamTensor) -> int:
        return math.ceil(param.numel / self.world)

    def gather(self, params: list[ParamTensor]) -> Gather:
        for p in params:
            self.available.add(p.name)
            self.n_available += p.numel
        return Gather(sum(self.partition(p) for p in params), len(params))

    # ---- the forward pre-hook ----

    def reset_step(self) -> list[int]:
        """Start of a forward: the lengths of the int lists checked against rank 0."""
        checked: list[int] = []
        if self.mode != "complete":
            checked.append(len(self.recorded))
            if self.mode == "record":
                self.order = tuple(self.recorded)
                self.param_order = tuple(
                    (p, step) for step, m in enumerate(self.order) for p in m.params
                )
                checked += [len(self.param_order), len(self.param_order)]  # ids, step ids
                self.mode = "complete"
            else:
                self.mode = "record"
        self.queue = deque(self.param_order)
        self.fetched_for.clear()
        self.step_id = 0
        self.n_available = 0
        return checked

    # ---- the module hooks ----

    def fetch(self, module: OwningModule) -> list[Gather]:
        if self.mode == "record":
            self.recorded.append(module)
        gathers = []
        missing = [p for p in module.params if p.name not in self.available]
        if missing:
            gathers.append(self.gather(missing))
        if self.mode == "complete":
            self._pop_own_uses(module)
            prefetch = self._next_prefetch()
            if prefetch:
                gathers.append(self.gather(prefetch))
        self.step_id += 1
        return gathers

    def _pop_own_uses(self, module: OwningModule) -> None:
        own = [p for p in module.params if self.fetched_for[p.name] < self.step_id]
        popped = 0
        while self.queue and popped < len(own):
            param, step = self.queue.popleft()
            self.fetched_for[param.name] = step
            popped += 1

    def _next_prefetch(self) -> list[ParamTensor]:
        limit = min(self.max_live_parameters - self.n_available, self.prefetch_bucket)
        batch: list[ParamTensor] = []
        numel = 0
        while self.queue and numel < limit:
            param, step = self.queue.popleft()
            self.fetched_for[param.name] = max(self.fetched_for[param.name], step)
            if param.name not in self.available and param not in batch:
                batch.append(param)
                numel += param.numel
        return batch

    def release(self, module: OwningModule) -> None:
        for param in self._releasable(module):
            if param.name in self.available:
                self.available.discard(param.name)
                self.n_available -= param.numel

    def _releasable(self, module: OwningModule) -> list[ParamTensor]:
        if self.mode != "complete":
            return list(module.params)
        persistent = {p.name for p in self.persistent}
        keep = {p.name for p in module.params if self.fetched_for[p.name] > self.step_id}
        traversed = 0
        for later in self.order[self.step_id :]:
            if traversed >= self.max_reuse_distance:
                break
            for p in later.params:
                keep.add(p.name)
                traversed += p.numel
        return [p for p in module.params if p.name not in keep and p.name not in persistent]

    # ---- the optimizer step ----

    def release_all(self) -> None:
        self.available.clear()
        self.n_available = 0

    def gather_persistent(self) -> Gather | None:
        missing = [p for p in self.persistent if p.name not in self.available]
        return self.gather(missing) if missing else None
