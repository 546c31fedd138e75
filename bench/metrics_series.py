"""How many /metrics series a node serves per rank, at each metrics level.

A simulated Megatron job (64 ranks, TP 8 x PP 2 x DP 4; then a node's 8 ranks, TP 2 x PP 2
x DP 2; communicators named as Inject names them) runs through the real plugin while the
Agent's own ingest (ProducerSet, update_from_producers) reads every rank's SHM region into two
NodeMetrics, one at level job (the default) and one at level rank; the exposition of each is
counted at the end: every sample line is a series. Series of the job (those with a job_id
label) are what grows with ranks; the node's own series (agent health, build, process) do not.

Prints JSON lines {"bench","metric","value","unit", ...}: metrics_series_per_rank at each
level (the job's series over its ranks, and every series over its ranks), the page's bytes
plain and gzip-compressed (what a scrape moves).

    python bench/metrics_series.py [--steps 3]     (make bench-metrics)
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from comminsight.agent.metrics.level import JOB, RANK
from comminsight.agent.metrics.node import NodeMetrics, update_from_producers
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.sim import SimConfig, run_simulation

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"


def emit(metric: str, value, unit: str, **extra) -> None:
    line = {"bench": "metrics_series", "metric": metric, "value": value, "unit": unit, **extra}
    print(json.dumps(line), flush=True)


def simulate_and_ingest(config: SimConfig, levels: tuple[str, ...]) -> dict[str, NodeMetrics]:
    """Run the job while the Agent's own passes read every rank's region, as a running Agent
    does (its lock held, so the Profilers leave their regions to it), into a NodeMetrics per
    level (the expiry far off: the job ends, its series are what is counted)."""
    home = Path(config.home)
    (home / "metadata").mkdir(parents=True, exist_ok=True)
    lock = open(home / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held to the end
    fcntl.flock(lock, fcntl.LOCK_EX)
    metrics = {level: NodeMetrics(expire_after_s=86_400, level=level) for level in levels}
    producers = ProducerSet(home)
    result: dict = {}
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    sim.start()
    try:
        idle = 0
        while sim.is_alive() or idle < 3:
            now = time.monotonic_ns()
            batches = producers.poll(now)
            for m in metrics.values():
                update_from_producers(m, producers, batches, now)
            idle = 0 if batches or sim.is_alive() else idle + 1
            time.sleep(0.05)
    finally:
        sim.join()
        producers.close()
        lock.close()
    if result["sim"].errors:
        raise RuntimeError(f"the simulation failed: {result['sim'].errors}")
    return metrics


def series(text: str) -> tuple[int, int]:
    """(every series, those of a job: with a job_id label) of an exposition."""
    every = of_job = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            every += 1
            of_job += "job_id" in sample.labels
    return every, of_job


SHAPES = (
    # the job of the budget: 64 ranks, every one on this one node's Agent
    {"ranks": 64, "tp": 8, "pp": 2},
    # a node of a large job as a fleet runs it: 8 ranks per node's Agent
    {"ranks": 8, "tp": 2, "pp": 2},
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    for shape in SHAPES:
        with tempfile.TemporaryDirectory(prefix="metrics-series-") as tmp:
            config = SimConfig(
                plugin=str(PLUGIN),
                home=tmp,
                workload="megatron",
                steps=args.steps,
                grad_accum=2,
                time_scale=0.01,
                comm_names=True,
                env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
                **shape,
            )
            labels = {**shape, "workload": "megatron"}
            for level, m in simulate_and_ingest(config, (JOB, RANK)).items():
                text = m.render().decode()
                every, of_job = series(text)
                emit(
                    "metrics_series_per_rank",
                    round(of_job / shape["ranks"], 2),
                    "series",
                    level=level,
                    counted="series with a job_id label",
                    **labels,
                )
                emit(
                    "metrics_series_per_rank_all",
                    round(every / shape["ranks"], 2),
                    "series",
                    level=level,
                    counted="every series of the page",
                    **labels,
                )
                body = text.encode()
                emit("metrics_page_bytes", len(body), "bytes", level=level, **labels)
                gz = len(gzip.compress(body))
                emit("metrics_page_gzip_bytes", gz, "bytes", level=level, **labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
