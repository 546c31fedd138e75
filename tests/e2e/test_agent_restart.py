"""`comminsight-agent` SIGKILLed in the middle of a training run and started again: training
goes on, every sealed inspector_logs segment reaches the archive exactly once (nothing
uploaded twice, nothing lost), and the restarted agent serves the run from where it is."""

from __future__ import annotations

import signal
import threading

import httpx
import zstandard
from agent_processes import agent_process, api_get
from e2e_sims import E2E_ENV
from ports import free_port
from waiting import wait_until

from comminsight.agent.archive.ledger import ArchiveLedger
from comminsight.log_segments import read_segment, segment_name, segments_in
from comminsight.sim import SimConfig, run_simulation

TOKEN = "restart-token"
NODE = "node-r"
# how long archiving is waited for: seconds when idle, minutes on a heavily loaded machine
DEADLINE_S = 240


def archived_objects(home):
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (home / "archives").rglob("*.zst")}


def test_agent_killed_mid_run_then_restarted_archives_every_segment_once(plugin, tmp_path):
    env = {
        "COMMINSIGHT_AGENT_NODE_NAME": NODE,
        "COMMINSIGHT_AGENT_TOKEN": TOKEN,
        "COMMINSIGHT_COMMON_ARCHIVE_INTERVAL_S": "0.1",
        "COMMINSIGHT_SEMANTIC_ENABLE": "0",  # this test is about segments only
    }
    listen = f"127.0.0.1:{free_port()}"
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path),
        workload="ddp",
        ranks=4,
        # long enough that a loaded 2-core machine archives a few segments before it ends
        steps=40,
        time_scale=0.05,
        # small segments: many seal during the run
        env=(*E2E_ENV, ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", "4096")),
    )
    first = agent_process(tmp_path, COMMINSIGHT_AGENT_LISTEN=listen, **env)
    result = {}
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    try:
        api_get(listen, "/api/v1/health")
        sim.start()
        ledger = tmp_path / "metadata" / "archive-ledger"
        wait_until(
            lambda: len(ArchiveLedger(ledger).entries()) >= 3,
            DEADLINE_S,
            "the first agent archived nothing",
        )
        assert sim.is_alive(), "the run ended before the agent could be killed mid-run"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        before_restart = archived_objects(tmp_path)
        second = agent_process(tmp_path, COMMINSIGHT_AGENT_LISTEN=listen, **env)
        try:
            assert api_get(listen, "/api/v1/health").status_code == 200
            sim.join(timeout=300)
            assert not result["sim"].errors, result["sim"].errors
            flushed = httpx.post(
                f"http://{listen}/api/v1/archive/flush",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=30,
            )
            assert flushed.status_code == 202, flushed.text

            def archived_all() -> bool:
                status = api_get(listen, "/api/v1/archive").json()
                return status["pending_files"] == 0 and not status["flush_in_progress"]

            wait_until(archived_all, DEADLINE_S, "the restarted agent did not archive the rest")
            status = api_get(listen, "/api/v1/archive").json()
        finally:
            second.send_signal(signal.SIGTERM)
            _, stderr = second.communicate(timeout=30)
        assert second.returncode == 0, stderr
    finally:
        if first.poll() is None:
            first.kill()
        sim.join(timeout=300)

    segments = segments_in(tmp_path / "inspector_logs")  # sealed, compressed or not
    print(f"{len(before_restart)} of {len(segments)} segments archived before the kill")
    assert len(segments) > len(before_restart) >= 3
    objects = archived_objects(tmp_path)
    archived_as = {s: f"{segment_name(s)}.zst" for s in segments}  # a .zst is sent as it is
    expected = {tmp_path / "archives" / NODE / "inspector_logs" / n for n in archived_as.values()}
    assert set(objects) == expected  # every sealed segment, nothing else (no temporaries)
    # nothing the killed agent committed was sent again
    assert all(objects[p] == identity for p, identity in before_restart.items())
    decompress = zstandard.ZstdDecompressor()
    for segment in segments:
        archived = tmp_path / "archives" / NODE / "inspector_logs" / archived_as[segment]
        assert decompress.decompressobj().decompress(archived.read_bytes()) == read_segment(segment)
    entries = ArchiveLedger(tmp_path / "metadata" / "archive-ledger").entries()
    sources = [f"inspector_logs/{segment_name(s)}" for s in segments]
    assert sorted(e.source for e in entries) == sources
    assert status["uploaded_files_total"] == len(segments) and status["last_error"] is None
