"""RL post-training (GRPO) as veRL runs it colocated: one process per GPU holds the FSDP2 actor,
the FSDP2 reference model and a vLLM engine (SPMD, `distributed_executor_backend=
"external_launcher"`, eager), switching between them every iteration (the "hybrid engine":
verl/workers/fsdp_workers.py `ActorRolloutRefWorker`, the FSDP->vLLM sharding manager
verl/workers/sharding_manager/fsdp_vllm.py, verl/workers/actor/dp_actor.py).

**What a Step is.** A Step is one optimizer step of the actor: one PPO mini-batch update
(`ppo_mini_batches` per iteration, `ppo_epochs` = 1). veRL's own counter, `global_steps`
(verl/trainer/ppo/ray_trainer.py `fit`), counts iterations instead: one batch of prompts,
its rollout and all its updates, with the learning-rate scheduler stepped once; an
iteration here is `ppo_mini_batches` Steps. The rollout and the experience it makes
(generation, old and reference log-probs) feed the iteration's first update and belong to that
Step, so the Steps tile the op stream after start-up: each ends with the actor's gradient-norm
all-reduce, the host reading it (`torch.isfinite`) and the optimizer. An engine can find them:
each Step ends on a scalar all-reduce of the default group that the host waits for, and the
updates between two rollouts repeat the same FSDP pattern. Training stops after
`warmup + steps` Steps, in the middle of an iteration if that is where the count ends.

Communicators: the actor and reference are sharded over the whole world (a 1-D DeviceMesh:
the default group). veRL builds a (dp, infer_tp, infer_pp) DeviceMesh for the rollout
(`mesh_dp`, `mesh_infer_tp`, `mesh_infer_pp`: named, never used for NCCL); vLLM then creates
its world, TP and PP groups with `new_group` and no description (`undefined:<n>`, each with a
gloo twin that takes a name too), and a `PyNcclCommunicator` per TP group that it initializes
through NCCL directly: its commName is NULL even with Inject.

Start-up: a barrier, then the actor's full state dict broadcast from rank 0 one tensor at a
time (fp32; `fsdp2_load_full_state_dict`); vLLM's pynccl warm-up all-reduce of one element and
its memory-profiling forward of `max_num_batched_tokens` tokens (TP all-reduces); then the
reference model like the actor (bf16).

Per iteration, in the first Step:
1. Weights to vLLM (sharding manager `__enter__`): `state_dict()` then `param.full_tensor()`
   for every parameter: one all-gather of its fp32 shard each, on the default group.
2. `preprocess_data`: the prompts all-gathered across vLLM's TP group, one all-gather per
   tensor (attention_mask, input_ids, position_ids) then `all_gather_object` (sizes, then the
   pickled bytes, each read by the host).
3. Generation: chunked prefill, then one decode step per generated token until the longest
   response of the TP group is done; each forward all-reduces the embedding and, per layer,
   attention and MLP outputs through pynccl (running sequences x hidden, so the size shrinks
   as sequences finish) and all-gathers the vocab-sharded logits on the torch TP group; the
   host reads the sampled tokens every step. Response lengths are drawn per iteration and TP
   group (seeded): different TP groups generate different numbers of tokens. With
   `rollout_cuda_graphs` the decode steps replay captured graphs and call no NCCL API (as
   veRL's default `enforce_eager: False` does); prefill stays eager.
4. `reduce_timing` / `topk_reduce_ratio_min_max`: an all-gather and an all-reduce of one
   float on the default group, each read by the host.
5. Old log-probs (actor) and reference log-probs (reference model): FSDP2 forward passes
   over the micro-batches, no backward, results copied to the host.
Then each Step: with dynamic micro-batching (`dynamic_accum`), `rearrange_micro_batches`
all-reduces the micro-batch count with MAX so every rank runs the same number; per micro-batch
an FSDP2 forward and backward reduce-scattering every time (veRL accumulates sharded gradients,
no `no_sync`), the host reading the loss metrics; then `fsdp2_clip_grad_norm_` (one fp32
all-reduce), `torch.isfinite(grad_norm)` on the host, the optimizer.
Advantages, rewards and the data itself move between workers through Ray, not NCCL.

Variants (`cfg.variants`; none: all of the above, unchanged):
- `verl_sync_after_update`: veRL's checkpoint engine (verl/checkpoint_engine,
  `CheckpointEngineManager.update_weights` in ray_trainer.py `fit`): the weights go to the
  rollout once before the loop (start-up, no Step) and then right after each iteration's
  actor update, not at the next rollout. The sync after an update still feeds the next
  iteration, so it begins that iteration's first Step; the one after the last update belongs
  to no Step.
- `ppo_epochs_2`: `actor.ppo_epochs: 2` (dp_actor.py `update_policy`: for each epoch, for
  each mini-batch, one optimizer step): 2 x `ppo_mini_batches` Steps per rollout.
- `openrlhf`: OpenRLHF with separate vLLM engines (rl_openrlhf.py).
- `trl_grpo`: TRL's GRPOTrainer with colocated vLLM under accelerate DDP (rl_trl.py).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from comminsight.sim.plan import CommSpec, PlanBuilder
from comminsight.sim.workloads import accumulation
from comminsight.sim.workloads.comm_groups import device_mesh, new_groups, unnamed_comm
from comminsight.sim.workloads.fsdp2 import Fsdp2Model
from comminsight.sim.workloads.host_sync import wait_for_gpu
from comminsight.sim.workloads.model import GPU_FLOPS, HBM_BYTES_PER_S, ModelShape
from comminsight.sim.workloads.transformer_params import VOCAB, ParamTensor, decoder_parameters

FP32, BF16, INT64 = "ncclFloat32", "ncclBfloat16", "ncclInt64"
BYTES_DTYPE = "ncclInt8"  # all_gather_object sends uint8; the sim has no ncclUint8
PROMPTS_PER_RANK = 8
PROMPT_LEN = 512
PROMPT_TENSORS = ("attention_mask", "input_ids", "position_ids")  # sorted, as veRL sends them
PICKLED_BYTES_PER_TOKEN = 6
MAX_BATCHED_TOKENS = 8192  # vLLM's max_num_batched_tokens as veRL sets it
CUDA_GRAPH_MAX_BATCH = 512  # the largest batch vLLM captures a decode graph for
DECODE_STEP_OVERHEAD_NS = 1_500_000  # vLLM's scheduler and sampler on the host, eager
CLIPPED_RESPONSES = 0.05  # responses that reach response_length
DRIVER_BETWEEN_ITERATIONS_NS = 20_000_000
VARIANTS = ("verl_sync_after_update", "ppo_epochs_2", "openrlhf", "trl_grpo")


@dataclass(frozen=True)
class RolloutComms:
    members: tuple[int, ...]  # the rank's vLLM TP group
    pynccl: CommSpec | None  # vLLM's own NCCL communicator: the model's all-reduces
    torch_tp: CommSpec | None  # vLLM's torch TP group: logits and prompts all-gathers


def build(b: PlanBuilder, model: ModelShape) -> None:
    cfg = b.config
    if "openrlhf" in cfg.variants:
        from comminsight.sim.workloads import rl_openrlhf

        return rl_openrlhf.build(b, model)
    if "trl_grpo" in cfg.variants:
        from comminsight.sim.workloads import rl_trl

        return rl_trl.build(b, model)
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    rollout = rollout_comms(b, world)
    params = decoder_parameters(model)
    for rank in range(cfg.ranks):
        RlRank(b, model, rank, world, rollout[rank], params).run()


def rollout_comms(b: PlanBuilder, world: CommSpec) -> dict[int, RolloutComms]:
    """veRL's rollout DeviceMesh, then vLLM's groups and pynccl communicators, in the order
    they are created (every rank creates every group)."""
    cfg = b.config
    tp, dp = cfg.rollout_tp, cfg.ranks // cfg.rollout_tp
    device_mesh(
        b,
        world,
        (dp, tp, 1),
        ("dp", "infer_tp", "infer_pp"),
        ("rollout_dp", "rollout_tp_mesh", "rollout_pp"),
    )
    tp_groups = [tuple(d * tp + i for i in range(tp)) for d in range(dp)]
    new_groups(b, "rollout_world", "undefined", [world.members])
    b.new_group_name()  # its gloo twin
    torch_tp: dict[int, CommSpec] = {}
    for members in tp_groups:
        torch_tp.update(new_groups(b, "rollout_tp", "undefined", [members]))
        b.new_group_name()
    for _ in range(cfg.ranks):  # pipeline groups of one rank, device and gloo
        b.new_group_name()
        b.new_group_name()
    comms = {}
    for members in tp_groups:
        pynccl = unnamed_comm(b, "tp", f"pynccl/{members}", members) if tp > 1 else None
        for r in members:
            comms[r] = RolloutComms(members, pynccl, torch_tp.get(r))
    return comms


def response_lengths(seed: int, iteration: int, group: int, n: int, most: int) -> list[int]:
    """Tokens each response of a TP group's batch gets: most stop at their EOS, a few are cut
    at `response_length` (the clip ratio RL runs report)."""
    rng = random.Random(f"{seed}/rollout/{iteration}/{group}")
    return [
        most if rng.random() < CLIPPED_RESPONSES else max(1, int(most * rng.betavariate(2, 3)))
        for _ in range(n)
    ]


@dataclass
class RlRank:
    b: PlanBuilder
    model: ModelShape
    rank: int
    world: CommSpec
    rollout: RolloutComms
    params: list[ParamTensor]

    def __post_init__(self) -> None:
        shards = self.world.nranks
        self.actor = Fsdp2Model(self.b, self.rank, self.world, self.model, shards)
        self.ref = Fsdp2Model(self.b, self.rank, self.world, self.model, shards)

    def coll(self, comm: CommSpec, func: str, count: int, dtype: str, **where) -> None:
        self.b.collective(self.rank, comm, func, count, dtype, **where)

    def run(self) -> None:
        cfg = self.b.config
        sync_after = "verl_sync_after_update" in cfg.variants
        per_rollout = cfg.ppo_mini_batches * (2 if "ppo_epochs_2" in cfg.variants else 1)
        self._startup()
        if sync_after:  # CheckpointEngineManager.update_weights before the loop
            self._push_weights({"phase": "weight_sync", "step": None})
        step = iteration = 0
        begun = None  # a Step the sync after the last update already began
        while step < cfg.total_steps:
            updates = min(per_rollout, cfg.total_steps - step)
            for k in range(updates):
                if begun != step + k:
                    self.b.step_begin(self.rank, step + k, step + k < cfg.warmup_steps)
                if k == 0:
                    self._make_experience(iteration, step, push=not sync_after)
                self._ppo_update(step + k)
                self.b.step_end(self.rank, step + k)
            if sync_after and updates == per_rollout:
                begun = self._sync_after_update(step + updates)
            step += updates
            iteration += 1

    def _sync_after_update(self, next_step: int) -> int | None:
        """veRL's checkpoint engine: the weights leave right after the update; they feed the
        next iteration, whose first Step they begin (none: the last update's)."""
        cfg = self.b.config
        if next_step >= cfg.total_steps:
            self._push_weights({"phase": "weight_sync", "step": None})
            return None
        self.b.step_begin(self.rank, next_step, next_step < cfg.warmup_steps)
        self._push_weights({"phase": "weight_sync", "step": next_step})
        # the driver: metrics, the next batch of prompts, the rollout replicas woken up
        self.b.compute(self.rank, DRIVER_BETWEEN_ITERATIONS_NS, "driver between iterations")
        return next_step

    # ---- start-up ----

    def _startup(self) -> None:
        self._load_full_state_dict(FP32, "actor_init")
        if self.rollout.pynccl is not None:
            self.coll(self.rollout.pynccl, "AllReduce", 1, FP32, phase="vllm_init", step=None)
            wait_for_gpu(self.b, self.rank, "pynccl warm-up")
        self._engine_forward(MAX_BATCHED_TOKENS, 0, {"phase": "vllm_profile", "step": None})
        self._load_full_state_dict(BF16, "ref_init")

    def _load_full_state_dict(self, dtype: str, phase: str) -> None:
        self.b.barrier(self.rank, self.world)
        for p in self.params:
            self.coll(self.world, "Broadcast", p.numel, dtype, root=0, phase=phase, step=None)

    # ---- the rollout and the experience ----

    def _make_experience(self, iteration: int, step: int, push: bool = True) -> None:
        if push:
            self._push_weights({"phase": "weight_sync", "step": step})
        where = {"phase": "rollout", "step": step}
        self._gather_prompts(iteration, where)
        self._generate(iteration, where)
        self._reduce_timing({"phase": "rollout_timing", "step": step})
        for role, model in (("old_log_prob", self.actor), ("ref_log_prob", self.ref)):
            self._log_prob_pass(model, {"phase": role, "step": step})

    def _push_weights(self, where: dict) -> None:
        for p in self.params:
            shard = math.ceil(p.numel / self.world.nranks)
            self.coll(self.world, "AllGather", shard, FP32, **where)

    def _gather_prompts(self, iteration: int, where: dict) -> None:
        comm = self.rollout.torch_tp
        if comm is None:
            return
        for _ in PROMPT_TENSORS:
            self.coll(comm, "AllGather", PROMPTS_PER_RANK * PROMPT_LEN, INT64, **where)
        self.coll(comm, "AllGather", 1, INT64, **where)  # all_gather_object: the sizes
        wait_for_gpu(self.b, self.rank, "object sizes")
        group = self.rollout.members[0] // len(self.rollout.members)
        jitter = random.Random(f"{self.b.config.seed}/pickle/{iteration}/{group}").randint(0, 512)
        pickled = PROMPTS_PER_RANK * PROMPT_LEN * PICKLED_BYTES_PER_TOKEN + jitter
        self.coll(comm, "AllGather", pickled, BYTES_DTYPE, **where)
        wait_for_gpu(self.b, self.rank, "unpickle prompts")

    def _generate(self, iteration: int, where: dict) -> None:
        cfg = self.b.config
        members = self.rollout.members
        n_seqs = PROMPTS_PER_RANK * len(members)
        group = members[0] // len(members)
        lengths = response_lengths(cfg.seed, iteration, group, n_seqs, cfg.response_length)
        prompt_tokens = n_seqs * PROMPT_LEN
        for start in range(0, prompt_tokens, MAX_BATCHED_TOKENS):
            chunk = min(MAX_BATCHED_TOKENS, prompt_tokens - start)
            finished = (start + chunk) // PROMPT_LEN - start // PROMPT_LEN
            self._engine_forward(chunk, finished, where)
        wait_for_gpu(self.b, self.rank, "first tokens")
        for t in range(1, max(lengths)):
            running = sum(1 for n in lengths if n > t)
            eager = not cfg.rollout_cuda_graphs or running > CUDA_GRAPH_MAX_BATCH
            self._engine_forward(running, running, where, eager, decode=True)
            wait_for_gpu(self.b, self.rank, "sampled tokens")

    def _engine_forward(
        self, tokens: int, logits_rows: int, where: dict, eager=True, decode=False
    ) -> None:
        """One vLLM model forward: compute, and the TP collectives where they are visible."""
        b, model, tp = self.b, self.model, len(self.rollout.members)
        shard = model.params / tp
        if decode:  # memory bound: the weights are read once per step
            ns = shard * 2 / HBM_BYTES_PER_S * 1e9 + DECODE_STEP_OVERHEAD_NS
        else:
            ns = 2 * shard * tokens / GPU_FLOPS * 1e9
        pynccl = self.rollout.pynccl if eager else None
        act = tokens * model.hidden
        if pynccl is not None:  # VocabParallelEmbedding
            self.coll(pynccl, "AllReduce", act, BF16, **where)
        for _ in range(model.layers):
            b.compute(self.rank, ns / model.layers, "vllm layer")
            if pynccl is not None:  # o_proj and down_proj: RowParallelLinear
                self.coll(pynccl, "AllReduce", act, BF16, **where)
                self.coll(pynccl, "AllReduce", act, BF16, **where)
        if eager and logits_rows and self.rollout.torch_tp is not None:
            count = logits_rows * VOCAB // tp
            self.coll(self.rollout.torch_tp, "AllGather", count, BF16, **where)

    def _reduce_timing(self, where: dict) -> None:
        self.coll(self.world, "AllGather", 1, FP32, **where)
        wait_for_gpu(self.b, self.rank, "timing min/max")
        self.coll(self.world, "AllReduce", 1, FP32, **where)
        wait_for_gpu(self.b, self.rank, "timing mean")

    def _log_prob_pass(self, model: Fsdp2Model, where: dict) -> None:
        for micro in range(self.b.config.grad_accum):
            model.forward({**where, "micro_batch": micro}, self._block_forward)
        wait_for_gpu(self.b, self.rank, "log-probs to cpu")

    # ---- the PPO update: one Step ----

    def _ppo_update(self, step: int) -> None:
        cfg, b = self.b.config, self.b
        micros = accumulation.micro_batches(cfg, step)
        if cfg.dynamic_accum:  # rearrange_micro_batches(same_micro_num_in_dp=True)
            self.coll(self.world, "AllReduce", 1, INT64, phase="micro_batch_count", step=step)
            wait_for_gpu(b, self.rank, "micro-batch count")
        for micro in range(micros):
            where = {"step": step, "micro_batch": micro}
            self.actor.forward({"phase": "forward", **where}, self._block_forward)
            self.actor.backward({"phase": "backward", **where}, self._block_backward, sync=True)
            wait_for_gpu(b, self.rank, "loss metrics .item()")
        self.coll(self.world, "AllReduce", 1, FP32, phase="clip_grad_norm", step=step)
        wait_for_gpu(b, self.rank, "torch.isfinite(grad_norm)")
        b.extra_ops(self.rank, self.world, step)
        b.compute(
            self.rank, self.model.optimizer_ns(self.model.params // self.world.nranks), "adam"
        )

    def _block_forward(self, layer: int) -> None:
        self.b.compute(self.rank, self.model.forward_ns(self.model.layer_params), "forward")

    def _block_backward(self, layer: int) -> None:
        self.b.compute(self.rank, self.model.backward_ns(self.model.layer_params), "backward")
