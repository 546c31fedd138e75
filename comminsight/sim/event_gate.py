"""Which events NCCL 2.28 starts for a given activation mask.

NCCL does not start only the types whose bit is set: a parent is started whenever any of its
descendants is wanted, so that the child has a parent handle. With the Profiler's default mask
Coll|P2p|KernelCh a plugin therefore also sees GroupApi, CollApi/P2pApi and Group events. These
sets are NCCL's own (src/plugin/profiler.cc, v2.28.9); KernelLaunch is the one API-side event
that needs its own bit.
"""

from __future__ import annotations

from comminsight_gen.abi.nccl_profiler_v5 import EventType as E

_DEVICE_SIDE = E.PROXY_OP | E.PROXY_STEP | E.KERNEL_CH | E.NET_PLUGIN

# event type -> the mask bits any one of which makes NCCL start it
STARTED_BY: dict[E, int] = {
    E.GROUP_API: E.GROUP_API
    | E.COLL_API
    | E.P2P_API
    | E.KERNEL_LAUNCH
    | E.GROUP
    | E.COLL
    | E.P2P
    | _DEVICE_SIDE,
    E.COLL_API: E.COLL_API | E.COLL | _DEVICE_SIDE,
    E.P2P_API: E.P2P_API | E.P2P | _DEVICE_SIDE,
    E.KERNEL_LAUNCH: E.KERNEL_LAUNCH,
    E.GROUP: E.GROUP | E.COLL | E.P2P | _DEVICE_SIDE,
    E.COLL: E.COLL | _DEVICE_SIDE,
    E.P2P: E.P2P | _DEVICE_SIDE,
    E.PROXY_OP: E.PROXY_OP | E.PROXY_STEP | E.NET_PLUGIN,
    E.PROXY_STEP: E.PROXY_STEP | E.NET_PLUGIN,
    E.KERNEL_CH: E.KERNEL_CH,
}


# the same as plain ints, by the type's value: Flag arithmetic and Enum hashing run in Python,
# and every simulated op asks several times
_STARTED_BY_BITS: dict[int, int] = {int(t): int(bits) for t, bits in STARTED_BY.items()}


def starts(event_type: E, mask: int) -> bool:
    """Whether NCCL starts an event of this type for an op whose task captured `mask`."""
    return bool(int(mask) & _STARTED_BY_BITS[int(event_type)])
