"""Profiler hot path: CPU time per collective that a profiler plugin adds over an empty one.

Builds profiler/bench/empty_plugin.c and profiler/bench/hot_path.c into build/bench/, then
runs the driver against the empty plugin and against the plugin under test (by default
dist/libnccl-profiler-comminsight.so, built with `make build-profiler` when missing),
alternating the two round after round so that machine noise hits both alike. Each value is a
median over rounds; "over empty" is the median of the per-round differences. architecture §8 budget:
<= 150 ns per collective above the empty plugin, 24 channel events included.

Prints JSON lines {"bench","metric","value","unit"}; the headline is
ns_per_collective_over_empty and ns_per_collective_ratio_over_empty (the plugin's time over the
empty one's): both plugins configured alike (mask Coll|P2p|KernelCh, one communicator thread),
the Profiler at its defaults, which time every op on the GPU, so both see the same events.
Supporting: the same with the Profiler's GPU timing sampled (_sampled,
COMMINSIGHT_PROFILER_GPU_TIMING=sampled: the empty plugin still has every op timed, the
Profiler a sample, gpu_timed_fraction_sampled says how many, and the driver, like NCCL, issues
KernelCh events only for ops whose mask had the bit), without KernelCh in the mask, with two
communicator threads at once, with KernelCh events from a proxy thread, process CPU (the
plugin's background threads included), and, when valgrind is installed, instructions per
collective (noise-free), at the defaults and sampled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "profiler" / "bench"
BUILD = ROOT / "build" / "bench"
DEFAULT_PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
CC = os.environ.get("CC", "gcc")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
INCLUDE = f"-I{ROOT / 'generated' / 'c' / 'include'}"

MASK_DEFAULT = 0x46  # Coll|P2p|KernelCh: the Profiler's default, GPU timing on
MASK_NO_KERNELCH = 0x06  # Coll|P2p
BUDGET_NS = 150.0
BUDGET_RATIO = 1.25
RUN_TIMEOUT_S = 600


def emit(metric: str, value: float, unit: str) -> None:
    line = {"bench": "profiler_hot_path", "metric": metric, "value": round(value, 2), "unit": unit}
    print(json.dumps(line, separators=(",", ":")), flush=True)


def fail(message: str) -> None:
    print(f"profiler_hot_path: {message}", file=sys.stderr)
    sys.exit(1)


# ---- building ----


def compile_c(args: list[str]) -> None:
    result = subprocess.run([CC, *CFLAGS, INCLUDE, *args], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"compiling failed: {' '.join(args)}\n{result.stderr}")


def build_tools() -> tuple[Path, Path]:
    """The driver and the empty baseline plugin, always rebuilt (a second of gcc)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    empty = BUILD / "empty_plugin.so"
    driver = BUILD / "hot_path"
    compile_c(["-fPIC", "-shared", str(SRC / "empty_plugin.c"), "-o", str(empty)])
    compile_c(["-pthread", str(SRC / "hot_path.c"), "-o", str(driver), "-ldl"])
    return driver, empty


def ensure_plugin(plugin: Path) -> Path:
    if plugin.exists():
        return plugin
    if plugin != DEFAULT_PLUGIN:
        fail(f"plugin {plugin} does not exist")
    print("profiler_hot_path: building the plugin (make build-profiler)", file=sys.stderr)
    result = subprocess.run(["make", "-C", str(ROOT), "build-profiler"])
    if result.returncode != 0 or not plugin.exists():
        fail(
            f"`make build-profiler` did not produce {plugin.relative_to(ROOT)}; "
            "nothing to benchmark (build the Profiler first, or pass --plugin PATH)"
        )
    return plugin


# ---- running ----


KERNEL_CH = 0x40


