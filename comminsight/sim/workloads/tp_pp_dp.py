"""Tensor + pipeline + data parallel (Megatron-style), ranks laid out dp x pp x tp.

Global rank = (dp_index * pp + stage) * tp + tp_index. Each stage holds layers/pp layers;
tensor parallelism all-reduces the activations twice per layer (attention and MLP) on the TP
communicator, forward and backward; the pipeline runs GPipe-style (every micro-batch forward,
then every micro-batch backward in reverse order) with Send/Recv of activations and gradients
between neighbouring stages; at the end of the step the data-parallel communicator
reduce-scatters the gradients, all-reduces the loss (last stage) and all-gathers the updated
parameters (distributed optimizer).

Send/Recv run where PyTorch runs a single (not batched) P2P op: on a two-rank communicator it
creates lazily for the pair (keyed "low:high"), with the pipeline group's name, so a middle
stage has two such communicators and a name is not unique to one communicator. The pipeline
group's own communicator is never created: nothing collective runs on it. Groups of one rank
are not created either: NCCL is never called on them.
"""

from __future__ import annotations

from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads.model import ModelShape

ACT_DTYPE = "ncclBfloat16"
GRAD_DTYPE = "ncclFloat32"
TP_ALLREDUCES_PER_LAYER = 2


def layout(rank: int, tp: int, pp: int) -> tuple[int, int, int]:
    """(dp_index, stage, tp_index) of a global rank."""
    return rank // (tp * pp), (rank // tp) % pp, rank % tp


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    tp, pp = cfg.tp, cfg.pp
    dp = cfg.ranks // (tp * pp)
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))

    def rank_of(d: int, s: int, t: int) -> int:
        return (d * pp + s) * tp + t

    def groups(role: str, desc: str, size: int, members_of) -> dict[int, CommSpec]:
        by_rank: dict[int, CommSpec] = {}
        if size == 1:
            return by_rank
        seen: set[tuple[int, ...]] = set()
        for rank in range(cfg.ranks):
            members = members_of(*layout(rank, tp, pp))
            if members not in seen:
                seen.add(members)
                comm = b.add_comm(role, desc, members)
                for m in members:
                    by_rank[m] = comm
        return by_rank

    tp_comm = groups(
        "tp", "tensor_parallel", tp, lambda d, s, t: tuple(rank_of(d, s, i) for i in range(tp))
    )
    pair_comm: dict[tuple[int, int], CommSpec] = {}  # (rank, neighbour) -> their P2P comm
    for d in range(dp):
        for t in range(tp):
            group_name = b.new_group_name()  # the pipeline group: a name, no NCCL communicator
            for s in range(pp - 1):
                low, high = rank_of(d, s, t), rank_of(d, s + 1, t)
                pair = b.add_comm("pp", "pipeline_parallel", (low, high), group_name)
                pair_comm[(low, high)] = pair_comm[(high, low)] = pair
    dp_comm = groups(
        "dp", "data_parallel", dp, lambda d, s, t: tuple(rank_of(i, s, t) for i in range(dp))
    )

    for rank in range(cfg.ranks):
        b.barrier(rank, world)
        for step in range(cfg.total_steps):
            b.step_begin(rank, step, step < cfg.warmup_steps)
            pipe = {other: comm for (me, other), comm in pair_comm.items() if me == rank}
            _step(b, model, rank, step, tp_comm.get(rank), pipe, dp_comm.get(rank), world)
            b.step_end(rank, step)


def _step(
    b: PlanBuilder,
    model: ModelShape,
    rank: int,
    step: int,
    tp_comm: CommSpec | None,
    pipe: dict[int, CommSpec],
    dp_comm: CommSpec | None,
    world: CommSpec,
) -> None:
    """One rank's step: GPipe forward and backward over the micro-batches, then the optimizer."""
    cfg = b.config
    tp, pp, dp = cfg.tp, cfg.pp, cfg.ranks // (cfg.tp * cfg.pp)
    _, stage, _ = layout(rank, tp, pp)
    first, last = stage == 0, stage == pp - 1
    warmup = step < cfg.warmup_steps
    act, layer_shard = model.activation_elements, model.layer_params // tp

    def tp_allreduces(where: dict) -> None:
        for _ in range(TP_ALLREDUCES_PER_LAYER if tp_comm else 0):
            b.collective(rank, tp_comm, "AllReduce", act, ACT_DTYPE, **where)

    def p2p(call, neighbour: int, where: dict) -> None:
        comm = pipe[neighbour]
        call(rank, comm, comm.comm_rank(neighbour), act, ACT_DTYPE, **where)

    for micro in range(cfg.grad_accum):
        where = {"phase": "forward", "step": step, "micro_batch": micro}
        if not first:
            p2p(b.recv, rank - tp, where)
        for _ in range(cfg.layers // pp):
            b.compute(rank, model.forward_ns(layer_shard, warmup), "forward")
            tp_allreduces(where)
        if not last:
            p2p(b.send, rank + tp, where)
    for micro in reversed(range(cfg.grad_accum)):
        where = {"phase": "backward", "step": step, "micro_batch": micro}
        if not last:
            p2p(b.recv, rank + tp, where)
        for _ in range(cfg.layers // pp):
            b.compute(rank, model.backward_ns(layer_shard, warmup), "backward")
            tp_allreduces(where)
        if not first:
            p2p(b.send, rank - tp, where)

    b.extra_ops(rank, world, step)
    shard = model.params // pp // tp // dp
    where = {"phase": "optimizer", "step": step}
    if dp_comm:
        b.collective(rank, dp_comm, "ReduceScatter", shard, GRAD_DTYPE, **where)
        if last:  # the loss, for logging
            b.collective(rank, dp_comm, "AllReduce", 1, "ncclFloat32", **where)
    b.compute(rank, model.optimizer_ns(shard), "optimizer")
    if dp_comm:
        b.collective(rank, dp_comm, "AllGather", shard, ACT_DTYPE, **where)
