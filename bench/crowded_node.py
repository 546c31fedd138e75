"""A crowded node, as the Agent meets it: what it costs in descriptors, CPU and memory.

Three faults, each against a real `comminsight-agent` process (bench/faults.py's Agent) whose
Profilers put their regions in a private directory of the tmpfs:

- process_churn: --churn-processes short-lived processes (profiler/bench/reload_cycles.c:
  the plugin loaded twice, each time two communicators with 16 AllReduces each, so two
  regions per process), --churn-parallel at a time, then the Agent left idle;
- junk_shm_entries: --junk-entries entries in shms/ that are no regions (19 in 20 other
  names, 1 in 20 *.shm files of garbage, which the Agent quarantines), the Agent left idle;
- random_op_stream: two processes publishing --random-ops collectives each whose function,
  size, datatype, channels and communicator are random (no period for the Semantic Engine to
  find), then the Agent left idle.

For each: agent_fds_max (open descriptors, the most seen while the fault ran and settled),
agent_cpu_idle_percent (the Agent's CPU over --idle-s seconds once the fault is over and its
effects drained, in percent of one core), agent_rss_mib (resident memory, the most seen).

Runs as scenarios of bench/faults.py (`make bench-faults FAULTS_ARGS="--only process_churn"`),
or `python bench/crowded_node.py --produce-random N` as the random stream's producer.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
FAULTS = ("process_churn", "junk_shm_entries", "random_op_stream")
SETTLE_TIMEOUT_S = 300.0


def proc_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Sampler:
    """The most descriptors and resident memory a process shows, sampled every 0.1 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fds_max = 0
        self.rss_max = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.1)

    def sample(self) -> None:
        try:
            self.fds_max = max(self.fds_max, proc_fds(self.pid))
            self.rss_max = max(self.rss_max, proc_rss_mib(self.pid))
        except OSError:
            pass

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def idle_cpu_percent(pid: int, seconds: float) -> float:
    before, t0 = proc_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return 100.0 * (proc_cpu_s(pid) - before) / (time.monotonic() - t0)


# bench/faults.py --shm-size: the private tmpfs of that size it runs in
SHM_TMPFS_ENV = "CI_BENCH_SHM_TMPFS"


def shm_detail() -> dict:
    """What each line says of the tmpfs the regions went to, when not the node's own."""
    mount_point = os.environ.get(SHM_TMPFS_ENV)
    if not mount_point:
        return {}
    st = os.statvfs(mount_point)
    return {"shm_size_mib": round(st.f_blocks * st.f_frsize / (1 << 20), 1)}


@contextmanager
def shm_dir() -> Iterator[str]:
    """A private directory of the tmpfs for the regions: the bench's own (--shm-size), else
    /dev/shm where there is one."""
    tmpfs = os.environ.get(SHM_TMPFS_ENV)
    if not tmpfs and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        tmpfs = "/dev/shm"
    with tempfile.TemporaryDirectory(prefix="ci-bench-crowded-", dir=tmpfs) as d:
        os.chmod(d, 0o700)
        yield d


# The Agent's own defaults for what decides its idle cost (bench/faults.py's Agent polls and
# archives faster, for the other faults' sake)
IDLE_DEFAULTS = {
    "COMMINSIGHT_AGENT_POLL_INTERVAL_MS": "20",
    "COMMINSIGHT_COMMON_ARCHIVE_INTERVAL_S": "30",
}


def producer_env(home: Path, shm: str) -> dict:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_SHM_DIR": shm,
    }


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.2)


def regions_left(home: Path) -> int:
    try:
        return sum(1 for e in os.scandir(home / "shms") if e.name.endswith(".shm"))
    except FileNotFoundError:
        return 0


def drain_stderr(agent) -> None:
    """Read the Agent's stderr as it comes: a pipe nobody reads fills (64 KiB) and blocks the
    Agent on its next log line, a hang the bench would take for the Agent's own."""

    def run() -> None:
        for _ in agent.proc.stderr:
            pass

    threading.Thread(target=run, daemon=True).start()


def queued_records(agent) -> float | None:
    found = re.search(
        r"^comminsight_engine_records_queued (\S+)$", agent.get("/metrics").text, re.MULTILINE
    )
    return None if found is None else float(found.group(1))


def settle(agent, home: Path) -> None:
    """Wait until the fault's effects are over, so the idle window measures an idle Agent:
    no record waits for the engine, every Step file is sealed (an ended GPU waits a while for
    peers that never come), nothing waits for the archive."""
    step_dir = home / "semantics" / "step"
    wait_for(
        lambda: (
            queued_records(agent) == 0
            and not any(step_dir.glob("*.partial"))
            and agent.archive_status().pending_files == 0
        ),
        "the Agent did not settle after the fault",
    )


def measure(agent, sampler: Sampler, fault: str, idle_s: float, emit, **detail) -> None:
    pid = agent.proc.pid
    emit("agent_fds_max", sampler.fds_max, "descriptors", fault, **detail)
    emit("agent_cpu_idle_percent", round(idle_cpu_percent(pid, idle_s), 2), "%", fault, **detail)
    sampler.sample()
    emit("agent_rss_mib", round(sampler.rss_max, 1), "MiB", fault, **detail)


# ---- process_churn ---------------------------------------------------------------------------


