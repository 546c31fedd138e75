"""Which Dask cluster an offline run uses: one given by its scheduler's address, a local one of
so many worker processes, or none (this process alone).

By default (`workers=None`) a job worth spreading gets a LocalCluster of one single-threaded
worker per core this process may use, and a small one (one process's logs, or fewer than
AUTO_BYTES of segments) runs here: a cluster takes seconds to start, more than such a job
takes. A scheduler is given as `tcp://host:8786` or as the path of its scheduler file (what
`dask scheduler --scheduler-file` and dask-jobqueue's clusters write); its workers must see the
logs and the output directory at the same paths as this process, and their memory stays flat
in the job's size only with Dask's profiler off (`distributed.worker.profile.enabled: false`,
as worker_config sets it for the workers started here).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
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


class ClusterError(RuntimeError):
    """The cluster cannot be used: its scheduler unreachable, a worker that died on a task
    and would again (KilledWorker), the connection lost. The message says which."""


@contextmanager
def dask_client(workers: int, scheduler: str | None) -> Iterator[object | None]:
    """A distributed.Client on the scheduler, or on a LocalCluster of `workers` processes; None
    (no cluster) for workers 0 and no scheduler. Closed on the way out; what goes wrong with
    the cluster while it is used is a ClusterError."""
    if scheduler is None and workers == 0:
        yield None
        return
    from distributed import Client
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    lost = (KilledWorker, CommClosedError, TimeoutError)
    if scheduler is not None:
        address = _address_of(scheduler)
        try:
            client = Client(address, timeout=CONNECT_S)
        except (OSError, TimeoutError, ValueError) as e:
            raise ClusterError(f"cannot use the Dask scheduler {scheduler}: {e}") from None
        try:
            yield client
        except lost as e:
            raise ClusterError(f"the Dask cluster of {scheduler} failed: {e!r}") from None
        finally:
            client.close()
        return
    with _local_cluster(workers) as client:
        try:
            yield client
        except lost as e:
            raise ClusterError(f"the local Dask cluster failed: {e!r}") from None


CONNECT_S = 30  # for the scheduler to answer


def _address_of(scheduler: str) -> str:
    """The scheduler's address: given, or read from its scheduler file (JSON whose
    `address` it is, as `dask scheduler --scheduler-file` and dask-jobqueue write it)."""
    path = Path(scheduler)
    if not path.is_file():
        return scheduler
    try:
        address = json.loads(path.read_text())["address"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ClusterError(
            f"cannot use the Dask scheduler {scheduler}: not a scheduler file (JSON giving "
            f"its address): {e!r}"
        ) from None
    if not isinstance(address, str):
        raise ClusterError(f"cannot use the Dask scheduler {scheduler}: its address is no text")
    return address


@contextmanager
def _local_cluster(workers: int) -> Iterator[object]:
    from distributed import Client, LocalCluster

    # the workers' own directory (what they keep between rounds): this user's alone, made
    # here, so nobody else can plant or swap what they read back
    scratch = tempfile.mkdtemp(prefix="comminsight-dask-")
    with worker_config():  # read as the workers start
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,  # the work is numpy and C per GPU: processes, not threads
            processes=True,
            # nothing of it reachable from other hosts: its scheduler, and the HTTP pages it
            # serves even without a dashboard, on this host's loopback, at ports free now; TLS
            # with certificates made for this cluster alone, so no other user of the host can
            # join it and run code as this one
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            security=True,
            # one process's ops may need more than an even share of the memory: no worker is
            # restarted for its size (the machine's own limits still hold)
            memory_limit=0,
            local_directory=scratch,
            silence_logs=logging.ERROR,
        )
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def worker_config() -> Iterator[None]:
    """Dask's settings for the workers of a cluster started within: without the statistical
    profiler, whose history (a call tree a second, the last 1,000 kept) grows a worker by tens
    of MiB over a long job, and which no run of ours reads."""
    import dask

    with dask.config.set({"distributed.worker.profile.enabled": False}):
        yield
