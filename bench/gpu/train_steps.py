"""Real PyTorch training through the CommInsight plugin, with ground-truth step markers, for
scoring the Semantic Engine on real NCCL logs (bench/gpu/steps_report.py reads the result).

Launch (on the GPU machine; the plugin built by `make build-profiler`):

    COMMINSIGHT_HOME=$(mktemp -d) COMMINSIGHT_AGENT_AUTOSTART=0 \
    NCCL_PROFILER_PLUGIN=$PWD/dist/libnccl-profiler-comminsight.so \
    torchrun --standalone --nproc_per_node=2 bench/gpu/train_steps.py \
        --mode ddp --steps 30 --out /tmp/steps

A stack of --layers Linear layers (width --width) trained on random data: `ddp` wraps it in
DistributedDataParallel (default 25 MiB buckets); `fsdp` shards every layer with FSDP2's
fully_shard. After each optimizer step every rank appends CLOCK_MONOTONIC (the clock the
profiler stamps ops with) to <out>/markers.rank<R>.json: the ground truth of where Steps end.
The engine never sees the markers. destroy_process_group() at the end seals the segments.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def model(layers: int, width: int) -> nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    net = model(args.layers, args.width).to(device)
    if args.mode == "ddp":
        net = nn.parallel.DistributedDataParallel(net, device_ids=[local])
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(net)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    markers = []
    x = torch.randn(args.batch, args.width, device=device)
    for _ in range(args.steps):
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        markers.append(time.monotonic_ns())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"markers.rank{rank}.json").write_text(json.dumps({"mode": args.mode, "steps": markers}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
