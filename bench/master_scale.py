"""A master Agent fed over real gRPC, flat and through relays: CPU and memory of the master and
of a relay, and the time from an injected fault to the master's verdict.

Every simulated node has 8 ranks, each in the job-wide world communicator and in its node's
8-rank communicator. Every report interval each simulated slave sends one batch with the rows
that a training node changes in that time (8 process rows, whose heartbeat moves, and 16
progress rows, whose counters move), as a real slave's RowDiff would. The fault: one rank on
one node stops joining ops while every other rank enqueues the next collective; the verdict
time is from then to the first hang report naming that rank and node at the master's
/api/v1/hangs (the hang threshold is included; it is printed too).

Three tiers, each with real Agent processes (`comminsight.agent.main`, their own homes):
- flat: one master fed by simulated slaves from this process (small sizes).
- relay: one real relay under one real master, fed by simulated slaves in --workers feeder
  processes (a relay is a master toward them). relay_cpu and relay_rss at each size, and the
  verdict through the real relay to the real master.
- master: one real master fed by simulated relays from this process, --tree-nodes nodes under
  --tree-relays relays. Each sends, every report interval, the full state a real relay with
  its share of the nodes would send: its classes, made once by the relay's own rank_classes
  from the rows its nodes would send (healthy, and with the fault), advanced to the job's
  op count and clock at each report, and its subtree node list.
The whole tree (every relay real, with all its slaves) does not fit on a small machine: what
it would cost is printed as a model (tier "tree", `"model": true`, with its inputs), never
as measured.

CPU is utime+stime from /proc over a steady window after a warm-up, in percent of one core;
RSS is read at the end of the window. The measured Agent (the relay in tier relay, else the
master) has a core of its own ("own_core"), everything else shares the rest: the feeders
would otherwise take CPU from it, and its CPU would be what it was given, not what it needs.
The feeders' own CPU is printed too. A relay run the machine did not hold (slaves not all
connected, streams broken, sent below 90 % of the nominal batch rate) says "held": false and
is left out of the model: its figures are those of a machine short of CPU. Whether the relay
applied what it was sent is its own result ("kept_up").

    .venv/bin/python bench/master_scale.py [--tiers flat relay master] [--nodes 64 256]
        [--relay-nodes 250 400 500] [--tree-nodes 12500] [--tree-relays 13] [--workers 2]
        [--seconds 10] [--report-interval-s 0.5] [--profile DIR]

--profile runs the masters and relays under cProfile and writes DIR/<role>-<tier>-<nodes>.prof
(their CPU figures then include the profiler's overhead: use it to find the hot spots, not
for the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import RawValue
from pathlib import Path

import grpc
import httpx

from comminsight.agent.master.job_view import NodeRecord
from comminsight.agent.relay.classes import rank_classes
from comminsight.agent.slave.agent import BATCH_FILL, split_batches
from comminsight.agent.state.node_state import row_key
from comminsight_client import Client
from comminsight_client.api.hangs import list_hangs
from comminsight_client.models import HangReportList
from comminsight_client.types import Unset
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.agent_master_slave.v1.agent_master_slave_pb2_grpc import AgentMasterStub
from comminsight_gen.models import agent_master_api_v1 as api

TOKEN = "bench-token"
RANKS_PER_NODE = 8
THRESHOLD_S = 1.0
STALE_MS = 10_000  # COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS of every Agent here
MAX_BATCH_BYTES = 4 << 20  # COMMINSIGHT_AGENT_MASTER_MAX_BATCH_BYTES's default
VERDICT_WAIT_S = 120
STREAM = "/comminsight.agent_master_slave.v1.AgentMaster/StreamNodeState"
WORLD = 0xABCDEF0000000001
# each simulated slave its own connection, as real slaves on their own hosts (gRPC would
# otherwise share one connection between the channels of a process that dial one address)
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


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


def percent(cpu_s: float, window_s: float) -> float:
    return round(cpu_s / window_s * 100, 2)


def mib(n: int) -> float:
    return round(n / 2**20, 1)


# ---- cores: the measured Agent alone on one -----------------------------------------------

CPUS = sorted(os.sched_getaffinity(0))


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process on `cpus` (Linux sets affinity per thread; threads made
    later inherit their maker's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, FileNotFoundError):  # a thread that ended meanwhile
            pass


def own_core(agent: Agent, others: list[int]) -> bool:
    """The measured Agent alone on the last core; `others` (pids) and this process, with the
    feeders it starts from now on, on the rest. On a small machine the scheduler would
    otherwise share the cores between the Agent and its feeders, and the Agent's CPU would be
    what it was given, not what it needs (a relay starved so falls behind at any CPU
    figure). False, and nothing done, with a single core. all_cores() undoes it here."""
    if len(CPUS) < 2:
        return False
    rest = set(CPUS[:-1])
    pin(agent.pid, {CPUS[-1]})
    for pid in [os.getpid(), *others]:
        pin(pid, rest)
    return True


def all_cores() -> None:
    pin(os.getpid(), set(CPUS))


# ---- the simulated job: its op clock and fault, shared with feeder processes --------------


class JobState:
    """Every rank of the job is at the same op count, as in a real job: one op per report
    interval since t0 (the job's op clock, not a feeder's batch count: a loaded event loop
    sends unevenly, and ranks that disagree on the op they wait in are no "rank not joined"
    fault). The fault freezes the count. Shared memory, so that feeder processes read it.
    time.monotonic is one clock for every process of the machine."""

    def __init__(self, report_s: float) -> None:
        self.report_s = report_s
        self.t0 = time.monotonic()
        self._fault_ops = RawValue(ctypes.c_uint64, 0)
        self._fault_at = RawValue(ctypes.c_uint64, 0)
        self._stopping = RawValue(ctypes.c_bool, False)

    def ops(self) -> int:
        """Collectives every rank has completed."""
        if self._fault_at.value:
            return self._fault_ops.value
        return 1 + int((time.monotonic() - self.t0) / self.report_s)

    def fault_at(self) -> int | None:
        return self._fault_at.value or None

    def inject_fault(self) -> None:
        self._fault_ops.value = self.ops()  # before the time: readers check the time first
        self._fault_at.value = time.monotonic_ns()

    def stopping(self) -> bool:
        return self._stopping.value

    def stop(self) -> None:
        self._stopping.value = True

    async def sleep_until(self, deadline: float) -> None:
        """Until `deadline` (time.monotonic); a sender sees the stop at its next report."""
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))


class FeedCounters:
    """What one feeder (process) did, in shared memory: one writer each, no lock needed."""

    def __init__(self) -> None:
        self.registered = RawValue(ctypes.c_uint64, 0)
        self.batches = RawValue(ctypes.c_uint64, 0)
        self.fault_sent = RawValue(ctypes.c_uint64, 0)  # reports that carried the fault
        self.failed = RawValue(ctypes.c_uint64, 0)  # streams that broke (see Sender.stream)


def total(counters: list[FeedCounters], name: str) -> int:
    return sum(getattr(c, name).value for c in counters)


# ---- one simulated node: its rows -------------------------------------------------------


class SimNode:
    """One node's 8 ranks, their world and node communicators, as its slave's rows."""

    def __init__(self, index: int, nodes: int) -> None:
        self.index = index
        self.name = node_name(index)
        self.nranks = nodes * RANKS_PER_NODE
        self.ops = 0  # collectives completed on every rank so far
        culprit_node, culprit_rank = culprit_of(nodes)
        # the rank that stops joining at the fault, on the culprit's node
        self.stuck_rank = culprit_rank if index == culprit_node else None
        self.pid0 = 100_000 + index * RANKS_PER_NODE
        self.node_comm = 0x1000_0000_0000_0000 + index
        self.started_mono = time.monotonic_ns()
        self.started_real = time.time_ns()

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
                    wait_in(row, done, fault_at)
                out.append(row)
        return out

    def record(self, fault_at: int | None) -> NodeRecord:
        """The node as a relay above it holds it (on the relay's clock: this one)."""
        rec = NodeRecord(
            self.name,
            api.AgentMode.slave,
            offset_ns=0,
            identity=pb.NodeIdentity(node_name=self.name, host=self.name),
            state=api.NodeState.connected,
            has_state=True,
        )
        rec.rows.processes = {p.pid: p for p in self.processes()}
        rec.rows.members = {row_key(m): m for m in self.members()}
        rec.rows.progress = {row_key(g): g for g in self.progress(fault_at)}
        return rec


def wait_in(row: pb.CommProgress, done: int, fault_at: int) -> None:
    """The rank enqueued op `done` at the fault and waits in it."""
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


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def culprit_of(nodes: int) -> tuple[int, int]:
    """(node index, global rank) of the rank that stops joining: one in the middle."""
    node = nodes // 2
    return node, node * RANKS_PER_NODE + 3


async def drain_acks(call) -> None:
    """Reads the receiver's acks (unread, they would stall the stream); the stream's end or
    failure is the writer's to see."""
    try:
        while await call.read() is not grpc.aio.EOF:
            pass
    except grpc.aio.AioRpcError:
        pass


def clock() -> pb.ClockSample:
    return pb.ClockSample(mono_ns=time.monotonic_ns(), real_ns=time.time_ns())


# ---- a simulated sender: registers, then streams a batch every report interval ----------


class Sender:
    """One gRPC session with a master (or relay), as a slave's link holds it."""

    def __init__(self, name: str, relay: bool) -> None:
        self.name = name
        self.relay = relay
        self.metadata = (("authorization", f"Bearer {TOKEN}"),)
        self.session = 0
        self.seq = 0

    def connect(self, grpc_addr: str) -> None:
        self.channel = grpc.aio.insecure_channel(grpc_addr, options=CHANNEL_OPTIONS)
        self.stub = AgentMasterStub(self.channel)

    async def register(self) -> None:
        identity = pb.NodeIdentity(
            node_name=self.name, host=self.name, agent_version="bench", relay=self.relay
        )
        response = await self.stub.Register(
            pb.RegisterRequest(
                protocol_version=1,
                node=identity,
                stream_epoch=secrets.randbits(64) | 1,
                clock=clock(),
            ),
            metadata=self.metadata,
            timeout=60,
        )
        self.session = response.session_id

    async def stream(self, job: JobState, counters: FeedCounters, phase: float) -> None:
        """Registered: reports until the job stops. A stream the receiver ends (or that
        breaks) is counted and this sender stops: no reconnection, so the count shows it."""
        call = self.channel.stream_stream(
            STREAM, request_serializer=None, response_deserializer=pb.BatchAck.FromString
        )(metadata=self.metadata)
        reader = asyncio.ensure_future(drain_acks(call))
        try:
            await self.report(call, job, counters, phase)
            await call.done_writing()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):  # the call ended under it
            counters.failed.value += 1
        finally:
            reader.cancel()
            await self.channel.close()

    async def report(self, call, job: JobState, counters: FeedCounters, phase: float) -> None:
        """A batch (or several) every report interval, `phase` of an interval late (senders
        are not in lockstep). A report timer, as a real slave's: building and sending a
        report does not delay the next one (a busy feeder sends late: batches_per_s)."""
        due = time.monotonic() + job.report_s * phase
        await job.sleep_until(due)
        first = True
        while not job.stopping():
            fault_at = job.fault_at()
            for batch in self.batches(job, first):
                self.seq += 1
                batch.session_id, batch.batch_seq = self.session, self.seq
                batch.clock.CopyFrom(clock())
                await call.write(batch.SerializeToString())
                counters.batches.value += 1
            first = False
            if fault_at is not None:
                counters.fault_sent.value += 1
            due = max(due + job.report_s, time.monotonic())
            await job.sleep_until(due)

    def batches(self, job: JobState, first: bool) -> list[pb.NodeStateBatch]:
        raise NotImplementedError


