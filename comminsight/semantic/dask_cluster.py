"""Which Dask cluster an offline run uses: one given by its scheduler's address, a local one of
so many worker processes, or none (this process alone).

By default (`workers=None`) a job worth spreading gets a LocalCluster of one single-threaded
worker per core this process may use, and a small one (one process's logs, or fewer than
AUTO_BYTES of segments) runs here: a cluster takes seconds to start, more than such a job
takes. A scheduler is given as `tcp://host:8786` or as the path of its scheduler file (what
`dask scheduler --scheduler-file` and dask-jobqueue's clusters write); its workers must see the
logs and the output directory at the same paths as this process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from comminsight.log_segments import segments_in

# segment bytes on disk from which a job is spread over the machine's cores by default
AUTO_BYTES = 256 << 20


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def auto_workers(logs: Path) -> int:
    """Workers for a run over `logs` when none were asked for: 0 (this process) for a small
    job, else one per usable core."""
    streams, total = set(), 0
    for path in segments_in(logs, include_open=True):
        streams.add(path.name.split(".jsonl")[0].rsplit("-", 1)[0])
        try:
            total += path.stat().st_size
        except OSError:
            continue  # sealed or compressed since the listing: the size is near enough
    if len(streams) < 2 or total < AUTO_BYTES:
        return 0
    return usable_cores()


@contextmanager
def dask_client(workers: int, scheduler: str | None) -> Iterator[object | None]:
    """A distributed.Client on the scheduler, or on a LocalCluster of `workers` processes; None
    (no cluster) for workers 0 and no scheduler. Closed on the way out."""
    if scheduler is None and workers == 0:
        yield None
        return
    from distributed import Client, LocalCluster

    if scheduler is not None:
        if Path(scheduler).is_file():
            client = Client(scheduler_file=scheduler)
        else:
            client = Client(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,  # the work is numpy and C per GPU: processes, not threads
        processes=True,
        # nothing of it reachable from other hosts: its scheduler, and the HTTP pages it
        # serves even without a dashboard, on this host's loopback, at ports free now
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    )
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()
