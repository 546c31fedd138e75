"""Faults an unlucky operator meets, on real parts: what is lost, what it costs the Agent.

Each scenario runs simulated ranks through the real plugin (dist/) and a real
`comminsight-agent` process, then counts ops against the simulator's ground truth:

- ops_lost, fault agent_sigkill: the Agent SIGKILLed and started again --agent-kills times
  while training runs; ops of the truth missing from the archive (every sealed segment,
  decompressed) once the last Agent flushed it. ops_duplicated: op lines archived more than
  once.
- ops_lost, fault rank_sigkill: one rank SIGKILLed mid-run (the simulator's `die` fault);
  ops it issued before dying that are in neither its logs nor a gap line, once the Agent
  retired it.
- ops_lost, fault disk_full: the home on a 64 MiB tmpfs that fills up during the run and
  frees space before it ends; ops in neither the logs nor a gap line (ops_in_gap_lines: how
  many the gap lines cover). (Needs root to mount; the line is left out, with a note on
  stderr, where it cannot be mounted.)
- ops_lost, fault read_only_home: the home mounted read-only; ops in no log the Profiler
  wrote (its private fallback directory under XDG_RUNTIME_DIR included).
- agent_rss_mib, fault forged_events: the Agent's resident memory after --forged-events
  forged hang events were written into its FIFO (agent_rss_mib_baseline: before them).
- health_latency_ms, fault half_open_connections: the median latency of /api/v1/health
  while 1,100 half-open connections are held, the Agent limited to 1,024 open files
  (health_answered: of 20 requests; agent_alive: 1 when it still runs afterwards).
- plugin_reload_growth_mib, plugin_reload_fds_growth, plugin_reload_maps_growth, fault
  plugin_reload: what --reload-cycles unloads and reloads of the plugin (NCCL's dlclose once
  the last communicator is gone, dlopen for the next) leave in the process (bench/plugin_reload.py).
- agent_fds_max, agent_cpu_idle_percent, agent_rss_mib, faults process_churn,
  junk_shm_entries, random_op_stream: a crowded node (bench/crowded_node.py): 500 short-lived
  processes, 20,000 entries in shms/ that are no regions, a random op stream with no period.
  With --shm-size (64m: a container's default /dev/shm), their regions go to a tmpfs of that
  size, mounted for the whole bench in a private mount namespace (`unshare -rm`) so that the
  Agent and every producer share it; their lines then carry `shm_size`.

A gap line counts ring records, of which some may not be ops: ops_lost is then a lower
bound on what a gap hid, never an overstatement of what reached the disk.

Prints JSON lines {"bench","metric","value","unit","fault"}: the metric names are the same
for every fault, the `fault` field says which.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import numpy as np
import zstandard

from comminsight.log_segments import read_segment, sealed_paths, segment_name
from comminsight.log_segments import segments_in as segments_in_dir
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.faults import parse_fault
from comminsight.sim.truth import read_ground_truth
from comminsight_client import AuthenticatedClient, Client
from comminsight_client.api.archive import flush_archive as archive_flush
from comminsight_client.api.archive import get_archive_status
from comminsight_client.models import ArchiveFlush, ArchiveStatus
from comminsight_gen.abi import fifo_event_v1, shm_v1
from comminsight_gen.models.inspector_log_v1 import (
    CiColl,
    CiCollCompact,
    CiGap,
    CiP2p,
    CiP2pCompact,
    CiSegmentStart,
    InspectorLogRecord,
)

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
TOKEN = "bench-faults-token"
NODE = "bench-node"
SIM_ENV = (("COMMINSIGHT_AGENT_AUTOSTART", "0"),)
HALF_OPEN = 1100
HALF_OPEN_FAULT = "half_open_connections"
FULL_S = 8.0  # how long the disk stays full


def emit(metric: str, value, unit: str, fault: str, **detail) -> None:
    value = round(value, 3) if isinstance(value, float) else value
    line = {"bench": "faults", "metric": metric, "value": value, "unit": unit, "fault": fault}
    print(json.dumps(line | detail))
    sys.stdout.flush()


def note(text: str) -> None:
    print(f"bench/faults: {text}", file=sys.stderr, flush=True)


# ---- counting ops ----------------------------------------------------------------------------


_RECORD = msgspec.json.Decoder(InspectorLogRecord)


def count_logged(segments: list[tuple[str, bytes]]) -> tuple[int, int, int]:
    """(distinct op lines, op lines written more than once, ring records inside gap lines)
    over segments given as (name, contents). Ops are told apart by (pid, ring_seq)."""
    seen: set[tuple[int, int]] = set()
    lines = gaps = 0
    for _name, data in segments:
        pid = -1
        for raw in data.splitlines():
            try:
                ci = _RECORD.decode(raw).ci
            except msgspec.DecodeError:
                continue  # a torn last line of a dead writer: the op is counted as lost
            if isinstance(ci, CiSegmentStart):
                pid = ci.process.pid
            elif isinstance(ci, (CiColl, CiP2p)):
                lines += 1
                seen.add((pid, ci.ring_seq))
            elif isinstance(ci, (CiCollCompact, CiP2pCompact)):
                lines += 1
                seen.add((pid, ci.q))
            elif isinstance(ci, CiGap):
                gaps += ci.lost_count
    return len(seen), lines - len(seen), gaps


def segments_in(directory: Path) -> list[tuple[str, bytes]]:
    """Every segment under `directory` (sealed, compressed or not, or open), recursively, by
    its uncompressed name: one entry per segment."""
    files = [p for p in sorted(directory.rglob("*")) if p.is_file()]
    sealed = sealed_paths(files)
    partial = [p for p in files if p.name.endswith(".jsonl.partial")]
    return [(segment_name(p), read_segment(p)) for p in sealed + partial]


def archived_segments(home: Path) -> list[tuple[str, bytes]]:
    decompress = zstandard.ZstdDecompressor()
    return [
        (p.name, decompress.decompressobj().decompress(p.read_bytes()))
        for p in sorted((home / "archives").rglob("*.jsonl.zst"))
    ]


def truth_ops(run_dir: Path) -> int:
    return sum(len(t.ops) for t in read_ground_truth(run_dir))


def ops_lost(truth: int, logged: tuple[int, int, int]) -> int:
    distinct, _duplicated, gaps = logged
    return max(0, truth - distinct - gaps)


# ---- the Agent -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    """A `comminsight-agent` process for `home`, on a loopback port of its own."""

    def __init__(self, home: Path, nofile: int | None = None, **env: str) -> None:
        self.home = home
        self.listen = f"127.0.0.1:{free_port()}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
            "COMMINSIGHT_HOME": str(home),
            "COMMINSIGHT_AGENT_LISTEN": self.listen,
            "COMMINSIGHT_AGENT_TOKEN": TOKEN,
            "COMMINSIGHT_AGENT_NODE_NAME": NODE,
            "COMMINSIGHT_AGENT_POLL_INTERVAL_MS": "100",
            "COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS": "1000",
            "COMMINSIGHT_COMMON_ARCHIVE_INTERVAL_S": "0.2",
            **env,
        }
        self.nofile = nofile
        self.proc: subprocess.Popen | None = None

    def start(self) -> Agent:
        def limit() -> None:
            if self.nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "comminsight.agent.main"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=limit,
        )
        self.get("/api/v1/health")
        return self

    def get(self, path: str, timeout_s: float = 60.0) -> httpx.Response:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                response = httpx.get(f"http://{self.listen}{path}", timeout=10)
                if response.status_code != 503:
                    return response
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or (self.proc and self.proc.poll() is not None):
                raise RuntimeError(f"the agent on {self.listen} does not answer {path}")
            time.sleep(0.05)

    def archive_status(self, timeout_s: float = 60.0) -> ArchiveStatus:
        """/api/v1/archive through the generated client, a 503 or a refused connection waited
        out as `get` does."""
        deadline = time.monotonic() + timeout_s
        with Client(base_url=f"http://{self.listen}", timeout=httpx.Timeout(10)) as c:
            while True:
                status = None
                with contextlib.suppress(httpx.TransportError):
                    status = get_archive_status.sync(client=c)
                if isinstance(status, ArchiveStatus):
                    return status
                if time.monotonic() > deadline or (self.proc and self.proc.poll() is not None):
                    raise RuntimeError(f"the agent on {self.listen} serves no archive status")
                time.sleep(0.05)

    def flush_archive(self, timeout_s: float = 120.0) -> None:
        url = f"http://{self.listen}"
        with AuthenticatedClient(base_url=url, token=TOKEN, timeout=httpx.Timeout(30)) as c:
            queued = archive_flush.sync(client=c)
        if not isinstance(queued, ArchiveFlush):
            raise RuntimeError(f"archive flush refused: {queued!r}")
        wait_until(
            lambda: (s := self.archive_status()).pending_files == 0 and not s.flush_in_progress,
            timeout_s,
            "the archive was not flushed",
        )

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> str:
        """Stop it; what it wrote on stderr."""
        if self.proc is None or self.proc.returncode is not None:
            return ""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.communicate(timeout=30)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[1].decode(errors="replace")


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.1)


def simulate_in_background(config: SimConfig) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    thread.start()
    return thread, result


def sim_config(home: Path, **extra) -> SimConfig:
    settings = dict(
        plugin=str(PLUGIN),
        home=str(home),
        workload="ddp",
        ranks=4,
        steps=60,
        time_scale=0.05,
        env=(*SIM_ENV, ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", "65536")),
    )
    settings.update(extra)
    return SimConfig(**settings)


# ---- scenarios -------------------------------------------------------------------------------


def agent_sigkill(home: Path, kills: int) -> None:
    agent = Agent(home).start()
    sim, result = simulate_in_background(sim_config(home, steps=400))
    try:
        done = 0
        while done < kills and sim.is_alive():
            time.sleep(1.0)
            agent.kill()
            agent = Agent(home).start()
            done += 1
        sim.join()
        if result["sim"].errors:
            raise RuntimeError(f"the simulation failed: {result['sim'].errors}")
        agent.flush_archive()
    finally:
        agent.stop()
        sim.join()
    logged = count_logged(archived_segments(home))
    lost = ops_lost(truth_ops(result["sim"].run_dir), logged)
    emit("ops_lost", lost, "ops", "agent_sigkill", agent_kills=done)
    emit("ops_duplicated", logged[1], "ops", "agent_sigkill", agent_kills=done)


def rank_sigkill(home: Path) -> None:
    agent = Agent(home).start()
    config = sim_config(home, faults=(parse_fault("die:rank=1,op=300"),), hang_hold_s=2.0)
    try:
        result = run_simulation(config)
        wait_until(
            lambda: recovered(home / "inspector_logs"),
            120,
            "the agent wrote no recovered segment for the dead rank",
        )
    finally:
        agent.stop()
    logged = count_logged(segments_in(home / "inspector_logs"))
    emit("ops_lost", ops_lost(truth_ops(result.run_dir), logged), "ops", "rank_sigkill")


def recovered(logs: Path) -> bool:
    """Whether a segment the Agent wrote from a dead process's SHM is sealed in `logs`."""
    return any(b'"reason":"recovered"' in read_segment(p)[-512:] for p in segments_in_dir(logs))