class SimSlave(Sender):
    """A node's slave: its changed rows every report interval, all rows in the first."""

    def __init__(self, index: int, nodes: int, grpc_addr: str) -> None:
        self.node = SimNode(index, nodes)
        super().__init__(self.node.name, relay=False)
        self.connect(grpc_addr)

    def batches(self, job: JobState, first: bool) -> list[pb.NodeStateBatch]:
        self.node.ops = job.ops()
        batch = pb.NodeStateBatch(
            full_state=first,
            full_state_last=first,
            processes=self.node.processes(),
            communicators=self.node.members() if first else [],
            progress=self.node.progress(job.fault_at()),
        )
        return [batch]

    async def run(self, job: JobState, counters: FeedCounters) -> None:
        await self.register()
        counters.registered.value += 1
        await self.stream(job, counters, phase=(self.node.index % 97) / 97)


# ---- a simulated relay: its classes and node list every report interval ----------------


TEMPLATE_OPS = 100  # the op count a simulated relay's classes are built at


@dataclass
class ClassSet:
    """A relay's classes for one state of its nodes, and the op count they were built at."""

    classes: list[pb.RankClass]
    ops: int

    def advance(self, ops: int, fault_at: int | None) -> None:
        """Moves the classes to op count `ops`, their times to now (a waiting op's to the
        fault), as a real relay's would move between reports."""
        step, self.ops = ops - self.ops, ops
        now, real = time.monotonic_ns(), time.time_ns()
        for rc in self.classes:
            rc.process.heartbeat_mono_ns, rc.process.heartbeat_real_ns = now, real
            rc.process.records_read_total += 2 * step
            g = rc.progress
            stages = g.collectives
            stages.enqueued += step
            stages.gpu_started += step
            stages.completed += step
            stages.gpu_started_mono_ns = stages.completed_mono_ns = now
            g.ops_completed_total += step
            g.bytes_completed_total += step << 20
            if g.HasField("oldest_inflight"):
                op = g.oldest_inflight
                op.seq += step
                op.op_index += step
                stages.enqueued_mono_ns = op.enqueued_mono_ns = op.gpu_started_mono_ns = fault_at
            else:
                stages.enqueued_mono_ns = now


