"""Hostile or damaged inspector_logs beside good ones (`comminsight steps DIR`): an open segment
of garbage lines, of random bytes, of one endless line, a line longer than any the Profiler
writes. Each file's skipped lines are named a few at a time, then counted in one problem that
names the file; reading them costs memory for the file's bytes, not a problem, a row and a copy
per bad line; an over-long line is skipped unread and named; the good logs (other segments,
and the good lines of the same file) give exactly the Steps and ops they give alone.

Memory is measured with tracemalloc: the peak of recover_steps over the damaged directory less
its peak over the same directory clean. No timing is asserted."""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import msgspec
import numpy as np
import pytest
from profiler_builds import builds

from comminsight.semantic.log_input import SKIPPED_NAMED, read_gpu_logs
from comminsight.semantic.native import LINE_BYTES_MAX
from comminsight.semantic.offline import recover_steps
from comminsight.semantic.templates import load_templates
from comminsight.sim import SimConfig, run_simulation

STEPS = 6  # + 1 warm-up
GARBAGE = "ci-h-123-456-000000.jsonl.partial"  # a process of its own, named as ours are
BAD_LINES = 50_000
# what reading a damaged file may add to the peak beyond its own bytes (an open segment is read
# whole): a chunk of scan rows and the like. Before, a problem string, a scan row, a copy and a
# Python int per bad line took 30 to 200 times the file (20 MiB for 50,000 short lines)
SLACK_BYTES = 3 << 20
# columns of an op that do not depend on where its line is in its file
PLACE_FREE = (
    "kind", "func", "comm", "peer", "seq", "size", "issue", "start", "end", "start_real",
    "end_real", "end_mono", "duration", "busbw", "ring_seq", "lost_before", "group_id",
)  # fmt: skip


