"""How NCCL would run an op on H200-class hardware: algorithm, protocol, channels, GPU time.

A model, not a measurement: NVLink-class bus bandwidth inside a node, InfiniBand-class between
nodes, a per-protocol latency and efficiency, and nccl-tests' bus-bandwidth factors. The
observed facts it honours: a 1 MiB float32 AllReduce on 2 ranks is RING/SIMPLE, 24 channels,
17 warps. Jitter comes from a generator seeded by the op, so every participant of a collective
computes the same duration.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DTYPE_BYTES = {
    "ncclInt8": 1,
    "ncclInt32": 4,
    "ncclUint32": 4,
    "ncclInt64": 8,
    "ncclUint64": 8,
    "ncclFloat16": 2,
    "ncclFloat32": 4,
    "ncclFloat64": 8,
    "ncclBfloat16": 2,
    "ncclFloat8e4m3": 1,
    "ncclFloat8e5m2": 1,
}
P2P_FUNCS = frozenset({"Send", "Recv"})
# AllGather and Broadcast reach the device as bytes: NCCL turns count into count*size, ncclInt8.
BYTE_FUNCS = frozenset({"AllGather", "Broadcast"})

INTRA_NODE_BUSBW = 360e9  # bytes/s, NVLink-class
INTER_NODE_BUSBW = 45e9  # bytes/s, 400 Gb/s InfiniBand-class
PROTO_LATENCY_NS = {"LL": 6_000, "LL128": 8_000, "SIMPLE": 12_000}
PROTO_EFFICIENCY = {"LL": 0.25, "LL128": 0.8, "SIMPLE": 1.0}
INTER_NODE_LATENCY_NS = 10_000
P2P_LATENCY_NS = 8_000
FIRST_OP_SETUP_NS = 1_500_000  # NCCL connects a communicator's channels lazily, on first use
MAX_CHANNELS = 24


@dataclass(frozen=True)
class Tuning:
    algo: str | None  # None for Send/Recv
    proto: str | None
    n_channels: int
    n_warps: int


def element_bytes(datatype: str) -> int:
    return DTYPE_BYTES[datatype]


def traffic_bytes(func: str, count: int, datatype: str, nranks: int) -> int:
    """The message size nccl-tests reports: the whole buffer for gathers and scatters."""
    size = count * element_bytes(datatype)
    return size * nranks if func in ("AllGather", "ReduceScatter") else size


def bus_factor(func: str, nranks: int) -> float:
    if nranks <= 1:
        return 0.0
    if func == "AllReduce":
        return 2 * (nranks - 1) / nranks
    if func in ("AllGather", "ReduceScatter"):
        return (nranks - 1) / nranks
    return 1.0


def tune(func: str, nbytes: int, nnodes: int) -> Tuning:
    if func in P2P_FUNCS:
        return Tuning(None, None, 8 if nbytes >= 512 * 1024 else 2, 0)
    if nbytes <= 64 * 1024:
        proto = "LL"
    elif nbytes <= 2 * 1024 * 1024 and nnodes == 1:
        proto = "LL128"
    else:
        proto = "SIMPLE"
    algo = "TREE" if func == "AllReduce" and nnodes > 1 and nbytes <= 4 * 1024 * 1024 else "RING"
    if proto == "SIMPLE":
        channels = MAX_CHANNELS
    elif proto == "LL128":
        channels = 16
    else:
        channels = max(1, min(MAX_CHANNELS, nbytes // 4096))
    return Tuning(algo, proto, channels, 17 if proto == "SIMPLE" else 16)


def gpu_duration_ns(
    func: str, nbytes: int, nranks: int, nnodes: int, tuning: Tuning, rng: random.Random
) -> int:
    if func in P2P_FUNCS:
        latency, factor, efficiency = P2P_LATENCY_NS, 1.0, 1.0
    else:
        latency = PROTO_LATENCY_NS[tuning.proto]
        factor, efficiency = bus_factor(func, nranks), PROTO_EFFICIENCY[tuning.proto]
    busbw = INTER_NODE_BUSBW if nnodes > 1 else INTRA_NODE_BUSBW
    if nnodes > 1:
        latency += INTER_NODE_LATENCY_NS
    ideal = latency + nbytes * factor / (busbw * efficiency) * 1e9
    jitter = 1.0 + abs(rng.gauss(0.0, 0.03))
    if rng.random() < 0.02:  # the occasional slow op every real trace has
        jitter *= 1.3
    return int(ideal * jitter)
