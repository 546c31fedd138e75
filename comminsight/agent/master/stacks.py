"""The master's questions to its slaves for Python stacks (agent-master-slave v1
WatchStackRequests / ReportStacks), and the answers it waits for.

A slave dials the master and never the other way round, so each slave session holds one
server stream the master writes StackRequests to (`watch`); the slave answers each with a
ReportStacks call (`answer`). `request` is what the master's diagnosis awaits: it always
returns a python-stack v1 document — the slave's answer, or `unavailable` saying which node
did not answer and why — and never waits past its timeout. Open requests are bounded; an
answer to a request that is no longer open, or from another node than the one asked, is
dropped. Each request ends in one of OUTCOMES, counted in `outcomes` for the master's /metrics
(what the node's capture made of it is counted on that node).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

import msgspec

from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models.python_stack_v1 import PythonStack, StackStatus

log = logging.getLogger(__name__)

SCHEMA = "comminsight.python-stack.v1"
MAX_OPEN = 1024  # requests waiting for an answer, all nodes together
QUEUE_MAX = 256  # requests written to one slave's stream and not yet sent
# answered: the node sent a python-stack document for the process (captured or unavailable);
# busy: MAX_OPEN or the node's QUEUE_MAX reached; bad_answer: undecodable or another pid's
OUTCOMES = ("answered", "not_connected", "busy", "timeout", "bad_answer")


def unavailable(host: str, pid: int, rank: int | None, reason: str) -> PythonStack:
    return PythonStack(
        schema=SCHEMA,
        status=StackStatus.unavailable,
        host=host,
        pid=pid,
        rank=rank,
        reason=reason[:1024],
        requested_real_ns=time.time_ns(),
    )


class StackRequests:
    def __init__(self) -> None:
        self.streams: dict[str, asyncio.Queue] = {}  # node -> the queue its stream sends
        self.open: dict[int, tuple[str, asyncio.Future]] = {}  # request id -> (node, answer)
        self.answers_dropped = 0
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)

    # ---- the slave's side of the stream ------------------------------------------------

    def watch(self, node: str) -> asyncio.Queue:
        """A new stream for `node`; an older one of the node is ended (None is its end)."""
        old = self.streams.get(node)
        if old is not None:
            _put(old, None)
        queue: asyncio.Queue = asyncio.Queue(QUEUE_MAX)
        self.streams[node] = queue
        return queue

    def unwatch(self, node: str, queue: asyncio.Queue) -> None:
        if self.streams.get(node) is queue:
            del self.streams[node]

    def answer(self, node: str, request_id: int, version: int, data: bytes) -> bool:
        """A slave's answer; False when no open request of that node has this id."""
        waiting = self.open.get(request_id)
        if waiting is None or waiting[0] != node or waiting[1].done():
            self.answers_dropped += 1
            return False
        future = waiting[1]
        if version != 1:
            future.set_exception(ValueError(f"python-stack version {version}; this master reads 1"))
            return True
        try:
            future.set_result(msgspec.json.decode(data, type=PythonStack))
        except NOT_JSON as e:
            future.set_exception(ValueError(f"not a python-stack v1 document: {e}"))
        return True

    # ---- the master's side ---------------------------------------------------------------

    async def request(
        self,
        node: str,
        host: str,
        pid: int,
        rank: int | None,
        timeout_s: float,
        via: str | None = None,
        pid_namespace: int = 0,
    ) -> PythonStack:
        """via: the relay whose stream carries the request down to `node` (None: the node's
        own stream); pid_namespace: the one `pid` is numbered in (0: unknown)."""
        outcome, stack = await self._request(node, host, pid, rank, timeout_s, via, pid_namespace)
        self.outcomes[outcome] += 1
        return stack

    async def _request(
        self,
        node: str,
        host: str,
        pid: int,
        rank: int | None,
        timeout_s: float,
        via: str | None,
        pid_namespace: int,
    ) -> tuple[str, PythonStack]:
        stream = via or node
        queue = self.streams.get(stream)
        if queue is None:
            reason = f"node {stream} has no stack request stream (not connected)"
            return "not_connected", unavailable(host, pid, rank, reason)
        if len(self.open) >= MAX_OPEN:
            return "busy", unavailable(host, pid, rank, f"{MAX_OPEN} stack requests already open")
        request_id = secrets.randbits(64) or 1
        future = asyncio.get_running_loop().create_future()
        self.open[request_id] = (stream, future)
        message = pb.StackRequest(
            request_id=request_id,
            pid=pid,
            node_name=node if via else "",
            pid_namespace=pid_namespace,
        )
        if rank is not None:
            message.global_rank = rank
        try:
            if not _put(queue, message):
                reason = f"node {stream} has {QUEUE_MAX} requests queued"
                return "busy", unavailable(host, pid, rank, reason)
            stack = await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            reason = f"node {node} did not answer within {timeout_s:g} s"
            return "timeout", unavailable(host, pid, rank, reason)
        except ValueError as e:
            return "bad_answer", unavailable(host, pid, rank, f"node {node} answered badly: {e}")
        finally:
            self.open.pop(request_id, None)
        if stack.pid != pid:
            reason = f"node {node} answered for pid {stack.pid}"
            return "bad_answer", unavailable(host, pid, rank, reason)
        return "answered", stack


def _put(queue: asyncio.Queue, item) -> bool:
    try:
        queue.put_nowait(item)
        return True
    except asyncio.QueueFull:
        return False
