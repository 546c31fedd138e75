"""Every GPU's ops of one job, in issue order, with each op matched to the same op on the
other ranks.

A training job's ranks do the same collectives on each communicator in the same order, so an
op is one *instance* of the job seen from each participant: a collective is named by
(communicator, function, NCCL sequence number) on every member (NCCL counts sequence numbers
per function), a point-to-point message by (communicator, sender, receiver, how many earlier
messages went from that sender to that receiver). `JobOps` gives each op of each GPU its
instance number; the instances are what carries a Step boundary from one rank to another.

Communicator ids are the 16-hex-digit ids NCCL gives every member alike; they are interned
into small integers shared by all GPUs (`comm` column). Op keys (`op_key`) identify an op
within its GPU: (kind, communicator, function, sequence) packed into one int64, so that a
later pass over the same ops finds each op's Step by a binary search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from comminsight.semantic.dump_times import idle_before
from comminsight.semantic.native import NONE
from comminsight.semantic.op_batch import KINDS, OpBatch, func_code

P2P = KINDS.index("p2p")
# op_key layout: communicator 20 bits | function 6 | kind 1 | sequence 37
_SEQ_BITS, _KIND_BITS, _FUNC_BITS = 37, 1, 6
_COMM_SHIFT = _SEQ_BITS + _KIND_BITS + _FUNC_BITS
MAX_COMMS = 1 << 19
_SEQ_MASK = (1 << _SEQ_BITS) - 1


def op_keys(kind: np.ndarray, comm: np.ndarray, func: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """One int64 per op naming it within its GPU (sequence numbers past 2^37 wrap: a run
    that long repeats no key within one reorder window)."""
    return (
        (comm.astype(np.int64) << _COMM_SHIFT)
        | (func.astype(np.int64) << (_SEQ_BITS + _KIND_BITS))
        | (kind.astype(np.int64) << _SEQ_BITS)
        | (seq.astype(np.int64) & _SEQ_MASK)
    )


@dataclass
class CommIds:
    """Communicator ids interned across GPUs: code -> id, and each communicator's size."""

    ids: list[str] = field(default_factory=list)
    nranks: list[int] = field(default_factory=list)
    names: list[str | None] = field(default_factory=list)
    _code: dict[str, int] = field(default_factory=dict)

    def code(self, comm_id: str, nranks: int, name: str | None) -> int:
        c = self._code.get(comm_id)
        if c is None:
            if len(self.ids) >= MAX_COMMS:
                raise ValueError(f"more than {MAX_COMMS} communicators in one job")
            c = self._code[comm_id] = len(self.ids)
            self.ids.append(comm_id)
            self.nranks.append(nranks)
            self.names.append(name)
        elif self.names[c] is None and name is not None:
            self.names[c] = name
        return c

    def lookup(self, comm_id: str) -> int:
        """The code of a communicator seen before; -1 for one never seen."""
        return self._code.get(comm_id, -1)

    def codes_of(self, batch: OpBatch) -> tuple[np.ndarray, np.ndarray]:
        """For a batch's communicator table: (global code, rank in the communicator) by
        table index."""
        comms = batch.comms.comms
        code = np.fromiter(
            (self.code(c.comm_id, c.nranks, c.name) for c in comms), np.int64, len(comms)
        )
        rank = np.fromiter((c.rank for c in comms), np.int64, len(comms))
        return code, rank


@dataclass
class GpuOps:
    """One GPU's ops in issue order, as columns."""

    stream: str
    rank: int  # the GPU's global rank (for ordering and messages)
    kind: np.ndarray
    func: np.ndarray
    comm: np.ndarray  # global communicator code
    comm_rank: np.ndarray
    peer: np.ndarray  # NONE for collectives
    seq: np.ndarray
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    issue: np.ndarray
    lost_before: np.ndarray
    group: np.ndarray  # the op's NCCL group within its process, 0 when unknown
    host_issue: np.ndarray  # bool: `issue` is the host's clock (NVIDIA logs give file order)
    arrival: np.ndarray  # each op's place in the order its batches came in
    instance: np.ndarray = field(default=None)  # set by JobOps.match
    key: np.ndarray = field(default=None)  # op_keys, in op order
    # the host times its process's optimizer steps returned (Inject's step markers), sorted;
    # None without markers
    markers: np.ndarray | None = None
    # each op's element type, the shm protocol's code (0: unknown, as NVIDIA's logs leave it)
    datatype: np.ndarray = field(default=None)
    # each op's call's userProfilerTag (NCCL 2.31+, ABI v7): 0 where the call had none
    user_tag: np.ndarray = field(default=None)

    def __post_init__(self) -> None:
        if self.datatype is None:
            self.datatype = np.zeros(len(self.kind), np.int64)
        if self.user_tag is None:
            self.user_tag = np.zeros(len(self.kind), np.int64)

    def __len__(self) -> int:
        return len(self.kind)

    def idle_gaps(self) -> np.ndarray:
        """For each op, how long before it nothing happened: the time the GPU ran none of
        this process's ops, plus the time the host took to issue it after the op before.
        A Step begins after both: the optimizer, data loading and often a host sync (the
        loss printed) keep the host from issuing, and its GPU has drained by then. Where the
        ends are only the times NVIDIA Inspector dumped the lines, what the dump interval
        can explain is no idle time (dump_times)."""
        # with no host clock at all the ends are NVIDIA's dump times, and no issue times add
        gaps = idle_before(self.start, self.end, not self.host_issue.any())
        if len(self) > 1:
            host_clock = self.host_issue[1:] & self.host_issue[:-1]
            gaps[1:] += np.where(host_clock, np.maximum(0, np.diff(self.issue)), 0)
        return gaps


