"""The Agent's ingest of Profiler SHM files: every record read once, bad files quarantined
while the others are served, finished producers retired after their data is drained."""

from __future__ import annotations

import time

import numpy as np
from agent_home import hold_agent_lock, run_sim

from comminsight.agent.receivers.producers import ProducerSet
from comminsight_gen.abi import shm_v1


def ops_of(batches) -> np.ndarray:
    if not batches:
        return np.empty(0, dtype=shm_v1.OP_SLOT_DTYPE)
    records = np.concatenate([b.records for b in batches])
    kinds = records["kind"]
    return records[(kinds == shm_v1.RecordKind.COLL) | (kinds == shm_v1.RecordKind.P2P)]


def test_reads_every_record_once_then_retires_the_finished_producers(tmp_path):
    lock = hold_agent_lock(tmp_path)
    truths = run_sim(tmp_path)
    producers = ProducerSet(tmp_path)
    batches = producers.poll(time.monotonic_ns())
    completed = sum(1 for t in truths for op in t.ops if op["completed"])
    assert len(ops_of(batches)) == completed
    assert producers.counters.records_lost == 0
    assert len({(b.producer.pid) for b in batches}) == 4
    links = list((tmp_path / "shms").glob("*.shm"))
    targets = [p.resolve() for p in links]
    # the rank processes have exited: the next pass finds nothing new and retires them
    assert ops_of(producers.poll(time.monotonic_ns())).size == 0
    assert producers.producers == {} and producers.counters.producers_retired == 4
    assert producers.remover.wait(60)  # region files are removed in a thread of their own
    assert not any(p.exists() for p in links + targets)
    lock.close()


def test_bad_files_are_quarantined_and_the_rest_served(tmp_path):
    lock = hold_agent_lock(tmp_path)
    run_sim(tmp_path, ranks=2)
    shms = tmp_path / "shms"
    (shms / "garbage.shm").write_bytes(b"\x00garbage" * 1000)
    (shms / "short.shm").write_bytes(b"CI")
    good = sorted(shms.glob("ci-*.shm"))[0].resolve().read_bytes()
    wrong_version = bytearray(good)
    wrong_version[8:12] = (2).to_bytes(4, "little")  # header.abi_version
    (shms / "v2.shm").write_bytes(bytes(wrong_version))
    truncated = good[: len(good) // 2]
    (shms / "truncated.shm").write_bytes(truncated)
    producers = ProducerSet(tmp_path)
    batches = producers.poll(time.monotonic_ns())
    assert len({b.producer.pid for b in batches}) == 2  # the good ones are read
    refused = producers.counters.refused
    assert set(refused) == {"garbage.shm", "short.shm", "v2.shm", "truncated.shm"}
    assert "header.magic" in refused["garbage.shm"]
    assert "shorter than the 4096-byte header" in refused["short.shm"]
    assert "header.abi_version: 2" in refused["v2.shm"]
    assert "header.file_size" in refused["truncated.shm"]
    quarantine = shms / "quarantine"
    assert (quarantine / "v2.shm").exists() and (quarantine / "v2.shm.reason").exists()
    assert not (shms / "v2.shm").exists()
    lock.close()


def test_a_file_still_being_created_is_waited_for_not_quarantined(tmp_path):
    """A Profiler creates its file empty, sizes it, writes the header and only then marks it
    LIVE: a pass that lands in between sees an empty file or an all-zero header. Refusing it
    then quarantined a live rank's region for good (seen under load: a rank with no Steps)."""
    lock = hold_agent_lock(tmp_path)
    run_sim(tmp_path, ranks=1)
    shms = tmp_path / "shms"
    good = sorted(shms.glob("ci-*.shm"))[0].resolve().read_bytes()
    empty, zeroed = shms / "creating-empty.shm", shms / "creating-zeroed.shm"
    empty.write_bytes(b"")
    zeroed.write_bytes(bytes(len(good)))
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns())
    producers.poll(time.monotonic_ns())
    assert producers.counters.files_refused == 0 and not (shms / "quarantine").exists()
    assert empty.exists() and zeroed.exists()
    # the producers finish: the same files are read as regions
    empty.write_bytes(good)
    with open(zeroed, "r+b") as f:
        f.write(good)
    producers.poll(time.monotonic_ns())
    assert producers.counters.files_refused == 0
    assert {empty.name, zeroed.name} <= {p.name for p in producers.producers}
    producers.close()
    lock.close()


def test_a_file_that_never_finishes_being_created_is_refused_after_the_grace(tmp_path, monkeypatch):
    import comminsight.agent.receivers.producers as producers_module

    (tmp_path / "shms").mkdir(mode=0o700)
    (tmp_path / "shms" / "stuck.shm").write_bytes(bytes(shm_v1.HEADER_DTYPE.itemsize * 4))
    (tmp_path / "shms" / "empty.shm").write_bytes(b"")
    producers = ProducerSet(tmp_path)
    producers.poll(time.monotonic_ns())
    assert producers.counters.files_refused == 0
    assert len(producers.own.creating_since) == 2  # remembered, and only while they wait
    monkeypatch.setattr(producers_module, "CREATING_GRACE_NS", 0)
    producers.poll(time.monotonic_ns())
    refused = producers.counters.refused
    assert set(refused) == {"stuck.shm", "empty.shm"}
    assert "header.state: CREATING" in refused["stuck.shm"] and "for 0 s" in refused["stuck.shm"]
    assert "not yet sized" in refused["empty.shm"]
    assert (tmp_path / "shms" / "quarantine" / "stuck.shm").exists()
    assert producers.own.creating_since == {}
