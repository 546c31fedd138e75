"""A small GPT-style training job for the end-to-end checks, 2 ranks: throughput, fail-open and
step recovery.

    torchrun --standalone --nproc_per_node=2 bench/gpu/gpt_train.py --mode ddp --steps 300 \
        --out DIR

Modes:
  ddp   the whole model under DistributedDataParallel (default 25 MiB buckets);
  fsdp  FSDP2: fully_shard on every block, then on the model;
  tpdp  a 2-D DeviceMesh (dp x tp = world/2... here 1 x 2 on two GPUs): Megatron-style tensor
        parallel MLP blocks (column-parallel then row-parallel Linear, one all-reduce on the
        tp group forward and one backward per block) and, every --accum micro-batches, the
        data-parallel gradient all-reduce on the dp group before the optimizer step. --tp
        sets the tp size (default 2 when the world is even): --tp 1 on 2 ranks is the 2 x 1
        mesh, data parallel across the ranks, each tp group of one rank.

More ranks than GPUs (one H200 lent): with --share-gpu, or on a machine of one GPU, every rank
takes GPU LOCAL_RANK mod count and sets NCCL_HOSTID=host-<RANK> before NCCL starts, so NCCL
takes each rank for a host of its own and joins them over sockets (run the job with
NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1; shared/reference/nccl-profiler-abi.md "Two ranks on
one GPU").

Every optimizer step ends with `loss.item()` (the usual logging sync). `--loop` adds what a
trainer issues around it (ddp and fsdp): `hf` as transformers' Trainer does with
average_tokens_across_devices (its default since 4.54): the Step's target tokens gathered
(an int64 all-gather, `.item()`) before the first forward, and the loss gathered to log (an
fp32 all-gather, `.item()`) after the optimizer; `verl` as veRL's actor with dynamic batch
sizes: the micro-batch count all-reduced with MAX (int64, `.item()`) before the forward, and
the gradient norm clipped (`clip_grad_norm_`) before the optimizer. Each rank writes
<out>/rank<R>.json: per-step wall times (host CLOCK_MONOTONIC after the sync), the host time
at which `opt.step()` returned (the same instant Inject's step markers stamp), the job's own
collective count where it issues them itself (tpdp), and throughput over the steps after
--warmup. `--progress FILE` (rank 0) rewrites FILE with the step number every 10 steps so a
driver can act mid-run. `--cpu` runs a tiny model on gloo for a dry run without GPUs.

Taking turns (`--turns DIR --turn-job I --turn-jobs N --block-steps K`): N copies of the job
(e.g. without CommInsight, with it, with NCCL's Inspector) share the two GPUs and run one at a
time, K steps each, so that the machine's drift over seconds hits every copy alike and
throughputs can be compared round by round. Round r gives its N turns to the jobs
(r, r+1, ..., r+N-1) mod N; DIR/turn holds the number of the turn now running. Each rank waits
for the turns of its job, polling DIR/turn; rank 0 writes the next number when its block ends.
Round 0 is the warm-up (--warmup steps). A driver starts the rotation by writing 0 to
DIR/turn once every rank of every job has written DIR/ready.<job>.<rank>. Each rank reports
its blocks: the host time at which it saw its turn and at which its last step's sync returned.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


# ---- tensor parallel pieces (tpdp): explicit collectives on the tp group ----


class _ReduceForward(torch.autograd.Function):
    """Row-parallel output: sum the partial results across tp ranks; the gradient passes."""

    @staticmethod
    def forward(ctx, x, group, counter):
        counter[0] += 1
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None, None


class _ReduceBackward(torch.autograd.Function):
    """Column-parallel input: identity forward; the input gradient is summed across tp."""

    @staticmethod
    def forward(ctx, x, group, counter):
        ctx.group, ctx.counter = group, counter
        return x

    @staticmethod
    def backward(ctx, g):
        ctx.counter[0] += 1
        g = g.contiguous()
        dist.all_reduce(g, group=ctx.group)
        return g, None, None


class TPBlock(nn.Module):
    def __init__(self, d: int, tp: int, group, counter):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d // tp)  # column shard
        self.fc2 = nn.Linear(4 * d // tp, d, bias=False)  # row shard
        self.group, self.counter = group, counter

    def forward(self, x):
        h = _ReduceBackward.apply(self.ln(x), self.group, self.counter)
        h = self.fc2(F.gelu(self.fc1(h)))
        return x + _ReduceForward.apply(h, self.group, self.counter)


class TPNet(nn.Module):
    def __init__(self, vocab, d, layers, tp, group, counter):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(TPBlock(d, tp, group, counter) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def dp_allreduce(params, group, counter, bucket_bytes=25 << 20):
    """DDP-like: flatten gradients into ~25 MiB buckets, average them on the dp group."""
    bucket, size = [], 0
    n = dist.get_world_size(group)

    def flush():
        if not bucket:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])
        counter[0] += 1
        dist.all_reduce(flat, group=group)
        flat /= n
        off = 0
        for p in bucket:
            k = p.grad.numel()
            p.grad.copy_(flat[off : off + k].view_as(p.grad))
            off += k

    for p in params:
        if p.grad is None:
            continue
        bucket.append(p)
        size += p.grad.numel() * p.grad.element_size()
        if size >= bucket_bytes:
            flush()
            bucket, size = [], 0
    flush()


class TurnGate:
    """This job's place in the rotation of --turns (see the module docstring)."""

    def __init__(self, directory: str, job: int, jobs: int, rank: int):
        self.dir, self.job, self.jobs, self.rank = Path(directory), job, jobs, rank
        self.turn_file = self.dir / "turn"

    def turn_of_block(self, block: int) -> int:
        # round `block` gives position p to job (p + block) mod N
        return block * self.jobs + (self.job - block) % self.jobs

    def ready(self) -> None:
        (self.dir / f"ready.{self.job}.{self.rank}").write_text(str(os.getpid()))

    def wait(self, block: int) -> int:
        """Block until the turn of `block` runs; returns the host time it was seen."""
        want = self.turn_of_block(block)
        while True:
            try:
                now = int(self.turn_file.read_text() or -1)
            except (FileNotFoundError, ValueError):
                now = -1
            if now == want:
                return time.monotonic_ns()
            if now > want:
                raise SystemExit(f"turn {now} passed this job's turn {want}")
            time.sleep(0.0002)

    def wait_end(self, blocks: int) -> None:
        """Stay until every job has run its blocks: a copy tearing down (NCCL, CUDA context)
        while another runs would slow that one's turns."""
        last = blocks * self.jobs
        while True:
            try:
                if int(self.turn_file.read_text() or -1) >= last:
                    return
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.001)

    def done(self, block: int) -> None:
        if self.rank != 0:
            return
        tmp = self.dir / f".turn.{self.job}"
        tmp.write_text(str(self.turn_of_block(block) + 1))
        os.replace(tmp, self.turn_file)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp", "tpdp"], default="ddp")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--layers", type=int, default=8)
    # --dim: torchrun's argparse takes a bare --d after the script for an ambiguous abbreviation
    ap.add_argument("--d", "--dim", dest="d", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--out", required=True)
    ap.add_argument("--progress", default="")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU, for a dry run")
    ap.add_argument("--tp", type=int, default=0, help="tpdp: tp size (0: 2 if the world is even)")
    ap.add_argument(
        "--share-gpu",
        action="store_true",
        help="ranks share GPUs, one NCCL host each (automatic on a machine of one GPU)",
    )
    ap.add_argument(
        "--loop",
        choices=["plain", "hf", "verl"],
        default="plain",
        help="the training loop's own collectives (module docstring)",
    )
    ap.add_argument("--turns", default="", help="take turns with other jobs (module docstring)")
    ap.add_argument("--turn-job", type=int, default=0)
    ap.add_argument("--turn-jobs", type=int, default=1)
    ap.add_argument("--block-steps", type=int, default=20)
    args = ap.parse_args()
    if args.cpu:
        args.layers, args.d, args.heads, args.seq, args.batch, args.vocab = 2, 64, 4, 16, 2, 128

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_env = int(os.environ["WORLD_SIZE"])
    share = not args.cpu and (args.share_gpu or (world_env > 1 and torch.cuda.device_count() == 1))
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    elif share:
        # NCCL refuses two ranks of one host on one GPU; its host identity is NCCL_HOSTID's
        os.environ["NCCL_HOSTID"] = f"host-{rank}"
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    elif args.mode == "tpdp" and world_env > torch.cuda.device_count():
        # more ranks than GPUs (2 x 2 mesh on two GPUs): GPU (dp + tp) % n puts the two ranks
        # of every tp and every dp group on different GPUs; the world group, which would hold
        # two ranks of one GPU, is never used for a collective (lazy NCCL init, no device_id)
        dp_i, tp_j = divmod(rank, 2)
        device = torch.device("cuda", (dp_i + tp_j) % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    world = dist.get_world_size()
    torch.manual_seed(0)
    issued = [0]  # collectives this script issues itself (tpdp)
    amp = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if not args.cpu
        else torch.autocast("cpu", enabled=False)
    )

    if args.mode == "tpdp":
        from torch.distributed.device_mesh import init_device_mesh

        tp = args.tp or (2 if world % 2 == 0 else 1)  # ranks tp*i .. tp*i+tp-1 form a tp group
        if world % tp:
            raise SystemExit(f"--tp {tp} does not divide the world of {world}")
        mesh = init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
        tp_group, dp_group = mesh.get_group("tp"), mesh.get_group("dp")
        net = TPNet(args.vocab, args.d, args.layers, tp, tp_group, issued).to(device)
        mesh_desc = {"dp": world // tp, "tp": tp}
    else:
        net = GPT(args.vocab, args.d, args.layers, args.heads, args.seq).to(device)
        mesh_desc = {"dp": world}
        if args.mode == "ddp":
            net = nn.parallel.DistributedDataParallel(
                net, device_ids=None if args.cpu else [device.index]
            )
        else:
            from torch.distributed.fsdp import fully_shard

            for blk in net.blocks:
                fully_shard(blk)
            fully_shard(net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    # tp ranks of one dp replica see the same batch
    data_seed = mesh.get_local_rank("dp") if args.mode == "tpdp" else rank
    gen = torch.Generator(device=device).manual_seed(data_seed)
    data = torch.randint(
        0, args.vocab, (16, args.batch, args.seq + 1), device=device, generator=gen
    )

    gate = None
    block_of_step: dict[int, int] = {}  # first step of a block -> block number
    last_of_block: dict[int, int] = {}  # last step of a block -> block number
    if args.turns:
        w = min(args.warmup, args.steps - 1)
        if (args.steps - w) % args.block_steps:
            raise SystemExit("--steps minus --warmup must be a multiple of --block-steps")
        starts = [0] + list(range(w, args.steps, args.block_steps))
        ends = [s - 1 for s in starts[1:]] + [args.steps - 1]
        block_of_step = {s: b for b, s in enumerate(starts)}
        last_of_block = {e: b for b, e in enumerate(ends)}
        gate = TurnGate(args.turns, args.turn_job, args.turn_jobs, rank)
        gate.ready()
    blocks = []

    step_done, opt_returned, iteration_end = [], [], []
    t_prev = time.monotonic_ns()
    t0 = t_prev
    micro = 0
    for step in range(args.steps):
        if gate is not None and step in block_of_step:
            # waiting for the turn is not the job's time: the block's clock starts here
            t_prev = gate.wait(block_of_step[step])
            blocks.append({"block": block_of_step[step], "first_step": step, "seen_ns": t_prev})
        if args.loop == "hf":
            items = torch.tensor(args.accum * args.batch * args.seq, device=device)
            gathered = torch.empty(world, dtype=items.dtype, device=device)
            dist.all_gather_into_tensor(gathered, items.reshape(1))
            gathered.sum().item()
        elif args.loop == "verl":
            count = torch.tensor([args.accum], device=device)
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
            count.item()
        for _ in range(args.accum):
            batch = data[micro % data.shape[0]]
            micro += 1
            with amp:
                logits = net(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            (loss / args.accum).backward()
        if args.mode == "tpdp":
            dp_allreduce(net.parameters(), dp_group, issued)
        if args.loop == "verl":
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt_returned.append(time.monotonic_ns())
        opt.zero_grad(set_to_none=True)
        lv = loss.item()
        if args.loop == "hf":
            logged = torch.empty(world, dtype=torch.float32, device=device)
            dist.all_gather_into_tensor(logged, loss.detach().float().reshape(1))
            logged.mean().item()
        now = time.monotonic_ns()
        iteration_end.append(now)
        step_done.append(now - t_prev)
        t_prev = now
        if gate is not None and step in last_of_block:
            blocks[-1].update(end_ns=now, steps=step + 1 - blocks[-1]["first_step"])
            gate.done(last_of_block[step])
        if rank == 0 and args.progress and step % 10 == 0:
            Path(args.progress).parent.mkdir(parents=True, exist_ok=True)
            Path(args.progress).write_text(str(step))
    end = time.monotonic_ns()
    if gate is not None:
        gate.wait_end(len(block_of_step))
    if not math.isfinite(lv):
        raise SystemExit(f"loss is {lv}")

    w = min(args.warmup, args.steps - 1)
    timed = step_done[w:]
    elapsed_s = sum(timed) / 1e9
    tokens = len(timed) * args.accum * args.batch * args.seq * world
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "mode": args.mode,
                "rank": rank,
                "pid": os.getpid(),
                "world": world,
                "mesh": mesh_desc,
                "steps": args.steps,
                "accum": args.accum,
                "warmup": w,
                "model": {k: getattr(args, k) for k in ("layers", "d", "heads", "seq", "batch")},
                "params": sum(p.numel() for p in net.parameters()),
                "loss_last": lv,
                "start_mono_ns": t0,
                "end_mono_ns": end,
                "step_ns": step_done,
                "opt_step_returned_mono_ns": opt_returned,
                "loop": args.loop,
                # where each iteration of the loop ended (after what it logs): the Step's end,
                # where ops issued after opt.step() returned still belong to it
                "iteration_end_mono_ns": iteration_end,
                "issued_by_script": issued[0],
                "timed_s": elapsed_s,
                "median_step_ms": statistics.median(timed) / 1e6,
                "tokens_per_s": tokens / elapsed_s if elapsed_s else 0.0,
                "tokens_per_step": args.accum * args.batch * args.seq * world,
                "turns": (
                    {"job": args.turn_job, "jobs": args.turn_jobs, "blocks": blocks}
                    if gate is not None
                    else None
                ),
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
