"""Whose a /metrics series is: the job, node, Kubernetes workload, ranks and GPU of a profiled
process, read from its SHM header (and, for a process that drives several GPUs, its
communicator table), placed on the node by `placement`.

These are the labels a fleet joins on: `job_id` tells two jobs' `default_pg:0` apart (with a
SLURM job step's `step_id` and an array task's `array_index`); `host` is the node (the
Agent's node name: in Kubernetes a process's own host name is its pod's), `node` the
Kubernetes node; `pod`, `namespace` and `container` are those of kube-state-metrics and
cAdvisor; `rank` places a process; `gpu` and `UUID` are the labels DCGM's exporter puts on a
GPU's metrics (`gpu` the node's device index, known where the Agent can read the driver's; the
CUDA ordinal inside the process, which CUDA_VISIBLE_DEVICES renumbers, is `cuda_device`).
None of them is a pid, so a restarted rank continues its series rather than starting a new
one.

Label values are in LABEL_NAMES' order, the metrics protocol's: a job's labels (the first
JOB_LABELS, those every rank of a job on one node shares) come first, then the process's own
up to its rank (RANK_LABELS), then its GPU's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from comminsight.agent.state.placement import Placement
from comminsight.shm_reader import record_text
from comminsight_gen import metrics_v1
from comminsight_gen.abi import shm_v1

# the metrics protocol's process label groups, in the order of every series' label values
_GROUPS = metrics_v1.LABEL_GROUPS
LABEL_NAMES = (*_GROUPS["job_labels"], *_GROUPS["rank_labels"], *_GROUPS["gpu_labels"])
JOB_LABELS = len(_GROUPS["job_labels"])  # what the ranks of one job on one node share
RANK_LABELS = JOB_LABELS + len(_GROUPS["rank_labels"])  # .. and one rank's process


@dataclass(frozen=True, order=True)
class ProcessLabels:
    # LABEL_NAMES, in their order (the UUID's field in lower case)
    job_id: str = ""
    step_id: str = ""
    array_index: str = ""
    host: str = ""
    node: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    rank: str = ""
    local_rank: str = ""
    gpu: str = ""
    cuda_device: str = ""
    uuid: str = ""

    def values(self) -> tuple[str, ...]:
        return (
            self.job_id,
            self.step_id,
            self.array_index,
            self.host,
            self.node,
            self.namespace,
            self.pod,
            self.container,
            self.rank,
            self.local_rank,
            self.gpu,
            self.cuda_device,
            self.uuid,
        )

    def job(self) -> tuple[str, ...]:
        return self.values()[:JOB_LABELS]


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


def _text(header, name: str) -> str:
    return record_text(header[name]) if name in header.dtype.names else ""


def header_labels(header, placement: Placement | None = None) -> ProcessLabels:
    """The process's labels, its GPU being the device of its first communicator. Without a
    placement (tests, tools): the host the process names, and no workload or device index."""
    uuid = uuid_text(header["cuda_uuid"]) if "cuda_uuid" in header.dtype.names else ""
    host = placement.node_name if placement is not None else record_text(header["hostname"])
    workload = (
        placement.workload(
            int(header["pid"]), int(header["process_start_ticks"]), int(header["pid_namespace"])
        )
        if placement is not None
        else None
    )
    return ProcessLabels(
        job_id=record_text(header["job_id"]),
        step_id=_text(header, "slurm_step_id"),
        array_index=_text(header, "slurm_array_task_id"),
        host=host,
        node=placement.kubernetes_node if placement is not None else "",
        namespace=workload.namespace if workload else "",
        pod=workload.pod if workload else "",
        container=workload.container if workload else "",
        rank=_index(int(header["rank"])),
        local_rank=_index(int(header["local_rank"])),
        gpu=placement.gpu_index(uuid) if placement is not None else "",
        cuda_device=_index(int(header["cuda_device"])),
        uuid=uuid,
    )


class ProducerLabels:
    """One pass's view of a producer's labels: the header's, or, when its communicators sit on
    several devices (one process per node driving all its GPUs), each member's own device."""

    def __init__(self, header, rows: np.ndarray, placement: Placement | None = None) -> None:
        self.process = header_labels(header, placement)
        self._of_member: dict[tuple[int, int], ProcessLabels] = {}
        # every pass asks, for every process: one device (the common case) is one look
        devices = rows["cuda_device"][rows["cuda_device"] >= 0]
        self.split = len(devices) > 1 and int(devices.min()) != int(devices.max())
        if not self.split:
            return
        used = rows[(rows["state"] != shm_v1.CommState.FREE) & (rows["cuda_device"] >= 0)]
        has_uuid = "cuda_uuid" in rows.dtype.names
        for row in used:
            uuid = uuid_text(row["cuda_uuid"]) if has_uuid else ""
            self._of_member[(int(row["comm_id"]), int(row["rank"]))] = replace(
                self.process,
                gpu=placement.gpu_index(uuid) if placement is not None else "",
                cuda_device=str(int(row["cuda_device"])),
                uuid=uuid,
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
