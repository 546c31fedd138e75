"""NewStepSummaries: what a slave forwards to its master every report, each Step decoded once
and kept by no one, through a file's sealing, a resumed engine's rewrite and bad lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

from comminsight.agent.steps.files import NewStepSummaries

FIXTURE = (
    Path(__file__).parents[1]
    / "contract-tests/fixtures/json/step-summary/v1/valid/ddp-warmup-anomalies.json"
)
BASE = json.loads(FIXTURE.read_text())


def line(step: int, rank: int = 0) -> bytes:
    return (json.dumps({**BASE, "step_index": step, "global_rank": rank}) + "\n").encode()


def indexes(summaries) -> list[tuple[int, int]]:
    return [(s.global_rank, s.step_index) for s in summaries]


def test_appended_steps_come_once_and_a_cut_line_waits_for_its_end(tmp_path):
    follower = NewStepSummaries(tmp_path)
    assert follower.read() == []
    partial = tmp_path / "live-n-1-2.jsonl.partial"
    partial.write_bytes(line(0) + line(1))
    assert indexes(follower.read()) == [(0, 0), (0, 1)]
    assert follower.read() == []  # nothing new: nothing decoded again
    whole = line(2)
    with open(partial, "ab") as f:
        f.write(whole[:40])  # the engine is writing the line
    assert follower.read() == []
    with open(partial, "ab") as f:
        f.write(whole[40:])
    assert indexes(follower.read()) == [(0, 2)]


def test_a_sealed_file_is_followed_on_from_where_its_open_file_was_read(tmp_path):
    follower = NewStepSummaries(tmp_path)
    partial = tmp_path / "live-n-1-2.jsonl.partial"
    partial.write_bytes(line(0, rank=3))
    assert indexes(follower.read()) == [(3, 0)]
    with open(partial, "ab") as f:
        f.write(line(1, rank=3))
    os.rename(partial, tmp_path / "live-n-1-2.jsonl")  # sealed: the same inode
    assert indexes(follower.read()) == [(3, 1)]
    assert follower.read() == []


def test_a_rewritten_file_is_read_again_and_a_removed_one_forgotten(tmp_path):
    follower = NewStepSummaries(tmp_path)
    path = tmp_path / "live-n-1-2.jsonl.partial"
    path.write_bytes(line(0) + line(1) + line(2))
    assert len(follower.read()) == 3
    path.write_bytes(line(0))  # a resumed engine truncated it: shorter than what was read
    assert indexes(follower.read()) == [(0, 0)]  # the reader skips Steps it has sent
    path.unlink()
    assert follower.read() == [] and follower._at == {}


def test_a_bad_line_is_counted_and_hides_no_other(tmp_path):
    follower = NewStepSummaries(tmp_path)
    (tmp_path / "a.jsonl").write_bytes(line(0) + b'{"not": "a summary"}\n\xff\xfe\n' + line(1))
    assert indexes(follower.read()) == [(0, 0), (0, 1)]
    assert follower.invalid_lines == 2
    assert NewStepSummaries(tmp_path / "missing").read() == []