def build_reload_driver(out_dir: Path) -> Path:
    exe = out_dir / "reload_cycles"
    subprocess.run(
        [
            os.environ.get("CC", "gcc"),
            "-std=c11",
            "-O2",
            "-pthread",
            f"-I{ROOT / 'generated/c/include'}",
            str(ROOT / "profiler" / "bench" / "reload_cycles.c"),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return exe


def process_churn(work: Path, agent_cls, emit, processes: int, parallel: int, idle_s: float):
    exe = build_reload_driver(work)
    home = work / "home"
    with shm_dir() as shm:
        agent = agent_cls(home, COMMINSIGHT_PROFILER_SHM_DIR=shm, **IDLE_DEFAULTS).start()
        drain_stderr(agent)
        try:
            env = producer_env(home, shm)
            with Sampler(agent.proc.pid) as sampler:
                running: list[subprocess.Popen] = []
                for _ in range(processes):
                    while len(running) >= parallel:
                        running = [p for p in running if p.poll() is None]
                        time.sleep(0.005)
                    cmd = [str(exe), str(PLUGIN), "1", "16", "1"]  # two loads: two regions
                    running.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL))
                for p in running:
                    p.wait()
                wait_for(lambda: regions_left(home) == 0, "the Agent kept ended processes' regions")
                left = len(os.listdir(shm))
                settle(agent, home)
            detail = {"processes": processes, **shm_detail()}
            measure(agent, sampler, "process_churn", idle_s, emit, **detail)
            emit("regions_left", left, "files", "process_churn", **detail)
        finally:
            agent.stop()


# ---- junk_shm_entries -----------------------------------------------------------------------


def junk_shm_entries(work: Path, agent_cls, emit, entries: int, idle_s: float):
    home = work / "home"
    shms = home / "shms"
    shms.mkdir(mode=0o700, parents=True, exist_ok=True)
    garbage = entries // 20
    with shm_dir() as shm:
        agent = agent_cls(home, COMMINSIGHT_PROFILER_SHM_DIR=shm, **IDLE_DEFAULTS).start()
        drain_stderr(agent)
        try:
            with Sampler(agent.proc.pid) as sampler:
                for i in range(entries - garbage):
                    (shms / f"junk-{i}").write_bytes(b"")
                for i in range(garbage):
                    (shms / f"junk-{i}.shm").write_bytes(b"not a region " * 400)
                wait_for(
                    lambda: regions_left(home) == 0, "the Agent did not quarantine the garbage"
                )
                time.sleep(3.0)  # past the listing's settling time: the directory is unchanged
                settle(agent, home)
            measure(
                agent, sampler, "junk_shm_entries", idle_s, emit, entries=entries, **shm_detail()
            )
        finally:
            agent.stop()


# ---- random_op_stream -----------------------------------------------------------------------

FUNCS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce")
DTYPES = ("ncclFloat32", "ncclBfloat16", "ncclFloat16", "ncclInt64", "ncclUint8")


def produce_random(ops: int, seed: int) -> None:
    """Publish `ops` collectives of random shape through the plugin, then finalize."""
    from comminsight.sim.abi import load_plugin
    from comminsight_gen.abi.nccl_profiler_v5 import EventState

    rng = random.Random(seed)
    abi = load_plugin(str(PLUGIN), 5)
    mask = abi.new_activation_mask()
    comms = [abi.init(mask, 0xC0FFEE00 + seed * 16 + i, f"random:{i}", 1, 2, 0) for i in range(4)]
    seqs = [0] * len(comms)
    tick = 1_000_000
    for _ in range(ops):
        c = rng.randrange(len(comms))
        channels = rng.randint(1, 8)
        coll = {
            "seq": seqs[c],
            "func": rng.choice(FUNCS),
            "send_buff": 0x1000,
            "recv_buff": 0x2000,
            "count": rng.randint(1, 1 << 24),
            "root": 0,
            "datatype": rng.choice(DTYPES),
            "n_channels": channels,
            "n_warps": 8,
            "algo": rng.choice(("RING", "TREE")),
            "proto": rng.choice(("SIMPLE", "LL", "LL128")),
        }
        seqs[c] += 1
        op = abi.start_coll(comms[c].context, None, None, 0, coll)
        abi.stop(op)
        tick += rng.randint(1_000, 5_000_000)
        handles = [
            abi.start_kernel_ch(comms[c].context, op, ch, tick + ch) for ch in range(channels)
        ]
        for h in handles:
            abi.record_state(
                h, EventState.KERNEL_CH_STOP, ptimer=tick + rng.randint(500, 4_000_000)
            )
            abi.stop(h)
    for comm in comms:
        abi.finalize(comm.context)


def random_op_stream(work: Path, agent_cls, emit, ops: int, idle_s: float):
    home = work / "home"
    with shm_dir() as shm:
        agent = agent_cls(home, COMMINSIGHT_PROFILER_SHM_DIR=shm, **IDLE_DEFAULTS).start()
        drain_stderr(agent)
        try:
            env = {**producer_env(home, shm), "PYTHONPATH": str(ROOT)}
            with Sampler(agent.proc.pid) as sampler:
                cpu0, t0 = proc_cpu_s(agent.proc.pid), time.monotonic()
                producers = [
                    subprocess.Popen(
                        [sys.executable, __file__, "--produce-random", str(ops), str(seed)],
                        env=env,
                    )
                    for seed in (1, 2)
                ]
                for p in producers:
                    if p.wait() != 0:
                        raise RuntimeError(f"a random-stream producer exited {p.returncode}")
                busy = 100.0 * (proc_cpu_s(agent.proc.pid) - cpu0) / (time.monotonic() - t0)
                wait_for(lambda: regions_left(home) == 0, "the Agent kept the producers' regions")
                settle(agent, home)
            emit("agent_cpu_busy_percent", round(busy, 2), "%", "random_op_stream", ops=2 * ops)
            measure(agent, sampler, "random_op_stream", idle_s, emit, ops=2 * ops, **shm_detail())
        finally:
            agent.stop()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--produce-random":
    produce_random(int(sys.argv[2]), int(sys.argv[3]))
