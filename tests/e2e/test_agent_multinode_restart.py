"""A slave and then the master SIGKILLed in the middle of a run and started again: every step
summary and every hang event of the job reaches the master exactly once (nothing reported
twice, nothing lost), through the slaves' outboxes and the master's cursors and event keys."""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter

import numpy as np
import pytest
from multinode_job import sim_config, start_job
from waiting import wait_until

from comminsight.agent.receivers.fifo_reader import EVENT
from comminsight.shm_reader import ShmError, ShmRegion
from comminsight.sim import run_simulation


def step_keys(agent) -> list[tuple[int, int, int]]:
    items, cursor = [], None
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = agent.get("/api/v1/steps", **params).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return [(s["global_rank"], s.get("pid", 0), s["step_index"]) for s in items]


def master_hang_keys(job, node: str) -> list[tuple[int, int]]:
    path = job.master.home / "metadata" / "master" / "hang-events" / f"{node}.jsonl"
    if not path.exists():
        return []
    keys = []
    for line in path.read_text().splitlines():
        e = np.frombuffer(base64.b64decode(json.loads(line)["record"]), dtype=EVENT)[0]
        keys.append((int(e["pid"]), int(e["event_seq"])))
    return keys


def hold_regions(home, count: int) -> list[ShmRegion] | None:
    """The node's `count` regions, mapped by the test (None until there are that many): the
    Agent removes a region once its records are safe, and the counters read at the end are
    the processes' final ones."""
    regions = []
    for path in (home / "shms").glob("*.shm"):
        try:
            regions.append(ShmRegion(path))
        except (ShmError, OSError):
            continue
    if len(regions) == count:
        return regions
    for region in regions:
        region.close()
    return None


def fifo_events_written(regions: list[ShmRegion]) -> int:
    return sum(region.counter("fifo_events_written") for region in regions)


@pytest.mark.slow
def test_master_and_slave_killed_mid_run_lose_and_repeat_nothing(plugin, tmp_path):
    (tmp_path / "sim").mkdir()
    job = start_job(tmp_path, 3)
    result = {}
    # rank 0 sleeps past the hang threshold late in the run: hang events on every node
    config = sim_config(
        plugin, tmp_path, job, ("sleep:rank=0,op=60,seconds=4",), steps=12, time_scale=0.1
    )
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    sim.start()
    regions = {}
    try:
        # each node's regions, held from the start (see hold_regions)
        for slave in job.slaves:
            regions[id(slave)] = wait_until(
                lambda slave=slave: hold_regions(slave.home, 2),
                120,
                "a node's two regions",
            )
        victim = job.slaves[1]
        wait_until(
            lambda: any(k[0] in (2, 3) for k in step_keys(job.master)),
            120,
            lambda: f"no step from node-1:\n{victim.log_text()[-2000:]}",
        )
        victim.kill()
        victim.start()
        victim.wait_ready()
        wait_until(
            lambda: job.master.get("/api/v1/hangs", status="all").json()["total"] > 0,
            120,
            lambda: f"no hang report:\n{job.master.log_text()[-2000:]}",
        )
        job.master.kill()  # while the hang's events are still coming
        # down until every slave saw it go (and keeps what comes meanwhile for the next one)
        wait_until(
            lambda: all(
                any(
                    r.startswith("not connected to the master")
                    for r in s.get("/api/v1/health").json()["reasons"]
                )
                for s in job.slaves
            ),
            60,
            "every slave to see the master gone",
        )
        job.master.start()
        job.master.wait_ready()
        wait_until(  # the slaves come back within their backoff (at most 10 s)
            lambda: all(
                n["state"] == "connected"
                for n in job.master.get("/api/v1/nodes").json()["items"]
                if n["node_name"] != "master"
            ),
            40,
            "the slaves did not re-register with the restarted master",
        )
        sim.join()
        assert not result["sim"].errors, result["sim"].errors
        union = sorted({k for s in job.slaves for k in step_keys(s)})
        assert union, "the slaves recovered no step"
        wait_until(
            lambda: sorted(set(step_keys(job.master))) == union,
            60,
            lambda: f"master steps {len(set(step_keys(job.master)))} of {len(union)}",
        )
        keys = step_keys(job.master)
        assert not [k for k, n in Counter(keys).items() if n > 1], "a step reported twice"
        for i, slave in enumerate(job.slaves):
            node = f"node-{i}"
            written = fifo_events_written(regions[id(slave)])
            if slave is victim:
                continue  # events written while it was down were dropped by the Profiler
            wait_until(
                lambda node=node, written=written: len(master_hang_keys(job, node)) >= written,
                30,
                lambda node=node, written=written: (
                    f"{node}: master has {len(master_hang_keys(job, node))} of {written}"
                ),
            )
        for i in range(3):
            hang = master_hang_keys(job, f"node-{i}")
            assert len(hang) == len(set(hang)), f"node-{i}: a hang event stored twice"
        assert sum(fifo_events_written(r) for r in regions.values()) > 0
        nodes = {n["node_name"]: n for n in job.master.get("/api/v1/nodes").json()["items"]}
        assert all(nodes[f"node-{i}"]["state"] == "connected" for i in range(3)), nodes
    finally:
        sim.join()
        job.stop()
        for region in (r for held in regions.values() for r in held):
            region.close()
