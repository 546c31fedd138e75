"""What Inject's optimizer-step marker costs a training Step (it is on by default).

Measured, one JSON line each:
- `marker_us_median`, `marker_us_p99`: one call of the hook torch runs after every
  optimizer step (`StepMarkers.on_step`), writing its `step` line to a real `MetadataFile`
  on disk (this machine's temporary directory: O_APPEND, one write a line), `MARKER_CALLS`
  calls in a tight loop, each timed on its own after `WARMUP` untimed ones. Caches are hot
  here, as they never are in training;
- `marker_us_after_step_median`, `marker_us_after_step_p99`: the same call timed right after
  a real `torch.optim.AdamW.step()` of a small model (`Linear(256, 256)` x 4 on one CPU
  thread, gradients set once), as torch runs it in training: the step's arithmetic has
  evicted the interpreter's caches, which costs the marker several times its hot figure;
- `optimizer_step_us_median`: that plain optimizer step, for scale;
- `marker_us_through_torch_median`: the hook installed through torch's own global post-hook
  (`register_optimizer_step_post_hook`): the median `step()` with it less the median
  without (runs alternated; a difference of medians, so noisier, a check of the above).
The three torch lines are skipped, with a word on stderr, where torch is not importable.

Computed, not measured: `overhead_fraction_10ms_step`, `_100ms_step`, `_1s_step`: the
marker's share of a Step of that length, one marker per Step (one optimizer step per Step,
gradient accumulation or not): the largest p99 measured above / the Step's length. That is
host time; on a GPU the host usually runs ahead of the kernels it queued, so the share of
the Step's wall time is at most this.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MARKER_CALLS = 20_000
WARMUP = 500
TORCH_STEPS = 2_000
MODEL = "4x Linear(256,256), AdamW, 1 CPU thread"
STEP_LENGTHS_S = {"10ms": 0.010, "100ms": 0.100, "1s": 1.0}


def emit(metric: str, value, unit: str, **extra) -> None:
    line = {"bench": "inject_step_markers", "metric": metric, "value": value, "unit": unit}
    print(json.dumps({**line, **extra}), flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_markers(home: Path) -> list[float]:
    from comminsight.inject.metadata import MetadataFile
    from comminsight.inject.step_markers import StepMarkers

    sink = MetadataFile(home, {"inject_version": "bench", "step_markers": True})
    markers = StepMarkers(sink)
    optimizer = types.SimpleNamespace()  # on_step reads only the optimizer's class name
    clock = time.perf_counter_ns
    samples = []
    try:
        for i in range(WARMUP + MARKER_CALLS):
            t0 = clock()
            markers.on_step(optimizer, (), {})
            t1 = clock()
            if i >= WARMUP:
                samples.append((t1 - t0) / 1e3)
        lines = sink.path.read_bytes().count(b"\n")
    finally:
        sink.close()
    if lines != WARMUP + MARKER_CALLS + 1:  # and the process line
        raise SystemExit(f"expected {WARMUP + MARKER_CALLS + 1} lines in {sink.path}, got {lines}")
    return samples


def time_torch(home: Path) -> dict[str, list[float]] | None:
    try:
        import torch
    except ImportError:
        print(
            "inject_step_markers: torch is not importable: no optimizer step timed", file=sys.stderr
        )
        return None
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from comminsight.inject.metadata import MetadataFile
    from comminsight.inject.step_markers import StepMarkers

    torch.manual_seed(0)
    torch.set_num_threads(1)  # one core: the figure does not depend on the machine's width
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    model(torch.randn(8, 256)).sum().backward()  # gradients once: step() alone is timed
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sink = MetadataFile(home, {"inject_version": "bench", "step_markers": True})
    markers = StepMarkers(sink)
    clock = time.perf_counter_ns
    times: dict[str, list[float]] = {"plain": [], "hooked": [], "after_step": []}
    try:
        for i in range(WARMUP // 10 + TORCH_STEPS):
            optimizer.step()
            t0 = clock()
            markers.on_step(optimizer, (), {})
            t1 = clock()
            t2 = clock()
            optimizer.step()
            t3 = clock()
            handle = register_optimizer_step_post_hook(markers.on_step)
            t4 = clock()
            optimizer.step()
            t5 = clock()
            handle.remove()
            if i >= WARMUP // 10:
                times["after_step"].append((t1 - t0) / 1e3)
                times["plain"].append((t3 - t2) / 1e3)
                times["hooked"].append((t5 - t4) / 1e3)
    finally:
        sink.close()
    return times


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ci-bench-markers-") as tmp:
        samples = time_markers(Path(tmp) / "markers")
        worst = percentile(samples, 0.99)
        emit("marker_us_median", round(statistics.median(samples), 3), "us", calls=MARKER_CALLS)
        emit("marker_us_p99", round(worst, 3), "us", calls=MARKER_CALLS)
        timed = time_torch(Path(tmp) / "torch")
    if timed is not None:
        after, n = timed["after_step"], len(timed["after_step"])
        emit("marker_us_after_step_median", round(statistics.median(after), 3), "us", calls=n)
        emit("marker_us_after_step_p99", round(percentile(after, 0.99), 3), "us", calls=n)
        worst = max(worst, percentile(after, 0.99))
        step = statistics.median(timed["plain"])
        emit("optimizer_step_us_median", round(step, 1), "us", model=MODEL)
        through = statistics.median(timed["hooked"]) - step
        emit("marker_us_through_torch_median", round(through, 3), "us", steps=n)
    for name, seconds in STEP_LENGTHS_S.items():
        fraction = worst * 1e-6 / seconds
        emit(f"overhead_fraction_{name}_step", float(f"{fraction:.3g}"), "fraction", of_us=worst)


if __name__ == "__main__":
    main()