class SimRelay(Sender):
    """A relay with nodes first..first+count-1 below it, as its master sees it: every report
    interval one full state of its classes and subtree nodes. The classes are the relay's
    own reduction (rank_classes) of its nodes' rows, made once healthy (nodes a report apart:
    the later half one op behind) and once with the fault (every rank waiting in the next
    world collective but the culprit), then only advanced (ClassSet.advance): reducing
    every relay's nodes every interval in this process would cost it what all the relays
    cost."""

    def __init__(self, index: int, first: int, count: int, nodes: int) -> None:
        super().__init__(f"relay-{index:02d}", relay=True)
        self.index = index
        sims = [SimNode(i, nodes) for i in range(first, first + count)]
        for s in sims:
            s.ops = TEMPLATE_OPS - 1 if s.index - first >= count // 2 else TEMPLATE_OPS
        self.healthy = self.reduce(sims, None)
        for s in sims:
            s.ops = TEMPLATE_OPS
        self.faulty = self.reduce(sims, time.monotonic_ns())
        self.subtree = [
            pb.SubtreeNode(
                node_name=s.name,
                host=s.name,
                state="connected",
                last_seen_age_ms=int(500 * (s.index % 97) / 97),
                processes=RANKS_PER_NODE,
                mode="slave",
            )
            for s in sims
        ]

    @staticmethod
    def reduce(sims: list[SimNode], fault_at: int | None) -> ClassSet:
        now = time.monotonic_ns()
        classes = rank_classes([s.record(fault_at) for s in sims], now, STALE_MS * 1_000_000)
        return ClassSet(classes, TEMPLATE_OPS)

    def batches(self, job: JobState, first: bool) -> list[pb.NodeStateBatch]:
        fault_at = job.fault_at()
        state = self.healthy if fault_at is None else self.faulty
        state.advance(job.ops(), fault_at)
        reduction = (state.classes, self.subtree)
        budget = int(MAX_BATCH_BYTES * BATCH_FILL)
        return split_batches(None, [], [], True, budget, None, reduction)

    async def run(self, job: JobState, counters: FeedCounters, relays: int) -> None:
        await self.register()
        counters.registered.value += 1
        await self.stream(job, counters, phase=self.index / relays)


