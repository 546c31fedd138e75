"""Real training with one injected fault, for incidents on real GPUs: 2 ranks, started by
bench/gpu/faults_driver.py without torchrun (torchrun would tear a hung job down or restart
it); RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the driver.

Two jobs:
  ddp  gpt_train.py's GPT under DistributedDataParallel with its gradient all-reduce written
       out as a comm hook (what DDP's default hook does: average each bucket by an async
       all-reduce), then the optimizer step and the usual logging of the loss averaged over
       the ranks (a 1-element all-reduce, then .item()).
  pp   the same GPT cut in two pipeline stages (pp_train.py's) with explicit send/recv:
       stage 0 (embeddings and the first half of the blocks) sends its activation to
       stage 1 and receives the activation's gradient back; stage 1 (second half, head,
       loss) receives, runs forward and backward, sends the gradient. The activation is
       --pp-batch x --pp-seq x --pp-dim float32 (512 MiB by default: several times what
       the socket buffers between two ranks on one GPU can hold (loopback TCP buffers of up
       to 32 MiB a direction, a few NCCL channels a peer), so that two sends block each
       other as they would over NVLink).

At step --at, rank --fault-rank does the fault (--fault):
  sleep     its data loader stalls: slow_data_loader() sleeps --sleep-s before the forward
            (the frame the rank's Python stack must show)
  skip      its comm hook skips the all-reduce of the step's last bucket and hands DDP the
            local gradient; the rank goes on to its next collective
  extra     it issues one extra 1-element all-reduce before the forward (a stray logging of
            the previous loss on one rank)
  sendsend  (pp; the last stage, rank 1) sends a stale gradient to stage 0 before receiving
            the activation, while stage 0 sends the activation: both send, neither receives
The job picks the pipeline for sendsend and DDP otherwise (--job overrides).

Every rank appends JSON lines to <events>/rank<R>.jsonl with CLOCK_MONOTONIC (the clock of the
profiler's records and of the Agent's incidents): start (the default group's
`<group_desc>:<group_name>`, the job), coll (before every collective the script issues: name,
step, element count and `torch_seq`, the group's count of collectives issued before it), p2p
(before every send/recv: func, peer, count, `p2p_index`), fault (what, where; for sleep the
function, file and line of the sleep), step (after each step's logging sync), done.

`--cpu` runs a tiny model on gloo without GPUs (a dry run of the logic).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_train import GPT  # noqa: E402
from pp_train import First, Last  # noqa: E402

FAULTS = ("none", "sleep", "skip", "extra", "sendsend")


class Events:
    """One JSON line per event, flushed at once: a rank may be SIGKILLed any moment."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - kept open for the run
        self.lock = threading.Lock()  # DDP calls the comm hook from the autograd thread

    def __call__(self, ev: str, **kw) -> None:
        line = json.dumps({"ev": ev, "mono_ns": time.monotonic_ns(), **kw})
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


def torch_seq(group=None) -> int | None:
    """How many collectives the group has issued: the NCCL sequence number of the next one,
    as long as each torch collective is one NCCL collective (it is for those used here)."""
    try:
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        return int(pg._get_sequence_number_for_group())
    except Exception:
        return None


def slow_data_loader(data: torch.Tensor, step: int, seconds: float, ev: Events) -> torch.Tensor:
    """The sleep fault: the batch of this step takes `seconds` to arrive."""
    where = {"function": "slow_data_loader", "file": __file__}
    where["line"] = sys._getframe().f_lineno + 2  # the line of the time.sleep below
    ev("fault", kind="sleep", step=step, seconds=seconds, **where)
    time.sleep(seconds)
    return data[step % data.shape[0]]


def next_batch(data: torch.Tensor, step: int) -> torch.Tensor:
    return data[step % data.shape[0]]


