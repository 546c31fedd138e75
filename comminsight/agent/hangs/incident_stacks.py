"""The culprits' Python stacks, fetched when an incident opens or its root changes, and
attached to the incident.

The store announces the incident on the Agent's loop (IncidentStore.subscribe); a capture
waits for the process to answer (StackCapture: up to its timeout), so each is a task of its
own and the diagnosis pass goes on. A culprit the Agent cannot ask (no pid known, or on a
node it cannot reach) gets an entry saying why; StackCapture itself refuses processes
without Inject and rate-limits signals, so a root that changes back and forth does not
signal a process again within the interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from comminsight.agent.hangs.incident_store import IncidentStore, UnknownIncident
from comminsight.agent.hangs.stack_capture import unavailable
from comminsight.agent.hangs.stack_incident import incident_stacks
from comminsight_gen.models.hang_report_v1 import Culprit, Incident
from comminsight_gen.models.python_stack_v1 import PythonStack

log = logging.getLogger(__name__)

MAX_CULPRITS = 4  # stacks fetched per root: a root blaming many ranks is no single process

# (culprit) -> the capture, or None when this Agent cannot ask that culprit's node
Capture = Callable[[Culprit], Awaitable[PythonStack] | None]


class IncidentStacks:
    def __init__(self, store: IncidentStore, capture: Capture) -> None:
        self.store = store
        self.capture = capture
        self.tasks: set[asyncio.Task] = set()  # running captures (kept: tasks are weak)
        self.attached = 0
        store.subscribe(self.on_root)

    def on_root(self, incident: Incident) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a diagnosis outside the Agent's loop): nothing is fetched
        for culprit in list(incident.root.culprits)[:MAX_CULPRITS]:
            if not isinstance(culprit.pid, int):
                continue  # a process never seen (a rank that did not join): nothing to ask
            task = loop.create_task(self._fetch(incident.incident_id, culprit))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _fetch(self, incident_id: str, culprit: Culprit) -> None:
        rank = culprit.global_rank if isinstance(culprit.global_rank, int) else culprit.comm_rank
        host = culprit.host if isinstance(culprit.host, str) else ""
        asked = self.capture(culprit)
        if asked is None:
            reason = f"node {culprit.node_name} cannot be asked from here"
            stack = unavailable(host, culprit.pid, rank, reason)
        else:
            stack = await asked
        try:
            self.store.attach_stacks(
                incident_id, incident_stacks(stack, culprit.node_name, rank), time.time_ns()
            )
            self.attached += 1
        except (UnknownIncident, ValueError) as e:
            log.warning("stacks of incident %s not attached: %s", incident_id, e)
