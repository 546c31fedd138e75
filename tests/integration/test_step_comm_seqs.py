"""step-summary v1 comm_seqs: each Step's seq span per communicator, the boundary candidates
the master reconciles nodes' step indices through. Checked on the logs of a real 2 x 2
tensor- and data-parallel job (4 GPUs): ranks that share a communicator report the same span
for the same Step, the spans account for every op, and a run interrupted at a checkpoint
(a Step open across it) resumes to the same bytes."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest

from comminsight.semantic import checkpoint as checkpoint_module
from comminsight.semantic.offline import CHECKPOINT_NAME, recover_steps
from comminsight.semantic.op_batch import KINDS, Comm, CommTable
from comminsight.semantic.step_builder import step_spans
from comminsight_gen.models import semantic_engine_v1 as se

DATA = Path(__file__).parents[1] / "data" / "gpu"
# Ops between checkpoints: most land inside a Step (70 ops each). Each save is fsync'd, and
# a run saves some 260 times at this interval (1,300 at 13 ops); the runs are interrupted at
# the same ops as at 13 ops (saves 4, 9, 14 here: 20, 45, 70 there; the same checkpoints).
EVERY = 65


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tpdp4")
    with tarfile.open(DATA / "tpdp4_h200x2.tar.gz") as tar:
        tar.extractall(root, filter="data")
    return root / "tpdp4" / "inspector_logs"


def spans_of(summary) -> dict[tuple[str, str], tuple[int, int, int]]:
    return {
        (c.kind.value, c.comm_id): (c.first_seq, c.last_seq, c.op_count) for c in summary.comm_seqs
    }


@pytest.mark.parametrize("per_gpu", [False, True])
def test_ranks_sharing_a_communicator_report_the_same_span_for_the_same_step(logs, per_gpu):
    result = recover_steps(logs, per_gpu=per_gpu)
    assert len(result.gpus) == 4
    by_comm: dict[tuple[str, str, int], set] = {}
    for gpu in result.gpus:
        assert len(gpu.summaries) == 60
        previous: dict[tuple[str, str], int] = {}
        for s in gpu.summaries:
            spans = spans_of(s)
            assert [(c.kind.value, c.comm_id) for c in s.comm_seqs] == sorted(spans)
            assert sum(n for _, _, n in spans.values()) == s.op_count
            assert len(spans) == 2  # its tp and its dp communicator
            for key, (first, last, count) in spans.items():
                assert first <= last and count == last - first + 1
                if key in previous:  # in the steady run Steps follow each other on every comm
                    assert first == previous[key] + 1
                previous[key] = last
                by_comm.setdefault((*key, s.step_index), set()).add((first, last))
    assert by_comm and all(len(claims) == 1 for claims in by_comm.values())
    # each communicator is shared by two of the four GPUs
    comms = {key[1] for key in by_comm}
    assert len(comms) == 4


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.jsonl"))}


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def uninterrupted(logs, tmp_path_factory) -> dict[str, bytes]:
    """The files of a run never interrupted, checkpointing as the interrupted runs do: the
    same for every interruption point, so run once."""
    reference = tmp_path_factory.mktemp("reference")
    recover_steps(logs, out_dir=reference, checkpoint_every_ops=EVERY)
    expected = files(reference)
    assert len(expected) == 4
    return expected


@pytest.mark.parametrize("saves", [4, 9, 14])
def test_a_run_interrupted_with_a_step_open_resumes_to_the_same_spans(
    logs, uninterrupted, tmp_path, monkeypatch, saves
):
    expected = uninterrupted
    out = tmp_path / "interrupted"
    save = checkpoint_module.CheckpointFile.save
    calls = 0

    def save_then_stop(self, states):
        nonlocal calls
        save(self, states)
        calls += 1
        # from the `saves`th checkpoint on, at the first that leaves a Step open (where the
        # Steps lie among the checkpoints depends on the simulated run's timing)
        if calls >= saves and any(g.open_step is not msgspec.UNSET for g in states.values()):
            raise Interrupted

    monkeypatch.setattr(checkpoint_module.CheckpointFile, "save", save_then_stop)
    with pytest.raises(Interrupted):
        recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY)
    monkeypatch.undo()
    ckpt = msgspec.json.decode((out / CHECKPOINT_NAME).read_bytes(), type=se.Checkpoint)
    open_steps = [g.open_step for g in ckpt.gpus if g.open_step is not msgspec.UNSET]
    assert open_steps and all(p.comm_seqs for p in open_steps)
    recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY)
    assert files(out) == expected


def test_a_step_open_in_a_checkpoint_without_spans_is_reported_without_them(
    logs, tmp_path, monkeypatch
):
    """A checkpoint of an engine that predates comm_seqs: the Step it left open cannot know
    the spans of its ops before the checkpoint, so its summary has none (never a wrong one);
    the Steps after it have them again."""
    out = tmp_path / "old"
    save = checkpoint_module.CheckpointFile.save
    calls = 0

    def save_then_stop(self, states):
        nonlocal calls
        save(self, states)
        calls += 1
        if calls == 9:
            raise Interrupted

    monkeypatch.setattr(checkpoint_module.CheckpointFile, "save", save_then_stop)
    with pytest.raises(Interrupted):
        recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY)
    monkeypatch.undo()
    path = out / CHECKPOINT_NAME
    raw = json.loads(path.read_bytes())
    stripped = []
    for g in raw["gpus"]:
        if "open_step" in g:
            g["open_step"].pop("comm_seqs", None)
            stripped.append((g["open_step"]["step_index"], g["output"]["file"]))
    assert stripped
    path.write_text(json.dumps(raw))
    recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY)
    for step_index, file in stripped:
        sealed = out / file.removesuffix(".partial")
        records = [json.loads(line) for line in sealed.read_text().splitlines()]
        assert len(records) == 60
        for r in records:
            assert ("comm_seqs" in r) == (r["step_index"] != step_index), r["step_index"]


@pytest.mark.parametrize("steps", [6, 1500])  # a dense table of cells, and a sparse one
def test_spans_are_the_lowest_and_highest_seq_and_the_count_of_each_steps_ops(steps):
    rng = np.random.default_rng(steps)
    comms = CommTable()
    for i in range(50):
        comms.index(Comm(f"{i:016x}", None, 2, 1, 0))
    n = 3000
    step_of = np.sort(rng.integers(-1, steps, n))
    cols = {
        "seq": rng.integers(0, 10**6, n),
        "comm": rng.integers(0, 50, n),
        "kind": rng.integers(0, 2, n),
    }
    k = int(step_of.max()) + 1
    got = step_spans(SimpleNamespace(step_of=step_of), SimpleNamespace(cols=cols, comms=comms), k)
    expected: list[dict] = [{} for _ in range(k)]
    for i in np.flatnonzero(step_of >= 0).tolist():
        key = (KINDS[cols["kind"][i]], f"{cols['comm'][i]:016x}")
        q = int(cols["seq"][i])
        lo, hi, count = expected[step_of[i]].get(key, (q, q, 0))
        expected[step_of[i]][key] = [min(lo, q), max(hi, q), count + 1]
    assert got == expected
