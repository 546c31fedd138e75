"""A 2-rank NCCL job with one injected fault, for hang localization on real GPUs.
Started by bench/gpu/e2e_driver.py without torchrun (torchrun would tear the
job down the moment a worker dies, before any threshold passes); RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the driver.

Each step: a matmul, one all-reduce of a 16 MiB float32 buffer on the default group (the only
collectives the job issues, so the op index of step N is N), then torch.cuda.synchronize()
(a loss.item() in real training). At step --at, rank --fault-rank does the fault:
  skip      never calls that all-reduce; waits in host code until the driver kills it
  sleep     time.sleep(--sleep-s) first, then calls it (the hang resolves by itself)
  kill      synchronizes, then SIGKILLs itself
  mismatch  calls broadcast(src=0) on the same buffer where the peer calls all_reduce
  mismatch_count  calls all_reduce on twice as many elements as the peer
  p2p_skip  with --p2p (every step, after the all-reduce, rank 1 sends a 1 MiB activation to
            rank 0, as one pipeline stage to the next): never sends that step's activation
            and waits in host code, so rank 0 waits in its Recv
Every rank appends JSON lines to <events>/rank<R>.jsonl with CLOCK_MONOTONIC: start (with
the default group's `<group_desc>:<group_name>`), enqueue (just before each collective call),
fault, done.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist


class Events:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - one line per write, kept open

    def __call__(self, ev: str, **kw) -> None:
        self.f.write(json.dumps({"ev": ev, "mono_ns": time.monotonic_ns(), **kw}) + "\n")
        self.f.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--fault",
        choices=["none", "skip", "sleep", "kill", "mismatch", "mismatch_count", "p2p_skip"],
    )
    ap.add_argument("--p2p", action="store_true", help="a Send/Recv after every all-reduce")
    ap.add_argument("--at", type=int, default=20)
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--sleep-s", type=float, default=13.0)
    ap.add_argument("--events", required=True)
    args = ap.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    ev = Events(Path(args.events) / f"rank{rank}.jsonl")
    if os.environ.get("E2E_CPU"):  # dry run without GPUs (gloo)
        device = torch.device("cpu")
        dist.init_process_group("gloo")
        torch.cuda.synchronize = lambda: None
    else:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    pg = dist.group.WORLD
    ev("start", pid=os.getpid(), rank=rank, group=f"{pg.group_desc}:{pg.group_name}")
    buf = torch.ones(4 << 20, device=device)
    a = torch.randn(2048, 2048, device=device)
    act = torch.ones(256 << 10, device=device)  # 1 MiB: a pipeline stage's activation
    for step in range(args.steps):
        a = torch.tanh(a @ a)
        if rank == args.fault_rank and step == args.at and args.fault != "none":
            if args.fault == "skip":
                ev("fault", kind="skip", op_index=step)
                torch.cuda.synchronize()
                while True:  # host code, outside NCCL, until the driver kills it
                    time.sleep(0.05)
            elif args.fault == "sleep":
                ev("fault", kind="sleep", op_index=step, seconds=args.sleep_s)
                time.sleep(args.sleep_s)
            elif args.fault == "kill":
                torch.cuda.synchronize()
                ev("fault", kind="kill", op_index=step)
                os.kill(os.getpid(), signal.SIGKILL)
            elif args.fault == "mismatch":
                ev("fault", kind="mismatch", op_index=step, func="Broadcast")
                ev("enqueue", op_index=step, func="Broadcast")
                dist.broadcast(buf, src=0)
                torch.cuda.synchronize()
                ev("completed", op_index=step)
                continue
            elif args.fault == "mismatch_count":
                big = torch.ones(8 << 20, device=device)
                ev("fault", kind="mismatch_count", op_index=step, count=big.numel())
                ev("enqueue", op_index=step, func="AllReduce", count=big.numel())
                dist.all_reduce(big)
                torch.cuda.synchronize()
                ev("completed", op_index=step)
                continue
        ev("enqueue", op_index=step, func="AllReduce")
        dist.all_reduce(buf)
        if args.p2p or args.fault == "p2p_skip":
            if rank == args.fault_rank and step == args.at and args.fault == "p2p_skip":
                ev("fault", kind="p2p_skip", p2p_index=step)
                torch.cuda.synchronize()
                while True:  # host code, outside NCCL, until the driver kills it
                    time.sleep(0.05)
            if rank == 1:
                dist.send(act, dst=0)
            else:
                ev("enqueue", p2p_index=step, func="Recv")
                dist.recv(act, src=1)
        torch.cuda.synchronize()
        buf.fill_(1.0)
    ev("done")
    dist.destroy_process_group()
    ev("exit")


if __name__ == "__main__":
    main()
