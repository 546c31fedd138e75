"""Files the Agent and the Semantic Engine read back from a home, planted or damaged: a FIFO
(a plain open() or read() of it blocks for ever), a sparse file of 64 GiB (read whole, it
takes the reader's memory), a symbolic link to a readable file elsewhere (following it reads,
or later overwrites, what is not the home's), and a document nested 100,000 deep (msgspec and
the standard library both raise RecursionError, which is no ValueError).

In every store each such file is refused without being opened as what it claims to be (a
FIFO is never blocked on), named in the log, and the files beside it are still read: a store
never loses its valid entries to one bad neighbour. A sparse step file costs one pass over
its data, not a read of its holes on every request: each case counts the bytes read.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import msgspec
import pytest
from fifo_events import event_bytes
from hang_snapshots import NOW, REAL, reports_of, tp_then_dp
from home_files import hang_report_fixture, write_step_summaries

from comminsight.agent.archive.ledger import ArchiveLedger, LedgerEntry
from comminsight.agent.hangs.incident_store import IncidentStore
from comminsight.agent.hangs.incidents import group_reports
from comminsight.agent.hangs.step_cycles import newest_steps
from comminsight.agent.hangs.store import HangStore
from comminsight.agent.master.store import MasterStore, hang_event_key
from comminsight.agent.slave.outbox import SlaveOutbox
from comminsight.agent.steps.files import NewStepSummaries, StepFiles
from comminsight.agent.steps.window import StepWindow
from comminsight.semantic.checkpoint import CheckpointFile
from comminsight.semantic.offline import read_summaries
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models.semantic_engine_v1 import ProducerMode
from comminsight_gen.models.step_summary_v1 import StepSummary

SPARSE_BYTES = 64 << 30
NESTED = b"[" * 100_000


def plant_fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def plant_sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(SPARSE_BYTES)


def plant_symlink(path: Path, target: Path) -> None:
    path.symlink_to(target)


def plant_nested(path: Path) -> None:
    path.write_bytes(NESTED)


PLANTS = ("fifo", "sparse", "symlink", "nested")


def plant(kind: str, path: Path, readable_elsewhere: bytes, outside: Path) -> None:
    """Put a `kind` where `path` belongs; a link points to a readable file in the directory
    `outside` (not the home) holding `readable_elsewhere`: what following it would take for
    the home's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        plant_fifo(path)
    elif kind == "sparse":
        plant_sparse(path)
    elif kind == "symlink":
        outside.mkdir(parents=True, exist_ok=True)
        target = outside / path.name
        target.write_bytes(readable_elsewhere)
        plant_symlink(path, target)
    else:
        plant_nested(path)


@pytest.fixture
def pread_bytes(monkeypatch):
    """The bytes read through os.pread and file reads from here on (the line readers read
    with os.pread; a sparse file's holes must not be among them)."""
    read = {"bytes": 0}
    real_pread = os.pread

    def counting_pread(fd, n, offset):
        data = real_pread(fd, n, offset)
        read["bytes"] += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    return read


def named(caplog, path: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]


# ---- metadata/hangs and metadata/incidents ---------------------------------------------------


@pytest.mark.parametrize("kind", PLANTS)
def test_a_planted_hang_report_is_set_aside_and_the_valid_ones_load(tmp_path, caplog, kind):
    home = tmp_path / "home"
    good = hang_report_fixture("rank-not-joined-open.json")
    HangStore(home).save(good)
    bad = home / "metadata" / "hangs" / "planted-1.json"
    plant(kind, bad, msgspec.json.encode(good), tmp_path / "outside")
    store = HangStore(home)
    with caplog.at_level(logging.ERROR):
        store.load()
    assert list(store.reports) == [good.report_id]
    assert "planted-1.json" in store.errors
    assert named(caplog, bad), caplog.text
    aside = home / "metadata" / "hangs" / "invalid" / "planted-1.json"
    assert aside.is_symlink() if kind == "symlink" else aside.exists()
    assert not os.path.lexists(bad)


@pytest.mark.parametrize("kind", PLANTS)
def test_a_planted_incident_is_set_aside_and_the_valid_ones_load(tmp_path, caplog, kind):
    home = tmp_path / "home"
    (incident,) = IncidentStore(home, "node-a").update(
        group_reports(reports_of(*tp_then_dp())), {}, NOW, REAL
    )
    bad = home / "metadata" / "incidents" / "planted-1.json"
    plant(kind, bad, msgspec.json.encode(incident), tmp_path / "outside")
    store = IncidentStore(home, "node-a")
    with caplog.at_level(logging.ERROR):
        store.load()
    assert list(store.incidents) == [incident.incident_id]
    assert named(caplog, bad), caplog.text
    assert os.path.lexists(home / "metadata" / "incidents" / "invalid" / "planted-1.json")


# ---- metadata/archive-ledger -----------------------------------------------------------------


