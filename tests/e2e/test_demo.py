"""`comminsight demo` (what `make demo` runs) end to end, its output captured to a file as
`make demo > log` does: it says each thing it verified, stays small with lines that fit, and
exits 0; with the Agent's hang diagnosis broken on purpose (from outside, through a
sitecustomize on PYTHONPATH that reaches the demo's Agent process) it says the faulted rank
was not named and exits non-zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKEN_DIAGNOSIS = ROOT / "tests" / "data" / "broken_diagnosis"
DEMO_TIMEOUT_S = 280  # under pytest's 300 s: a stuck demo fails here, with its output

MAX_BYTES = 200_000
MAX_LINE = 200

# what the demo verifies, as its checklist names each item
HEALTHY_CHECKS = (
    "healthy run: every rank ran to the end",
    "healthy run: every inspector_logs segment sealed and verified",
    "healthy run: the logs hold a record of every op each rank issued",
    "healthy run: the Agent's Semantic Engine found each rank's Steps, as many as were run",
)
HANG_CHECKS = (
    "hang run: the fault was applied, the run hung, every rank stopped cleanly",
    "hang run: every inspector_logs segment sealed and verified",
    "hang run: rank 1's peers on tensor_parallel:1 wrote hang evidence of AllReduce seq 5, "
    "rank 1 none",
)
VERDICT = "hang run: the Agent's diagnosis names rank 1, tensor_parallel:1 and AllReduce seq 5"


@pytest.fixture(scope="module", autouse=True)
def built():
    """The demo needs the plugin and the Semantic Engine's C core (make demo builds both)."""
    subprocess.run(["make", "-s", "build-profiler", "build-engine"], cwd=ROOT, check=True)


def run_demo(tmp_path: Path, **env: str) -> tuple[int, str, str]:
    """The demo with stdout and stderr in files; COLUMNS unset, as in a pipe from a script."""
    out, err = tmp_path / "demo.log", tmp_path / "demo.err"
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.run(
            [sys.executable, "-m", "comminsight.cli", "demo"],
            stdout=stdout,
            stderr=stderr,
            cwd=ROOT,
            env={**environ, **env},
            timeout=DEMO_TIMEOUT_S,
        )
    assert out.stat().st_size < MAX_BYTES, f"{out}: {out.stat().st_size} bytes"
    return proc.returncode, out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")


def flat(text: str) -> str:
    """The text with every run of whitespace one space: a statement wrapped to the width is
    found whole."""
    return re.sub(r"\s+", " ", text)


def assert_fits(text: str) -> None:
    longest = max(text.splitlines(), key=len)
    assert len(longest) <= MAX_LINE, f"a line of {len(longest)} characters: {longest[:300]}"
    # a progress bar or colour is for a terminal: nothing of it in a file
    assert "\x1b[" not in text and "\r" not in text


@pytest.mark.slow
def test_the_demo_says_what_it_verified_in_a_small_log_and_exits_0(tmp_path):
    status, out, err = run_demo(tmp_path)
    assert status == 0, out[-6000:] + err[-3000:]
    assert_fits(out)
    said = flat(out)
    for item in (*HEALTHY_CHECKS, *HANG_CHECKS, VERDICT):
        assert f"✓ {item}: " in said, item  # stated with its numbers as it was made
        assert f"✓ {item}\n" in out, item  # and a line of the closing checklist
    assert "✗" not in out and "NOT verified" not in said
    assert re.search(r"all (\d+) checks passed", out), out[-3000:]
    # the numbers behind the statements, read from the data
    assert "8/8 ranks exited 0, status done" in said
    assert re.search(r"\d+ sealed segments from all 8 ranks, none left open", said)
    assert "32 Steps, 4 on each of 8 ranks (1 of them warm-up) as the simulator ran them" in said
    assert re.search(
        r"incident inc-\w+ \(critical\) blames rank 1 alone on tensor_parallel:1", said
    )
    # what the Agent served, read through the generated API client and the CLI
    assert re.search(r"the Agent wrote [1-9]\d* hang reports, grouped into [1-9]\d* incident", said)
    assert "stuck_outside_nccl" in out  # the verdict on the skipping rank, as the CLI shows it
    assert "hang evidence written by each rank's Profiler watchdog" in said
    assert "Everything stays under" in said


@pytest.mark.slow
def test_the_demo_fails_and_says_so_when_the_diagnosis_names_another_rank(tmp_path):
    marker = tmp_path / "broken-diagnosis-pids"
    pythonpath = os.pathsep.join(
        p for p in (str(BROKEN_DIAGNOSIS), os.environ.get("PYTHONPATH")) if p
    )
    status, out, err = run_demo(
        tmp_path, PYTHONPATH=pythonpath, DEMO_BROKEN_DIAGNOSIS_MARKER=str(marker)
    )
    assert marker.exists(), "no Agent loaded the broken diagnosis: the test proves nothing"
    assert status == 1, out[-6000:] + err[-3000:]
    assert_fits(out)
    said = flat(out)
    assert f"✗ {VERDICT} (NOT verified): the Agent did not name rank 1 alone as the cause" in said
    assert f"✗ {VERDICT}\n" in out
    assert f"✓ {VERDICT}" not in said
    assert re.search(r"1 of \d+ checks failed", said), out[-3000:]
    assert "check(s) failed" in err and "names rank 1" in flat(err)  # where a person looks too
    # what did not depend on the diagnosis still held
    for item in (*HEALTHY_CHECKS, *HANG_CHECKS):
        assert f"✓ {item}: " in said, item