# ---- Agent processes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    seconds: float  # the CPU window
    report_s: float  # every sender's report interval (and the Agents')
    workers: int  # the relay tier's feeder processes
    profile: Path | None  # cProfile the Agents into this directory
    soak_s: float = 0.0  # tier relay: how long to follow the Agents' memory after the window


@dataclass
class Agent:
    """A real Agent process (`comminsight.agent.main`) and where it serves."""

    role: str
    process: subprocess.Popen
    home: Path
    api: str
    grpc_addr: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_agent(
    role: str, home: Path, opts: Options, tier: str, nodes: int, parent: str | None = None
) -> Agent:
    """A master (no parent) or a relay below `parent`'s gRPC address, in its own home."""
    home.mkdir(parents=True)
    api_addr, grpc_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.update(
        COMMINSIGHT_HOME=str(home),
        COMMINSIGHT_AGENT_MODE="relay" if parent else "master",
        COMMINSIGHT_AGENT_NODE_NAME=role,
        COMMINSIGHT_AGENT_LISTEN=api_addr,
        COMMINSIGHT_AGENT_MASTER_LISTEN=grpc_addr,
        COMMINSIGHT_AGENT_TOKEN=TOKEN,
        COMMINSIGHT_AGENT_REPORT_INTERVAL_MS=str(round(opts.report_s * 1000)),
        COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=str(THRESHOLD_S),
        COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS=str(STALE_MS),
        COMMINSIGHT_AGENT_LOG_LEVEL="error",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
    )
    if parent:
        env["COMMINSIGHT_AGENT_MASTER_ADDR"] = parent
    command = [sys.executable, "-m", "comminsight.agent.main"]
    if opts.profile is not None:
        command[1:1] = ["-m", "cProfile", "-o", str(opts.profile / f"{role}-{tier}-{nodes}.prof")]
    with open(home / f"{role}.log", "w") as log:  # the child holds its own copy
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    agent = Agent(role, process, home, api_addr, grpc_addr)
    wait_api(agent)
    return agent


def wait_api(agent: Agent) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise SystemExit(f"the {agent.role} exited ({agent.process.returncode})")
        try:
            if httpx.get(f"http://{agent.api}/api/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the {agent.role} did not come up")


def get(agent: Agent, path: str, **params) -> dict:
    """An Agent Master API answer; its death ends the bench, with the end of its log."""
    try:
        response = httpx.get(f"http://{agent.api}{path}", params=params, timeout=60)
    except httpx.TransportError as e:
        raise SystemExit(f"the {agent.role} does not answer ({e}): {agent_log(agent)}") from None
    if response.status_code != 200:
        raise SystemExit(f"the {agent.role}'s {path}: {response.text[:300]}: {agent_log(agent)}")
    return response.json()


def agent_log(agent: Agent) -> str:
    return (agent.home / f"{agent.role}.log").read_text()[-2000:]


def node_list(agent: Agent) -> list[dict]:
    """The agent's /api/v1/nodes, every page."""
    items, cursor = [], None
    while True:
        page = get(agent, "/api/v1/nodes", limit=1000, **({"cursor": cursor} if cursor else {}))
        items += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def applied_batches(agent: Agent) -> int:
    """Batches the agent applied from the senders below it."""
    return sum(n.get("last_applied_batch_seq") or 0 for n in node_list(agent))


def connected(agent: Agent) -> int:
    """Senders connected to the agent itself (not the nodes it hears of through relays)."""
    return sum(1 for n in node_list(agent) if n["state"] == "connected" and not n.get("via"))


# ---- measuring ----------------------------------------------------------------------------


