"""A process whose SHM ring overwrote the records after the live engine's checkpoint while no
Agent ran: the restarted Agent reads them back from the process's inspector logs (and the
records of its last Steps, the cut's context), and its summaries are an uninterrupted
Agent's. The ring here is 64 records, the smallest the Profiler takes, and the job runs on
after the checkpoint until it has lapped many times over."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
from agent_home import hold_agent_lock, run_sim
from log_files import segment_lines

from comminsight.agent.metrics.node import NodeMetrics
from comminsight.agent.node.ingest import NodeIngest, comm_infos
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.state.recent_ops import RecentOps
from comminsight.agent.steps.engine_hook import PassThroughEngine
from comminsight.agent.steps.log_records import op_slots, process_segments
from comminsight.agent.steps.semantic_hook import SemanticEngineHook
from comminsight.semantic.templates import load_templates
from comminsight.shm_reader import op_records

# The ring is large enough never to lap during the run, so the log writer (however far a
# loaded machine lets it fall behind) logs every record; the lapped ring an Agent would find
# is then the newest half of the ring's records, cut here.
ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", "65536"),
)
CHUNK = 50  # records an uninterrupted Agent takes of each GPU at a time


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A finished job's home (its regions kept: an Agent's lock is held), each GPU's stream,
    the records a lapped ring would still hold, and all its records, from its logs."""
    home = tmp_path_factory.mktemp("home")
    lock = hold_agent_lock(home)
    run_sim(home, ranks=2, steps=60, time_scale=0.02, env=ENV)
    producers = ProducerSet(home)
    batches = producers.poll(time.monotonic_ns())
    ingest = NodeIngest(producers, NodeMetrics(), RecentOps(16), PassThroughEngine(), "node")
    gpus = {}
    for p in producers.producers.values():
        gpu = ingest.gpu_of(p)
        ring = op_records(np.concatenate([b.records for b in batches if b.producer is p]))
        segments = process_segments(home / "inspector_logs", p.pid, gpu.start_real_ns)
        every = np.concatenate([s for s, _ in op_slots(segments, 0)])
        assert len(ring) == len(every)  # nothing lapped yet
        ring = ring[ring["seq"] > every["seq"][len(every) // 2]]  # the first half gone
        gpus[gpu] = (ring, comm_infos(p.region.comm_entries()), every)
    producers.close()
    lock.close()
    logs = b"".join(segment_lines(home / "inspector_logs")).decode()
    assert '"kind":"gap"' not in logs  # the writer saw every record
    return home, gpus


def take_in_turns(hook: SemanticEngineHook, gpus: dict, until: float = 1.0) -> None:
    """Each GPU's records of the first `until` of its run, CHUNK at a time, GPU after GPU."""
    at = 0
    longest = max(len(v[2]) for v in gpus.values())
    while at < longest * until:
        for gpu, (_, comms, every) in gpus.items():
            end = min(at + CHUNK, int(len(every) * until))
            if at < end:
                hook._take(gpu, "ops", (every[at:end], comms))
        at += CHUNK


def finished(hook: SemanticEngineHook, gpus: dict) -> dict[str, list[dict]]:
    for gpu in gpus:
        hook._take(gpu, "finished", None)
    hook.stop()
    return {p.name: [comparable(x) for x in p.read_bytes().splitlines()] for p in files(hook)}


def files(hook: SemanticEngineHook) -> list:
    return sorted(hook.out_dir.glob("live-*.jsonl"))


def comparable(line: bytes) -> dict:
    """A summary without what says how sure the cut that placed it was (it names how far each
    GPU's ops had come when the cut ran, which Agents that never stop differ in too)."""
    summary = json.loads(line)
    summary["recovery"].pop("confidence")
    summary["recovery"].pop("reasons", None)
    return summary


def killed(hook: SemanticEngineHook) -> None:
    hook.worker._stopping = True  # nothing more written
    with hook.worker._cond:
        hook.worker._cond.notify()


def stopped_at_checkpoint(home, gpus) -> None:
    """An Agent that checkpointed at a third of the run, went on to a half, and was killed."""
    first = SemanticEngineHook(home, load_templates(), checkpoint_s=3600)
    take_in_turns(first, gpus, 1 / 3)
    first._save_checkpoint()
    take_in_turns(first, gpus, 1 / 2)  # written after the checkpoint: cut off again
    killed(first)


def uninterrupted(tmp_path, gpus) -> dict[str, list[dict]]:
    expected = SemanticEngineHook(tmp_path / "uninterrupted", load_templates(), checkpoint_s=3600)
    take_in_turns(expected, gpus)
    return finished(expected, gpus)


def restarted_on_lapped_rings(home, gpus) -> tuple[SemanticEngineHook, dict[str, list[dict]]]:
    """A restarted Agent's summaries, its rings read from their oldest record."""
    second = SemanticEngineHook(home, load_templates(), checkpoint_s=3600)
    for gpu, (ring, comms, _) in gpus.items():
        second._take(gpu, "ops", (ring, comms))
    return second, finished(second, gpus)


def test_records_the_ring_overwrote_while_no_agent_ran_come_from_the_logs(job, tmp_path):
    home, gpus = job
    want = uninterrupted(tmp_path, gpus)
    assert len(want) == 2 and all(len(v) >= 55 for v in want.values())

    stopped_at_checkpoint(home, gpus)
    second, got = restarted_on_lapped_rings(home, gpus)
    assert second.restored == 2
    assert got.keys() == want.keys()
    for name in want:
        lost = [s["step_index"] for s in got[name] if s.get("records_lost")]
        assert not lost, name
        assert [s["step_index"] for s in got[name]] == list(range(len(want[name]))), name
        differ = [k for k, (a, b) in enumerate(zip(got[name], want[name], strict=True)) if a != b]
        assert not differ, (name, differ[:5], got[name][differ[0]], want[name][differ[0]])


def test_the_ring_records_wait_until_the_log_writer_has_written_what_it_lost(job, tmp_path):
    home, gpus = job
    copy = tmp_path / "home"
    shutil.copytree(home / "inspector_logs", copy / "inspector_logs")
    stopped_at_checkpoint(copy, gpus)
    gpu, (ring, comms, _) = next(iter(gpus.items()))
    ring = ring[-64:]  # a 64-slot ring: its first record is in the segments held back below
    # the writer is behind: its newest segments are not written yet
    later = sorted((copy / "inspector_logs").glob(f"ci-*-{gpu.pid}-*"))[-4:]
    held = tmp_path / "held"
    held.mkdir()
    for path in later:
        shutil.move(path, held / path.name)
    second = SemanticEngineHook(copy, load_templates(), checkpoint_s=3600)
    second._take(gpu, "ops", (ring, comms))
    g = second.engines.gpus[gpu]
    assert g.parked is not None and not g.replay.entries  # nothing handed on yet
    second._fill_from_logs(g, time.monotonic())
    assert g.parked is not None  # still behind
    for path in later:
        shutil.move(held / path.name, copy / "inspector_logs" / path.name)
    second._fill_from_logs(g, time.monotonic())
    assert g.parked is None
    assert int(g.replay.entries[-1].payload[0]["seq"][-1]) == int(ring["seq"][-1])
    assert g.lost == 0
    second.stop()


def killed_before_naming_them(home, gpus) -> None:
    """An Agent that wrote its start checkpoint (no GPU in it), took half the run and was
    killed before its next checkpoint."""
    first = SemanticEngineHook(home, load_templates(), checkpoint_s=3600)
    first._save_checkpoint()
    take_in_turns(first, gpus, 1 / 2)
    killed(first)


def test_a_running_process_no_checkpoint_named_takes_what_its_ring_lost_from_its_logs(
    job, tmp_path
):
    home, gpus = job
    want = uninterrupted(tmp_path, gpus)
    copy = tmp_path / "home"
    shutil.copytree(home / "inspector_logs", copy / "inspector_logs")
    killed_before_naming_them(copy, gpus)
    second, got = restarted_on_lapped_rings(copy, gpus)
    assert second.restored == 0
    assert got.keys() == want.keys()
    for name in want:
        assert [s["step_index"] for s in got[name]] == list(range(len(want[name]))), name
        assert got[name] == want[name], name


def test_an_agent_in_a_home_none_followed_before_reads_the_ring_alone(job, tmp_path):
    home, gpus = job
    copy = tmp_path / "home"
    shutil.copytree(home / "inspector_logs", copy / "inspector_logs")
    first = SemanticEngineHook(copy, load_templates(), checkpoint_s=3600)
    gpu, (ring, comms, every) = next(iter(gpus.items()))
    first._take(gpu, "ops", (ring, comms))
    g = first.engines.gpus[gpu]
    assert g.parked is None and g.logs_checked  # its logs are not read
    assert int(g.replay.entries[0].payload[0]["seq"][0]) == int(ring["seq"][0])
    first.stop()
