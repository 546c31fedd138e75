"""`comminsight demo`: the pipeline that exists so far, end to end, on an embedded default.

1. A simulated 8-rank tensor+pipeline+data-parallel training run (2 nodes x 4 ranks, 3 steps)
   drives the real Profiler plugin through NCCL's ABI while a real `comminsight-agent` runs
   for the demo's home; the demo verifies every sealed inspector_logs segment, prints what
   each rank recorded, and shows what the Agent serves (`comminsight status`, `comms`).
2. The same run with rank 1 skipping an all-reduce: the other ranks hang, each one's Profiler
   watchdog writes hang evidence, and the Agent's cross-rank diagnosis names rank 1. The
   reports of every communicator blocked behind it form one incident whose root names rank 1,
   the communicator and the op (`comminsight incidents --tree`, then `--id`).
Along the way the Agent's Semantic Engine recovers the Steps of the healthy run from the op
sequence alone (`comminsight steps`). Files stay under var/demo/ for inspection.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from comminsight.cli import client as cli_client
from comminsight.cli import hangs as cli_hangs
from comminsight.cli import incidents as cli_incidents
from comminsight.cli import node as cli_node
from comminsight.cli import ops as cli_ops
from comminsight.cli import steps as cli_steps
from comminsight.log_segments import segments_in, verify_segment
from comminsight.sim import SimConfig, parse_fault, run_simulation
from comminsight_client import Client
from comminsight_client.api.hangs import list_hangs
from comminsight_client.api.incidents import list_incidents
from comminsight_client.api.steps import list_steps
from comminsight_client.models import (
    HangReportList,
    HangStatusFilter,
    IncidentList,
    IncidentStatusFilter,
    StepPage,
)
from comminsight_gen.models.inspector_log_v1 import CiColl, CiHangEvidence, CiP2p, CiSegmentStart

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
DEMO_DIR = ROOT / "var" / "demo"
SETTINGS = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),  # a demo leaves no Agent daemon running behind it
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "100"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "1"),
)


@contextmanager
def running_agent(home: Path, console: Console) -> Iterator[str]:
    """`comminsight-agent` for this home on a free local port, as a user would run it; its
    log goes to <home>/agent.log. Yields the API's base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.update(
        COMMINSIGHT_HOME=str(home),
        COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{port}",
        COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS="2000",
        COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="1",
    )
    home.mkdir(parents=True, exist_ok=True)
    log = open(home / "agent.log", "w")  # noqa: SIM115 - closed below
    agent = subprocess.Popen(
        [sys.executable, "-m", "comminsight.agent.main"], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent did not start; see {home / 'agent.log'}")
            time.sleep(0.05)
        console.print(f"comminsight-agent (pid {agent.pid}) serves {url}")
        yield url
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        log.close()


def api_client(url: str) -> Client:
    return Client(base_url=url, timeout=httpx.Timeout(5.0))


def wait_for_steps(url: str, expected: int, timeout_s: float = 30.0) -> int:
    """Step summaries the agent serves, once it has all `expected` (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    total = 0
    while time.monotonic() < deadline:
        page = list_steps.sync(client=api_client(url), limit=1)
        total = page.total if isinstance(page, StepPage) else 0
        if total >= expected:
            break
        time.sleep(0.1)
    return total


def show(console: Console, command: str, url: str, **options) -> None:
    """What `comminsight <command> --url URL` prints."""
    flags = "".join(
        f" --{k}" if v is True else f" --{k} {v}"
        for k, v in options.items()
        if k in ("tree", "id") and v not in (None, False)
    )
    console.print(f"[dim]$ comminsight {command}{flags} --url {url}[/dim]")
    args = argparse.Namespace(url=url, json=False, format="table", token=None, **options)
    func = {
        "status": cli_node.status,
        "comms": cli_ops.comms_cmd,
        "hangs": cli_hangs.hangs_cmd,
        "incidents": cli_incidents.incidents_cmd,
        "steps": cli_steps.steps_cmd,
    }
    cli_client.run(func[command], args, console)


def simulate(home: Path, faults: tuple = ()) -> object:
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
    shutil.rmtree(home, ignore_errors=True)
    console.rule("1. simulated TP+PP+DP training through the Profiler, with the Agent")
    with running_agent(home, console) as url:
        result = simulate(home)
        expected = 8 * 4  # ranks x (3 steps + the warm-up step)
        steps = wait_for_steps(url, expected)
        show(console, "status", url)
        show(console, "comms", url, state="all", name=None, full=False, id=None)
        show(console, "steps", url, rank=0, since_step=0, limit=100, logs=None)
        console.print(
            f"the agent's Semantic Engine recovered {steps} of {expected} steps (8 ranks) "
            f"from the op sequence alone; summaries in {home / 'semantics' / 'step'}"
        )
        metrics = httpx.get(f"{url}/metrics", timeout=5).text.count("comminsight_ops_total{")
        console.print(f"{url}/metrics exposed {metrics} comminsight_ops_total series")
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
    shutil.rmtree(home, ignore_errors=True)
    console.rule("2. the same run, rank 1 skips its 6th tensor-parallel all-reduce")
    with running_agent(home, console) as url:
        result = simulate(home, faults=(parse_fault("skip:rank=1,op=5,comm=tp"),))
        # the diagnosis outlives the run: resolved once the communicators were torn down
        client = api_client(url)
        incident_page = list_incidents.sync(client=client, status=IncidentStatusFilter.ALL)
        hang_page = list_hangs.sync(client=client, status=HangStatusFilter.ALL)
        if not isinstance(incident_page, IncidentList) or not isinstance(hang_page, HangReportList):
            console.print(
                f"[red]the Agent did not list its incidents and hangs: {incident_page} "
                f"{hang_page}[/red]"
            )
            return False
        incidents = incident_page.items
        console.print(
            f"the Agent wrote {hang_page.total} hang reports, one per communicator that "
            f"hung; they form {len(incidents)} incident(s), the root cause first:"
        )
        show(console, "incidents", url, status="all", tree=True, id=None, limit=10)
        if incidents:
            show(
                console,
                "incidents",
                url,
                status="all",
                tree=False,
                id=incidents[0].incident_id,
                limit=10,
            )
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
        f"ranks {flagged} report a stuck op; rank 1, which never issued it, reports none: "
        "the Agent's diagnosis across the ranks names it."
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
        f"Everything stays under {DEMO_DIR}: inspector_logs/ (the Profiler's sealed logs), "
        "semantics/step/ (step summaries), metadata/hangs/ (hang reports), metadata/incidents/ "
        "(the reports grouped by cause), archives/ (what "
        "the agent archived). Run `comminsight steps <dir>/inspector_logs` or `comminsight "
        "trace <dir>/inspector_logs -o trace.json` on them; the agent served its API and "
        "/metrics at the URLs printed above while it ran (README: Using the Agent). Real "
        "PyTorch jobs get their process-group names through Inject (README: Using Inject); "
        "several nodes report to one master agent (COMMINSIGHT_AGENT_MODE)."
    )
    return 0 if ok else 1