class GradSync:
    """DDP's default comm hook written out: each bucket averaged by one async all-reduce.
    `skip_step`: on this step the last bucket is not all-reduced (the skip fault)."""

    def __init__(self, ev: Events, world: int, skip_step: int | None):
        self.ev, self.world, self.skip_step = ev, world, skip_step
        self.step = 0

    def bucket_ready(self, bucket):
        buf = bucket.buffer()
        if self.step == self.skip_step and bucket.is_last():
            self.ev(
                "fault",
                kind="skip",
                step=self.step,
                bucket=bucket.index(),
                count=buf.numel(),
                torch_seq=torch_seq(),
            )
            done = torch.futures.Future()
            done.set_result(buf)  # DDP takes the local gradient as if it were the average
            return done
        buf.div_(self.world)
        self.ev(
            "coll",
            name=f"bucket{bucket.index()}",
            func="AllReduce",
            step=self.step,
            count=buf.numel(),
            torch_seq=torch_seq(),
        )
        work = dist.all_reduce(buf, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])


def grad_sync_hook(state: GradSync, bucket):
    """The comm hook DDP calls per bucket (DDP wants a function: it logs the hook's name)."""
    return state.bucket_ready(bucket)


def ddp_job(args, rank: int, world: int, device: torch.device, ev: Events) -> None:
    torch.manual_seed(0)
    net = GPT(args.vocab, args.d, args.layers, args.heads, args.seq).to(device)
    net = nn.parallel.DistributedDataParallel(
        net,
        device_ids=None if device.type == "cpu" else [device.index],
        bucket_cap_mb=args.bucket_mb,
    )
    faulty = rank == args.fault_rank
    sync = GradSync(ev, world, args.at if faulty and args.fault == "skip" else None)
    net.register_comm_hook(state=sync, hook=grad_sync_hook)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(rank)
    data = torch.randint(
        0, args.vocab, (16, args.batch, args.seq + 1), device=device, generator=gen
    )
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    last_loss = torch.zeros(1, device=device)
    for step in range(args.steps):
        sync.step = step
        at_fault = faulty and step == args.at
        if at_fault and args.fault == "extra":
            stray = last_loss.clone()
            ev("fault", kind="extra", step=step, count=stray.numel(), torch_seq=torch_seq())
            dist.all_reduce(stray)  # logged on this rank only
        if at_fault and args.fault == "sleep":
            batch = slow_data_loader(data, step, args.sleep_s, ev)
        else:
            batch = next_batch(data, step)
        with amp:
            logits = net(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        avg = loss.detach().reshape(1)
        ev("coll", name="loss", func="AllReduce", step=step, count=1, torch_seq=torch_seq())
        dist.all_reduce(avg)
        last_loss = avg / world
        value = last_loss.item()  # the logging sync
        ev("step", step=step, loss=round(value, 4))


class P2P:
    """send/recv with the stage's p2p count (the communicator's index of the op)."""

    def __init__(self, ev: Events):
        self.ev, self.index = ev, 0

    def send(self, t: torch.Tensor, dst: int, step: int) -> None:
        self.ev("p2p", func="Send", peer=dst, step=step, count=t.numel(), p2p_index=self.index)
        self.index += 1
        dist.send(t, dst)

    def recv(self, t: torch.Tensor, src: int, step: int) -> None:
        self.ev("p2p", func="Recv", peer=src, step=step, count=t.numel(), p2p_index=self.index)
        self.index += 1
        dist.recv(t, src)


def pp_job(args, rank: int, device: torch.device, ev: Events) -> None:
    torch.manual_seed(rank)
    half = max(1, args.pp_layers // 2)
    shape = (args.pp_batch, args.pp_seq, args.pp_dim)
    if rank == 0:
        net = First(args.vocab, args.pp_dim, half, args.heads, args.pp_seq).to(device)
    else:
        net = Last(args.vocab, args.pp_dim, args.pp_layers - half, args.heads).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(0)  # both stages see the same data
    data = torch.randint(
        0, args.vocab, (4, args.pp_batch, args.pp_seq + 1), device=device, generator=gen
    )
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    p2p = P2P(ev)
    act = torch.empty(shape, device=device)  # stage 1: the activation received
    grad = torch.zeros(shape, device=device)  # stage 0: its gradient; stage 1: the last sent
    for step in range(args.steps):
        batch = next_batch(data, step)
        if rank == 0:
            with amp:
                x = net(batch[:, :-1])
            p2p.send(x.detach().float().contiguous(), 1, step)
            p2p.recv(grad, 1, step)
            x.backward(grad)
        else:
            if args.fault == "sendsend" and step == args.at:
                ev("fault", kind="sendsend", step=step, count=grad.numel(), p2p_index=p2p.index)
                p2p.send(grad, 0, step)  # the gradient before the activation: both send
            p2p.recv(act, 0, step)
            x = act.clone().requires_grad_()
            with amp:
                logits = net(x)
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            loss.backward()
            grad.copy_(x.grad)
            p2p.send(grad, 0, step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 1:
            value = loss.item()  # the logging sync
            ev("step", step=step, loss=round(value, 4))
        else:
            if device.type == "cuda":
                torch.cuda.synchronize()
            ev("step", step=step)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--at", type=int, default=8, help="the step of the fault")
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--job", choices=["auto", "ddp", "pp"], default="auto")
    ap.add_argument("--steps", type=int, default=0, help="0: 30 without a fault, else at + 30")
    ap.add_argument("--sleep-s", type=float, default=120.0)
    ap.add_argument("--events", required=True)
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU, tiny model (a dry run)")
    ap.add_argument("--share-gpu", action="store_true", help="as gpt_train.py (auto on 1 GPU)")
    # the DDP job's GPT (bench/gpu/run_steps_jobwide.sh's size)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", "--dim", dest="d", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    # the pipeline: the activation between the stages is pp_batch x pp_seq x pp_dim float32
    ap.add_argument("--pp-layers", type=int, default=2)
    ap.add_argument("--pp-dim", type=int, default=2048)
    ap.add_argument("--pp-seq", type=int, default=1024)
    ap.add_argument("--pp-batch", type=int, default=64)
    args = ap.parse_args(argv)
    if args.job == "auto":
        args.job = "pp" if args.fault == "sendsend" else "ddp"
    if args.fault == "sendsend" and (args.job != "pp" or args.fault_rank != 1):
        ap.error("sendsend is the pipeline's last stage sending first: --job pp, --fault-rank 1")
    if args.fault in ("sleep", "skip", "extra") and args.job != "ddp":
        ap.error(f"{args.fault} is a fault of the DDP job")
    if args.fault_rank not in (0, 1):
        ap.error("--fault-rank is 0 or 1 (a 2-rank job)")
    if args.at < 1:
        ap.error("--at must be >= 1 (DDP rebuilds its buckets after step 0)")
    if args.steps <= 0:
        args.steps = 30 if args.fault == "none" else args.at + 30
    if args.steps <= args.at and args.fault != "none":
        ap.error("--steps must be past --at")
    if args.cpu:
        args.layers, args.d, args.heads, args.seq, args.batch, args.vocab = 2, 64, 4, 16, 2, 128
        args.pp_layers, args.pp_dim, args.pp_seq, args.pp_batch = 2, 64, 16, 2
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world != 2:
        raise SystemExit("fault_train.py is a 2-rank job")
    ev = Events(Path(args.events) / f"rank{rank}.jsonl")
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        if args.share_gpu or torch.cuda.device_count() == 1:
            # NCCL refuses two ranks of one host on one GPU; its host identity is NCCL_HOSTID's
            os.environ["NCCL_HOSTID"] = f"host-{rank}"
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        dist.init_process_group("nccl", device_id=device)
    pg = dist.group.WORLD
    ev(
        "start",
        pid=os.getpid(),
        rank=rank,
        job=args.job,
        fault=args.fault,
        at=args.at,
        fault_rank=args.fault_rank,
        group=f"{pg.group_desc}:{pg.group_name}",
        device=str(device),
        activation_bytes=4 * args.pp_batch * args.pp_seq * args.pp_dim if args.job == "pp" else 0,
    )
    if args.job == "ddp":
        ddp_job(args, rank, world, device, ev)
    else:
        pp_job(args, rank, device, ev)
    ev("done")
    dist.destroy_process_group()
    ev("exit")


if __name__ == "__main__":
    main()
