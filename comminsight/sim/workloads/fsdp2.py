"""FSDP2 (`fully_shard`) on one rank: a unit per decoder layer plus the root (embedding, final
norm, head), as torch/distributed/fsdp/_fully_shard does it, tracking which units hold their
full parameters so that the all-gathers fall where FSDP2 issues them.

- Forward: the root's pre-forward unshards the root (one all-gather), each block's pre-forward
  its block. Blocks reshard after forward; the root never does (FSDP2 keeps the root's
  parameters for the backward that follows), so a second forward before any backward (a
  log-prob pass, the next micro-batch) does not gather it again. torchtitan also keeps the
  last block (`reshard_last_block=False`).
- Backward: each block's pre-backward unshards it if needed and prefetches the next block in
  backward order; after its backward it reshards and, when gradients are synchronized,
  reduce-scatters its gradients (fp32). The root's gradients are reduce-scattered last, from
  the final callback, which also reshards the root.

Shards are the unit's parameters over `shards` ranks: the dp mesh dimension times whatever
else already split them (tensor parallelism).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads.model import ModelShape
from comminsight.sim.workloads.transformer_params import root_numel

PARAM_DTYPE, REDUCE_DTYPE = "ncclBfloat16", "ncclFloat32"
ROOT = "root"


@dataclass
class Fsdp2Model:
    b: PlanBuilder
    rank: int
    comm: CommSpec
    model: ModelShape
    shards: int
    reshard_last_block: bool = True
    unsharded: set = field(default_factory=set)
    # fully_shard(block, reshard_after_forward=False): blocks stay unsharded until backward
    reshard_after_forward: bool = True
    # HSDP: the replicate dimension's communicator; each reduce-scatter's output is then
    # all-reduced across the replicas (foreach_reduce, all_reduce_group)
    replicate: CommSpec | None = None

    @property
    def block_shard(self) -> int:
        return max(1, self.model.layer_params // self.shards)

    @property
    def root_shard(self) -> int:
        return max(1, root_numel(self.model) // self.shards)

    def _gather(self, unit, count: int, where: dict) -> None:
        if unit not in self.unsharded:
            self.b.collective(self.rank, self.comm, "AllGather", count, PARAM_DTYPE, **where)
            self.unsharded.add(unit)

    def _reduce(self, count: int, where: dict) -> None:
        self.b.collective(self.rank, self.comm, "ReduceScatter", count, REDUCE_DTYPE, **where)
        if self.replicate is not None:
            self.b.collective(self.rank, self.replicate, "AllReduce", count, REDUCE_DTYPE, **where)

    # ---- the hooks, in the order FSDP2 runs them ----

    def root_pre_forward(self, where: dict) -> None:
        self._gather(ROOT, self.root_shard, where)

    def block_pre_forward(self, layer: int, where: dict) -> None:
        self._gather(layer, self.block_shard, where)

    def block_post_forward(self, layer: int) -> None:
        if not self.reshard_after_forward:
            return
        if layer < self.model.layers - 1 or self.reshard_last_block:
            self.unsharded.discard(layer)

    def block_pre_backward(self, layer: int, where: dict) -> None:
        self._gather(layer, self.block_shard, where)
        if layer > 0:
            self._gather(layer - 1, self.block_shard, where)  # backward prefetch

    def block_post_backward(self, layer: int, where: dict, sync: bool) -> None:
        self.unsharded.discard(layer)
        if sync:
            self._reduce(self.block_shard, where)

    def root_post_backward(self, where: dict, sync: bool) -> None:
        if sync:
            self._reduce(self.root_shard, where)
        self.unsharded.discard(ROOT)

    # ---- whole passes, for models whose blocks do nothing else collective ----

    def forward(self, where: dict, block_compute: Callable[[int], None]) -> None:
        self.root_pre_forward(where)
        for layer in range(self.model.layers):
            self.block_pre_forward(layer, where)
            block_compute(layer)
            self.block_post_forward(layer)

    def backward(self, where: dict, block_compute: Callable[[int], None], sync: bool) -> None:
        for layer in reversed(range(self.model.layers)):
            self.block_pre_backward(layer, where)
            block_compute(layer)
            self.block_post_backward(layer, where, sync)
        self.root_post_backward(where, sync)
