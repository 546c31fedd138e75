"""Plugin unload/reload soak: what NCCL's unloading and loading of the profiler plugin leaves
in the training process.

NCCL dlcloses the plugin when a process's last communicator is destroyed and dlopens it again
for the next; elastic and RL jobs do that all the time. profiler/bench/reload_cycles.c does
what NCCL does, cycle after cycle (dlopen, two communicators with a few AllReduces each,
finalize, dlclose), with the default configuration (a 16 MiB region per load) and no Agent,
and measures the process after --warm cycles (glibc keeps thread stacks and freed heap for
reuse: they are there from the first few cycles on) and again after --cycles more:

- plugin_reload_growth_mib: resident memory growth, the regions' shared memory counted once
  whether still mapped or only left as files in the SHM directory (details: rss_growth_mib,
  shm_growth_mib, heap_growth_mib: bytes malloc holds in use);
- plugin_reload_fds_growth, plugin_reload_maps_growth: open descriptors and mappings.

Runs standalone (`python bench/plugin_reload.py --cycles 500`) or as the `plugin_reload`
scenario of bench/faults.py (`make bench-faults FAULTS_ARGS="--only plugin_reload"`). Prints
JSON lines {"bench": "faults", "metric", "value", "unit", "fault": "plugin_reload", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
DRIVER_SRC = ROOT / "profiler" / "bench" / "reload_cycles.c"
FAULT = "plugin_reload"
MIB = 1024 * 1024


def build_driver(out_dir: Path) -> Path:
    exe = out_dir / "reload_cycles"
    subprocess.run(
        [
            os.environ.get("CC", "gcc"),
            "-std=c11",
            "-O2",
            "-pthread",
            f"-I{ROOT / 'generated/c/include'}",
            str(DRIVER_SRC),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return exe


def run_cycles(work: Path, cycles: int, ops: int, warm: int) -> dict:
    """The driver's measurements; the home on disk, the regions in a private directory of
    the tmpfs (/dev/shm where there is one), as in production."""
    exe = build_driver(work)
    home = work / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    tmpfs = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="ci-bench-reload-", dir=tmpfs) as shm:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
            "COMMINSIGHT_HOME": str(home),
            "COMMINSIGHT_AGENT_AUTOSTART": "0",
            "COMMINSIGHT_PROFILER_SHM_DIR": shm,
        }
        proc = subprocess.run(
            [str(exe), str(PLUGIN), str(cycles), str(ops), str(warm)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"reload_cycles exited {proc.returncode}: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    if not out["unloaded"]:
        raise RuntimeError(f"the plugin stayed loaded after dlclose: {proc.stderr[-2000:]}")
    return out


def shared_kib(sample: dict) -> float:
    """The regions' memory once: mapped (resident shmem) or left behind as files."""
    return max(sample["rss_shmem_kib"], sample["shm_bytes"] / 1024)


def growth_lines(out: dict) -> list[tuple[str, float, str, dict]]:
    first, last = out["first"], out["last"]
    private = (last["rss_kib"] - last["rss_shmem_kib"]) - (
        first["rss_kib"] - first["rss_shmem_kib"]
    )
    shared = shared_kib(last) - shared_kib(first)
    detail = {
        "cycles": out["cycles"],
        "rss_growth_mib": round(private / 1024, 3),
        "shm_growth_mib": round(shared / 1024, 3),
        "heap_growth_mib": round((last["heap_bytes"] - first["heap_bytes"]) / MIB, 3),
    }
    return [
        ("plugin_reload_growth_mib", round((private + shared) / 1024, 3), "MiB", detail),
        ("plugin_reload_fds_growth", last["fds"] - first["fds"], "fds", {"cycles": out["cycles"]}),
        (
            "plugin_reload_maps_growth",
            last["maps"] - first["maps"],
            "mappings",
            {"cycles": out["cycles"]},
        ),
    ]


def reload_soak(work: Path, cycles: int = 500, ops: int = 16, warm: int = 10) -> list:
    """(metric, value, unit, detail) for each line."""
    return growth_lines(run_cycles(work, cycles, ops, warm))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=500, help="measured cycles")
    ap.add_argument("--ops", type=int, default=16, help="AllReduces per communicator and cycle")
    ap.add_argument("--warm", type=int, default=10, help="cycles before the first measurement")
    args = ap.parse_args()
    if not PLUGIN.exists():
        sys.exit(f"bench/plugin_reload: {PLUGIN} is missing; run `make build-profiler`")
    with tempfile.TemporaryDirectory(prefix="ci-bench-reload-") as tmp:
        for metric, value, unit, detail in reload_soak(Path(tmp), args.cycles, args.ops, args.warm):
            line = {"bench": "faults", "metric": metric, "value": value, "unit": unit}
            print(json.dumps(line | {"fault": FAULT} | detail), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
