"""The GPUs of one profiled process, live: which of its ring records belong to which GPU.

Most processes drive one GPU, and all their records are one stream. A process of JAX's
single-controller runtime, or one built on ncclCommInitAll, holds one communicator member per
local device; its records must then be split, or the engine sees several GPUs' ops as one
sequence. The rule is the offline reader's (comminsight.semantic.process_gpus): the members
come here from the process's communicator table (comm id, rank, size and the CUDA device of
each), every record names its communicator and its rank in it, and with that its GPU.

Members are remembered once seen (a communicator destroyed and its table row reused still
owns the records it left in the ring), and the split is decided again only when a member
appears. Records of a member the table never showed (a full or corrupt table) cannot be given
a GPU: they are counted and left out of the engine's input, never given to the wrong GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from comminsight.semantic.process_gpus import GpuOfProcess, ProcessMembers, split_members
from comminsight_gen.abi import shm_v1


@dataclass
class ProcessGpus:
    """One process's members and the split they give (kept across passes)."""

    where: str  # names the process in problems (its SHM file)
    members: ProcessMembers = field(default_factory=ProcessMembers)
    gpus: list[GpuOfProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unattributed: int = 0  # records of a member the table never showed
    _keys: np.ndarray | None = None  # (comm id, rank) of each member, as int64 pairs
    _gpu_of_key: np.ndarray | None = None  # the GPU index of each of those members
    _seen: bytes = b""  # the table rows the split was last decided on

    def update(self, comm_rows: np.ndarray) -> bool:
        """Take the communicator table's rows; whether the split changed."""
        seen = b"".join(
            comm_rows[name].tobytes() for name in ("comm_id", "rank", "cuda_device", "state")
        )
        if self.gpus and seen == self._seen:  # every pass asks; the table rarely changes
            return False
        self._seen = seen
        known = len(self.members.members)
        for row in sorted(comm_rows, key=lambda r: int(r["init_mono_ns"])):
            if int(row["state"]) == shm_v1.CommState.FREE:
                continue
            device = int(row["cuda_device"])
            self.members.add_member(
                f"{int(row['comm_id']):016x}",
                int(row["rank"]),
                int(row["nranks"]),
                device if device >= 0 else None,
            )
        if self.gpus and len(self.members.members) == known and not self.members.conflicts:
            return False
        before = [(g.suffix, g.members) for g in self.gpus]
        split = split_members(self.members, self.where)
        self.gpus, self.problems = split.gpus, split.problems
        self._index()
        return [(g.suffix, g.members) for g in self.gpus] != before

    @property
    def split(self) -> bool:
        return bool(self.gpus) and self.gpus[0].members is not None

    def partition(self, records: np.ndarray) -> list[tuple[GpuOfProcess, np.ndarray]]:
        """Each GPU's records of `records` (ring order kept), GPUs without any left out."""
        if not self.split:
            return [(self.gpus[0], records)] if self.gpus and len(records) else []
        keys = np.stack(
            (
                records["comm_id"].astype(np.uint64).view(np.int64),
                records["rank"].astype(np.int64),
            ),
            axis=1,
        )
        gpu = np.full(len(records), -1, np.int64)
        distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for i, (comm_id, rank) in enumerate(distinct.tolist()):
            hit = np.flatnonzero((self._keys[:, 0] == comm_id) & (self._keys[:, 1] == rank))
            if len(hit):
                gpu[inverse == i] = self._gpu_of_key[hit[0]]
        self.unattributed += int(np.count_nonzero(gpu < 0))
        return [
            (g, records[gpu == index]) for index, g in enumerate(self.gpus) if np.any(gpu == index)
        ]

    def _index(self) -> None:
        keys, owners = [], []
        for index, g in enumerate(self.gpus):
            for comm_id, rank in g.members or ():
                keys.append((np.uint64(int(comm_id, 16)).view(np.int64), rank))
                owners.append(index)
        self._keys = np.array(keys, np.int64).reshape(-1, 2)
        self._gpu_of_key = np.array(owners, np.int64)
