"""PyTorch + NCCL with the CommInsight plugin: do the sealed logs hold exactly the all-reduces
the job issued, with GPU timings?

Launch (on the GPU machine; the plugin built by `make build-profiler`):

    COMMINSIGHT_HOME=$(mktemp -d) COMMINSIGHT_AGENT_AUTOSTART=0 \
    NCCL_PROFILER_PLUGIN=$PWD/dist/libnccl-profiler-comminsight.so \
    torchrun --standalone --nproc_per_node=2 bench/gpu/torch_allreduce_check.py \
        --iters 200 --out /tmp/torchcheck

Each rank: init_process_group("nccl", device_id=its GPU), N all-reduces (float32, sum) of each
size in --sizes, one correctness all-reduce per size, one dist.barrier(), then
destroy_process_group (the plugin finalizes and seals its segments). Each rank writes
<out>/done.rank<R>.json with what it issued. Rank 0 then waits for every rank's marker and
sealed segments and reads all of COMMINSIGHT_HOME/inspector_logs with the standard library only
(bench/gpu/ci_logs.py): seals (record_count, byte_count, zlib.crc32), AllReduce op lines per
rank and communicator against what was issued, GPU timing (kernel_gpu, gpu stop >= start,
exec time > 0 for sizes >= 1 MiB), coll_sn contiguity, gaps. Anything PyTorch issues on its
own (the barrier's all-reduce, other communicators) is reported, not hidden.

Prints JSON lines {"bench":"gpu_torch_records","metric",...} and writes them to
<out>/torch_records.jsonl. `--verify-only` repeats the check after torchrun has exited (no torch
needed): every process has exited by then, so every segment must be sealed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import ci_logs  # bench/gpu/ci_logs.py: the script's own directory is on sys.path

BENCH = "gpu_torch_records"
DEFAULT_SIZES = "8,65536,1048576,16777216"
BIG_BYTES = 1 << 20
ROOT = Path(__file__).resolve().parent.parent.parent


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200, help="all-reduces per size")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="message sizes in bytes, comma list")
    ap.add_argument("--out", type=Path, required=True, help="markers and torch_records.jsonl")
    ap.add_argument("--wait-s", type=float, default=60.0, help="rank 0's wait for the others")
    ap.add_argument("--verify-only", action="store_true", help="only check, after torchrun")
    ap.add_argument("--world", type=int, default=0, help="ranks to expect with --verify-only")
    return ap.parse_args()


# ---- the job (every rank) ----


def run_rank(args: argparse.Namespace, home: Path) -> dict:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    sizes = [int(s) for s in args.sizes.split(",") if s]
    (args.out / f"done.rank{rank}.json").unlink(missing_ok=True)  # from an earlier run
    logdir = home / "inspector_logs"
    if logdir.exists() and any(logdir.iterdir()):
        # Checked before init_process_group: no rank's plugin can have written yet.
        raise SystemExit(f"{logdir} is not empty: give this check a fresh COMMINSIGHT_HOME")

    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=dev)
    issued: Counter[int] = Counter()  # message bytes -> all-reduces issued by this script
    us_per_call = {}
    check_ok = True
    want = float(world * (world + 1) // 2)
    for size in sizes:
        n = max(1, size // 4)
        t = torch.zeros(n, dtype=torch.float32, device=dev)
        dist.all_reduce(t)  # warm-up, counted like every other
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        us_per_call[str(n * 4)] = round((time.perf_counter() - t0) * 1e6 / args.iters, 3)
        t.fill_(float(rank + 1))
        dist.all_reduce(t)  # correctness: every element must be 1 + 2 + ... + world
        check_ok = check_ok and bool(torch.all(t == want).item())
        issued[n * 4] += args.iters + 2
    torch.cuda.synchronize()
    dist.barrier()  # PyTorch's own collective: counted as "barriers", reported as extra
    torch.cuda.synchronize()
    dist.destroy_process_group()
    marker = {
        "rank": rank,
        "local_rank": local_rank,
        "world": world,
        "pid": os.getpid(),
        "issued_allreduce_by_size": {str(k): v for k, v in sorted(issued.items())},
        "issued_allreduce": sum(issued.values()),
        "barriers": 1,
        "check_ok": check_ok,
        "us_per_call": us_per_call,
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
    }
    tmp = args.out / f".done.rank{rank}.json.tmp"
    tmp.write_text(json.dumps(marker))
    tmp.rename(args.out / f"done.rank{rank}.json")
    return marker


# ---- the check (rank 0, or --verify-only) ----


class Emitter:
    def __init__(self, path: Path) -> None:
        self.fh = path.open("w")
        self.failures: list[str] = []

    def __call__(self, metric: str, value: object, unit: str, **extra: object) -> None:
        line = {"bench": BENCH, "metric": metric, "value": value, "unit": unit, **extra}
        text = json.dumps(line, separators=(",", ":"))
        print(text, flush=True)
        self.fh.write(text + "\n")
        self.fh.flush()

    def check(self, metric: str, ok: bool, **extra: object) -> None:
        if not ok:
            self.failures.append(metric)
        self(metric, bool(ok), "bool", **extra)


def wait_for_markers(out: Path, world: int, wait_s: float) -> list[dict]:
    deadline = time.monotonic() + wait_s
    while True:
        found = sorted(out.glob("done.rank*.json"))
        if len(found) >= world or time.monotonic() > deadline:
            return [json.loads(p.read_text()) for p in found]
        time.sleep(0.2)


def wait_for_seals(home: Path, pids: set[int], wait_s: float) -> ci_logs.LogSummary:
    """Until every marked process has a sealed segment and no .partial is left (or time)."""
    deadline = time.monotonic() + wait_s
    while True:
        summary = ci_logs.read_home(home)
        sealed_pids = {p.pid for p in summary.processes.values() if p.segments_sealed}
        if (summary.unsealed == 0 and pids <= sealed_pids) or time.monotonic() > deadline:
            return summary
        time.sleep(0.5)


def verify(args: argparse.Namespace, home: Path, world: int, stage: str) -> int:
    emit = Emitter(args.out / ("torch_records.jsonl" if stage == "in_job" else "verify.jsonl"))
    markers = wait_for_markers(args.out, world, args.wait_s)
    emit("stage", stage, "", home=str(home))
    emit.check("all_ranks_finished", len(markers) == world, ranks=len(markers), world=world)
    if markers:
        m0 = markers[0]
        emit("versions", f"torch {m0['torch']} nccl {m0['nccl']}", "")
    pids = {m["pid"] for m in markers}
    summary = wait_for_seals(home, pids, 30.0 if stage == "in_job" else 0.0)
    seg = ci_logs.summary_report(summary)
    emit.check(
        "segments_sealed_and_verified",
        summary.seals_ok,
        sealed_ok=seg["sealed_ok"],
        unsealed=seg["unsealed"],
        seal_failures=seg["seal_failures"],
        segment_index_problems=seg["segment_index_problems"],
    )
    emit.check("no_lost_records", summary.lost_records == 0, gap_lines=summary.gap_lines)
    emit("line_kinds", dict(summary.kinds), "lines", bad_lines=summary.bad_lines)
    for p in seg["processes"]:
        emit(
            f"process_rank{p['global_rank']}",
            p["pid"],
            "pid",
            comm_init=p["comm_init"],
            comm_finalize=p["comm_finalize"],
            profiler_abi=p["profiler_abi"],
            segments_sealed=p["segments_sealed"],
        )

    for m in sorted(markers, key=lambda m: m["rank"]):
        r = m["rank"]
        emit.check(f"allreduce_values_correct_rank{r}", m["check_ok"])
        for size, us in m["us_per_call"].items():
            emit(f"torch_us_per_allreduce_rank{r}_{size}B", us, "us")
        comms = [cs for cs in summary.comms.values() if m["pid"] in cs.pids]
        emit(
            f"communicators_rank{r}",
            len(comms),
            "comms",
            comms=[ci_logs.comm_report(cs) for cs in comms],
        )
        if not comms:
            emit.check(f"records_match_rank{r}", False, reason="no op lines for this pid")
            continue
        # The main communicator: the world-sized one carrying the most all-reduces.
        main = max(comms, key=lambda cs: (cs.n_ranks == m["world"], cs.allreduce))
        want = {int(k): v for k, v in m["issued_allreduce_by_size"].items()}
        got = dict(main.allreduce_by_size)
        per_size = {str(s): {"issued": n, "records": got.get(s, 0)} for s, n in want.items()}
        extra = {str(s): n for s, n in got.items() if s not in want}
        sizes_match = all(got.get(s, 0) == n for s, n in want.items())
        emit(
            f"allreduce_issued_rank{r}",
            m["issued_allreduce"],
            "ops",
            barriers_issued=m["barriers"],
        )
        emit(
            f"allreduce_records_main_comm_rank{r}",
            main.allreduce,
            "records",
            comm_id=main.comm_id,
            comm_rank=main.rank,
            per_size=per_size,
            extra_by_size=extra,
            all_comms=sum(cs.allreduce for cs in comms),
        )
        emit.check(f"records_match_issued_rank{r}", sizes_match, per_size=per_size)
        n_extra = sum(extra.values())
        emit.check(
            f"extra_allreduce_records_equal_barriers_rank{r}",
            n_extra == m["barriers"],
            extra=n_extra,
            barriers=m["barriers"],
            extra_by_size_dtype={
                k: v
                for k, v in ci_logs.comm_report(main)["allreduce_by_size_dtype"].items()
                if int(k.split(":")[0]) not in want
            },
        )
        others = {f: n for f, n in main.colls.items() if f != "AllReduce"}
        emit("other_colls_main_comm_rank" + str(r), sum(others.values()), "ops", colls=others)
        emit.check(
            f"kernel_gpu_all_rank{r}",
            main.kernel_gpu == main.allreduce,
            kernel_gpu=main.kernel_gpu,
            of=main.allreduce,
            timing_source=dict(main.timing_source),
        )
        emit.check(
            f"gpu_stop_ge_start_rank{r}",
            main.gpu_stop_before_start == 0 and main.gpu_times_present == main.allreduce,
            violations=main.gpu_stop_before_start,
            with_gpu_times=main.gpu_times_present,
        )
        big_zero = {str(s): n for s, n in main.exec_zero.items() if s >= BIG_BYTES}
        emit.check(
            f"exec_time_positive_big_sizes_rank{r}",
            not big_zero,
            zero_by_size=big_zero,
            exec_us_by_size=main.exec_report(),
        )
        emit.check(
            f"coll_sn_contiguous_rank{r}",
            main.coll_sn_contiguous(),
            coll_sn=main.coll_sn_report(),
        )
        emit(
            f"channels_short_rank{r}",
            main.channels_short,
            "records",
            forced_complete=main.forced_complete,
        )
    emit("all_checks_pass", not emit.failures, "bool", failures=emit.failures)
    return 0 if not emit.failures else 1


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    home = Path(os.environ.get("COMMINSIGHT_HOME", ""))
    if not os.environ.get("COMMINSIGHT_HOME"):
        print("torch_allreduce_check: set COMMINSIGHT_HOME (a fresh directory)", file=sys.stderr)
        return 2
    if args.verify_only:
        world = args.world or len(list(args.out.glob("done.rank*.json")))
        return verify(args, home, world, "after_exit")
    if not os.environ.get("NCCL_PROFILER_PLUGIN"):
        plugin = ROOT / "dist" / "libnccl-profiler-comminsight.so"
        os.environ["NCCL_PROFILER_PLUGIN"] = str(plugin)  # read by NCCL at communicator init
    os.environ.setdefault("COMMINSIGHT_AGENT_AUTOSTART", "0")
    # NVLink multicast stays off on the shared GPU machines, whatever the caller set.
    os.environ.update(
        NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1"
    )
    marker = run_rank(args, home)
    if marker["rank"] != 0:
        return 0
    return verify(args, home, marker["world"], "in_job")


if __name__ == "__main__":
    sys.exit(main())
