"""NewStepSummaries: what a slave forwards to its master every report, each Step decoded once
and kept by no one, through a file's sealing, a resumed engine's rewrite and bad lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

from comminsight.agent.steps.files import NewStepSummaries

FIXTURE = (
    Path(__file__).parents[2]
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


def test_the_api_pages_every_step_once_and_keeps_only_an_index(tmp_path):
    """StepFiles: where each line is, its step and rank; a page decodes only its own lines, so
    what stays in memory is a few numbers per Step, not the summaries (a run writes for days)."""
    import gc
    import warnings

    from comminsight.agent.steps.files import StepFiles
    from comminsight_gen.models.step_summary_v1 import StepSummary

    step_dir = tmp_path / "semantics" / "step"
    step_dir.mkdir(parents=True)
    (step_dir / "live-a.jsonl").write_bytes(b"".join(line(k, rank=0) for k in range(150)))
    (step_dir / "live-b.jsonl.partial").write_bytes(b"".join(line(k, rank=1) for k in range(149)))
    files = StepFiles(tmp_path)
    seen, cursor = [], None
    while True:
        page = files.page(rank=None, since_step=0, cursor=cursor, limit=7)
        assert page.total == 299
        seen += indexes(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    expected = [(r, k) for k in range(150) for r in (0, 1) if (r, k) != (1, 149)]
    assert seen == expected  # by step, then rank; each once
    del page  # the caller's last page: the only summaries that may remain
    gc.collect()
    with warnings.catch_warnings():  # isinstance on every live object: torch's deprecated
        warnings.simplefilter("ignore")  # attributes warn where another test imported torch
        assert not [o for o in gc.get_objects() if isinstance(o, StepSummary)]
    with open(step_dir / "live-b.jsonl.partial", "ab") as f:
        f.write(line(149, rank=1))  # appended: indexed from where the index ended
    page = files.page(rank=1, since_step=149, cursor=None, limit=10)
    assert indexes(page.items) == [(1, 149)] and page.total == 1


def test_a_file_sealed_between_a_pages_listing_and_its_reads_is_read_under_its_new_name(
    tmp_path,
):
    from comminsight.agent.steps.files import StepFiles

    step_dir = tmp_path / "semantics" / "step"
    step_dir.mkdir(parents=True)
    partial = step_dir / "live-n-1-2.jsonl.partial"
    partial.write_bytes(line(0) + line(1))
    files = StepFiles(tmp_path)
    listed = files._refresh

    def listed_then_sealed():
        indexed = listed()
        os.rename(partial, step_dir / "live-n-1-2.jsonl")  # the engine seals it now
        return indexed

    files._refresh = listed_then_sealed
    page = files.page(rank=None, since_step=0, cursor=None, limit=10)
    assert [s.step_index for s in page.items] == [0, 1]


def test_a_file_removed_between_a_pages_listing_and_its_reads_is_left_out_of_the_page(
    tmp_path,
):
    from comminsight.agent.steps.files import StepFiles

    step_dir = tmp_path / "semantics" / "step"
    step_dir.mkdir(parents=True)
    (step_dir / "live-n-1-2.jsonl").write_bytes(line(0, rank=1))
    removed = step_dir / "live-n-3-4.jsonl"
    removed.write_bytes(line(0, rank=2))
    files = StepFiles(tmp_path)
    listed = files._refresh

    def listed_then_removed():
        indexed = listed()
        removed.unlink()  # the disk budget took it
        return indexed

    files._refresh = listed_then_removed
    page = files.page(rank=None, since_step=0, cursor=None, limit=10)
    assert [s.global_rank for s in page.items] == [1]
