"""Semantic Engine soak: a long TP x PP x DP job through a real Agent, its memory sampled.

Eight simulated ranks (tensor 2 x pipeline 2 x data 2, a 7B-class model of 32 layers: about 68
ops per GPU per Step) drive the real plugin (dist/libnccl-profiler-comminsight.so), which
publishes every op into its SHM ring; a real `comminsight-agent` process ingests the rings and
runs the live Semantic Engine on every GPU (step summaries and checkpoints under
semantics/step/), for --minutes of simulated training at --time-scale (< 1: faster than real
time). Simulated time is the job's own clock: the span of its Steps (ground truth) divided by
the time scale. How many Steps make --minutes is measured first, by a short run of the same job
without an Agent (its shortest Step: the job's Steps take at least as long). On a small
machine the ranks spend minutes building their plans before the first op; that is not part of
the measurement.

While the job runs, the Agent's memory is sampled (/proc) every --sample-s and its health read
(/api/v1/health: the engine's lag and failures). Warm-up is the first quarter of the time from
the first op ingested to the end (templates are chosen, allocators reach their working size);
agent_rss_growth_mib is the least-squares slope of the Agent's own resident memory (RssAnon)
over the samples after warm-up times their duration (method: fitted_slope_x_duration), which a
single late sample cannot swing. The Agent gives freed heap back every few seconds, so
its RSS saws between what it uses and the peaks of the cuts in between:
agent_rss_floor_growth_mib fits each minute's lowest sample instead, which a leak raises and
the saw's phase does not. The Profilers' SHM rings that the Agent maps are apart
(agent_vmrss_*, agent_shm_resident_end_mib): their pages count in its VmRSS once it has read
them, so VmRSS rises by up to the rings' size (8 x 16 MiB by default) during the first pass
through each ring, whatever the Agent does. engine_lag_ms is the median, after warm-up, of how
far the engine's newest placed op trails the newest op ingested (completion times): at least
the span of the engine's reorder window (256 ops). When the job has ended and the Agent has
sealed every GPU's summaries, steps recovered per GPU are counted against the Steps the job ran,
and ops ingested read from the Agent's metrics.

Nothing here asserts a timing. Prints JSON lines {"bench","metric","value","unit"}.
`make bench-engine-soak`; `--minutes 1` for a quick check.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import msgspec
import numpy as np

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.truth import read_ground_truth
from comminsight_client import Client
from comminsight_client.api.health import get_health
from comminsight_client.models import Health
from comminsight_client.types import Unset
from comminsight_gen.abi import shm_v1
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models.step_summary_v1 import StepSummary

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
RANKS, TP, PP = 8, 2, 2
MODEL = {"model_params": 7_000_000_000, "layers": 32}
CALIBRATION_STEPS = 30
SEAL_TIMEOUT_S = 180.0
SLOT_BYTES = shm_v1.OP_SLOT_DTYPE.itemsize
STEP_SUMMARY = msgspec.json.Decoder(StepSummary)


def emit(metric: str, value, unit: str, **extra) -> None:
    value = round(value, 3) if isinstance(value, float) else value
    line = {"bench": "engine_soak", "metric": metric, "value": value, "unit": unit, **extra}
    print(json.dumps(line, separators=(",", ":")), flush=True)


def job(home: Path, steps: int, time_scale: float) -> SimConfig:
    return SimConfig(
        plugin=str(PLUGIN),
        home=str(home),
        workload="tp-pp-dp",
        ranks=RANKS,
        tp=TP,
        pp=PP,
        steps=steps,
        time_scale=time_scale,
        timeout_s=24 * 3600.0,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
        **MODEL,
    )


def simulated_s(run_dir: Path, time_scale: float) -> tuple[float, int]:
    """The job's simulated duration (span of rank 0's Steps / time scale), and its Steps."""
    truth = read_ground_truth(run_dir)[0]
    steps = truth.records["step"]
    span_ns = steps[-1]["end_ns"] - steps[0]["start_ns"]
    return span_ns / 1e9 / time_scale, len(steps)


def steps_for(minutes: float, time_scale: float) -> tuple[int, float]:
    """How many measured Steps make at least `minutes` of simulated training, and the
    simulated seconds per Step that assumes: the shortest steady Step of a short run of the
    same job without an Agent. A Step never takes less than the model says, however idle the
    machine, while a busy machine stretches them: the shortest one errs on the long side."""
    with tempfile.TemporaryDirectory(prefix="ci-soak-calibration-") as tmp:
        result = run_simulation(job(Path(tmp), CALIBRATION_STEPS, time_scale))
        if result.errors:
            sys.exit(f"engine_soak: the calibration run failed: {result.errors}")
        steps = read_ground_truth(result.run_dir)[0].records["step"]
    per_step = min(s["end_ns"] - s["start_ns"] for s in steps if not s["warmup"]) / 1e9
    per_step /= time_scale
    return max(1, math.ceil(minutes * 60 / per_step)), per_step


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_agent(home: Path, listen: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.update(COMMINSIGHT_HOME=str(home), COMMINSIGHT_AGENT_LISTEN=listen)
    log = open(home / "agent.log", "w")  # noqa: SIM115 - the Agent's for its whole run
    return subprocess.Popen(
        [sys.executable, "-m", "comminsight.agent.main"], env=env, stdout=log, stderr=log
    )


def get(listen: str, path: str, timeout_s: float = 5.0) -> bytes | None:
    try:
        with urllib.request.urlopen(f"http://{listen}{path}", timeout=timeout_s) as response:
            return response.read()
    except OSError:
        return None


def health(listen: str, timeout_s: float = 5.0) -> Health | None:
    """The Agent's /api/v1/health through the generated client; None while it cannot answer
    (not listening yet, or 503 while it starts or stops)."""
    try:
        with Client(base_url=f"http://{listen}", timeout=httpx.Timeout(timeout_s)) as c:
            answer = get_health.sync(client=c)
    except (httpx.HTTPError, OSError):
        return None
    return answer if isinstance(answer, Health) else None


def wait_for_agent(listen: str, agent: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while health(listen) is None:
        if agent.poll() is not None or time.monotonic() > deadline:
            sys.exit("engine_soak: the Agent did not come up (see agent.log in the home)")
        time.sleep(0.2)


def rss_mib(pid: int) -> dict[str, float] | None:
    """The process's resident memory: all of it (VmRSS), its own (RssAnon), and the pages of
    mapped shared memory it has touched (RssShmem: the Profilers' SHM rings)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssShmem"):
            fields[key] = int(value.split()[0]) / 1024
    return fields if len(fields) == 3 else None


class Sampler(threading.Thread):
    """The Agent's RSS and the engine's lag, every `every_s`, until stopped."""

    def __init__(self, pid: int, listen: str, every_s: float) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.pid, self.listen, self.every_s = pid, listen, every_s
        self.rss: list[tuple[float, dict[str, float]]] = []  # (s since start, rss_mib())
        self.lag: list[tuple[float, float]] = []  # (s since start, ms), from the first op on
        self.failures = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stopped.wait(self.every_s):
            now = time.monotonic() - t0
            rss = rss_mib(self.pid)
            if rss is not None:
                self.rss.append((now, rss))
            answer = health(self.listen)
            if answer is None or isinstance(answer.semantic_engine, Unset):
                continue
            engine = answer.semantic_engine
            if engine.lag_ms is not None:
                self.lag.append((now, engine.lag_ms))
            self.failures = max(self.failures, engine.failures_total)


def metric_sum(text: str, name: str) -> float:
    """The sum of a Prometheus series over its labels."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def sealed_summaries(home: Path) -> dict[int, int]:
    """Step summaries per global rank, of the sealed live files."""
    out = {}
    for path in (home / "semantics" / "step").glob("live-*.jsonl"):
        lines = path.read_bytes().splitlines()
        if lines:
            out[STEP_SUMMARY.decode(lines[0]).global_rank] = len(lines)
    return out


def fitted_growth(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(least-squares slope in MiB/s, the samples' duration in s, slope x duration)."""
    t = np.array([s[0] for s in samples])
    mib = np.array([s[1] for s in samples])
    slope = float(np.polyfit(t, mib, 1)[0])
    duration = float(t[-1] - t[0])
    return slope, duration, slope * duration


def minute_floors(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(the minute's start, its lowest value) for each whole minute of the samples."""
    if not samples:
        return []
    start = samples[0][0]
    by_minute: dict[int, list[float]] = {}
    for t, mib in samples:
        by_minute.setdefault(int((t - start) // 60), []).append(mib)
    last = int((samples[-1][0] - start) // 60)  # the last minute is not whole: left out
    return [(start + 60 * m, min(v)) for m, v in sorted(by_minute.items()) if m < last]


def report_rss(samples: list[tuple[float, dict[str, float]]], first_op_s: float | None) -> None:
    """The Agent's own memory (RssAnon) is what must stay flat; the SHM rings it maps are the
    Profilers' (COMMINSIGHT_PROFILER_RING_SLOTS x 256 bytes each), resident in its RSS once it
    has read every slot of them, so VmRSS rises by up to their size during the first pass
    through each ring, then stays."""
    first_op_s = first_op_s if first_op_s is not None else samples[0][0] if samples else 0.0
    warm_s = first_op_s + (samples[-1][0] - first_op_s) / 4 if samples else 0.0
    after = [s for s in samples if s[0] >= warm_s]
    if len(after) < 8:
        emit("agent_rss_growth_mib", None, "MiB", note="too few RSS samples")
        return
    series = {key: [(t, rss[key]) for t, rss in after] for key in ("RssAnon", "VmRSS")}
    slope, duration, growth = fitted_growth(series["RssAnon"])
    emit(
        "agent_rss_growth_mib",
        growth,
        "MiB",
        method="fitted_slope_x_duration",
        rss="RssAnon (the Agent's own memory; SHM rings apart)",
        after_warmup_s=round(after[0][0], 1),
        over_s=round(duration, 1),
    )
    emit("agent_rss_slope_mib_per_h", slope * 3600, "MiB/h", rss="RssAnon")
    # The Agent hands freed heap back every few seconds (heap_trim), so its RSS saws between
    # what is in use and the peaks of the cuts in between; a leak raises the floor, the saw's
    # phase at the window's ends only tilts the fit. The floor: each minute's lowest sample.
    floors = minute_floors(series["RssAnon"])
    if len(floors) >= 3:
        _, floor_span, floor_growth = fitted_growth(floors)
        emit(
            "agent_rss_floor_growth_mib",
            floor_growth,
            "MiB",
            method="fitted_slope_x_duration of each minute's lowest RssAnon",
            minutes=len(floors),
            first_mib=round(floors[0][1], 3),
            last_mib=round(floors[-1][1], 3),
            floors_mib=[round(mib, 1) for _, mib in floors],
        )
    emit("agent_rss_after_warmup_mib", after[0][1]["RssAnon"], "MiB", rss="RssAnon")
    emit("agent_rss_end_mib", after[-1][1]["RssAnon"], "MiB", rss="RssAnon")
    emit("agent_rss_max_mib", max(s[1]["RssAnon"] for s in samples), "MiB", rss="RssAnon")
    _, _, total_growth = fitted_growth(series["VmRSS"])
    emit(
        "agent_vmrss_growth_mib",
        total_growth,
        "MiB",
        method="fitted_slope_x_duration",
        rss="VmRSS (with the SHM ring pages read so far)",
    )
    emit("agent_vmrss_end_mib", after[-1][1]["VmRSS"], "MiB")
    rings = RANKS * msgspec.convert({"home": "/"}, ConfigV1).profiler_ring_slots * SLOT_BYTES
    emit(
        "agent_shm_resident_end_mib",
        after[-1][1]["RssShmem"],
        "MiB",
        rss="RssShmem",
        rings_mib=rings / 2**20,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="simulated training time")
    ap.add_argument("--time-scale", type=float, default=0.5, help="< 1: faster than real time")
    ap.add_argument("--sample-s", type=float, default=1.0)
    ap.add_argument("--keep", help="run in this directory and keep it (default: a temporary one)")
    args = ap.parse_args()
    if not PLUGIN.exists():
        sys.exit(f"engine_soak: {PLUGIN} is missing; run `make build-profiler`")
    steps, per_step = steps_for(args.minutes, args.time_scale)
    if args.keep:
        home = Path(args.keep)
        home.mkdir(parents=True, exist_ok=True)
        run(home, steps, per_step, args)
    else:
        with tempfile.TemporaryDirectory(prefix="ci-engine-soak-") as tmp:
            run(Path(tmp), steps, per_step, args)


def run(home: Path, steps: int, per_step: float, args) -> None:
    listen = f"127.0.0.1:{free_port()}"
    agent = start_agent(home, listen)
    try:
        wait_for_agent(listen, agent)
        sampler = Sampler(agent.pid, listen, args.sample_s)
        sampler.start()
        started = time.monotonic()
        result = run_simulation(job(home, steps, args.time_scale))
        wall_s = time.monotonic() - started
        sampler.stopped.set()
        sampler.join()
        if result.errors:
            sys.exit(f"engine_soak: the simulation failed: {result.errors}")
        deadline = time.monotonic() + SEAL_TIMEOUT_S
        while len(sealed_summaries(home)) < RANKS and time.monotonic() < deadline:
            time.sleep(0.5)
        metrics = (get(listen, "/metrics") or b"").decode()
    finally:
        agent.terminate()
        agent.wait(timeout=60)

    seconds, job_steps = simulated_s(result.run_dir, args.time_scale)
    ops = metric_sum(metrics, "comminsight_ops_total")
    tag = {"ranks": RANKS, "tp": TP, "pp": PP, "dp": RANKS // (TP * PP)}
    emit("simulated_training_s", seconds, "s", time_scale=args.time_scale, steps=job_steps, **tag)
    emit("wall_s", wall_s, "s")
    emit("calibrated_simulated_s_per_step", per_step, "s", stat="shortest_steady_step")
    emit("ops_ingested", int(ops), "ops")
    emit("ops_ingested_per_wall_s", ops / wall_s, "ops/s")
    report_rss(sampler.rss, sampler.lag[0][0] if sampler.lag else None)
    warm = len(sampler.lag) // 4
    lags = [ms for _, ms in sampler.lag[warm:]]
    if lags:
        emit("engine_lag_ms", statistics.median(lags), "ms", stat="median_after_warmup")
        emit("engine_lag_p99_ms", float(np.percentile(lags, 99)), "ms")
        emit("engine_lag_max_ms", max(lags), "ms")
        # a backlog that grows holds more ops in memory: the Agent's growth is then the
        # engine falling behind (a starved CPU), not a leak
        lag_slope, _, _ = fitted_growth(sampler.lag[warm:])
        emit("engine_lag_slope_ms_per_min", lag_slope * 60, "ms/min", stat="fitted_after_warmup")
    else:
        emit("engine_lag_ms", None, "ms", note="the health API gave no engine lag")
    recovered = sealed_summaries(home)
    truths = read_ground_truth(result.run_dir)
    for rank in range(RANKS):
        expected = len(truths[rank].records["step"])
        emit("steps_recovered", recovered.get(rank, 0), "steps", gpu=rank, expected=expected)
    emit(
        "engine_failures",
        int(metric_sum(metrics, "comminsight_semantic_engine_failures_total")),
        "failures",
    )
    emit(
        "engine_restarts",
        int(metric_sum(metrics, "comminsight_semantic_engine_restarts_total")),
        "restarts",
    )


if __name__ == "__main__":
    main()
