"""The inputs of every user a shared node Agent serves: their SHM regions and logs (through
the ProducerSet), their Inject metadata and stacks, and their hang-event FIFOs.

Each pass asks `TenantDirs` for the users' directories of the shared home (listed again only
when users/ changed) and hands them to the readers, which then read each user's files checked
against that user as owner. A user's FIFO is made by their own Profilers; it is opened when it
appears (looked for at most every FIFO_RETRY_S while it is missing or refused) and closed when
the user's directory goes.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from pathlib import Path

from comminsight.agent.hangs.stack_capture import StackCapture
from comminsight.agent.receivers.fifo_reader import HangEvent, HangEventFifo
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.receivers.producers import ProducerSet
from comminsight.agent.receivers.tenants import Tenant, TenantDirs, prepare_shared_home

log = logging.getLogger(__name__)

FIFO_RETRY_S = 1.0  # a missing or refused FIFO of a user is looked for again after this


class TenantInputs:
    def __init__(
        self,
        home: Path,
        producers: ProducerSet,
        inject_names: InjectNames,
        stacks: StackCapture,
        on_events: Callable[[HangEventFifo, list[HangEvent]], None],
    ) -> None:
        prepare_shared_home(home)
        self.dirs = TenantDirs(home)
        self.producers = producers
        self.inject_names = inject_names
        self.stacks = stacks
        self.on_events = on_events
        self.fifos: dict[int, HangEventFifo] = {}
        self.fifo_errors: dict[int, str] = {}  # uid -> why their hang events are not received
        self._fifo_tried_s: dict[int, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def tenants(self) -> dict[int, Tenant]:
        return self.dirs.tenants

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hang events of users' FIFOs are read on this loop from now on."""
        self._loop = loop

    def refresh(self) -> None:
        """One pass's look at users/: readers follow the users there now."""
        tenants = self.dirs.scan()
        homes = {uid: t.home for uid, t in tenants.items()}
        self.producers.serve(tenants.values())
        self.inject_names.serve(homes)
        self.stacks.serve(homes)
        for uid in list(self.fifos.keys() | self.fifo_errors.keys()):
            if uid not in tenants:
                self._close_fifo(uid)
        if self._loop is not None:
            now = time.monotonic()
            for uid, tenant in tenants.items():
                if (
                    uid not in self.fifos
                    and now - self._fifo_tried_s.get(uid, -1e9) >= FIFO_RETRY_S
                ):
                    self._open_fifo(tenant, now)

    def _open_fifo(self, tenant: Tenant, now: float) -> None:
        self._fifo_tried_s[tenant.uid] = now
        fifo = HangEventFifo(tenant.home, owner=tenant.uid)
        try:
            fifo.open()
        except OSError as e:
            if e.errno == errno.ENOENT:
                self.fifo_errors[tenant.uid] = f"{fifo.path} is not made yet (by a Profiler)"
                return
            if self.fifo_errors.get(tenant.uid) != str(e):
                log.error("user %d's hang events are not received: %s", tenant.uid, e)
            self.fifo_errors[tenant.uid] = str(e)
            return
        fifo.attach(self._loop, lambda events: self.on_events(fifo, events))
        self.fifos[tenant.uid] = fifo
        self.fifo_errors.pop(tenant.uid, None)

    def _close_fifo(self, uid: int) -> None:
        fifo = self.fifos.pop(uid, None)
        if fifo is not None:
            fifo.close()
        self.fifo_errors.pop(uid, None)
        self._fifo_tried_s.pop(uid, None)

    def problems(self, now_mono_s: float) -> list[str]:
        out = self.dirs.problems()
        for uid, why in sorted(self.fifo_errors.items()):
            if "is not made yet" not in why:
                out.append(f"user {uid}'s hang events are not received: {why}")
        for fifo in self.fifos.values():
            out += fifo.problems(now_mono_s)
        return out

    def close(self) -> None:
        for uid in list(self.fifos):
            self._close_fifo(uid)