@contextlib.contextmanager
def tmpfs(size: str, read_only: bool = False) -> Iterator[Path]:
    mount = Path(tempfile.mkdtemp(prefix="ci-bench-faults-mnt-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        check=True,
        capture_output=True,
    )
    try:
        if read_only:
            for sub in ("etc", "shms", "fifos", "logs", "metadata", "inspector_logs"):
                (mount / sub).mkdir(mode=0o700)
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            mount.rmdir()


def disk_full(work: Path) -> None:
    with tmpfs("64m") as home:
        filler = home / "filler"
        sim, result = simulate_in_background(
            sim_config(
                home,
                steps=600,
                time_scale=0.02,
                out=str(work / "sim-out"),
                # a ring small enough that the writer must drop records while the disk is full
                env=(*SIM_ENV, ("COMMINSIGHT_PROFILER_RING_SLOTS", "256")),
            )
        )
        try:
            # fill what is left once the run writes, then give it back before the run ends
            time.sleep(1.0)
            with contextlib.suppress(OSError), filler.open("wb") as f:
                while True:
                    f.write(b"\0" * 65536)
            free = os.statvfs(home)
            note(f"disk_full: {free.f_bavail * free.f_frsize} bytes free while full")
            time.sleep(FULL_S)
            space_returned_during_run = sim.is_alive()
            filler.unlink()
        finally:
            sim.join()
        if not space_returned_during_run:
            raise RuntimeError("the run ended before space returned: run it longer")
        if result["sim"].errors:
            raise RuntimeError(f"the simulation failed: {result['sim'].errors}")
        logged = count_logged(segments_in(home / "inspector_logs"))
        truth = truth_ops(result["sim"].run_dir)
        emit("ops_in_gap_lines", logged[2], "ops", "disk_full")
        emit("ops_lost", ops_lost(truth, logged), "ops", "disk_full", truth_ops=truth)


def read_only_home(work: Path) -> None:
    private = work / "xdg-runtime"
    private.mkdir(mode=0o700)
    with tmpfs("8m", read_only=True) as home:
        config = sim_config(
            home,
            steps=30,
            env=(*SIM_ENV, ("XDG_RUNTIME_DIR", str(private))),
            out=str(work / "sim-out"),
        )
        result = run_simulation(config)
        if result.errors:
            raise RuntimeError(f"the simulation failed: {result.errors}")
        logged = count_logged(segments_in(home / "inspector_logs") + segments_in(private))
        lost = ops_lost(truth_ops(result.run_dir), logged)
        emit("ops_lost", lost, "ops", "read_only_home")


def forged_event(pid: int, seq: int) -> bytes:
    e = np.zeros(1, dtype=fifo_event_v1.EVENT_DTYPE)
    e["magic"] = fifo_event_v1.MAGIC
    e["abi_version"] = fifo_event_v1.PROTOCOL_VERSION
    e["event_size"] = fifo_event_v1.EVENT_DTYPE.itemsize
    e["event_type"] = fifo_event_v1.EventType.HANG_SUSPECTED
    e["event_seq"] = seq
    e["pid"] = pid
    e["op_kind"] = shm_v1.RecordKind.COLL
    e["func"] = shm_v1.Func.ALL_REDUCE
    e["peer"] = -1
    e["comm_id"] = seq * 2654435761 % (1 << 63)
    return e.tobytes()


def forged_events(home: Path, count: int) -> None:
    agent = Agent(home).start()
    try:
        fifo = home / "fifos" / "hang-events.fifo"
        wait_until(fifo.exists, 30, "the agent made no FIFO")
        time.sleep(1.0)
        before = agent.rss_mib()
        fd = os.open(fifo, os.O_WRONLY)
        try:
            chunk = 512
            for first in range(0, count, chunk):
                data = b"".join(
                    forged_event(100000 + (i % 30000), i)
                    for i in range(first, min(count, first + chunk))
                )
                os.write(fd, data)
        finally:
            os.close(fd)
        agent.get("/api/v1/health")
        time.sleep(2.0)  # the reader drains what the pipe still holds
        agent.get("/api/v1/health")
        emit("agent_rss_mib_baseline", before, "MiB", "forged_events")
        emit("agent_rss_mib", agent.rss_mib(), "MiB", "forged_events", events=count)
    finally:
        agent.stop()


def half_open(home: Path) -> None:
    agent = Agent(home, nofile=1024).start()
    host, port = agent.listen.rsplit(":", 1)
    held: list[socket.socket] = []
    try:
        for _ in range(HALF_OPEN):
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError, OSError):
                s.connect((host, int(port)))
            held.append(s)
        time.sleep(0.5)
        for s in held:
            with contextlib.suppress(OSError):
                s.send(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")  # never finished
        latencies = []
        for _ in range(20):
            t0 = time.monotonic()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://{agent.listen}/api/v1/health", timeout=10).status_code:
                    latencies.append((time.monotonic() - t0) * 1e3)
            time.sleep(0.05)
        emit("health_answered", len(latencies), "of 20", HALF_OPEN_FAULT)
        if latencies:
            median = statistics.median(latencies)
            emit("health_latency_ms", median, "ms", HALF_OPEN_FAULT, connections=HALF_OPEN)
    finally:
        for s in held:
            s.close()
    try:
        agent.get("/api/v1/health", timeout_s=30)
        emit("agent_alive", 1, "bool", HALF_OPEN_FAULT)
    except RuntimeError:
        emit("agent_alive", 0, "bool", HALF_OPEN_FAULT)
    finally:
        agent.stop()


def crowded_node_module():
    spec = importlib.util.spec_from_file_location(
        "crowded_node", ROOT / "bench" / "crowded_node.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def crowded_node(name: str, work: Path, args) -> None:
    module = crowded_node_module()
    if name == "process_churn":
        module.process_churn(
            work, Agent, emit, args.churn_processes, args.churn_parallel, args.idle_s
        )
    elif name == "junk_shm_entries":
        module.junk_shm_entries(work, Agent, emit, args.junk_entries, args.idle_s)
    else:
        module.random_op_stream(work, Agent, emit, args.random_ops, args.idle_s)


def plugin_reload(work: Path, cycles: int) -> None:
    # loaded by path: this module is also imported by file from the tests, without bench/
    # on sys.path
    spec = importlib.util.spec_from_file_location(
        "plugin_reload", ROOT / "bench" / "plugin_reload.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for metric, value, unit, detail in module.reload_soak(work, cycles):
        emit(metric, value, unit, module.FAULT, **detail)


def in_private_shm_tmpfs(size: str) -> int:
    """This bench again, in a private mount namespace where a tmpfs of `size` is mounted on a
    fresh directory (named to it in crowded_node.SHM_TMPFS_ENV); its exit status."""
    with tempfile.TemporaryDirectory(prefix="ci-bench-shm-") as mount_point:
        script = 'mount -t tmpfs -o "size=$1,mode=0700" tmpfs "$2" && shift 2 && exec "$@"'
        argv = [sys.executable, *sys.argv]
        return subprocess.run(
            ["unshare", "-rm", "sh", "-c", script, "sh", size, mount_point, *argv],
            env={**os.environ, crowded_node_module().SHM_TMPFS_ENV: mount_point},
        ).returncode


SCENARIOS = (
    "agent_sigkill",
    "rank_sigkill",
    "disk_full",
    "read_only_home",
    "forged",
    "half_open",
    "plugin_reload",
    "process_churn",
    "junk_shm_entries",
    "random_op_stream",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agent-kills", type=int, default=5)
    ap.add_argument("--forged-events", type=int, default=100_000)
    ap.add_argument("--reload-cycles", type=int, default=500)
    ap.add_argument("--churn-processes", type=int, default=500)
    ap.add_argument("--churn-parallel", type=int, default=8)
    ap.add_argument("--junk-entries", type=int, default=20_000)
    ap.add_argument("--random-ops", type=int, default=200_000)
    ap.add_argument("--idle-s", type=float, default=10.0, help="idle CPU window, seconds")
    ap.add_argument(
        "--shm-size",
        help="the crowded-node faults' regions in a private tmpfs of this size (e.g. 64m)",
    )
    ap.add_argument("--only", nargs="*", choices=SCENARIOS, default=list(SCENARIOS))
    args = ap.parse_args()
    if args.shm_size and crowded_node_module().SHM_TMPFS_ENV not in os.environ:
        return in_private_shm_tmpfs(args.shm_size)
    if not PLUGIN.exists():
        sys.exit(f"bench/faults: {PLUGIN} is missing; run `make build-profiler`")
    failed = []
    for name in args.only:
        with tempfile.TemporaryDirectory(prefix=f"ci-bench-faults-{name}-") as tmp:
            work = Path(tmp)
            home = work / "home"
            home.mkdir(mode=0o700)
            try:
                if name == "agent_sigkill":
                    agent_sigkill(home, args.agent_kills)
                elif name == "rank_sigkill":
                    rank_sigkill(home)
                elif name == "disk_full":
                    disk_full(work)
                elif name == "read_only_home":
                    read_only_home(work)
                elif name == "forged":
                    forged_events(home, args.forged_events)
                elif name == "plugin_reload":
                    plugin_reload(work, args.reload_cycles)
                elif name in ("process_churn", "junk_shm_entries", "random_op_stream"):
                    crowded_node(name, work, args)
                else:
                    half_open(home)
            except subprocess.CalledProcessError as e:
                note(f"{name}: cannot mount a tmpfs here ({e}); its line is left out")
            except Exception as e:  # the other scenarios still run; the bench then fails
                note(f"{name}: {type(e).__name__}: {e}")
                failed.append(name)
    if failed:
        note(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
