"""Whose a /metrics series is: the job, host, ranks and GPU of a profiled process, read from
its SHM header (and, for a process that drives several GPUs, its communicator table).

These are the labels a fleet joins on: `job_id` tells two jobs' `default_pg:0` apart, `host`
and `rank` place a process, and `UUID` is the label DCGM's exporter puts on a GPU's metrics
(`gpu` is the CUDA device ordinal inside the process, which is DCGM's index only when
CUDA_VISIBLE_DEVICES does not renumber the devices). None of them is a pid, so a restarted
rank continues its series rather than starting a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from comminsight.shm_reader import record_text
from comminsight_gen.abi import shm_v1

LABEL_NAMES = ("job_id", "host", "rank", "local_rank", "gpu", "UUID")


@dataclass(frozen=True, order=True)
class ProcessLabels:
    job_id: str = ""
    host: str = ""
    rank: str = ""
    local_rank: str = ""
    gpu: str = ""
    uuid: str = ""

    def values(self) -> tuple[str, str, str, str, str, str]:
        return (self.job_id, self.host, self.rank, self.local_rank, self.gpu, self.uuid)


NO_PROCESS = ProcessLabels()  # records whose producer is not known (tests, benchmarks)


def uuid_text(raw) -> str:
    """The 16 bytes of a GPU UUID as nvidia-smi and DCGM print them; "" when all zero
    (unknown)."""
    b = bytes(raw)
    if len(b) != 16 or not any(b):
        return ""
    h = b.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _index(value: int) -> str:
    return str(value) if value >= 0 else ""  # NO_RANK: unset


def index_label(index: int | None) -> str:
    """A rank's or device's label: "" where it is not known."""
    return "" if index is None else str(index)


def header_labels(header) -> ProcessLabels:
    """The process's labels, its GPU being the device of its first communicator."""
    names = header.dtype.names
    return ProcessLabels(
        job_id=record_text(header["job_id"]),
        host=record_text(header["hostname"]),
        rank=_index(int(header["rank"])),
        local_rank=_index(int(header["local_rank"])),
        gpu=_index(int(header["cuda_device"])),
        uuid=uuid_text(header["cuda_uuid"]) if "cuda_uuid" in names else "",
    )


class ProducerLabels:
    """One pass's view of a producer's labels: the header's, or, when its communicators sit on
    several devices (one process per node driving all its GPUs), each member's own device."""

    def __init__(self, header, rows: np.ndarray) -> None:
        self.process = header_labels(header)
        self._of_member: dict[tuple[int, int], ProcessLabels] = {}
        # every pass asks, for every process: one device (the common case) is one look
        devices = rows["cuda_device"][rows["cuda_device"] >= 0]
        self.split = len(devices) > 1 and int(devices.min()) != int(devices.max())
        if not self.split:
            return
        used = rows[(rows["state"] != shm_v1.CommState.FREE) & (rows["cuda_device"] >= 0)]
        has_uuid = "cuda_uuid" in rows.dtype.names
        for row in used:
            self._of_member[(int(row["comm_id"]), int(row["rank"]))] = replace(
                self.process,
                gpu=str(int(row["cuda_device"])),
                uuid=uuid_text(row["cuda_uuid"]) if has_uuid else "",
            )

    def of_member(self, comm_id: int, rank: int) -> ProcessLabels:
        """The labels of a communicator member's series."""
        if not self.split:
            return self.process
        return self._of_member.get((comm_id, rank), self.process)

    def partition(self, records: np.ndarray) -> list[tuple[ProcessLabels, np.ndarray]]:
        """The records under each set of labels (one set, the common case, costs nothing)."""
        if not self.split or not len(records):
            return [(self.process, records)] if len(records) else []
        pairs = np.stack(
            (
                records["comm_id"].astype(np.uint64).view(np.int64),
                records["rank"].astype(np.int64),
            ),
            axis=1,
        )
        distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        groups: dict[ProcessLabels, list[int]] = {}
        for i, (comm_id, rank) in enumerate(distinct.tolist()):
            labels = self.of_member(int(np.int64(comm_id).view(np.uint64)), rank)
            groups.setdefault(labels, []).append(i)
        out = []
        for labels, members in groups.items():
            mask = np.isin(inverse, members)
            out.append((labels, records[mask]))
        return out