def plugin_env(home: str, mask: int, timing: str | None) -> dict[str, str]:
    """Only what the bench decides: no COMMINSIGHT_* from the caller's shell leaks in.
    timing None: the Profiler's default GPU timing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env["COMMINSIGHT_HOME"] = home
    env["COMMINSIGHT_AGENT_AUTOSTART"] = "0"
    env["COMMINSIGHT_PROFILER_EVENT_MASK"] = str(mask)
    if timing is not None:
        env["COMMINSIGHT_PROFILER_GPU_TIMING"] = timing
    return env


def run_driver(cmd: list[str], mask: int, timing: str | None) -> str:
    # a fresh home per run: logs left by one run must not slow or feed the next
    with tempfile.TemporaryDirectory(prefix="ci-bench-home-") as home:
        result = subprocess.run(
            cmd,
            env=plugin_env(home, mask, timing),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    if result.returncode != 0:
        fail(f"{' '.join(cmd)} exited {result.returncode}\n{result.stderr}")
    return result.stdout


def measure(driver: Path, plugin: Path, mask: int, extra: list[str], timing: str | None) -> dict:
    out = run_driver([str(driver), str(plugin), *extra], mask, timing)
    record = json.loads(out.strip().splitlines()[-1])
    # sampling moves the KernelCh bit op by op; every other bit stays as configured
    if record["mask"] & ~KERNEL_CH != mask & ~KERNEL_CH:
        fail(f"{plugin.name} set mask {record['mask']}, the bench asked for {mask}")
    return record


@dataclass
class Comparison:
    empty: float  # median over rounds
    plugin: float
    over: float  # median of per-round differences
    process_over: float
    ratio: float  # median of per-round ratios plugin / empty
    gpu_timed: float  # the plugin's ops that NCCL timed on the GPU, a fraction


def compare(
    driver: Path,
    empty: Path,
    plugin: Path,
    mask: int,
    extra: list[str],
    rounds: int,
    timing: str | None = None,
) -> Comparison:
    """Alternates empty/plugin, swapping who goes first each round (ABBA) to cancel drift."""
    rows: list[tuple[dict, dict]] = []
    for r in range(rounds):
        if r % 2 == 0:
            e = measure(driver, empty, mask, extra, timing)
            p = measure(driver, plugin, mask, extra, timing)
        else:
            p = measure(driver, plugin, mask, extra, timing)
            e = measure(driver, empty, mask, extra, timing)
        rows.append((e, p))

    def med(f) -> float:
        return statistics.median(f(e, p) for e, p in rows)

    key, proc = "cpu_ns_per_collective", "process_cpu_ns_per_collective"
    return Comparison(
        empty=med(lambda e, p: e[key]),
        plugin=med(lambda e, p: p[key]),
        over=med(lambda e, p: p[key] - e[key]),
        process_over=med(lambda e, p: p[proc] - e[proc]),
        ratio=med(lambda e, p: p[key] / e[key]),
        gpu_timed=med(lambda e, p: p["gpu_timed_fraction"]),
    )


# ---- callgrind ----


def callgrind_instructions(
    driver: Path, plugin: Path, mask: int, n: int, timing: str | None
) -> float | None:
    """Instructions per collective inside measured_loop (the plugin's calls included).

    --toggle-collect limits counting to measured_loop and what it calls, on its thread, so
    init, warm-up, finalize and the plugin's own background threads are left out.
    """
    with tempfile.TemporaryDirectory(prefix="ci-bench-cg-") as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--toggle-collect=measured_loop",
            str(driver),
            str(plugin),
            "--n",
            str(n),
            "--warmup",
            str(max(n // 10, 1)),
        ]
        run_driver(cmd, mask, timing)
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1]) / n
    return None


# ---- main ----


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--plugin", type=Path, default=DEFAULT_PLUGIN, help="plugin under test")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each plugin per setting")
    ap.add_argument("--n", type=int, default=200_000, help="measured collectives per run")
    ap.add_argument("--warmup", type=int, default=20_000, help="collectives before measuring")
    ap.add_argument("--callgrind-n", type=int, default=5_000, help="collectives under valgrind")
    ap.add_argument("--no-callgrind", action="store_true", help="skip the valgrind metric")
    return ap.parse_args()


def report(name: str, c: Comparison) -> None:
    emit(f"ns_per_collective_empty{name}", c.empty, "ns")
    emit(f"ns_per_collective_plugin{name}", c.plugin, "ns")
    emit(f"ns_per_collective_over_empty{name}", c.over, "ns")
    emit(f"ns_per_collective_ratio_over_empty{name}", c.ratio, "ratio")


def main() -> None:
    args = parse_args()
    driver, empty = build_tools()
    plugin = ensure_plugin(args.plugin.resolve())
    base = ["--n", str(args.n), "--warmup", str(args.warmup)]
    threads = max(2, min(4, os.cpu_count() or 2))

    def run(mask: int, extra: list[str], timing: str | None = None) -> Comparison:
        return compare(driver, empty, plugin, mask, base + extra, args.rounds, timing)

    headline = run(MASK_DEFAULT, [])
    report("", headline)
    emit("process_cpu_ns_per_collective_over_empty", headline.process_over, "ns")
    sampled = run(MASK_DEFAULT, [], "sampled")
    report("_sampled", sampled)
    emit("gpu_timed_fraction_sampled", sampled.gpu_timed, "fraction")
    report("_no_kernelch", run(MASK_NO_KERNELCH, []))
    report(f"_threads{threads}", run(MASK_DEFAULT, ["--threads", str(threads)]))
    report("_kernelch_thread", run(MASK_DEFAULT, ["--kernelch-thread"]))

    if not args.no_callgrind and shutil.which("valgrind"):
        for suffix, timing in (("", None), ("_sampled", "sampled")):
            n = args.callgrind_n
            ie = callgrind_instructions(driver, empty, MASK_DEFAULT, n, timing)
            ip = callgrind_instructions(driver, plugin, MASK_DEFAULT, n, timing)
            if ie is not None and ip is not None:
                emit(f"instructions_per_collective_empty{suffix}", ie, "instructions")
                emit(f"instructions_per_collective_plugin{suffix}", ip, "instructions")
                emit(f"instructions_per_collective_over_empty{suffix}", ip - ie, "instructions")

    verdict = "within" if headline.over <= BUDGET_NS else "OVER"
    ratio_verdict = "within" if headline.ratio <= BUDGET_RATIO else "OVER"
    print(
        f"profiler_hot_path: {plugin.name} adds {headline.over:.1f} ns per collective over the "
        f"empty plugin ({verdict} the {BUDGET_NS:.0f} ns budget), {headline.ratio:.2f}x its "
        f"time ({ratio_verdict} {BUDGET_RATIO}x); with GPU timing sampled {sampled.ratio:.2f}x",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