def gpu_ops(stream: str, rank: int, batches: list[OpBatch], comms: CommIds) -> GpuOps:
    """A GPU's batches (in arrival order) as one issue-ordered GpuOps."""
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("kind", "func", "comm", "comm_rank", "peer", "seq", "size")
    }
    for k in (
        "start",
        "end",
        "issue",
        "arrival",
        "lost_before",
        "group",
        "host_issue",
        "datatype",
        "user_tag",
    ):
        cols[k] = []
    arrival = 0
    for batch in batches:
        if not len(batch):
            continue
        c = batch.cols
        code, rank_in = comms.codes_of(batch)
        table_index = c["comm"]
        cols["comm"].append(code[table_index])
        cols["comm_rank"].append(rank_in[table_index])
        for k in ("kind", "func", "peer", "seq", "size", "start", "end", "issue", "lost_before"):
            cols[k].append(np.asarray(c[k], np.int64))
        cols["arrival"].append(np.arange(arrival, arrival + len(batch), dtype=np.int64))
        cols["group"].append(np.asarray(c["group_id"], np.int64))
        cols["datatype"].append(np.asarray(c["datatype"], np.int64))
        cols["user_tag"].append(np.asarray(c["user_tag"], np.int64))
        cols["host_issue"].append(np.asarray(c["end_mono"]) != NONE)
        arrival += len(batch)
    joined = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in cols.items()}
    issue = joined["issue"]
    if len(issue) < 2 or bool((issue[1:] >= issue[:-1]).all()):
        take = joined  # in issue order already (most logs): the copies joined are the columns
    else:
        order = np.lexsort((joined["arrival"], issue))
        take = {k: v[order] for k, v in joined.items()}
    ops = GpuOps(
        stream,
        rank,
        take["kind"],
        take["func"],
        take["comm"],
        take["comm_rank"],
        take["peer"],
        take["seq"],
        take["size"],
        take["start"],
        take["end"],
        take["issue"],
        take["lost_before"],
        take["group"],
        take["host_issue"].astype(bool),
        take["arrival"],
        datatype=take["datatype"],
        user_tag=take["user_tag"],
    )
    ops.key = op_keys(ops.kind, ops.comm, ops.func, ops.seq)
    return ops


@dataclass
class JobOps:
    gpus: list[GpuOps]
    comms: CommIds
    instances: int = 0  # number of distinct instances
    participants: np.ndarray = field(default=None)  # per instance: how many GPUs have it

    def match(self) -> None:
        """Number every op's instance (see the module docstring)."""
        parts = [instance_keys(g) for g in self.gpus]
        if not parts:
            return
        hi = np.concatenate([p[0] for p in parts])
        lo = np.concatenate([p[1] for p in parts])
        order = np.lexsort((lo, hi))
        new = np.ones(len(order), bool)
        if len(order) > 1:
            new[1:] = (hi[order][1:] != hi[order][:-1]) | (lo[order][1:] != lo[order][:-1])
        ids = np.empty(len(order), np.int64)
        ids[order] = np.cumsum(new) - 1
        self.instances = int(new.sum())
        self.participants = np.bincount(ids, minlength=self.instances)
        at = 0
        for g in self.gpus:
            g.instance = ids[at : at + len(g)]
            at += len(g)


def instance_keys(g: GpuOps) -> tuple[np.ndarray, np.ndarray]:
    """Each op's instance as (family, number): the same pair on every rank that takes part.
    A collective's family is its communicator and function, its number the sequence number;
    a point-to-point message's family is its communicator, sender and receiver, its number
    how many messages went that way before it."""
    p2p = g.kind == P2P
    send = p2p & (g.func == func_code("Send"))
    sender = np.where(send, g.comm_rank, g.peer)
    receiver = np.where(send, g.peer, g.comm_rank)
    # a P2P op's n-th message between its sender and receiver on its communicator
    pair = (g.comm << 40) | ((sender & 0xFFFFF) << 20) | (receiver & 0xFFFFF)
    nth = np.zeros(len(g), np.int64)
    if p2p.any():
        idx = np.flatnonzero(p2p)
        nth[idx] = _occurrence(pair[idx] * 2 + send[idx])
    family = np.where(p2p, pair | (1 << 62), (g.comm << 40) | g.func)
    # below 2^62, so that an interval of numbers (cut_order) never ends past int64's range
    # (NCCL counts from 0: only a forged log reaches that far)
    number = np.where(p2p, nth, g.seq) & NUMBER_MASK
    return family, number


NUMBER_MASK = (1 << 62) - 1


def _occurrence(values: np.ndarray) -> np.ndarray:
    """For each value, how many times it occurred earlier in the array."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.ones(len(values), bool)
    starts[1:] = sorted_values[1:] != sorted_values[:-1]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(len(values)), 0))
    out = np.empty(len(values), np.int64)
    out[order] = np.arange(len(values)) - run_start
    return out
