"""The Profiler plugin builds the tests run against, and how to load each in a subprocess.

One recipe builds them (the Makefile); tests ask make for them, so `pytest` alone works too.
Sanitizer builds need their runtime preloaded into the Python process that loads them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import forked_python

ROOT = Path(__file__).resolve().parent.parent
PLAIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
ASAN = ROOT / "build" / "asan" / "libnccl-profiler-comminsight.so"
TSAN = ROOT / "build" / "tsan" / "libnccl-profiler-comminsight.so"
SCENARIOS = ROOT / "tests" / "plugin_scenarios.py"


@dataclass(frozen=True)
class Build:
    name: str
    path: Path
    env: dict  # extra environment for the process that loads it


def _runtime(lib: str) -> str:
    cc = os.environ.get("CC", "gcc")
    return subprocess.run(
        [cc, f"-print-file-name={lib}"], capture_output=True, text=True, check=True
    ).stdout.strip()


@cache
def builds() -> dict[str, Build]:
    subprocess.run(
        ["make", "-s", "build-profiler", "build-profiler-sanitizers"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return {
        "plain": Build("plain", PLAIN, {}),
        "asan": Build(
            "asan",
            ASAN,
            {
                "LD_PRELOAD": f"{_runtime('libasan.so')}:{_runtime('libubsan.so')}",
                # Python itself leaks by design at exit; UBSan findings are fatal in this build.
                "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
            },
        ),
        "tsan": Build(
            "tsan",
            TSAN,
            {
                "LD_PRELOAD": _runtime("libtsan.so"),
                "TSAN_OPTIONS": f"suppressions={ROOT / 'profiler/tests/tsan.supp'}:halt_on_error=1:"
                "exitcode=66:report_signal_unsafe=0",
            },
        ),
    }


def c_driver(source: Path, out_dir: Path, optimize: str = "-O2", exports: bool = False) -> Path:
    """A C program that loads the plugin (a driver under profiler/bench or tests/plugins), built
    into out_dir. exports: the plugin binds to the driver's own definitions of libc functions
    (pthread_create, clock_gettime) that it wraps."""
    exe = out_dir / source.stem
    subprocess.run(
        [
            os.environ.get("CC", "gcc"),
            "-std=c11",
            optimize,
            "-g",
            "-pthread",
            *(["-rdynamic"] if exports else []),
            f"-I{ROOT / 'generated/c/include'}",
            str(source),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return exe


def hot_path_driver(out_dir: Path, optimize: str = "-O2") -> Path:
    """The C driver that replays NCCL's event trees (profiler/bench/hot_path.c), built for tests."""
    return c_driver(ROOT / "profiler/bench/hot_path.c", out_dir, optimize)


def run_scenario(scenario: str, build: str, home: Path, script: Path = SCENARIOS, **env) -> dict:
    """Run one scenario of `script` (plugin_scenarios.py by default) in a process of its own;
    its JSON result."""
    b = builds()[build]
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "50",
        "COMMINSIGHT_PROFILER_LOG_FLUSH_MS": "20",
        "COMMINSIGHT_PROFILER_RING_SLOTS": "4096",
        "COMMINSIGHT_PROFILER_EVENT_POOL": "1024",
        "PYTHONPATH": str(ROOT / "tests"),
        **b.env,
        **env,
    }
    proc = forked_python.run(  # a sanitizer's build (LD_PRELOAD) gets a new interpreter
        [sys.executable, str(script), scenario, str(b.path)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"{scenario} on {build} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr
    assert "WARNING: ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
