"""Pipeline-parallel training job for step recovery: 2 stages on 2 ranks under
torch.distributed.pipelining, M micro-batches a Step (GPipe or 1F1B).

    torchrun --standalone --nproc_per_node=2 bench/gpu/pp_train.py --schedule 1f1b \
        --microbatches 4 --steps 40 --out DIR

The model is gpt_train.py's GPT cut in two by hand: stage 0 holds the embeddings and the first
half of the blocks, stage 1 the second half, the final LayerNorm and the head; the loss
(cross entropy) is the last stage's. Each rank builds its own stage (`PipelineStage`, shapes
inferred at the first step) and runs the schedule over a batch of --batch sequences split into
--microbatches along the batch dimension; between stages only activations go forward and their
gradients backward (NCCL Send/Recv). Every rank then runs its own AdamW step and ends the Step
with the usual logging sync (the last stage's `loss.item()`, a `cuda.synchronize()` on stage
0). No data parallelism: DP is 1.

Ground truth: Inject's step markers (COMMINSIGHT_INJECT_STEP_MARKERS=1) when Inject is
installed; each rank also writes <out>/rank<R>.json with the host time at which `opt.step()`
returned (the instant the markers stamp) and its per-step times. More ranks than GPUs: as in
gpt_train.py (--share-gpu, automatic on a machine of one GPU: NCCL_HOSTID=host-<RANK>).
`--cpu` runs a tiny model on gloo for a dry run without GPUs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_train import Block  # noqa: E402


class First(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return x


class Last(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4, help="blocks in all, half a stage")
    ap.add_argument("--d", "--dim", dest="d", type=int, default=512)  # as in gpt_train.py
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences a Step (all micro-batches)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU, for a dry run")
    ap.add_argument("--share-gpu", action="store_true", help="as in gpt_train.py")
    args = ap.parse_args()
    if args.cpu:
        args.layers, args.d, args.heads, args.seq, args.batch, args.vocab = 2, 64, 4, 16, 8, 128
    if args.batch % args.microbatches:
        raise SystemExit("--batch must be a multiple of --microbatches")

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_env = int(os.environ["WORLD_SIZE"])
    if world_env != 2:
        raise SystemExit("pp_train.py is a 2-stage job: run it on 2 ranks")
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        if args.share_gpu or torch.cuda.device_count() == 1:
            os.environ["NCCL_HOSTID"] = f"host-{rank}"  # see gpt_train.py
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.manual_seed(rank)
    half = max(1, args.layers // 2)
    if rank == 0:
        net = First(args.vocab, args.d, half, args.heads, args.seq)
    else:
        net = Last(args.vocab, args.d, args.layers - half, args.heads)
    net = net.to(device)
    stage = PipelineStage(net, rank, 2, device)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.float().reshape(-1, args.vocab), target.reshape(-1))

    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
    schedule = kind(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(0)  # both stages see the same data
    data = torch.randint(0, args.vocab, (8, args.batch, args.seq + 1), device=device, generator=gen)

    step_done, opt_returned = [], []
    t0 = t_prev = time.monotonic_ns()
    lv = 0.0
    for step in range(args.steps):
        batch = data[step % data.shape[0]]
        if rank == 0:
            schedule.step(batch[:, :-1].contiguous())  # the stage checks strides
        else:
            losses: list[torch.Tensor] = []
            schedule.step(target=batch[:, 1:].contiguous(), losses=losses)
        opt.step()
        opt_returned.append(time.monotonic_ns())
        opt.zero_grad(set_to_none=True)
        if rank == 1:
            lv = torch.stack(losses).mean().item()
        elif device.type == "cuda":
            torch.cuda.synchronize()
        now = time.monotonic_ns()
        step_done.append(now - t_prev)
        t_prev = now
    end = time.monotonic_ns()
    if not math.isfinite(lv):
        raise SystemExit(f"loss is {lv}")
    w = min(args.warmup, args.steps - 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "mode": f"pp_{args.schedule}",
                "rank": rank,
                "pid": os.getpid(),
                "world": 2,
                "mesh": {"pp": 2, "dp": 1},
                "steps": args.steps,
                "microbatches": args.microbatches,
                "warmup": w,
                "model": {k: getattr(args, k) for k in ("layers", "d", "heads", "seq", "batch")},
                "params": sum(p.numel() for p in net.parameters()),
                "loss_last": lv,
                "start_mono_ns": t0,
                "end_mono_ns": end,
                "step_ns": step_done,
                "opt_step_returned_mono_ns": opt_returned,
                "median_step_ms": statistics.median(step_done[w:]) / 1e6,
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