@dataclass
class Window:
    """Over a steady window: CPU of some processes (percent of a core), batches the feeders
    sent and the watched agents applied (per second)."""

    pids: dict[str, int]
    watched: list[Agent]
    counters: list[FeedCounters]
    cpu: dict[str, float] = field(default_factory=dict)
    applied_per_s: dict[str, float] = field(default_factory=dict)
    sent_per_s: float = 0.0

    async def measure(self, seconds: float) -> None:
        # the API reads outside the CPU window (not the steady state), and in a thread (the
        # feeders on this event loop keep sending); each read timed as it ends
        applied0 = [await asyncio.to_thread(applied_batches, a) for a in self.watched]
        read0 = time.monotonic()
        cpu0 = {k: proc_cpu_s(pid) for k, pid in self.pids.items()}
        sent0, t0 = total(self.counters, "batches"), time.monotonic()
        await asyncio.sleep(seconds)
        window = time.monotonic() - t0
        self.cpu = {k: percent(proc_cpu_s(p) - cpu0[k], window) for k, p in self.pids.items()}
        self.sent_per_s = round((total(self.counters, "batches") - sent0) / window, 1)
        applied1 = [await asyncio.to_thread(applied_batches, a) for a in self.watched]
        read_window = time.monotonic() - read0
        for agent, before, after in zip(self.watched, applied0, applied1, strict=True):
            self.applied_per_s[agent.role] = round((after - before) / read_window, 1)


async def wait_verdict(
    agent: Agent, rank: int, node: str, job: JobState, counters: list[FeedCounters]
) -> float | None:
    """Seconds from the fault to a hang report at `agent` naming `rank` on `node`; None
    when none came within VERDICT_WAIT_S."""
    fault_at = job.fault_at()
    async with Client(base_url=f"http://{agent.api}", timeout=httpx.Timeout(60)) as client:
        while True:
            try:
                page = await list_hangs.asyncio(client=client)
            except httpx.TransportError as e:
                raise SystemExit(f"the {agent.role} died ({e}): {agent_log(agent)}") from None
            if not isinstance(page, HangReportList):
                raise SystemExit(f"the {agent.role} serves no hang reports: {page!r}")
            for report in page.items:
                names = {
                    (None if isinstance(c.global_rank, Unset) else c.global_rank, c.node_name)
                    for c in report.culprits
                }
                if (rank, node) in names:
                    return (time.monotonic_ns() - fault_at) / 1e9
            if time.monotonic_ns() - fault_at > VERDICT_WAIT_S * 1e9:
                seen = [(r.verdict.value, r.summary[:200]) for r in page.items]
                print(
                    f"no verdict within {VERDICT_WAIT_S} s at the {agent.role}; "
                    f"{total(counters, 'fault_sent')} reports sent the fault; open reports: "
                    f"{seen[:3]}",
                    file=sys.stderr,
                )
                return None
            await asyncio.sleep(0.05)


def tags(
    tier: str, nodes: int, relays: int, opts: Options, fed_by: str, alone: bool | None = None
) -> dict:
    """What every line of a tier carries; own_core: whether the measured Agent had a core
    of its own (own_core())."""
    out = {
        "tier": tier,
        "ranks": nodes * RANKS_PER_NODE,
        "relays": relays,
        "nodes": nodes,
        "report_interval_s": opts.report_s,
        "fed_by": fed_by,
    }
    return out if alone is None else out | {"own_core": alone}


def emit_common(window: Window, verdict_s: float | None, tag: dict, **target) -> None:
    """The lines every tier ends with: the feed and the verdict."""
    feeders = sum(v for k, v in window.cpu.items() if k.startswith("feeder"))
    emit("feeder_cpu", round(feeders, 2), "percent_of_a_core", **tag)
    emit("streams_failed", total(window.counters, "failed"), "streams", **tag)
    if verdict_s is None:
        emit("fault_to_verdict", None, "s", no_verdict_within_s=VERDICT_WAIT_S, **tag)
    else:
        emit("fault_to_verdict", round(verdict_s, 3), "s", threshold_s=THRESHOLD_S, **target, **tag)
        emit("verdict_past_threshold", round(verdict_s - THRESHOLD_S, 3), "s", **tag)


async def measure_fed_master(master, job, counters, nodes: int, opts: Options) -> tuple:
    """A master fed from this process (tiers flat and master): its CPU window, its RSS, the
    senders it counts connected, and the verdict on a fault injected after the window."""
    window = Window({"master": master.pid, "feeder": os.getpid()}, [master], [counters])
    await window.measure(opts.seconds)
    rss = proc_rss_bytes(master.pid)
    seen = connected(master)
    job.inject_fault()
    node, rank = culprit_of(nodes)
    verdict_s = await wait_verdict(master, rank, node_name(node), job, [counters])
    return window, rss, seen, verdict_s


async def stop_fed_master(master, job, tasks: list) -> None:
    job.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    master.stop()
    all_cores()


# ---- tier flat: one master, simulated slaves in this process -----------------------------


