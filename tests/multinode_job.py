"""A multi-node job on one machine for tests: a master `comminsight-agent` and slave agents as
separate processes on 127.0.0.1, each slave with its own COMMINSIGHT_HOME, and a simulated
NCCL job whose ranks are spread over the slaves' homes (SimConfig.node_homes) so that each
slave sees only its node's ranks of communicators that span nodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import forked_python
import httpx
from ports import free_port
from waiting import wait_until

from comminsight.sim import SimConfig, parse_fault

TOKEN = "multinode-token"
STALE_MS = 2000
# Generous against a loaded 2-core CI machine: six rank processes and four agents start
# together, and a rank that starts late must not look hung or dead.
HANG_TIMEOUT_S = 2.0
SIM_ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", str(HANG_TIMEOUT_S)),
)


def agent_env(home: Path, mode: str, node: str, listen: str, **extra) -> dict:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_MODE": mode,
        "COMMINSIGHT_AGENT_NODE_NAME": node,
        "COMMINSIGHT_AGENT_LISTEN": listen,
        "COMMINSIGHT_AGENT_TOKEN": TOKEN,
        "COMMINSIGHT_AGENT_POLL_INTERVAL_MS": "50",
        "COMMINSIGHT_AGENT_REPORT_INTERVAL_MS": "100",
        "COMMINSIGHT_AGENT_MASTER_STALE_MS": str(STALE_MS),
        "COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS": "5000",
        "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S": str(HANG_TIMEOUT_S),
        "COMMINSIGHT_COMMON_ARCHIVE_INTERVAL_S": "3600",
        **extra,
    }


@dataclass
class AgentProc:
    home: Path
    mode: str
    node: str
    listen: str
    extra: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    logs: list[str] = field(default_factory=list)

    def start(self) -> AgentProc:
        log = open(self.home / f"agent-{len(self.logs)}.log", "w")  # noqa: SIM115
        self.logs.append(log.name)
        self.proc = forked_python.popen(
            [sys.executable, "-m", "comminsight.agent.main"],
            env=agent_env(self.home, self.mode, self.node, self.listen, **self.extra),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def log_text(self) -> str:
        return "".join(Path(p).read_text() for p in self.logs if Path(p).exists())

    def get(self, path: str, **params):
        return httpx.get(f"http://{self.listen}{path}", params=params, timeout=10)

    def wait_ready(self, timeout_s: float = 120) -> None:  # a loaded box starts it slowly
        def ready() -> bool:
            assert self.proc.poll() is None, f"{self.node} exited:\n{self.log_text()}"
            return (
                self.get("/api/v1/health").status_code == 200
                and (self.home / "fifos" / "hang-events.fifo").exists()
            )

        wait_until(ready, timeout_s, lambda: f"{self.node} to be ready:\n{self.log_text()}")


@dataclass
class Job:
    master: AgentProc
    slaves: list[AgentProc]
    grpc: str

    def all(self) -> list[AgentProc]:
        return [self.master, *self.slaves]

    def stop(self) -> None:
        for agent in self.slaves + [self.master]:
            agent.stop()


def start_job(root: Path, n_slaves: int, master_extra=None, slave_extra=None) -> Job:
    grpc = f"127.0.0.1:{free_port()}"
    (root / "master").mkdir()
    master = AgentProc(
        root / "master",
        "master",
        "master",
        f"127.0.0.1:{free_port()}",
        {"COMMINSIGHT_AGENT_MASTER_LISTEN": grpc, **(master_extra or {})},
    ).start()
    slaves = []
    for i in range(n_slaves):
        home = root / f"node-{i}"
        home.mkdir()
        slaves.append(
            AgentProc(
                home,
                "slave",
                f"node-{i}",
                f"127.0.0.1:{free_port()}",
                {"COMMINSIGHT_AGENT_MASTER_ADDR": grpc, **(slave_extra or {})},
            ).start()
        )
    job = Job(master, slaves, grpc)
    for agent in job.all():
        agent.wait_ready()
    return job


RANKS, NODES = 6, 3  # sim_config's job: two ranks on each of three slaves


def sim_config(plugin, root, job, faults=(), steps=3, time_scale=0.02, hold=6.0):
    return SimConfig(
        plugin=str(plugin),
        home=str(root / "sim"),
        workload="ddp",
        ranks=RANKS,
        nodes=NODES,
        node_homes=tuple(str(s.home) for s in job.slaves),
        steps=steps,
        time_scale=time_scale,
        hang_hold_s=hold,
        faults=tuple(parse_fault(f) for f in faults),
        env=SIM_ENV,
    )
