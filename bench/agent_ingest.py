"""Agent ingest: how fast the Agent drains the Profilers' SHM rings, and how far behind it runs.

Producers are real: the C driver of profiler/bench/hot_path.c replays NCCL's event trees into
the real plugin (dist/libnccl-profiler-comminsight.so), which publishes op records into its
SHM ring exactly as under NCCL. The consumer is the Agent's own ingest pass
(comminsight.agent.node.ingest.NodeIngest.run_pass), in this process on one thread: discover
files, read new slots in batches through the generated numpy dtype, count overwritten slots,
fold the batches into the Prometheus collector's state, keep the API's recent-ops window
(COMMINSIGHT_AGENT_RECENT_OPS per process, default) and hand the ops per GPU to the engine
hook (the pass-through until the Semantic Engine lands).

Two phases:
- capacity: producers fill their rings (sized to hold every record) and exit; then the
  consumer drains them, as the Agent does for producers that died before it caught up.
  records_per_s is records consumed per second of the consumer thread's CPU time (its one
  core), without idle polls or a producer competing for the core diluting it.
- lag: producers paced at a steady total rate; the consumer polls every --poll-ms as the
  Agent does; for every batch, lag is the age of its oldest record (poll time less the
  record's complete_mono_ns, both CLOCK_MONOTONIC). lag_ms is the p99 over batches.

Budget (architecture §8): >= 2 M records/s on one core, lag < 100 ms.
Prints JSON lines {"bench","metric","value","unit"}.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from profiler_hot_path import DEFAULT_PLUGIN, build_tools, ensure_plugin, plugin_env

from comminsight.agent.metrics.node import NodeMetrics
from comminsight.agent.node.ingest import NodeIngest
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.recent_ops import RecentOps
from comminsight.agent.steps.engine_hook import PassThroughEngine
from comminsight_gen.abi import shm_v1
from comminsight_gen.config_v1 import ConfigV1

MASK = 0x46  # Coll|P2p|KernelCh: the Profiler's default
RING_SLOTS = 1 << 20
OP_KINDS = [shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P]


def emit(metric: str, value: float, unit: str) -> None:
    line = {"bench": "agent_ingest", "metric": metric, "value": round(value, 3), "unit": unit}
    print(json.dumps(line, separators=(",", ":")), flush=True)


def hold_agent_lock(home: Path):
    """Stand in for the Agent: the Profilers see it is there and leave their files to it."""
    (home / "metadata").mkdir(parents=True, exist_ok=True)
    f = open(home / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held for the run
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def start_producers(driver: Path, plugin: Path, home: Path, n: int, count: int, rate: int):
    env = plugin_env(str(home), MASK, None)  # the Profiler's default GPU timing
    env["COMMINSIGHT_PROFILER_RING_SLOTS"] = str(RING_SLOTS)
    cmd = [str(driver), str(plugin), "--n", str(count), "--warmup", "0"]
    if rate:
        cmd += ["--rate", str(rate)]
    return [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL) for _ in range(n)]


def consume(home: Path, procs: list, poll_s: float) -> dict:
    """Run the Agent's ingest loop until every producer exited and its ring is drained."""
    producers = ProducerSet(home)
    metrics = NodeMetrics()
    ingest = NodeIngest(
        producers, metrics, RecentOps(ConfigV1().agent_recent_ops), PassThroughEngine(), "bench"
    )
    lags_ms: list[float] = []
    cpu = 0.0
    ops = 0
    while True:
        running = any(p.poll() is None for p in procs)
        t0 = time.thread_time()
        now = time.monotonic_ns()
        batches = ingest.run_pass(now)
        cpu += time.thread_time() - t0
        for b in batches:
            ops += int(np.isin(b.records["kind"], OP_KINDS).sum())
            oldest = int(b.records["complete_mono_ns"].min())
            if oldest:
                lags_ms.append(max(0, now - oldest) / 1e6)
        if not running and not batches:
            break
        if poll_s:
            time.sleep(poll_s)
    for p in procs:
        if p.returncode:
            sys.exit(f"agent_ingest: a producer exited {p.returncode}")
    producers.close()
    return {
        "records": producers.counters.records,
        "ops": ops,
        "lost": producers.counters.records_lost,
        "cpu_s": cpu,
        "lags_ms": lags_ms,
        "ops_in_metrics": metrics_total(metrics),
    }


def metrics_total(metrics: NodeMetrics) -> int:
    """comminsight_ops_total summed over its series: the records the collector counted."""
    text = metrics.render().decode()
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("comminsight_ops_total{")
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin", type=Path, default=DEFAULT_PLUGIN)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument(
        "--capacity-n", type=int, default=RING_SLOTS - 16, help="collectives per producer"
    )
    ap.add_argument("--rate", type=int, default=100_000, help="total records/s in the lag phase")
    ap.add_argument("--lag-s", type=float, default=5.0, help="length of the lag phase")
    ap.add_argument("--poll-ms", type=float, default=10.0)
    args = ap.parse_args()
    plugin = ensure_plugin(args.plugin)
    driver, _ = build_tools()

    with tempfile.TemporaryDirectory(prefix="ci-agent-ingest-") as tmp:
        home = Path(tmp) / "capacity"
        lock = hold_agent_lock(home)
        procs = start_producers(driver, plugin, home, args.producers, args.capacity_n, 0)
        for p in procs:
            p.wait()
        cap = consume(home, procs, 0.0)
        lock.close()

        home = Path(tmp) / "lag"
        lock = hold_agent_lock(home)
        per_producer = max(1, args.rate // args.producers)
        count = int(per_producer * args.lag_s)
        procs = start_producers(driver, plugin, home, args.producers, count, per_producer)
        lag = consume(home, procs, args.poll_ms / 1e3)
        lock.close()

    emit("records_per_s", cap["records"] / cap["cpu_s"], "records/s")
    emit("capacity_records", cap["records"], "records")
    emit("capacity_records_lost", cap["lost"], "records")
    emit("capacity_metrics_ops_match", float(cap["ops_in_metrics"] == cap["ops"]), "bool")
    lags = np.array(lag["lags_ms"])
    emit("lag_ms", float(np.percentile(lags, 99)), "ms")
    emit("lag_p50_ms", float(np.percentile(lags, 50)), "ms")
    emit("lag_max_ms", float(lags.max()), "ms")
    emit("lag_phase_records", lag["records"], "records")
    emit("lag_phase_records_lost", lag["lost"], "records")
    emit("lag_phase_cpu_fraction", lag["cpu_s"] / args.lag_s, "cores")


if __name__ == "__main__":
    main()
