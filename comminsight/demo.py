"""`comminsight demo`: the pipeline that exists so far, end to end, on an embedded default.

1. A simulated 8-rank tensor+pipeline+data-parallel training run (2 nodes x 4 ranks, 3 steps)
   drives the real Profiler plugin through NCCL's ABI; the demo verifies every sealed
   inspector_logs segment and prints what each rank recorded.
2. The same run with rank 1 skipping an all-reduce: the other ranks hang, and each one's
   Profiler watchdog writes hang evidence, which the demo prints.
The Agent (API, metrics, cross-rank verdicts) and the Semantic Engine are not built yet; the
demo says so rather than pretending. Files stay under var/demo/ for inspection.
"""

from __future__ import annotations

import shutil
import statistics
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from comminsight.log_segments import segments_in, verify_segment
from comminsight.sim import SimConfig, parse_fault, run_simulation
from comminsight_gen.models.inspector_log_v1 import CiColl, CiHangEvidence, CiP2p, CiSegmentStart

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
DEMO_DIR = ROOT / "var" / "demo"
SETTINGS = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),  # a demo leaves no Agent daemon running behind it
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "100"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "1"),
)


def simulate(home: Path, faults: tuple = ()) -> object:
    shutil.rmtree(home, ignore_errors=True)
    config = SimConfig(
        plugin=str(PLUGIN),
        home=str(home),
        workload="tp-pp-dp",
        ranks=8,
        nodes=2,
        steps=3,
        time_scale=0.05,
        hang_hold_s=2.0,
        faults=faults,
        env=SETTINGS,
    )
    return run_simulation(config)


def read_logs(home: Path) -> dict[int, list]:
    by_rank: dict[int, list] = defaultdict(list)
    for path in segments_in(home / "inspector_logs"):
        segment = verify_segment(path)  # line count, byte count and CRC-32 of the seal
        start = segment.records[0].ci
        rank = start.process.global_rank if isinstance(start, CiSegmentStart) else -1
        by_rank[rank] += segment.records
    return by_rank


def healthy_run(console: Console) -> bool:
    home = DEMO_DIR / "healthy"
    console.rule("1. simulated TP+PP+DP training through the Profiler")
    result = simulate(home)
    if result.errors:
        console.print(f"[red]simulation failed:[/red] {result.errors}")
        return False
    logs = read_logs(home)
    table = Table(
        title=f"what the Profiler recorded ({len(segments_in(home / 'inspector_logs'))} "
        "sealed segments, all verified)"
    )
    for column in ("rank", "collectives", "p2p", "GiB moved", "median busbw GB/s", "GPU-timed"):
        table.add_column(column, justify="right")
    for rank in sorted(logs):
        colls = [r for r in logs[rank] if isinstance(r.ci, CiColl)]
        p2ps = [r for r in logs[rank] if isinstance(r.ci, CiP2p)]
        busbw = [
            r.coll_perf.coll_busbw_gbs
            for r in colls
            if isinstance(r.coll_perf.coll_busbw_gbs, float)
        ]
        moved = sum(r.coll_perf.coll_msg_size_bytes for r in colls) + sum(
            r.p2p_perf.p2p_msg_size_bytes for r in p2ps
        )
        timed = sum(r.coll_perf.coll_timing_source == "kernel_gpu" for r in colls)
        table.add_row(
            str(rank),
            str(len(colls)),
            str(len(p2ps)),
            f"{moved / 2**30:.2f}",
            f"{statistics.median(busbw):.1f}" if busbw else "-",
            f"{timed}/{len(colls)}",
        )
    console.print(table)
    console.print(f"logs: {home / 'inspector_logs'}   ground truth: {result.run_dir}")
    return True


def hang_run(console: Console) -> bool:
    home = DEMO_DIR / "hang"
    console.rule("2. the same run, rank 1 skips its 6th tensor-parallel all-reduce")
    result = simulate(home, faults=(parse_fault("skip:rank=1,op=5,comm=tp"),))
    logs = read_logs(home)
    evidence = [
        (rank, r.ci)
        for rank in sorted(logs)
        for r in logs[rank]
        if isinstance(r.ci, CiHangEvidence)
    ]
    if not evidence:
        console.print(
            f"[red]no hang evidence was written[/red] (simulation: {result.abort_reason}, "
            f"{result.errors})"
        )
        return False
    table = Table(title="hang evidence written by each rank's Profiler watchdog")
    for column in (
        "rank",
        "communicator",
        "op",
        "seq",
        "op index",
        "waiting for",
        "channels started",
    ):
        table.add_column(column)
    for rank, h in evidence:
        table.add_row(
            str(rank),
            h.comm_name or h.comm_id,
            h.func,
            str(h.seq),
            str(h.op_index),
            f"{h.age_ns / 1e9:.1f} s",
            f"{h.channels_started}/{h.n_channels}",
        )
    console.print(table)
    flagged = sorted({rank for rank, _ in evidence})
    console.print(
        f"ranks {flagged} report a stuck op; rank 1, which never issued it, reports none. "
        "Naming the culprit across ranks is the Agent's job (not built yet)."
    )
    console.print(f"logs: {home / 'inspector_logs'}")
    return True


def run(console: Console) -> int:
    if not PLUGIN.exists():
        console.print(f"[red]{PLUGIN} is missing: run `make build-profiler` (make demo does)[/red]")
        return 2
    ok = healthy_run(console) and hang_run(console)
    console.rule()
    console.print(
        "Not built yet, so not run: the Agent (HTTP API, Prometheus metrics, cross-rank hang "
        "verdicts, archives), the Semantic Engine (step recovery) and Inject."
    )
    return 0 if ok else 1
