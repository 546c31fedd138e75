"""How far a Profiler's CLOCK_MONOTONIC runs ahead of the Agent's.

Every time a Profiler writes (header, communicator rows, ring records, hang events) is on its
own CLOCK_MONOTONIC. A process in a time namespace of its own (a checkpoint-restored
container, `unshare --time`) has that clock shifted by a fixed offset; compared raw with the
Agent's clock its ops look days old (false hangs) or come from the future (ring records
refused as out of range, hangs never seen). The Agent therefore puts every such time on its
own clock where it reads it: `agent_ns = producer_ns - offset`.

The offset comes from the kernel where the Agent can see the process (the same pid namespace:
/proc/<pid>/timens_offsets): exact, and fixed for the process's life (a process never changes
its own time namespace), so it is kept once known, after the process has died too. Elsewhere
it is estimated from the header's heartbeat pair: the Profiler read CLOCK_MONOTONIC and
CLOCK_REALTIME at the same moment, and CLOCK_REALTIME is the same in every namespace, so the
producer's (monotonic - real) against the Agent's is the offset, give or take how far the wall
clock was slewed or stepped between the two reads. An estimate within ESTIMATE_SAME_CLOCK_NS
of zero is the same clock.
"""

from __future__ import annotations

import time

from comminsight.agent.core.liveness import (
    ProcessIdentity,
    namespace_shift,
    own_pid_namespace,
    process_runs,
)
from comminsight.shm_reader import ShmRegion

# An NTP slew moves the wall clock by at most 0.5 ms a second, and a producer's heartbeat is
# at most a few seconds old while it runs: a second covers that with room; a time namespace
# that is less than a second off is harmless to judgements made in seconds.
ESTIMATE_SAME_CLOCK_NS = 1_000_000_000


def on_reader_clock(producer_ns: int, offset_ns: int) -> int:
    """A producer's CLOCK_MONOTONIC time on the reader's; 0 (never, unset) stays 0."""
    return max(1, producer_ns - offset_ns) if producer_ns else 0


class ProducerClock:
    """The offset of one producer's clock from this process's."""

    def __init__(self, region: ShmRegion, identity: ProcessIdentity) -> None:
        self.region = region
        self.identity = identity
        self.exact_ns: int | None = None  # from the kernel, once known
        self.source = "same"  # "kernel" | "heartbeat" | "same": what the offset came from

    def offset_ns(self) -> int:
        if self.exact_ns is not None:
            return self.exact_ns
        pid = int(self.region.header["pid"])
        if self.identity.pid_namespace in (0, own_pid_namespace()):
            shift = namespace_shift(pid)
            # read before the identity check, so that a pid reused in between is caught
            if shift is not None and process_runs(pid, self.identity):
                self.exact_ns, self.source = shift[0], "kernel"
                return self.exact_ns
            # a process of our namespace that ended before it was seen: taken as sharing our
            # clocks (a header's pair cannot be told from one forged or left stale)
            self.source = "same"
            return 0
        return self._estimate()

    def _estimate(self) -> int:
        h = self.region.header
        mono, real = int(h["heartbeat_mono_ns"]), int(h["heartbeat_real_ns"])
        if not mono or not real:  # never beat: the pair the file was created with
            mono, real = int(h["start_mono_ns"]), int(h["start_real_ns"])
        if not mono or not real:
            self.source = "same"
            return 0
        here = time.monotonic_ns() - time.time_ns()
        estimate = (mono - real) - here
        if abs(estimate) < ESTIMATE_SAME_CLOCK_NS:
            self.source = "same"
            return 0
        self.source = "heartbeat"
        return estimate
