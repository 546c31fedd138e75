"""One master Agent fed by simulated slaves over real gRPC: master CPU and memory per node, and
the time from an injected fault to the master's verdict.

The master is a real `comminsight-agent` process (COMMINSIGHT_AGENT_MODE=master, its own home).
This process plays N slaves, one gRPC connection and session each, through the generated
agent-master-slave messages: every node has 8 ranks, each in the job-wide world communicator
(N*8 ranks) and in its node's 8-rank communicator. Every report interval each slave sends one
batch with the rows that a training node changes in that time (8 process rows, whose heartbeat
moves, and 16 progress rows, whose counters move), as a real slave's RowDiff would.

After a warm-up, master CPU (utime+stime from /proc) is measured over a steady window; its RSS
is read before any slave registers and at the end. Then one rank on one node stops joining
ops while every other rank enqueues the next collective: the verdict time is from that batch
to the first hang report naming that rank and node at /api/v1/hangs (the hang threshold is
included; it is printed too).

    .venv/bin/python bench/master_scale.py [--nodes 64 256] [--seconds 10] [--profile DIR]
        [--report-interval-s 0.5]

--profile runs the master under cProfile and writes DIR/master-<nodes>.prof (its CPU figures
then include the profiler's overhead: use it to find the hot spots, not for the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import httpx

from comminsight_client import Client
from comminsight_client.api.hangs import list_hangs
from comminsight_client.api.health import get_health
from comminsight_client.models import HangReportList, Health
from comminsight_client.types import Unset
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.agent_master_slave.v1.agent_master_slave_pb2_grpc import AgentMasterStub

TOKEN = "bench-token"
RANKS_PER_NODE = 8
REPORT_S = 0.5  # COMMINSIGHT_AGENT_REPORT_INTERVAL_MS's default
THRESHOLD_S = 1.0
STREAM = "/comminsight.agent_master_slave.v1.AgentMaster/StreamNodeState"
WORLD = 0xABCDEF0000000001


def emit(metric: str, value: float, unit: str, **extra) -> None:
    line = {"bench": "master_scale", "metric": metric, "value": value, "unit": unit, **extra}
    print(json.dumps(line), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def job_ops(fault: dict) -> int:
    """Collectives every rank has completed: one per report interval since the job began."""
    return 1 + int((time.monotonic() - fault["t0"]) / REPORT_S)


class SimSlave:
    """One node: 8 ranks, their world and node communicators, progressing one op per batch."""

    def __init__(self, index: int, nodes: int, grpc_addr: str) -> None:
        self.index = index
        self.name = f"node-{index:05d}"
        self.nranks = nodes * RANKS_PER_NODE
        self.channel = grpc.aio.insecure_channel(grpc_addr)
        self.stub = AgentMasterStub(self.channel)
        self.metadata = (("authorization", f"Bearer {TOKEN}"),)
        self.ops = 0  # collectives completed on every rank so far
        self.stuck_rank: int | None = None  # global rank that stopped joining
        self.seq = 0
        self.pid0 = 100_000 + index * RANKS_PER_NODE
        self.node_comm = 0x1000_0000_0000_0000 + index
        self.started_mono = time.monotonic_ns()
        self.started_real = time.time_ns()

    def clock(self) -> pb.ClockSample:
        return pb.ClockSample(mono_ns=time.monotonic_ns(), real_ns=time.time_ns())

    def processes(self) -> list[pb.ProcessInfo]:
        now = time.monotonic_ns()
        out = []
        for local in range(RANKS_PER_NODE):
            rank = self.index * RANKS_PER_NODE + local
            out.append(
                pb.ProcessInfo(
                    pid=self.pid0 + local,
                    ingest_state=pb.INGEST_STATE_ACTIVE,
                    alive=True,
                    heartbeat_mono_ns=now,
                    heartbeat_real_ns=time.time_ns(),
                    global_rank=rank,
                    local_rank=local,
                    world_size=self.nranks,
                    cuda_device=local,
                    process_name="python train.py",
                    started_real_ns=self.started_real,
                    started_mono_ns=self.started_mono,
                    records_read_total=self.ops * 2,
                )
            )
        return out

    def members(self) -> list[pb.CommunicatorMember]:
        out = []
        for local in range(RANKS_PER_NODE):
            rank = self.index * RANKS_PER_NODE + local
            for comm, comm_rank, n, name in (
                (WORLD, rank, self.nranks, "default_pg:0"),
                (self.node_comm, local, RANKS_PER_NODE, f"tp:{self.index}"),
            ):
                out.append(
                    pb.CommunicatorMember(
                        comm_id=comm,
                        pid=self.pid0 + local,
                        generation=1,
                        comm_rank=comm_rank,
                        nranks=n,
                        nnodes=n // RANKS_PER_NODE,
                        name=name,
                        name_source=pb.NAME_SOURCE_INJECT,
                        init_real_ns=self.started_real,
                        init_mono_ns=self.started_mono,
                    )
                )
        return out

    def progress(self, fault_at: int | None) -> list[pb.CommProgress]:
        now = time.monotonic_ns()
        out = []
        for local in range(RANKS_PER_NODE):
            rank = self.index * RANKS_PER_NODE + local
            for comm, comm_rank in ((WORLD, rank), (self.node_comm, local)):
                done = self.ops
                row = pb.CommProgress(
                    comm_id=comm,
                    pid=self.pid0 + local,
                    generation=1,
                    comm_rank=comm_rank,
                    collectives=pb.StageCounters(
                        enqueued=done,
                        enqueued_mono_ns=now,
                        gpu_started=done,
                        gpu_started_mono_ns=now,
                        completed=done,
                        completed_mono_ns=now,
                    ),
                    ops_completed_total=done,
                    bytes_completed_total=done * (1 << 20),
                )
                if fault_at is not None and comm == WORLD and rank != self.stuck_rank:
                    # every other rank enqueued op `done` and waits in it
                    row.collectives.enqueued = done + 1
                    row.collectives.enqueued_mono_ns = fault_at
                    row.inflight_count = 1
                    row.oldest_inflight.CopyFrom(
                        pb.InflightOp(
                            seq=done,
                            op_index=done,
                            kind=pb.OP_KIND_COLL,
                            func="AllReduce",
                            datatype="ncclFloat32",
                            count=1 << 18,
                            size_bytes=1 << 20,
                            enqueued_mono_ns=fault_at,
                            gpu_started_mono_ns=fault_at,
                            channels_started=8,
                            n_channels=8,
                        )
                    )
                out.append(row)
        return out

    async def register(self) -> int:
        epoch = secrets.randbits(64) | 1
        response = await self.stub.Register(
            pb.RegisterRequest(
                protocol_version=1,
                node=pb.NodeIdentity(node_name=self.name, host=self.name, agent_version="bench"),
                stream_epoch=epoch,
                clock=self.clock(),
            ),
            metadata=self.metadata,
            timeout=30,
        )
        return response.session_id

    async def run(self, stop: asyncio.Event, fault: dict) -> None:
        session = await self.register()
        call = self.channel.stream_stream(
            STREAM, request_serializer=None, response_deserializer=pb.BatchAck.FromString
        )(metadata=self.metadata)

        async def drain():
            while await call.read() is not grpc.aio.EOF:
                pass

        reader = asyncio.ensure_future(drain())
        first = True
        await asyncio.sleep(REPORT_S * (self.index % 97) / 97)  # slaves are not in lockstep
        while not stop.is_set():
            fault_at = fault.get("at_mono_ns")
            # every rank of the job at the same op count, as in a real job: the job's op
            # clock, not this slave's batch count (a loaded event loop sends unevenly, and
            # ranks that disagree on the op they wait in are no "rank not joined" fault)
            self.ops = fault["ops"] if fault_at is not None else job_ops(fault)
            self.seq += 1
            batch = pb.NodeStateBatch(
                session_id=session,
                batch_seq=self.seq,
                clock=self.clock(),
                full_state=first,
                full_state_last=first,
                processes=self.processes(),
                communicators=self.members() if first else [],
                progress=self.progress(fault_at),
            )
            first = False
            await call.write(batch.SerializeToString())
            fault["batches"] = fault.get("batches", 0) + 1
            if fault_at is not None:
                fault.setdefault("sent", set()).add(self.index)
            try:
                await asyncio.wait_for(stop.wait(), timeout=REPORT_S)
            except TimeoutError:
                pass
        await call.done_writing()
        reader.cancel()
        await self.channel.close()


def start_master(home: Path, api: str, grpc_addr: str, profile: Path | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.update(
        COMMINSIGHT_HOME=str(home),
        COMMINSIGHT_AGENT_MODE="master",
        COMMINSIGHT_AGENT_NODE_NAME="master",
        COMMINSIGHT_AGENT_LISTEN=api,
        COMMINSIGHT_AGENT_MASTER_LISTEN=grpc_addr,
        COMMINSIGHT_AGENT_TOKEN=TOKEN,
        COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=str(THRESHOLD_S),
        COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS="10000",
        COMMINSIGHT_AGENT_LOG_LEVEL="error",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
    )
    command = [sys.executable, "-m", "comminsight.agent.main"]
    if profile is not None:
        command[1:1] = ["-m", "cProfile", "-o", str(profile)]
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(home / "master.log", "w"),  # noqa: SIM115
    )


def wait_api(api: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{api}/api/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("the master did not come up")


async def measure(nodes: int, seconds: float, profile_dir: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="master-scale-") as tmp:
        home = Path(tmp)
        api, grpc_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        profile = profile_dir / f"master-{nodes}.prof" if profile_dir else None
        master = start_master(home, api, grpc_addr, profile)
        try:
            wait_api(api)
            rss0 = proc_rss_bytes(master.pid)
            stop, fault = asyncio.Event(), {"t0": time.monotonic()}
            slaves = [SimSlave(i, nodes, grpc_addr) for i in range(nodes)]
            culprit = slaves[nodes // 2]
            culprit.stuck_rank = culprit.index * RANKS_PER_NODE + 3
            tasks = [asyncio.ensure_future(s.run(stop, fault)) for s in slaves]
            await asyncio.sleep(max(3.0, 2 * REPORT_S + nodes / 200))  # registered, warm
            cpu0, t0, sent0 = proc_cpu_s(master.pid), time.monotonic(), fault.get("batches", 0)
            await asyncio.sleep(seconds)
            window = time.monotonic() - t0
            cpu = (proc_cpu_s(master.pid) - cpu0) / window
            batch_rate = (fault.get("batches", 0) - sent0) / window
            with Client(base_url=f"http://{api}", timeout=httpx.Timeout(30)) as c:
                health = get_health.sync(client=c)
            if not isinstance(health, Health):
                raise SystemExit(f"the master serves no health: {health!r}")
            rss1 = proc_rss_bytes(master.pid)
            fault["ops"] = job_ops(fault)
            fault["at_mono_ns"] = time.monotonic_ns()
            verdict_s = await wait_verdict(api, culprit, fault)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            master.send_signal(signal.SIGTERM)
            master.wait(30)
    ranks = nodes * RANKS_PER_NODE
    tag = {"nodes": nodes, "ranks": ranks, "report_interval_s": REPORT_S}
    emit("nodes_connected", health.nodes_connected - 1, "nodes", **tag)
    emit("master_cpu", round(cpu * 100, 2), "percent_of_a_core", **tag)
    emit("master_cpu_per_node", round(cpu * 100 / nodes, 4), "percent_of_a_core", **tag)
    emit("master_rss", round(rss1 / 2**20, 1), "MiB", **tag)
    emit("master_rss_per_node", round((rss1 - rss0) / nodes / 1024, 1), "KiB", **tag)
    # sent by this process in the CPU window (nominal: nodes / REPORT_S); below nominal, the
    # feeder, not the master, was the limit
    emit("batches_per_s", round(batch_rate, 1), "batches/s", nominal=nodes / REPORT_S, **tag)
    emit("fault_to_verdict", round(verdict_s, 3), "s", threshold_s=THRESHOLD_S, **tag)
    emit("verdict_past_threshold", round(verdict_s - THRESHOLD_S, 3), "s", **tag)


async def wait_verdict(api: str, culprit: SimSlave, fault: dict) -> float:
    async with Client(base_url=f"http://{api}", timeout=httpx.Timeout(30)) as client:
        while True:
            page = await list_hangs.asyncio(client=client)
            if not isinstance(page, HangReportList):
                raise SystemExit(f"the master serves no hang reports: {page!r}")
            for report in page.items:
                names = {
                    (None if isinstance(c.global_rank, Unset) else c.global_rank, c.node_name)
                    for c in report.culprits
                }
                if (culprit.stuck_rank, culprit.name) in names:
                    return (time.monotonic_ns() - fault["at_mono_ns"]) / 1e9
            if time.monotonic_ns() - fault["at_mono_ns"] > 120e9:
                seen = [(r.verdict.value, r.summary[:200]) for r in page.items]
                raise SystemExit(
                    f"no verdict within 120 s; {len(fault.get('sent', ()))} slaves sent the "
                    f"fault; open reports: {seen[:5]}"
                )
            await asyncio.sleep(0.05)


def main() -> None:
    global REPORT_S  # the feeder's batch interval, read by every simulated slave
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU measurement window")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the master into DIR")
    parser.add_argument(
        "--report-interval-s",
        type=float,
        default=REPORT_S,
        help="how often each slave sends a batch (COMMINSIGHT_AGENT_REPORT_INTERVAL_MS on "
        "real slaves; the default is its default)",
    )
    args = parser.parse_args()
    REPORT_S = args.report_interval_s
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    for nodes in args.nodes:
        asyncio.run(measure(nodes, args.seconds, args.profile))


if __name__ == "__main__":
    main()