async def measure_flat(nodes: int, opts: Options) -> dict:
    with tempfile.TemporaryDirectory(prefix="master-scale-") as tmp:
        master = start_agent("master", Path(tmp) / "master", opts, "flat", nodes)
        rss0 = proc_rss_bytes(master.pid)
        alone = own_core(master, [])
        job, counters = JobState(opts.report_s), FeedCounters()
        slaves = [SimSlave(i, nodes, master.grpc_addr) for i in range(nodes)]
        tasks = [asyncio.ensure_future(s.run(job, counters)) for s in slaves]
        try:
            await wait_registered([counters], nodes, "slaves")
            await asyncio.sleep(max(3.0, 4 * opts.report_s))  # every slave streaming, warm
            window, rss, seen, verdict_s = await measure_fed_master(
                master, job, counters, nodes, opts
            )
        finally:
            await stop_fed_master(master, job, tasks)
    tag = tags("flat", nodes, 0, opts, "simulated slaves, this process", alone)
    cpu = window.cpu["master"]
    emit("nodes_connected", seen, "nodes", **tag)
    emit("master_cpu", cpu, "percent_of_a_core", **tag)
    emit("master_cpu_per_node", round(cpu / nodes, 4), "percent_of_a_core", **tag)
    emit("master_rss", mib(rss), "MiB", **tag)
    emit("master_rss_per_node", round((rss - rss0) / nodes / 1024, 1), "KiB", **tag)
    # below nominal (nodes / interval), the feeder, not the master, was the limit
    emit("batches_per_s", window.sent_per_s, "batches/s", nominal=nodes / opts.report_s, **tag)
    emit("master_applied_per_s", window.applied_per_s["master"], "batches/s", **tag)
    emit_common(window, verdict_s, tag)
    return {"nodes": nodes, "verdict_s": verdict_s}


# ---- tier relay: a real relay under a real master, slaves in feeder processes ------------


def feed(indices: range, nodes: int, grpc_addr: str, job: JobState, counters: FeedCounters):
    """A feeder process: the slaves of nodes `indices`, on one event loop."""

    async def run():
        slaves = [SimSlave(i, nodes, grpc_addr) for i in indices]
        await asyncio.gather(*(s.run(job, counters) for s in slaves))

    asyncio.run(run())


