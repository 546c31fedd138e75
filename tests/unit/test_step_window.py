"""The recent-Steps window over step-summary files (comminsight.agent.steps.window): reads
only what was appended, follows a sealed file, survives truncation and garbage, and stays
bounded."""

from __future__ import annotations

import json
import os
from pathlib import Path

from comminsight.agent.steps.job_steps import GpuKey
from comminsight.agent.steps.window import StepWindow

FIXTURE = (
    Path(__file__).parents[2]
    / "contract-tests/fixtures/json/step-summary/v1/valid/job-comm-seqs.json"
)
BASE = json.loads(FIXTURE.read_text())


def line(step: int, rank: int = 0, host: str = "n1", job: str | None = "job-1", **extra) -> str:
    record = {**BASE, "step_index": step, "global_rank": rank, "host": host, **extra}
    record["pid"] = 100 + rank
    if job is None:
        record.pop("job_id", None)
    else:
        record["job_id"] = job
    return json.dumps(record) + "\n"


def steps(window: StepWindow, job="job-1", host="n1", rank=0) -> list[int]:
    return sorted(window.jobs[job].gpus[GpuKey(host, rank, 100 + rank)])


def test_appended_lines_are_read_once_and_a_cut_line_waits_for_its_end(tmp_path):
    path = tmp_path / "live-n1.jsonl.partial"
    path.write_text(line(0) + line(1))
    w = StepWindow([tmp_path])
    w.refresh()
    assert steps(w) == [0, 1]
    version = w.version
    w.refresh()
    assert w.version == version  # nothing new: nothing decoded
    text = line(2)
    with open(path, "a") as f:
        f.write(text[:40])
    w.refresh()
    assert steps(w) == [0, 1]
    with open(path, "a") as f:
        f.write(text[40:])
    w.refresh()
    assert steps(w) == [0, 1, 2]
    record = w.jobs["job-1"].gpus[GpuKey("n1", 0, 100)][2]
    assert record.spans == {  # coll spans only: p2p counters are each rank's own
        "41b7a09e5cd2f318": (386240, 386303),
        "9d3c4e1f27ab60c5": (2410, 2415),
    }


def test_a_sealed_file_is_followed_from_where_its_open_name_was_read(tmp_path):
    partial = tmp_path / "live-n1.jsonl.partial"
    partial.write_text(line(0))
    w = StepWindow([tmp_path])
    w.refresh()
    with open(partial, "a") as f:
        f.write(line(1))
    os.rename(partial, tmp_path / "live-n1.jsonl")
    version = w.version
    w.refresh()
    assert steps(w) == [0, 1] and w.version == version + 1


def test_a_truncated_file_is_read_again_and_garbage_is_counted(tmp_path):
    path = tmp_path / "n1.jsonl"
    path.write_text(line(0) + "not json\n" + line(1) + '{"schema_version": 2}\n')
    w = StepWindow([tmp_path])
    w.refresh()
    assert steps(w) == [0, 1] and w.invalid_lines == 2
    path.write_text(line(0))  # a resumed engine cut it back
    w.refresh()
    assert steps(w) == [0, 1]  # records are keyed: reading again repeats nothing
    assert w.invalid_lines == 2


def test_old_summaries_without_comm_seqs_are_kept_without_spans(tmp_path):
    record = json.loads(line(0))
    del record["comm_seqs"]
    (tmp_path / "old.jsonl").write_text(json.dumps(record) + "\n")
    w = StepWindow([tmp_path])
    w.refresh()
    assert w.jobs["job-1"].gpus[GpuKey("n1", 0, 100)][0].spans is None


def test_each_gpu_keeps_its_latest_steps_and_a_big_old_file_is_read_from_its_tail(tmp_path):
    text = "".join(line(i) for i in range(200))
    (tmp_path / "n1.jsonl").write_text(text)
    w = StepWindow([tmp_path], steps_per_gpu=16, tail_start_bytes=len(text) // 4)
    w.refresh()
    kept = steps(w)
    assert kept[-1] == 199 and len(w.window(w.jobs["job-1"])[GpuKey("n1", 0, 100)]) == 16
    assert w.invalid_lines == 0  # the line cut by starting mid-file is skipped, not counted
    assert len(kept) <= 20


def test_jobs_are_apart_and_the_gpus_of_a_job_are_bounded(tmp_path):
    lines = [line(0, rank=r) for r in range(5)] + [line(0, job=None), line(0, job="job-2")]
    (tmp_path / "all.jsonl").write_text("".join(lines))
    w = StepWindow([tmp_path], max_gpus=3)
    w.refresh()
    assert set(w.jobs) == {"job-1", "job-2", None}
    assert len(w.jobs["job-1"].gpus) == 3


def test_missing_directories_are_nothing_to_read(tmp_path):
    w = StepWindow([tmp_path / "not-yet"])
    w.refresh()
    assert w.jobs == {}
