"""A slave's connection to its master (agent-master-slave v1, gRPC): register, resend what the
master lacks from the outbox, stream new batches as they are built, heartbeat, and come back
with backoff after anything goes wrong.

One session per connection: Register (refusals happen here, before any state flows), then
StreamNodeState with a window of unacknowledged batches, and Heartbeat beside it. Every
acknowledgement deletes the batches it covers from the outbox. When the master's record of
this epoch and the outbox disagree (the master lost batches it had acknowledged, or the
outbox dropped batches it never sent) no resend can fill the hole, so the link starts a new
epoch and asks for a full state; the master drops duplicate events by their natural keys.

When the node's Agent can capture Python stacks (`answer_stacks`), each session also opens
WatchStackRequests and answers every request the master writes to it with ReportStacks; a
master that does not know the call (an older one) is told once in the log and the session
goes on without it.

The session id is the connection's, not the batch's: batches are stored without it and sent
as the serialized session id followed by the stored bytes (protobuf merges concatenated
messages), so a resend never re-encodes a batch.

Parents: COMMINSIGHT_AGENT_MASTER_ADDR may list several, in order (a relay, then the master
behind it). A session that fails moves the link to the next at once; the backoff applies only
once every parent has failed in a row. A new parent does not know this epoch, takes the first
batch it receives as its start and asks for a full state: nothing the outbox holds is lost,
and events the former parent already passed on are dropped upstream by their natural keys.
A link on a later parent checks the first every PREFERRED_RETRY_S (jittered) and goes back
to it once it answers: a relay that restarts gets its nodes back instead of leaving them on
the master for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from comminsight.agent.master.rejects import PROTOCOL_VERSION, Rejected, reason_name, reject_of
from comminsight.agent.slave import tls as slave_tls
from comminsight.agent.slave.outbox import SlaveOutbox
from comminsight.backoff import Backoff, jitter
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.agent_master_slave.v1.agent_master_slave_pb2_grpc import AgentMasterStub

log = logging.getLogger(__name__)

STREAM_METHOD = "/comminsight.agent_master_slave.v1.AgentMaster/StreamNodeState"
WINDOW = 32  # batches sent and not yet acknowledged
RECONNECT = Backoff(base_s=0.2, cap_s=10.0)
FATAL_RETRY_S = 30.0  # a refusal a retry cannot fix: try again rarely, for a corrected master
RPC_TIMEOUT_S = 10.0
PREFERRED_RETRY_S = 60.0
PROBE_TIMEOUT_S = 2.0


def clock() -> pb.ClockSample:
    return pb.ClockSample(mono_ns=time.monotonic_ns(), real_ns=time.time_ns())


class _NewEpoch(Exception):
    """The outbox started a new epoch: register again at once."""


class _BackToPreferred(Exception):
    """The first parent answers again: end this session and go back to it."""


class SlaveLink:
    def __init__(
        self,
        *,
        master_addr: str,
        token: str,
        tls: slave_tls.SlaveTls,
        outbox: SlaveOutbox,
        identity: pb.NodeIdentity,
        inventory: Callable[[], tuple[list, list]],
        max_batch_bytes: int,
        heartbeat_s: float,
        answer_stacks: Callable[[pb.StackRequest], Awaitable[bytes]] | None = None,
    ) -> None:
        self.parents = [a.strip() for a in master_addr.split(",") if a.strip()] or [master_addr]
        self.parent_index = 0
        self.token = token
        self.tls = tls
        self.outbox = outbox
        self.identity = identity
        self.inventory = inventory
        self.max_batch_bytes = max_batch_bytes
        self.heartbeat_s = heartbeat_s
        self.answer_stacks = answer_stacks
        self.stack_requests_answered = 0
        self.connected = False
        self.full_state_wanted = True  # a new slave process starts with a full state
        self.session_id = 0
        self.master_instance_id = 0
        self.sessions = 0
        self.last_error: str | None = None
        self.last_reject: pb.Reject | None = None
        self._wake = asyncio.Event()

    @property
    def master_addr(self) -> str:
        """The parent dialed now."""
        return self.parents[self.parent_index]

    def notify(self) -> None:
        """New batches are in the outbox."""
        self._wake.set()

    # ---- the reconnect loop --------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            began = time.monotonic()
            failures += 1
            wait = RECONNECT.delay(failures)
            parent = self.parent_index
            try:
                await self._session(stop)
            except _NewEpoch:
                continue
            except _BackToPreferred:
                log.info("parent %s answers again: going back to it", self.parents[0])
                self.connected = False
                self.parent_index = 0
                self.full_state_wanted = True
                continue  # the backoff stays: a first parent that answers yet refuses
                # registration is tried again only at the next probe
            except Rejected as e:
                self.last_reject = e.reject
                self._failed(f"refused by the master at {self.master_addr}: {e}", error=True)
                if e.fatal:
                    wait = FATAL_RETRY_S
            except grpc.RpcError as e:
                reject = reject_of(e)
                if reject is not None:
                    self.last_reject = reject
                    self._failed(
                        f"refused by the master at {self.master_addr}: "
                        f"{reason_name(reject.reason)}: {reject.message}",
                        error=True,
                    )
                    if Rejected(reject).fatal:
                        wait = FATAL_RETRY_S
                else:
                    tls = await slave_tls.tls_failure(e, self.master_addr, self.tls)
                    if tls is not None:
                        self._failed(f"cannot connect to the master: {tls}", error=True)
                        wait = FATAL_RETRY_S  # a configuration error: retrying cannot fix it
                    else:
                        self._failed(
                            f"master {self.master_addr} unreachable: {e.code().name} {e.details()}"
                        )
            except asyncio.InvalidStateError as e:
                # grpc.aio's answer to a write on a stream the parent already ended (it died
                # mid-batch): the session is over, like any other loss of the parent
                self._failed(f"master {self.master_addr} ended the stream: {e}")
            except (OSError, ValueError) as e:
                self._failed(f"link to master {self.master_addr} failed: {e}", error=True)
            self.connected = False
            if time.monotonic() - began > 5 * RECONNECT.cap_s:
                failures = 1  # the session lasted: this is the first failure of a new outage
                wait = RECONNECT.delay(failures)
            if len(self.parents) > 1:
                self.parent_index = (parent + 1) % len(self.parents)
                self.full_state_wanted = True  # the next parent has none of this node's rows
                if self.parent_index != 0:
                    wait = 0  # the next parent at once; the backoff after a whole round
                    failures -= 1
                log.info("trying parent %s next", self.master_addr)
            try:
                await asyncio.wait_for(stop.wait(), timeout=jitter(wait))
            except TimeoutError:
                pass

    def _failed(self, message: str, error: bool = False) -> None:
        if message != self.last_error:  # once per outage, not once per retry
            (log.error if error else log.warning)("%s", message)
        self.last_error = message

    # ---- one session ---------------------------------------------------------------------

    async def _session(self, stop: asyncio.Event) -> None:
        async with slave_tls.channel(self.master_addr, self.tls) as channel:
            stub = AgentMasterStub(channel)
            metadata = (("authorization", f"Bearer {self.token}"),)
            processes, communicators = self.inventory()
            request = pb.RegisterRequest(
                protocol_version=PROTOCOL_VERSION,
                node=self.identity,
                stream_epoch=self.outbox.epoch,
                last_built_batch_seq=self.outbox.last_built,
                clock=clock(),
                processes=processes,
                communicators=communicators,
            )
            try:
                response = await stub.Register(request, metadata=metadata, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as e:
                reject = reject_of(e)
                if reject is not None:
                    raise Rejected(reject) from None
                raise
            acked = self._reconcile(response)
            self.session_id = response.session_id
            self.master_instance_id = response.master_instance_id
            if response.max_batch_bytes:
                self.max_batch_bytes = response.max_batch_bytes
            if response.heartbeat_interval_ms:
                self.heartbeat_s = response.heartbeat_interval_ms / 1000
            if response.full_state_requested:
                self.full_state_wanted = True
            self.connected = True
            self.sessions += 1
            self.last_error = None
            log.info(
                "registered with master %s as %s (epoch %016x, resending %d batches)",
                self.master_addr,
                self.identity.node_name,
                self.outbox.epoch,
                len(self.outbox.pending(acked)),
            )
            await self._stream(channel, stub, metadata, acked, stop)

    def _reconcile(self, response: pb.RegisterResponse) -> int:
        """Where to resume: the last batch the master holds; a new epoch if the master and the
        outbox cannot be brought together by resending."""
        outbox = self.outbox
        if response.HasField("last_applied_batch_seq"):
            last = response.last_applied_batch_seq
            following = outbox.pending(last)
            hole = (following and following[0] != last + 1) or (
                not following and last != outbox.last_built
            )
            if outbox.lost_batches or last > outbox.last_built or hole:
                log.warning(
                    "master holds batch %d of epoch %016x, this slave built %d and still has "
                    "%s: starting a new epoch with a full state",
                    last,
                    outbox.epoch,
                    outbox.last_built,
                    f"{following[0]}.." if following else "none",
                )
                outbox.new_epoch()
                self.full_state_wanted = True
                raise _NewEpoch()
            outbox.ack(last)
            return last
        if outbox.lost_batches:
            outbox.new_epoch()
            self.full_state_wanted = True
            raise _NewEpoch()
        pending = outbox.pending()
        return pending[0] - 1 if pending else outbox.last_built

    async def _stream(self, channel, stub, metadata, acked: int, stop: asyncio.Event) -> None:
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=None, response_deserializer=pb.BatchAck.FromString
        )(metadata=metadata)
        prefix = pb.NodeStateBatch(session_id=self.session_id).SerializeToString()
        state = {"acked": acked, "sent": acked}
        progressed = asyncio.Event()

        async def send() -> None:
            while not stop.is_set():
                self._wake.clear()
                for seq in self.outbox.pending(state["sent"]):
                    if seq - state["acked"] > WINDOW:
                        break
                    data = self.outbox.read(seq)
                    if data is None:
                        continue
                    await call.write(prefix + data)
                    state["sent"] = seq
                progressed.clear()
                waits = [asyncio.ensure_future(e.wait()) for e in (self._wake, progressed, stop)]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:  # a session cancelled here leaves no waiting task behind
                    for w in waits:
                        w.cancel()
            await call.done_writing()

        async def receive() -> None:
            while True:
                ack = await call.read()
                if ack is grpc.aio.EOF:
                    return
                self.outbox.ack(ack.last_applied_batch_seq)
                state["acked"] = max(state["acked"], ack.last_applied_batch_seq)
                if ack.full_state_requested:
                    self.full_state_wanted = True
                progressed.set()

        async def heartbeat() -> None:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.heartbeat_s)
                except TimeoutError:
                    pass
                request = pb.HeartbeatRequest(
                    session_id=self.session_id,
                    clock=clock(),
                    last_built_batch_seq=self.outbox.last_built,
                    shutting_down=stop.is_set(),
                )
                await stub.Heartbeat(request, metadata=metadata, timeout=RPC_TIMEOUT_S)

        async def stack_requests() -> None:
            await self._stack_requests(stub, metadata, stop)

        async def prefer() -> None:
            await self._wait_for_preferred(stop)

        tasks = [
            asyncio.ensure_future(t()) for t in (send, receive, heartbeat, stack_requests, prefer)
        ]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
            if stop.is_set() and pending:  # let the goodbye heartbeat and last acks through
                await asyncio.wait(pending, timeout=RPC_TIMEOUT_S)
        finally:
            for task in tasks:
                task.cancel()
            call.cancel()

    async def _wait_for_preferred(self, stop: asyncio.Event) -> None:
        """On a later parent: returns (ending the session) only at stop, or raises
        _BackToPreferred once the first parent accepts a connection."""
        if self.parent_index == 0:
            await stop.wait()
            return
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=jitter(PREFERRED_RETRY_S))
                return
            except TimeoutError:
                pass
            async with slave_tls.channel(self.parents[0], self.tls) as channel:
                try:
                    await asyncio.wait_for(channel.channel_ready(), PROBE_TIMEOUT_S)
                except (TimeoutError, grpc.RpcError):
                    continue
            raise _BackToPreferred()

    async def _stack_requests(self, stub, metadata, stop: asyncio.Event) -> None:
        """Answer the master's stack requests until the session ends; returns only at stop
        (the session's other tasks decide when it ends)."""
        if self.answer_stacks is None:
            await stop.wait()
            return
        call = stub.WatchStackRequests(
            pb.WatchStackRequestsRequest(session_id=self.session_id), metadata=metadata
        )
        answering: set[asyncio.Task] = set()

        async def read() -> None:
            async for request in call:
                task = asyncio.ensure_future(self._answer_stacks(stub, metadata, request))
                answering.add(task)
                task.add_done_callback(answering.discard)

        reader = asyncio.ensure_future(read())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((reader, stopping), return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and reader.exception() is not None:
                raise reader.exception()
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self._failed(f"master {self.master_addr} takes no stack requests (an older master)")
        finally:
            reader.cancel()
            stopping.cancel()
            call.cancel()
            for task in answering:
                task.cancel()
        await stop.wait()

    async def _answer_stacks(self, stub, metadata, request: pb.StackRequest) -> None:
        try:
            data = await self.answer_stacks(request)
            report = pb.StackReport(
                session_id=self.session_id,
                request_id=request.request_id,
                python_stack_version=1,
                json=data,
            )
            await stub.ReportStacks(report, metadata=metadata, timeout=RPC_TIMEOUT_S)
            self.stack_requests_answered += 1
        except (grpc.RpcError, OSError, ValueError) as e:
            log.warning("cannot answer the master's stack request for pid %d: %s", request.pid, e)