@pytest.fixture(scope="module")
def sim_logs(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("hostile-logs")
    sim = run_simulation(
        SimConfig(
            plugin=str(builds()["plain"].path),
            home=str(home),
            workload="ddp",
            ranks=2,
            steps=STEPS,
            time_scale=0.02,
            env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
        )
    )
    assert not sim.errors
    return home / "inspector_logs"


@pytest.fixture(scope="module")
def templates():
    return load_templates("")


@pytest.fixture(scope="module")
def clean(sim_logs, templates):
    """What the good logs give alone: summaries and op columns by stream."""
    result = recover_steps(sim_logs, templates=templates)
    assert result.problems == []
    assert [len(g.summaries) for g in result.gpus] == [STEPS + 1] * 2
    return summaries(result), op_columns(sim_logs)


@pytest.fixture
def logs(sim_logs, tmp_path) -> Path:
    dst = tmp_path / "inspector_logs"
    shutil.copytree(sim_logs, dst)
    return dst


def summaries(result) -> dict[str, list[bytes]]:
    return {g.stream: [msgspec.json.encode(s) for s in g.summaries] for g in result.gpus}


def op_columns(logs_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for log in read_gpu_logs(logs_dir)[0]:
        batches = list(log.batches())
        if batches:
            out[log.stream] = {
                k: np.concatenate([b.cols[k] for b in batches]) for k in batches[0].cols
            }
    return out


def peak_bytes(logs_dir: Path, templates):
    """recover_steps' result, and the peak of memory it allocated above what was before."""
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = recover_steps(logs_dir, templates=templates)
        return result, tracemalloc.get_traced_memory()[1] - before
    finally:
        if started:
            tracemalloc.stop()


def damaged(logs_dir: Path, templates, name: str, body: bytes):
    """recover_steps over logs_dir with `name` written into it, and how much more memory that
    took at its peak than the clean directory."""
    _, clean_peak = peak_bytes(logs_dir, templates)
    (logs_dir / name).write_bytes(body)
    result, peak = peak_bytes(logs_dir, templates)
    return result, peak - clean_peak


def about(result, path: Path) -> list[str]:
    return [p for p in result.problems if p.startswith(f"{path}:")]


def assert_counted(problems: list[str], path: Path, skipped: int) -> None:
    """The first skipped lines named one by one, then one problem with the file's total."""
    assert len(problems) <= SKIPPED_NAMED + 1, problems
    assert problems[-1] == (
        f"{path}: {skipped} lines skipped in all (not inspector-log lines, or longer than "
        f"{LINE_BYTES_MAX} bytes); the first {SKIPPED_NAMED} are named above"
    )


def assert_good_logs_intact(result, clean, logs_dir: Path) -> None:
    clean_summaries, clean_ops = clean
    got = summaries(result)
    for stream, records in clean_summaries.items():
        assert got[stream] == records, stream
    ops = op_columns(logs_dir)
    for stream, columns in clean_ops.items():
        for k, column in columns.items():
            assert np.array_equal(ops[stream][k], column), (stream, k)


@pytest.mark.parametrize(
    "line",
    [b"not json", b'{"not": "an op', b"x"],
    ids=["not_json", "json_cut_short", "one_byte"],
)
def test_a_partial_of_garbage_lines_is_counted_not_listed(logs, templates, clean, line):
    body = (line + b"\n") * BAD_LINES
    result, grown = damaged(logs, templates, GARBAGE, body)
    path = logs / GARBAGE
    problems = about(result, path)
    assert_counted(problems, path, BAD_LINES)
    for i, problem in enumerate(problems[:SKIPPED_NAMED], 1):  # the first ones, in order
        assert problem.startswith(f"{path}:{i}: not an inspector-log line: "), problem
    assert grown < len(body) + SLACK_BYTES, grown
    assert_good_logs_intact(result, clean, logs)


def test_random_bytes_are_counted_and_the_good_logs_read(logs, templates, clean):
    body = random.Random(20240601).randbytes(2 << 20)
    lines = body.split(b"\n")[:-1]  # the complete ones (the rest may still be being written)
    assert len(body) - body.rfind(b"\n") < LINE_BYTES_MAX
    for line in lines:  # none is a JSON object: every complete line is skipped
        try:
            assert not isinstance(json.loads(line), dict)
        except ValueError:
            pass
    result, grown = damaged(logs, templates, GARBAGE, body)
    path = logs / GARBAGE
    assert_counted(about(result, path), path, len(lines))
    assert grown < len(body) + SLACK_BYTES, grown
    assert_good_logs_intact(result, clean, logs)


def test_an_endless_line_is_named_not_waited_for(logs, templates, clean):
    body = b"x" * (6 << 20)  # no newline at all
    result, grown = damaged(logs, templates, GARBAGE, body)
    path = logs / GARBAGE
    assert about(result, path) == [
        f"{path}:1: {len(body)} bytes without a newline at the end, more than any "
        f"inspector-log line ({LINE_BYTES_MAX} bytes): not a line being written; skipped unread"
    ]
    # read once, into one buffer (it was held three times: read in chunks then joined, and
    # read again to look for the process's GPUs)
    assert grown < len(body) + SLACK_BYTES, grown
    assert_good_logs_intact(result, clean, logs)


def rank0_segment(logs_dir: Path) -> Path:
    return sorted(logs_dir.glob("*-000000.jsonl"))[0]


def as_partial(segment: Path, lines: list[bytes]) -> Path:
    """The segment's lines (its seal left out) as the open segment of its process."""
    segment.unlink()
    partial = segment.with_name(segment.name + ".partial")
    partial.write_bytes(b"".join(line + b"\n" for line in lines))
    return partial


def place_free(columns: dict[str, dict[str, np.ndarray]]) -> dict:
    return {s: {k: c[k].tolist() for k in PLACE_FREE} for s, c in columns.items()}


def test_a_line_longer_than_any_is_skipped_unread_and_the_rest_of_its_file_read(
    logs, templates, clean
):
    _, clean_peak = peak_bytes(logs, templates)
    segment = rank0_segment(logs)
    lines = segment.read_bytes().split(b"\n")[:-2]  # without the seal
    # valid JSON, which decodes: only its length tells it is no inspector-log line
    long = b'{"a":"' + b"y" * (6 << 20) + b'"}'
    partial = as_partial(segment, [*lines[:3], long, *lines[3:]])
    result, peak = peak_bytes(logs, templates)
    assert about(result, partial) == [
        f"{partial}:4: a line of {len(long) + 1} bytes, more than any inspector-log line "
        f"({LINE_BYTES_MAX} bytes): skipped unread"
    ]
    # never copied out of the file's bytes nor decoded (each would add its size again)
    assert peak - clean_peak < partial.stat().st_size + SLACK_BYTES
    assert summaries(result) == clean[0]
    assert place_free(op_columns(logs)) == place_free(clean[1])


def test_garbage_between_good_lines_is_counted_and_every_op_read(logs, templates, clean):
    """Garbage of every kind between the lines of a good open segment, enough lines for the
    scan to take several chunks: every op and Step is still there."""
    segment = rank0_segment(logs)
    lines = segment.read_bytes().split(b"\n")[:-2]
    rng = random.Random(7)
    junk = [b"x", b"not json", b'{"not": "an op', b"", b"[1, 2]", b"\x00\xff{"]
    mixed, bad = [], 0
    for line in lines:
        mixed.append(line)
        for _ in range(200):
            mixed.append(rng.choice(junk))
            bad += 1
    partial = as_partial(segment, mixed)
    result = recover_steps(logs, templates=templates)
    assert_counted(about(result, partial), partial, bad)
    assert summaries(result) == clean[0]
    assert place_free(op_columns(logs)) == place_free(clean[1])


def test_the_cli_prints_a_few_warnings_for_a_file_of_garbage(logs, tmp_path):
    (logs / GARBAGE).write_bytes(b"not json\n" * BAD_LINES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    run = subprocess.run(
        [sys.executable, "-m", "comminsight.cli", "steps", str(logs), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    # the good logs may have their own (a loaded machine's simulation can lose records)
    warnings = [w for w in run.stderr.splitlines() if "warning:" in w and GARBAGE in w]
    assert len(warnings) == SKIPPED_NAMED + 1, run.stderr[-3000:]
    assert f"{BAD_LINES} lines skipped in all" in warnings[-1]
    assert f"{2 * (STEPS + 1)} step summaries" in run.stdout
