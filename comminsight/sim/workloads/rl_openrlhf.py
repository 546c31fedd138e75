"""RL post-training as OpenRLHF runs it with separate vLLM engines (the `rl` workload's
`openrlhf` variant): the actor trains on its own GPUs (FSDP2 backend, `--dist_backend fsdp2`),
the vLLM engines generate on others, and the new weights go from the actor's rank 0 to every
engine over a model-update group after each training phase.

Read in OpenRLHF: openrlhf/trainer/ppo_trainer.py (`fit`: generate samples, make experience,
`ppo_train`, then `_broadcast_to_vllm`), openrlhf/trainer/ray/ppo_actor.py
(`ActorPPOTrainer.__init__`, `ppo_train`, `training_step`, `_broadcast_to_vllm_fsdp2`),
openrlhf/trainer/ray/vllm_engine.py (`init_process_group`, `update_weight`),
openrlhf/utils/fsdp2 strategy `all_reduce`.

Ranks: the first half of the world are the actor's (its own torch world, `default_pg`), the
other half vLLM engines of `rollout_tp` GPUs each (each engine its own processes; its
`PyNcclCommunicator` over its TP group does the model's all-reduces, commName NULL).

Communicators: the model-update group is `stateless_init_process_group`: a vLLM
`PyNcclCommunicator` over [actor rank 0] + every engine rank (world size
`engines x tp + 1`), made outside torch.distributed, so its commName is NULL; the
communicator's constructor runs a one-element warm-up all-reduce.

Start-up: the engines' memory-profiling forward (TP all-reduces), the model-update group's
warm-up all-reduce, `torch_dist_barrier_and_cuda_sync` on the actor's world.

Per iteration (what the actor's ranks issue):
1. The weights of the previous iteration's training (none before the first iteration: vLLM
   loaded the same checkpoint), `_broadcast_to_vllm_fsdp2` with NCCL: for every parameter,
   `DTensor.redistribute(Replicate)`, an all-gather of its shard on the actor's world, then
   actor rank 0 alone broadcasts it (bf16) on the model-update group and waits for the
   engines (`ray.get(refs)`); at the end `torch_dist_barrier_and_cuda_sync`.
2. Generation runs on the engines; the actor's ranks wait for it (Ray, no NCCL).
3. Experience: the actor's forward passes for the old log-probs (FSDP2 all-gathers, no
   backward), copied to the host. No reference model and no critic (`--init_kl_coef 0`, a
   GRPO/REINFORCE++ advantage estimator), rewards from a remote function.
4. `ppo_train`: per micro-batch `training_step` (forward, backward: FSDP2 reduce-scatters),
   the optimizer (`clip_grad_norm_`: one fp32 all-reduce, then the step) on the micro-batch
   that ends gradient accumulation, and after every micro-batch `strategy.all_reduce(status)`:
   one single-element all-reduce per metric of the status dict, each copied back to the host.
The weight sync of step 1 follows the previous iteration's last update at once, but it feeds
this iteration's rollout: it begins this iteration's first Step. The sync after the last
training phase of the run belongs to no Step. The run stops after `warmup + steps` Steps,
in the middle of an iteration if that is where the count ends (no sync after it then).

What the engines issue: per iteration, the parameters' broadcasts received (the update group,
root 0), then generation (prefill and one forward per decode step, each all-reducing the
embedding and two outputs per layer on the engine's pynccl communicator, sized by the running
sequences). They have no Steps: no training runs there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from comminsight.sim.config import SimConfigError
from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.comm_groups import unnamed_comm
from comminsight.sim.workloads.fsdp2 import Fsdp2Model
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.model import GPU_FLOPS, HBM_BYTES_PER_S, ModelShape
from comminsight.sim.workloads.rl import (
    BF16,
    DECODE_STEP_OVERHEAD_NS,
    FP32,
    MAX_BATCHED_TOKENS,
    PROMPT_LEN,
    PROMPTS_PER_RANK,
    response_lengths,
)
from comminsight.sim.workloads.transformer_params import ParamTensor, decoder_parameters

# ActorPPOTrainer.training_step's status: policy_loss, actor_lr, then experience.info's keys
STATUS_METRICS = (
    "policy_loss",
    "actor_lr",
    "kl",
    "reward",
    "return",
    "response_length",
    "total_length",
    "ppo_clip_ratio",
    "ppo_kl",
)
LOAD_WEIGHT_NS = 200_000  # an engine's load_weights of one parameter, on the host


@dataclass(frozen=True)
class Layout:
    trainers: tuple[int, ...]
    engines: list[tuple[int, ...]]
    world: CommSpec  # the actor's torch world
    update: CommSpec  # the model-update group: actor rank 0 + every engine rank
    engine_tp: dict[int, CommSpec]  # engine rank -> its pynccl TP communicator (tp > 1)
    iterations: list[tuple[int, int]]  # (first Step, Steps) of each iteration
    trailing_sync: bool  # the last iteration trained all its updates: its sync follows


def iterations_of(total: int, per_rollout: int) -> list[tuple[int, int]]:
    out, step = [], 0
    while step < total:
        updates = min(per_rollout, total - step)
        out.append((step, updates))
        step += updates
    return out


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    n_train = cfg.ranks // 2
    n_vllm = cfg.ranks - n_train
    if n_train < 2 or n_vllm % cfg.rollout_tp:
        raise SimConfigError(
            "rl openrlhf: half the ranks train (at least 2), the rest are vLLM engines of "
            "rollout-tp ranks each"
        )
    trainers = tuple(range(n_train))
    vllm = tuple(range(n_train, cfg.ranks))
    engines = [vllm[i : i + cfg.rollout_tp] for i in range(0, n_vllm, cfg.rollout_tp)]
    world = b.add_comm("world", "default_pg", trainers)
    engine_tp: dict[int, CommSpec] = {}
    for e, members in enumerate(engines):
        if len(members) > 1:
            comm = unnamed_comm(b, "tp", f"openrlhf/engine{e}/pynccl", members)
            engine_tp.update(dict.fromkeys(members, comm))
    update = unnamed_comm(b, "world", "openrlhf/model_update_group", (0, *vllm))
    per_rollout = cfg.ppo_mini_batches * (2 if "ppo_epochs_2" in cfg.variants else 1)
    iterations = iterations_of(cfg.total_steps, per_rollout)
    layout = Layout(
        trainers, engines, world, update, engine_tp, iterations, iterations[-1][1] == per_rollout
    )
    params = decoder_parameters(model)
    for rank in trainers:
        ActorRank(b, model, rank, layout, params).run()
    for e, members in enumerate(engines):
        for rank in members:
            EngineRank(b, model, rank, e, layout, params).run()


@dataclass
class ActorRank:
    b: PlanBuilder
    model: ModelShape
    rank: int
    layout: Layout
    params: list[ParamTensor]

    def __post_init__(self) -> None:
        world = self.layout.world
        self.actor = Fsdp2Model(self.b, self.rank, world, self.model, world.nranks)

    def coll(self, comm: CommSpec, func: str, count: int, dtype: str, **where) -> None:
        self.b.collective(self.rank, comm, func, count, dtype, **where)

    def run(self) -> None:
        b, cfg, lay = self.b, self.b.config, self.layout
        if self.rank == 0:  # PyNcclCommunicator's warm-up
            self.coll(lay.update, "AllReduce", 1, FP32, phase="update_group_init", step=None)
            wait_for_gpu(b, self.rank, "pynccl warm-up")
        b.barrier(self.rank, lay.world)  # torch_dist_barrier_and_cuda_sync
        for i, (first, updates) in enumerate(lay.iterations):
            for k in range(updates):
                step = first + k
                b.step_begin(self.rank, step, step < cfg.warmup_steps)
                if k == 0:
                    if i > 0:
                        self._broadcast_to_vllm({"phase": "weight_sync", "step": step})
                    self._wait_for_rollout()
                    self._make_experience({"phase": "old_log_prob", "step": step})
                self._train_step(step)
                b.step_end(self.rank, step)
        if lay.trailing_sync:
            self._broadcast_to_vllm({"phase": "weight_sync", "step": None})

    def _broadcast_to_vllm(self, where: dict) -> None:
        lay = self.layout
        for p in self.params:
            shard = math.ceil(p.numel / lay.world.nranks)
            self.coll(lay.world, "AllGather", shard, BF16, **where)  # redistribute(Replicate)
            if self.rank == 0:
                self.coll(lay.update, "Broadcast", p.numel, BF16, root=0, **where)
                wait_for_gpu(self.b, self.rank, "ray.get(update_weight)")
        self.b.barrier(self.rank, lay.world)

    def _wait_for_rollout(self) -> None:
        """generate_samples: the engines decode; the actor's ranks wait on Ray."""
        cfg, model = self.b.config, self.model
        per_token = model.params / cfg.rollout_tp * 2 / HBM_BYTES_PER_S * 1e9
        self.b.compute(
            self.rank, cfg.response_length * (per_token + DECODE_STEP_OVERHEAD_NS), "generation"
        )

    def _make_experience(self, where: dict) -> None:
        for micro in range(self.b.config.grad_accum):
            self.actor.forward({**where, "micro_batch": micro}, self._block_forward)
            wait_for_gpu(self.b, self.rank, "action_log_probs.to('cpu')")

    def _train_step(self, step: int) -> None:
        b, world = self.b, self.layout.world
        micros = accumulation.micro_batches(b.config, step)
        for micro in range(micros):
            where = {"step": step, "micro_batch": micro}
            self.actor.forward({"phase": "forward", **where}, self._block_forward)
            self.actor.backward({"phase": "backward", **where}, self._block_backward, sync=True)
            if micro == micros - 1:  # strategy.optimizer_step at the accumulation boundary
                self.coll(world, "AllReduce", 1, FP32, phase="clip_grad_norm", step=step)
                b.extra_ops(self.rank, world, step)
                ns = self.model.optimizer_ns(self.model.params // world.nranks)
                b.compute(self.rank, ns, "adam")
            for _ in STATUS_METRICS:  # strategy.all_reduce(status), one tensor per key
                self.coll(world, "AllReduce", 1, FP32, phase="status", **where)
                wait_for_gpu(b, self.rank, "status .cpu()")

    def _block_forward(self, layer: int) -> None:
        self.b.compute(self.rank, self.model.forward_ns(self.model.layer_params), "forward")

    def _block_backward(self, layer: int) -> None:
        self.b.compute(self.rank, self.model.backward_ns(self.model.layer_params), "backward")


@dataclass
class EngineRank:
    b: PlanBuilder
    model: ModelShape
    rank: int
    engine: int
    layout: Layout
    params: list[ParamTensor]

    @property
    def tp_comm(self) -> CommSpec | None:
        return self.layout.engine_tp.get(self.rank)

    def run(self) -> None:
        lay = self.layout
        setup = {"phase": "vllm_init", "step": None}
        if self.tp_comm is not None:
            self.b.collective(self.rank, self.tp_comm, "AllReduce", 1, FP32, **setup)
            wait_for_gpu(self.b, self.rank, "pynccl warm-up")
        self._forward(MAX_BATCHED_TOKENS, setup)
        self.b.collective(self.rank, lay.update, "AllReduce", 1, FP32, **setup)
        wait_for_gpu(self.b, self.rank, "pynccl warm-up")
        for i in range(len(lay.iterations)):
            if i > 0:
                self._receive_weights()
            self._generate(i)
        if lay.trailing_sync:
            self._receive_weights()

    def _receive_weights(self) -> None:
        for p in self.params:
            self.b.collective(
                self.rank, self.layout.update, "Broadcast", p.numel, BF16, root=0,
                phase="weight_sync", step=None,
            )  # fmt: skip
            wait_for_gpu(self.b, self.rank, "update_weight")
            self.b.compute(self.rank, LOAD_WEIGHT_NS, "load_weights")

    def _generate(self, iteration: int) -> None:
        cfg = self.b.config
        members = self.layout.engines[self.engine]
        n_seqs = PROMPTS_PER_RANK * len(members)
        lengths = response_lengths(cfg.seed, iteration, self.engine, n_seqs, cfg.response_length)
        where = {"phase": "rollout", "step": None}
        self._forward(n_seqs * PROMPT_LEN, where)
        wait_for_gpu(self.b, self.rank, "first tokens")
        for t in range(1, max(lengths)):
            self._forward(sum(1 for n in lengths if n > t), where, decode=True)
            wait_for_gpu(self.b, self.rank, "sampled tokens")

    def _forward(self, tokens: int, where: dict, decode: bool = False) -> None:
        model, tp = self.model, len(self.layout.engines[self.engine])
        shard = model.params / tp
        if decode:
            ns = shard * 2 / HBM_BYTES_PER_S * 1e9 + DECODE_STEP_OVERHEAD_NS
        else:
            ns = 2 * shard * tokens / GPU_FLOPS * 1e9
        comm, act = self.tp_comm, tokens * model.hidden
        if comm is not None:
            self.b.collective(self.rank, comm, "AllReduce", act, BF16, **where)
        for _ in range(model.layers):
            self.b.compute(self.rank, ns / model.layers, "vllm layer")
            if comm is not None:
                self.b.collective(self.rank, comm, "AllReduce", act, BF16, **where)
                self.b.collective(self.rank, comm, "AllReduce", act, BF16, **where)
