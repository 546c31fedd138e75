"""The Semantic Engine killed with SIGKILL at random moments and started again: it resumes from
its checkpoint and the step summaries end byte-identical to an uninterrupted run's."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import forked_python
import pytest
from profiler_builds import builds

from comminsight.semantic.offline import CHECKPOINT_NAME, recover_steps
from comminsight.sim import SimConfig, run_simulation

KILLS = 20
EVERY = 7  # checkpoint every 7 ops: many checkpoints, kills land between and during them


def cli(logs, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env["COLUMNS"] = "250"
    return forked_python.popen(
        [
            sys.executable,
            "-m",
            "comminsight.cli",
            "steps",
            str(logs),
            "--out",
            str(out),
            "--checkpoint-every-ops",
            str(EVERY),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.jsonl"))}


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: on a loaded machine each run and its fsyncs are slower
def test_killed_at_twenty_random_points_the_summaries_are_byte_identical(tmp_path):
    home = tmp_path / "home"
    sim = run_simulation(
        SimConfig(
            plugin=str(builds()["plain"].path),
            home=str(home),
            workload="tp-pp-dp",
            ranks=8,
            steps=12,  # still over 5,000 ops: some 800 checkpoints a run
            grad_accum=2,
            extra_ops_every=5,
            time_scale=0.02,
            env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
        )
    )
    assert not sim.errors
    logs = home / "inspector_logs"
    # the reference checkpoints not at all: the uninterrupted CLI run below, which does,
    # must give the same bytes too
    reference = tmp_path / "reference"
    result = recover_steps(logs, out_dir=reference)
    assert result.problems == [] and result.ops > 5000
    expected = files(reference)
    assert len(expected) == 8 and all(expected.values())

    started = time.monotonic()
    full = cli(logs, tmp_path / "timing")
    assert full.wait(timeout=300) == 0
    run_s = time.monotonic() - started
    assert files(tmp_path / "timing") == expected

    rng = random.Random(1234)
    out = tmp_path / "killed"
    kills = kills_after_a_checkpoint = 0
    while kills < KILLS:
        run = cli(logs, out)
        try:
            # Within the first half of a whole run's time: a run resumed from a checkpoint
            # goes on from there, so a chain of kills still walks through the whole run (each
            # kill in it a little further), and fewer runs end before their kill (such a
            # chain is begun again), a wait that kills nothing
            run.wait(timeout=rng.uniform(0.05, run_s / 2))
        except subprocess.TimeoutExpired:
            run.send_signal(signal.SIGKILL)
            run.wait()
            kills += 1
            kills_after_a_checkpoint += (out / CHECKPOINT_NAME).exists()
            continue
        assert run.returncode == 0, run.stderr.read()
        shutil.rmtree(out)  # finished before the kill: begin a new chain of kills
    final = cli(logs, out)
    stdout, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr
    assert files(out) == expected
    assert kills_after_a_checkpoint >= KILLS // 4, "too few kills landed mid-run"
    print(
        f"\n{KILLS} kills ({kills_after_a_checkpoint} after a checkpoint), run {run_s:.2f} s; "
        f"final run: {stdout.splitlines()[-1]}"
    )