def start_feeders(
    nodes: int, workers: int, grpc_addr: str, job: JobState
) -> tuple[list[multiprocessing.Process], list[FeedCounters]]:
    # spawned, not forked: this process may hold gRPC's threads from an earlier tier
    ctx = multiprocessing.get_context("spawn")
    processes, counters = [], []
    for w in range(workers):
        c = FeedCounters()
        indices = range(nodes * w // workers, nodes * (w + 1) // workers)
        p = ctx.Process(target=feed, args=(indices, nodes, grpc_addr, job, c), daemon=True)
        p.start()
        processes.append(p)
        counters.append(c)
    return processes, counters


async def wait_registered(counters: list[FeedCounters], expected: int, what: str) -> None:
    deadline = time.monotonic() + 120
    while (done := total(counters, "registered")) < expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {done} of {expected} {what} registered")
        await asyncio.sleep(0.2)


async def measure_relay(nodes: int, opts: Options) -> dict:
    with tempfile.TemporaryDirectory(prefix="master-scale-") as tmp:
        master = start_agent("master", Path(tmp) / "master", opts, "relay", nodes)
        job, relay, feeders = JobState(opts.report_s), None, []
        try:
            relay = start_agent(
                "relay-00", Path(tmp) / "relay", opts, "relay", nodes, master.grpc_addr
            )
            rss0 = proc_rss_bytes(relay.pid)
            alone = own_core(relay, [master.pid])  # before the feeders: they inherit it
            feeders, counters = start_feeders(nodes, opts.workers, relay.grpc_addr, job)
            await wait_registered(counters, nodes, "slaves")
            await asyncio.sleep(max(3.0, 4 * opts.report_s))  # every slave streaming, warm
            pids = {"master": master.pid, "relay": relay.pid}
            pids |= {f"feeder{i}": p.pid for i, p in enumerate(feeders)}
            window = Window(pids, [master, relay], counters)
            await window.measure(opts.seconds)
            rss = {"master": proc_rss_bytes(master.pid), "relay": proc_rss_bytes(relay.pid)}
            soak = await follow_rss(pids, opts.soak_s) if opts.soak_s else None
            seen = connected(relay)
            job.inject_fault()
            node, rank = culprit_of(nodes)
            verdict_s = await wait_verdict(master, rank, node_name(node), job, counters)
        finally:
            job.stop()
            for p in feeders:
                p.join(30)
                if p.is_alive():  # a feeder stuck on a dead stream
                    p.terminate()
            if relay is not None:
                relay.stop()
            master.stop()
            logs = {a.role: agent_log(a) for a in (relay, master) if a is not None}
            all_cores()
    cpu, nominal = window.cpu["relay"], nodes / opts.report_s
    held = machine_held(nodes, seen, window, nominal, logs)
    kept_up = window.applied_per_s["relay-00"] >= 0.9 * nominal
    tag = tags("relay", nodes, 1, opts, f"simulated slaves, {opts.workers} processes", alone)
    tag |= {"held": held, "kept_up": kept_up}
    emit("nodes_connected", seen, "nodes", **tag)
    emit("relay_cpu", cpu, "percent_of_a_core", **tag)
    emit("relay_cpu_per_node", round(cpu / nodes, 4), "percent_of_a_core", **tag)
    emit("relay_rss", mib(rss["relay"]), "MiB", **tag)
    emit("relay_rss_per_node", round((rss["relay"] - rss0) / nodes / 1024, 1), "KiB", **tag)
    emit("master_cpu", window.cpu["master"], "percent_of_a_core", **tag)
    emit("master_rss", mib(rss["master"]), "MiB", **tag)
    emit("batches_per_s", window.sent_per_s, "batches/s", nominal=nominal, **tag)
    # the relay keeping up: its children's batches it applied, its reports the master did
    emit("relay_applied_per_s", window.applied_per_s["relay-00"], "batches/s", **tag)
    report_rate = window.applied_per_s["master"]
    emit("relay_reports_per_s", report_rate, "batches/s", nominal=1 / opts.report_s, **tag)
    emit_common(window, verdict_s, tag)
    if soak is not None:
        emit_soak(soak, tag)
    return {
        "nodes": nodes,
        "held": held,
        "kept_up": kept_up,
        "relay_cpu": cpu,
        "relay_rss": rss["relay"],
        "verdict_s": verdict_s,
    }


async def follow_rss(pids: dict[str, int], seconds: float) -> dict[str, list[tuple]]:
    """(seconds since start, RSS bytes) of the master and the relay, sampled 40 times over
    `seconds` while the job runs on."""
    samples: dict[str, list[tuple]] = {"master": [], "relay": []}
    began = time.monotonic()
    for i in range(41):
        await asyncio.sleep(max(0.0, began + i * seconds / 40 - time.monotonic()))
        for role in samples:
            samples[role].append((time.monotonic() - began, proc_rss_bytes(pids[role])))
    return samples


def emit_soak(samples: dict[str, list[tuple]], tag: dict) -> None:
    """Memory over the soak: start and end, and the growth of its second half (after the
    warm-up of caches and allocator arenas) as a least-squares slope per hour."""
    for role, points in samples.items():
        half = points[len(points) // 2 :]
        n = len(half)
        mean_t = sum(t for t, _ in half) / n
        mean_r = sum(r for _, r in half) / n
        var = sum((t - mean_t) ** 2 for t, _ in half)
        slope = sum((t - mean_t) * (r - mean_r) for t, r in half) / var if var else 0.0
        extra = {"soak_s": round(points[-1][0], 1), **tag}
        emit(f"{role}_rss_soak_start", mib(points[0][1]), "MiB", **extra)
        emit(f"{role}_rss_soak_end", mib(points[-1][1]), "MiB", **extra)
        emit(f"{role}_rss_growth", round(slope * 3600 / 2**20, 1), "MiB/h", **extra)


def machine_held(
    nodes: int, seen: int, window: Window, nominal: float, logs: dict[str, str]
) -> bool:
    """Whether this machine delivered the relay tier's load at this size: every slave
    connected, no stream broken, the feeders sending at 90 % of the nominal rate at least.
    When not, the figures are those of a machine short of CPU, not of the relay: its lines
    say "held": false, and the tree's model leaves the run out. (Whether the relay applied
    what it was sent is its own result: "kept_up".)"""
    failed = total(window.counters, "failed")
    held = seen == nodes and not failed and window.sent_per_s >= 0.9 * nominal
    if not held:
        print(
            f"the machine did not hold {nodes} nodes below one relay ({len(CPUS)} cores): "
            f"{seen} connected, {failed} streams broke, {window.sent_per_s} batches/s sent "
            f"of {nominal} nominal",
            file=sys.stderr,
        )
        for role, tail in logs.items():
            print(f"--- the end of the {role}'s log:\n{tail}", file=sys.stderr)
    return held


# ---- tier master: a real master fed by simulated relays ---------------------------------


def build_relays(nodes: int, relays: int) -> list[SimRelay]:
    out = []
    for r in range(relays):
        first, end = nodes * r // relays, nodes * (r + 1) // relays
        out.append(SimRelay(r, first, end - first, nodes))
    return out


async def measure_master(nodes: int, relays: int, opts: Options) -> dict:
    with tempfile.TemporaryDirectory(prefix="master-scale-") as tmp:
        t0 = time.monotonic()
        sims = build_relays(nodes, relays)  # rank_classes for every relay: before the master
        setup_s = time.monotonic() - t0
        master = start_agent("master", Path(tmp) / "master", opts, "master", nodes)
        alone = own_core(master, [])
        job, counters = JobState(opts.report_s), FeedCounters()
        for s in sims:
            s.connect(master.grpc_addr)
        tasks = [asyncio.ensure_future(s.run(job, counters, relays)) for s in sims]
        try:
            await wait_registered([counters], relays, "relays")
            await asyncio.sleep(max(5.0, 6 * opts.report_s))  # every relay's classes in, warm
            window, rss, seen, verdict_s = await measure_fed_master(
                master, job, counters, nodes, opts
            )
        finally:
            await stop_fed_master(master, job, tasks)
    tag = tags("master", nodes, relays, opts, "simulated relays, this process", alone)
    emit("relays_connected", seen, "relays", **tag)
    emit("classes_per_relay", len(sims[0].healthy.classes), "classes", **tag)
    # the targets at the tree's full size
    emit("master_cpu", window.cpu["master"], "percent_of_a_core", target=100, **tag)
    emit("master_rss", mib(rss), "MiB", target=1024, **tag)
    nominal = relays / opts.report_s
    emit("relay_reports_per_s", window.sent_per_s, "batches/s", nominal=nominal, **tag)
    emit("master_applied_per_s", window.applied_per_s["master"], "batches/s", **tag)
    emit("feeder_setup", round(setup_s, 1), "s", **tag)
    emit_common(window, verdict_s, tag, target=THRESHOLD_S + 2)
    return {"nodes": nodes, "relays": relays, "verdict_s": verdict_s}


# ---- the whole tree, as a model ---------------------------------------------------------


def extrapolate(runs: list[dict], key: str, nodes: int) -> tuple[float, dict]:
    """runs[key] at `nodes` nodes: on the line through the two largest runs (one run: in
    proportion to it), and the inputs it took."""
    runs = sorted(runs, key=lambda r: r["nodes"])[-2:]
    points = {r["nodes"]: r[key] for r in runs}
    if len(runs) == 1:
        ((n, v),) = points.items()
        return v * nodes / n, {"measured": points, "fit": "proportional"}
    (n1, v1), (n2, v2) = points.items()
    slope = (v2 - v1) / (n2 - n1)
    return v2 + slope * (nodes - n2), {"measured": points, "fit": "linear"}


def emit_tree_model(relay_runs: list[dict], master_run: dict, opts: Options) -> None:
    """The tree of master_run's size with every relay real (it does not fit this machine at
    once), from the runs this machine held. The master is as measured with simulated relays
    (tier master), so it has no line here. A relay of the tree: as measured where a relay run
    held as many nodes (no line either), else extrapolated in nodes from the relay runs. The
    verdict: the master tier's plus what the real relay added past the threshold in the
    relay tier, an upper bound (each already waits up to a report interval for the next
    report, and the relay tier's own master's pass is counted too)."""
    nodes, relays = master_run["nodes"], master_run["relays"]
    per_relay = -(-nodes // relays)
    held = [r for r in relay_runs if r["held"] and r["kept_up"] and r["verdict_s"] is not None]
    behind = [r["nodes"] for r in relay_runs if r["held"] and not r["kept_up"]]
    tag = tags("tree", nodes, relays, opts, "model") | {"model": True, "nodes_per_relay": per_relay}
    if behind:  # measured: at these sizes the relay applied less than it was sent
        tag["relay_fell_behind_at_nodes"] = behind
    if not held or master_run["verdict_s"] is None:
        print("no tree model: no relay run held, or no verdict", file=sys.stderr)
        return
    largest = max(held, key=lambda r: r["nodes"])
    if per_relay > largest["nodes"]:
        cpu, inputs = extrapolate(held, "relay_cpu", per_relay)
        emit("relay_cpu", round(cpu, 2), "percent_of_a_core", target=100, inputs=inputs, **tag)
        rss, inputs = extrapolate(held, "relay_rss", per_relay)
        inputs["measured"] = {n: mib(v) for n, v in inputs["measured"].items()}
        emit("relay_rss", mib(int(rss)), "MiB", inputs=inputs, **tag)
    inputs = {
        "master_tier_verdict_s": round(master_run["verdict_s"], 3),
        "relay_tier_verdict_s": round(largest["verdict_s"], 3),
        "relay_tier_nodes": largest["nodes"],
    }
    verdict = master_run["verdict_s"] + largest["verdict_s"] - THRESHOLD_S
    target = THRESHOLD_S + 2
    extra = {"upper_bound": True, "target": target, "threshold_s": THRESHOLD_S}
    emit("fault_to_verdict", round(verdict, 3), "s", inputs=inputs, **extra, **tag)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    tiers = ("flat", "relay", "master")
    parser.add_argument("--tiers", nargs="+", choices=tiers, default=list(tiers))
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 256], help="tier flat")
    parser.add_argument(
        "--relay-nodes", type=int, nargs="+", default=[250, 400, 500], help="tier relay: its nodes"
    )
    parser.add_argument("--tree-nodes", type=int, default=12_500, help="tier master")
    parser.add_argument("--tree-relays", type=int, default=13, help="tier master")
    parser.add_argument("--workers", type=int, default=2, help="tier relay's feeder processes")
    parser.add_argument(
        "--soak-s",
        type=float,
        default=0.0,
        help="tier relay: follow the relay's and master's memory this long after the window",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU measurement window")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile Agents into DIR")
    parser.add_argument(
        "--report-interval-s",
        type=float,
        default=0.5,
        help="how often each slave and relay reports (COMMINSIGHT_AGENT_REPORT_INTERVAL_MS "
        "on real ones; the default is its default)",
    )
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    opts = Options(args.seconds, args.report_interval_s, args.workers, args.profile, args.soak_s)
    if "flat" in args.tiers:
        for nodes in args.nodes:
            asyncio.run(measure_flat(nodes, opts))
    relay_runs = []
    if "relay" in args.tiers:
        relay_runs = [asyncio.run(measure_relay(nodes, opts)) for nodes in args.relay_nodes]
    if "master" in args.tiers:
        master_run = asyncio.run(measure_master(args.tree_nodes, args.tree_relays, opts))
        if relay_runs:
            emit_tree_model(relay_runs, master_run, opts)


if __name__ == "__main__":
    main()
