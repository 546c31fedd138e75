"""scripts/as-if-booted.sh: a command (and what it starts) sees a machine booted moments ago,
which is how `make test-fresh-boot` runs the suite on a young clock without a reboot."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from comminsight.sim import time_namespace

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "as-if-booted.sh"
UNSUPPORTED = time_namespace.supported()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.skipif(UNSUPPORTED is not None, reason=str(UNSUPPORTED))
def test_the_command_and_its_children_see_a_young_clock():
    if time.monotonic() < 200:
        pytest.skip("this machine is itself younger than the clock asked for")
    probe = (
        "import subprocess, sys, time;"
        "print(time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME));"
        "print(subprocess.run([sys.executable, '-c', 'import time; print(time.monotonic())'],"
        " capture_output=True, text=True).stdout.strip());"
        "print(open('/proc/uptime').read().split()[0]);"
        "print(time.time())"
    )
    before = time.time()
    done = run("90", sys.executable, "-c", probe)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    monotonic, boottime, child, uptime, wall = (float(v) for v in lines)
    # 90 s at the start, plus however long a loaded machine takes to start Python
    for clock in (monotonic, boottime, child, uptime):
        assert 90 <= clock < 150, done.stdout
    assert before <= wall <= time.time()  # the wall clock is the host's


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("x", "true"), "UPTIME_S must be whole seconds, not 'x'"),
        (("-5", "true"), "UPTIME_S must be whole seconds, not '-5'"),
        (("99999999999", "true"), "it cannot seem up longer (99999999999 s)"),
        (("60",), "usage:"),
    ],
)
def test_bad_arguments_are_named(args, says):
    done = run(*args)
    assert done.returncode != 0
    assert says in done.stderr
    assert done.stdout == ""


@pytest.mark.skipif(UNSUPPORTED is not None, reason=str(UNSUPPORTED))
def test_inside_a_time_namespace_of_its_own_the_clock_is_still_the_one_asked_for():
    """`make test-fresh-boot` runs the suite, and so this test's script, in a namespace."""
    if time.monotonic() < 1100:
        pytest.skip("this machine is itself younger than the outer clock asked for")
    done = run("1000", str(SCRIPT), "90", "cat", "/proc/uptime")
    assert done.returncode == 0, done.stderr
    assert 90 <= float(done.stdout.split()[0]) < 150, done.stdout