def ledger_entry(source: str) -> LedgerEntry:
    return LedgerEntry(
        source=source,
        remote=f"node/{source}.zst",
        source_bytes=100,
        source_sha256="0" * 64,
        archived_bytes=50,
        archived_sha256="1" * 64,
        zstd_level=3,
        uploaded_real_ns=REAL,
    )


@pytest.mark.parametrize("kind", PLANTS)
def test_a_planted_ledger_entry_is_ignored_and_the_others_kept(tmp_path, caplog, kind):
    directory = tmp_path / "home" / "metadata" / "archive-ledger"
    ArchiveLedger(directory).record(ledger_entry("inspector_logs/ci-a-000000.jsonl"))
    bad = directory / "inspector_logs" / "ci-b-000000.jsonl.json"
    plant(
        kind,
        bad,
        msgspec.json.encode(ledger_entry("inspector_logs/ci-b-000000.jsonl")),
        tmp_path / "outside",
    )
    with caplog.at_level(logging.WARNING):
        ledger = ArchiveLedger(directory)
    assert [e.source for e in ledger.entries()] == ["inspector_logs/ci-a-000000.jsonl"]
    assert named(caplog, bad), caplog.text


# ---- semantics/step/*.checkpoint.json ----------------------------------------------------------


@pytest.mark.parametrize("kind", PLANTS)
def test_a_planted_checkpoint_means_starting_over(tmp_path, caplog, kind):
    path = tmp_path / "home" / "semantics" / "step" / "engine.checkpoint.json"
    plant(kind, path, b"{}", tmp_path / "outside")
    with caplog.at_level(logging.WARNING):
        states = CheckpointFile(path, "digest", ProducerMode.live).load()
    assert states == {}
    assert named(caplog, path) and "starting over" in caplog.text


# ---- metadata/master -------------------------------------------------------------------------


STEP_FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "contract-tests/fixtures/json/step-summary/v1/valid/ddp-warmup-anomalies.json"
)


def step_line(step: int, rank: int) -> tuple[StepSummary, bytes]:
    base = msgspec.json.decode(STEP_FIXTURE.read_bytes(), type=StepSummary)
    summary = msgspec.structs.replace(base, step_index=step, global_rank=rank)
    return summary, msgspec.json.encode(summary)


def event_record(pid: int, seq: int) -> bytes:
    return event_bytes(pid=pid, event_seq=seq)


def master_with_one_node(home: Path) -> MasterStore:
    store = MasterStore(home)
    store.load()
    store.commit(
        "node-a",
        epoch=7,
        seq=3,
        hang_events=[(event_record(100, 1), REAL), (event_record(100, 2), REAL)],
        steps=[step_line(0, 0), step_line(1, 0)],
    )
    return store


@pytest.mark.parametrize("kind", PLANTS)
@pytest.mark.parametrize("what", ["cursors/node-b.json", "hang-events/node-b.jsonl"])
def test_a_planted_master_store_file_is_refused_and_the_node_it_holds_kept(
    tmp_path, caplog, pread_bytes, kind, what
):
    home = tmp_path / "home"
    master_with_one_node(home)
    bad = home / "metadata" / "master" / what
    elsewhere = (home / "metadata" / "master" / what.replace("node-b", "node-a")).read_bytes()
    plant(kind, bad, elsewhere, tmp_path / "outside")
    store = MasterStore(home)
    with caplog.at_level(logging.ERROR):
        store.load()
    assert store.cursors["node-a"].epoch == 7 and store.cursors["node-a"].last_applied == 3
    assert len(store.hang_keys["node-a"]) == 2 and len(store.step_keys["node-a"]) == 2
    assert "node-b" not in store.cursors and not store.hang_keys.get("node-b")
    if kind in ("fifo", "symlink") or what.startswith("cursors"):
        assert named(caplog, bad), caplog.text  # an unterminated line is just not read yet
    assert pread_bytes["bytes"] < 64 << 20  # the holes were not read
    # the node's next batch is stored where it belongs: not through a link, not into a
    # FIFO, not glued to an unterminated line
    store.commit("node-b", 1, 1, [(event_record(200, 9), REAL)], [])
    again = MasterStore(home)
    again.load()
    assert again.cursors["node-b"].last_applied == 1
    assert again.hang_keys["node-b"] == {hang_event_key(event_record(200, 9))}
    if kind == "symlink":
        assert (tmp_path / "outside" / bad.name).read_bytes() == elsewhere


def test_a_nested_line_in_a_master_store_costs_that_line_only(tmp_path):
    home = tmp_path / "home"
    master_with_one_node(home)
    events = home / "metadata" / "master" / "hang-events" / "node-a.jsonl"
    steps = home / "metadata" / "master" / "steps" / "node-a.jsonl"
    for path in (events, steps):
        with open(path, "ab") as f:
            f.write(NESTED + b"\n")
    store = MasterStore(home)
    store.load()
    assert len(store.hang_keys["node-a"]) == 2 and len(store.step_keys["node-a"]) == 2


