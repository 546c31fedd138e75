"""The Semantic Engine's input: one GPU's completed ops, in the order the GPU's process issued
them.

`EngineOp` holds what step recovery and summaries need of one Collective or P2P op, whatever
it came from (inspector_logs lines, NVIDIA Inspector lines, SHM records); the engine works
on batches of them in columns (op_batch.OpBatch), and `EngineOp` is one op of a batch where a
single op is wanted. Ops complete out of issue order when they run on different streams, but
a Step is a stretch of the issue order, so the engine restores it over a bounded window
(native.reorder): an op is released once WINDOW later ops have arrived, smallest (issue
time, arrival) first. The release rule depends only on what the window holds, so re-reading
the same input from a checkpoint reproduces the same releases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from comminsight_gen.abi.shm_v1 import DATATYPE_BY_LABEL, Datatype

# More than the ops one process can have in flight at once across its streams.
WINDOW = 256


def datatype_code(label: str | None) -> int:
    """The shm protocol's code of a datatype as logs spell it (UNKNOWN for any other)."""
    return int(DATATYPE_BY_LABEL.get(label, Datatype.UNKNOWN)) if label else 0


# 64-bit integers: counts (samples, tokens, micro-batches), as PyTorch makes them by default
# (a sum of a mask, torch.tensor of an int); a narrower integer is a flag (Megatron's
# update-successful, DeepSpeed's overflow) or Megatron's token count reduced with the gradients
_COUNT_TYPES = np.array([Datatype.INT64, Datatype.UINT64], np.int64)


def counts_of(datatype: np.ndarray) -> np.ndarray:
    """Per op, whether its elements are counts (64-bit integers). NCCL hands all-gathers and
    broadcasts over as bytes: only a reduction can show its type."""
    # (one type at a time: np.isin takes about five times as long over an op stream)
    return (datatype == _COUNT_TYPES[0]) | (datatype == _COUNT_TYPES[1])


@dataclass(slots=True)
class EngineOp:
    kind: str  # "coll" or "p2p"
    func: str
    comm_id: str  # 16 lowercase hex digits
    comm_name: str | None
    comm_nranks: int
    comm_nnodes: int | None
    comm_rank: int
    peer: int | None  # P2P peer (comm rank); None for collectives
    seq: int  # coll_sn, or the communicator's P2P counter
    size_bytes: int
    issue_ns: int  # host enqueue time (CLOCK_MONOTONIC): the issue order
    start_ns: int  # execution start: GPU start where measured, else host
    end_ns: int  # execution end, same clock as start_ns
    start_real_ns: int
    end_real_ns: int
    start_mono_ns: int | None  # CLOCK_MONOTONIC start/end; None when the input has none
    end_mono_ns: int | None
    duration_ns: int
    busbw_gbs: float
    ring_seq: int | None
    lost_before: int = 0  # op records lost (a log gap) just before this op
    position: object = None  # the input position of the op (for checkpoints)
    arrival: int = 0  # arrival counter, set by the buffer: a stable tie-break
    group_id: int = 0  # per-process id of the NCCL group the op was launched in; 0: unknown
    datatype: int = 0  # the shm protocol's code of the element type; 0: unknown
    user_tag: int = 0  # the call's userProfilerTag (NCCL 2.31+ ABI v7); 0: none

    def key(self) -> tuple:
        """What repeats from one Step to the next: where, what and how big."""
        return (self.comm_id, self.func, self.size_bytes)
