"""Synthetic op streams for the job cut: each GPU's ops with the idle time before each and
the Step the truth puts it in, built into the columns cut_job reads."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from comminsight.semantic.job_cut import STARTUP, TAIL, cut_job
from comminsight.semantic.job_ops import CommIds, GpuOps, JobOps, op_keys
from comminsight.semantic.op_batch import func_code

MS = 1_000_000
WORLD, TP = "00000000000000a1", "00000000000000b2"


class Stream:
    """One GPU's ops as the job cut reads them: each op with the idle time before it and
    the Step the truth puts it in (STARTUP for the start-up)."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, int, float, int, int]] = []
        self.step = STARTUP
        self.timed = False  # host issue times as well (the idle time before each op)

    def op(
        self, func: str, size: int, gap_ms: float = 0.05, comm: str = WORLD, datatype: int = 0
    ) -> None:
        """`datatype`: the shm protocol's code of the op's element type (0: unknown)."""
        self.ops.append((comm, func, size, gap_ms, self.step, datatype))

    def truth(self) -> np.ndarray:
        return np.array([o[4] for o in self.ops], np.int64)

    def gpu(self, comms: CommIds, rank: int, nranks: dict[str, int]) -> GpuOps:
        n = len(self.ops)
        seq: dict[tuple, int] = defaultdict(int)
        cols = defaultdict(list)
        t = 0
        for comm, func, size, gap_ms, _, datatype in self.ops:
            code = comms.code(comm, nranks[comm], None)
            cols["comm"].append(code)
            cols["func"].append(func_code(func))
            cols["size"].append(size)
            cols["seq"].append(seq[(code, func)])
            seq[(code, func)] += 1
            t += int(gap_ms * MS)
            cols["start"].append(t)
            t += 20_000
            cols["end"].append(t)
            cols["datatype"].append(datatype)
        zeros = np.zeros(n, np.int64)
        arr = {k: np.array(v, np.int64) for k, v in cols.items()}
        g = GpuOps(
            stream=f"gpu{rank}",
            rank=rank,
            kind=zeros.copy(),
            func=arr["func"],
            comm=arr["comm"],
            comm_rank=np.full(n, rank, np.int64),
            peer=np.full(n, -1, np.int64),
            seq=arr["seq"],
            size=arr["size"],
            start=arr["start"],
            end=arr["end"],
            issue=arr["start"].copy(),
            lost_before=zeros.copy(),
            group=zeros.copy(),
            host_issue=np.full(n, self.timed),
            arrival=np.arange(n, dtype=np.int64),
            datatype=arr["datatype"],
        )
        g.key = op_keys(g.kind, g.comm, g.func, g.seq)
        return g


def labels_of(streams: list[Stream], nranks: dict[str, int]):
    comms = CommIds()
    gpus = [s.gpu(comms, rank, nranks) for rank, s in enumerate(streams)]
    cut = cut_job(JobOps(gpus, comms))
    out = []
    for rank_cut in cut.ranks:
        label = rank_cut.label.copy()
        label[label == TAIL] = STARTUP  # nothing follows the last Step in these streams
        out.append(label)
    return cut, out