# ---- semantics/step/*.jsonl: /api/v1/steps, the step window, the live followers ------------------


def page_all(files: StepFiles) -> list[tuple[int, int]]:
    page = files.page(rank=None, since_step=0, cursor=None, limit=1000)
    return [(s.step_index, s.global_rank) for s in page.items]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_planted_step_file_is_refused_once_and_the_others_served(tmp_path, caplog, kind):
    home = tmp_path / "home"
    write_step_summaries(home)
    good = home / "semantics" / "step" / "steps.jsonl"
    bad = home / "semantics" / "step" / "planted.jsonl"
    plant(
        kind,
        bad,
        good.read_bytes().replace(b'"step_index": ', b'"step_index": 1'),
        tmp_path / "outside",
    )
    files = StepFiles(home)
    with caplog.at_level(logging.ERROR):
        first = page_all(files)
        second = page_all(files)
    assert first == second == [(s, r) for s in range(5) for r in range(4)]
    assert len(named(caplog, bad)) == 1, caplog.text  # not once per request
    followed = NewStepSummaries(home / "semantics" / "step")
    assert len(followed.read()) == 20
    window = StepWindow([home / "semantics" / "step"])
    window.refresh()
    assert sum(len(s) for job in window.jobs.values() for s in job.gpus.values()) == 20


def test_a_sparse_step_file_costs_one_pass_and_its_lines_are_served(tmp_path, pread_bytes):
    home = tmp_path / "home"
    write_step_summaries(home)
    good = home / "semantics" / "step" / "steps.jsonl"
    sparse = home / "semantics" / "step" / "sparse.jsonl"
    first, second = (json.loads(line) for line in good.read_text().splitlines()[:2])
    sparse.write_text(json.dumps({**first, "step_index": 99}) + "\n")
    with open(sparse, "r+b") as f:
        f.truncate(SPARSE_BYTES)  # the hole follows one valid line
    files = StepFiles(home)
    for _ in range(3):
        served = page_all(files)
        assert len(served) == 21 and served[-1] == (99, 0)
    assert pread_bytes["bytes"] < 64 << 20  # not 64 GiB, not once per request
    with open(sparse, "ab") as f:  # the hole ends: the line after it is read
        f.write(b"\n" + json.dumps({**second, "step_index": 100}).encode() + b"\n")
    served = page_all(files)
    assert served[-1] == (100, 1) and len(served) == 22
    assert files.invalid_lines() == 1  # the hole, as one line of 64 GiB
    assert newest_steps(sparse)[-1].step_index == 100  # its tail only


@pytest.mark.parametrize("kind", ["fifo", "symlink", "nested line"])
def test_offline_read_summaries_names_a_planted_step_file(tmp_path, kind):
    path = tmp_path / "steps.jsonl"
    if kind == "nested line":
        path.write_bytes(NESTED + b"\n")
    else:
        plant(kind, path, b"", tmp_path / "outside")
    with pytest.raises((OSError, ValueError)) as raised:
        read_summaries(path)
    assert str(path) in str(raised.value)


def test_offline_read_summaries_passes_over_a_sparse_tail(tmp_path, pread_bytes):
    path = tmp_path / "steps.jsonl"
    _, line = step_line(3, 1)
    path.write_bytes(line + b"\n")
    with open(path, "r+b") as f:
        f.truncate(SPARSE_BYTES)  # an unterminated line: a write in progress, not read
    assert [s.step_index for s in read_summaries(path)] == [3]
    assert pread_bytes["bytes"] < 64 << 20


# ---- metadata/slave --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PLANTS)
def test_a_planted_slave_link_state_starts_a_new_epoch(tmp_path, caplog, kind):
    home = tmp_path / "home"
    plant(
        kind,
        home / "metadata" / "slave" / "link.json",
        b'{"epoch": 5, "next_seq": 9}',
        tmp_path / "outside",
    )
    outbox = SlaveOutbox(home, max_bytes=1 << 20)
    with caplog.at_level(logging.ERROR):
        outbox.load()
    assert outbox.epoch not in (0, 5)  # a new one, not the linked file's
    assert "unreadable" in caplog.text


@pytest.mark.parametrize("kind", ["fifo", "symlink", "sparse"])
def test_a_planted_outbox_batch_is_dropped_and_the_others_sent(tmp_path, kind):
    home = tmp_path / "home"
    outbox = SlaveOutbox(home, max_bytes=1 << 30)
    outbox.load()
    seq = outbox.append(pb.NodeStateBatch())
    bad = outbox._path(seq + 1)
    plant(kind, bad, pb.NodeStateBatch(batch_seq=seq + 1).SerializeToString(), tmp_path / "outside")
    again = SlaveOutbox(home, max_bytes=1 << 30)
    again.load()
    assert again.read(seq) is not None
    assert again.read(seq + 1) is None
    assert not os.path.lexists(bad)
