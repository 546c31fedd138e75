"""One GPU's ops built by hand, as the job cut reads them (GpuOps), for tests of the rules
that read op kinds, sizes and idle time."""

from __future__ import annotations

import numpy as np

from comminsight.semantic.job_ops import GpuOps
from comminsight.semantic.op_batch import KINDS, func_code

COLL = KINDS.index("coll")
MIB = 1 << 20


def gpu_ops(
    ops: list[tuple[str, int, int]], gaps: list[int] | None = None, host_issue: bool = True
) -> GpuOps:
    """Ops from (function, communicator, bytes); `gaps`: the host's time before each op in
    microseconds (1 µs each by default); each op runs 0.5 µs on the GPU. Seq counts per
    function and communicator, as NCCL's do."""
    n = len(ops)
    gaps = gaps if gaps is not None else [1] * n
    issue = np.cumsum(np.array(gaps, np.int64) * 1000)
    seq = np.zeros(n, np.int64)
    for i, (f, c, _) in enumerate(ops):
        seq[i] = sum(1 for g, d, _ in ops[:i] if (g, d) == (f, c))
    return GpuOps(
        stream="ci-h-7-1",
        rank=0,
        kind=np.full(n, COLL, np.int64),
        func=np.array([func_code(f) for f, _, _ in ops], np.int64),
        comm=np.array([c for _, c, _ in ops], np.int64),
        comm_rank=np.zeros(n, np.int64),
        peer=np.full(n, -1, np.int64),
        seq=seq,
        size=np.array([s for _, _, s in ops], np.int64),
        start=issue + 100,
        end=issue + 600,
        issue=issue,
        lost_before=np.zeros(n, np.int64),
        group=np.zeros(n, np.int64),
        host_issue=np.full(n, host_issue),
        arrival=np.arange(n, dtype=np.int64),
    )
