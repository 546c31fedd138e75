"""The master's end of agent-master-slave v1: the AgentMaster gRPC service on grpc.aio.

The handlers take the request bytes themselves (no generated deserializer), so that bytes
that do not parse are a MALFORMED refusal that names the slave and is recorded, rather than
gRPC's anonymous "Exception deserializing request". gRPC's own receive limit sits a little
above max_batch_bytes; a message past it never reaches a handler (the slave reads
RESOURCE_EXHAUSTED as OVERSIZED), one between the two is refused here.

A call without the right token is refused from its metadata alone (TokenGate, a server
interceptor), before gRPC reads its request: a stranger's message of megabytes is never
buffered whole, so a flood of them costs the master a little per call, not the message size.

Every refusal of a peer that presented the token is recorded on the node it names
(rejects_total, last_reject: /api/v1/nodes) and logged; it ends only the call that caused it.
A peer without the right token is nobody: its refusal is counted on the master alone
(unauthenticated_rejects, the latest kept for health) and logged at most once a minute,
never attributed to the node name it claims, so it cannot change what a live node shows.
Handlers run on the agent's event loop, so they change the job view between the service's
passes, never during one.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable

import grpc
import msgspec

from comminsight import __version__
from comminsight.agent.core.metric_family import metric_family
from comminsight.agent.core.rate_limited_log import PERSISTENT_PERIOD_S, RateLimitedLog
from comminsight.agent.master.job_view import NodeRecord, class_runs
from comminsight.agent.master.rejects import PROTOCOL_VERSION, REJECT_KEY, STATUS_OF, reason_name
from comminsight.agent.master.stacks import StackRequests
from comminsight.agent.master.store import MasterStore
from comminsight.agent.receivers.fifo_reader import EVENT_SIZE, MAGIC_BYTES
from comminsight.agent.state.node_state import process_key, row_key
from comminsight.agent.state.rank_runs import RankRuns
from comminsight.agent.tls_files import read_pem
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import metrics_v1
from comminsight_gen.abi import fifo_event_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.models import agent_master_api_v1 as api
from comminsight_gen.models.python_stack_v1 import PythonStack
from comminsight_gen.models.step_summary_v1 import StepSummary

log = logging.getLogger(__name__)

SERVICE = "comminsight.agent_master_slave.v1.AgentMaster"
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
MAX_REFUSED_STRANGERS = 256  # names never admitted that refusals may add to the node table
GRPC_LIMIT_SLACK = 64 * 1024  # gRPC's limit above max_batch_bytes: ours refuses first
DEFAULT_MAX_CONCURRENT_RPCS = 4096


class Refusal(Exception):
    def __init__(self, reason: int, message: str, **extra) -> None:
        super().__init__(message)
        self.reject = pb.Reject(
            reason=reason, message=message[:1024], master_protocol_version=PROTOCOL_VERSION, **extra
        )


def clock() -> pb.ClockSample:
    return pb.ClockSample(mono_ns=time.monotonic_ns(), real_ns=time.time_ns())


class AgentMasterServer:
    """Sessions of slaves, applied into `nodes` (shared with the master service)."""

    def __init__(
        self,
        *,
        nodes: dict[str, NodeRecord],
        store: MasterStore,
        token: str,
        max_batch_bytes: int,
        stale_ms: int,
        on_events: Callable[[str, list[bytes]], None],
        max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS,
        on_steps: Callable[[list[tuple[str, bytes]]], None] | None = None,
    ) -> None:
        self.nodes = nodes
        self.max_concurrent_rpcs = max_concurrent_rpcs
        self.store = store
        self.token = token
        self.max_batch_bytes = max_batch_bytes
        self.stale_ms = stale_ms
        self.on_events = on_events
        self.on_steps = on_steps  # new step summaries, (origin node, JSON), once applied
        self.instance_id = secrets.randbits(64) or 1
        self.sessions: dict[int, NodeRecord] = {}
        self.shutting_down = False
        self.batches_applied = 0
        self.bytes_received = 0
        self.duplicates_dropped = 0
        self.rejects_total = 0
        self.strangers_unrecorded = 0  # refusals of unknown names past MAX_REFUSED_STRANGERS
        self.unauthenticated_rejects = 0  # refusals of peers without the token: nobody's
        self.last_unauthenticated: api.NodeReject | None = None
        self.last_unauthenticated_mono_ns = 0
        self._unauthenticated_log = RateLimitedLog(
            log, "refused a peer without the token", PERSISTENT_PERIOD_S, logging.ERROR
        )
        self.version = 0  # moves whenever a node's rows or state change
        self.stacks = StackRequests()

    # ---- wiring ------------------------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Register": grpc.unary_unary_rpc_method_handler(self.register),
                "StreamNodeState": grpc.stream_stream_rpc_method_handler(self.stream),
                "Heartbeat": grpc.unary_unary_rpc_method_handler(self.heartbeat),
                "WatchStackRequests": grpc.unary_stream_rpc_method_handler(self.watch_stacks),
                "ReportStacks": grpc.unary_unary_rpc_method_handler(self.report_stacks),
            },
        )

    async def start(
        self, listen: str, cert: str = "", key: str = "", client_ca: str = ""
    ) -> tuple[grpc.aio.Server, int]:
        """Serve on listen; returns the server and the bound port (listen may say port 0).
        With client_ca, TLS is mutual: a slave must present a certificate that CA signed.
        TlsFileError (an OSError) when a TLS setting's file cannot be used."""
        server = grpc.aio.server(
            interceptors=[TokenGate(self)],
            options=[
                # a batch is the largest message a slave sends (its registration carries one
                # node's processes and communicators, far less); max_batch_bytes bounds it
                ("grpc.max_receive_message_length", self.max_batch_bytes + GRPC_LIMIT_SLACK),
                ("grpc.max_send_message_length", 1 << 20),
                ("grpc.so_reuseport", 0),
                ("grpc.http2.bdp_probe", 0),
            ],
            # each slave holds two calls open (its batch stream, its stack-request watch);
            # calls beyond this are refused RESOURCE_EXHAUSTED before anything is read
            maximum_concurrent_rpcs=self.max_concurrent_rpcs,
        )
        server.add_generic_rpc_handlers((self.handler(),))
        if cert:
            creds = grpc.ssl_server_credentials(
                [
                    (
                        read_pem("COMMINSIGHT_AGENT_TLS_KEY", key),
                        read_pem("COMMINSIGHT_AGENT_TLS_CERT", cert),
                    )
                ],
                root_certificates=(
                    read_pem("COMMINSIGHT_AGENT_TLS_CLIENT_CA", client_ca) if client_ca else None
                ),
                require_client_auth=bool(client_ca),
            )
            port = server.add_secure_port(listen, creds)
        else:
            port = server.add_insecure_port(listen)
        await server.start()
        return server, port

    # ---- refusals ----------------------------------------------------------------------

    async def _refuse(self, context, refusal: Refusal, node_name: str | None) -> None:
        reject = refusal.reject
        self.rejects_total += 1
        peer = context.peer() or ""
        if reject.reason == pb.REJECT_REASON_WRONG_TOKEN:
            await self._refuse_unauthenticated(context, reject, peer)
            return
        log.error(
            "refused slave %s from %s: %s: %s",
            node_name or "(unnamed)",
            peer,
            reason_name(reject.reason),
            reject.message,
        )
        record = self.nodes.get(node_name) if node_name and NODE_NAME.fullmatch(node_name) else None
        if record is None and node_name and NODE_NAME.fullmatch(node_name):
            if self.refused_strangers() < MAX_REFUSED_STRANGERS:
                record = self.nodes[node_name] = NodeRecord(node_name, api.AgentMode.slave)
            else:  # bounded: anyone can present a new name with a wrong token
                self.strangers_unrecorded += 1
        if record is not None:
            record.rejects_total += 1
            record.last_reject = api.NodeReject(
                reason=reason_name(reject.reason),
                message=reject.message,
                at_real_ns=time.time_ns(),
                peer=peer[:512],
            )
            if record.session_id == 0 or record.state is not api.NodeState.connected:
                record.state = api.NodeState.rejected
        await context.abort(
            STATUS_OF[reject.reason],
            reject.message,
            trailing_metadata=((REJECT_KEY, reject.SerializeToString()),),
        )

    def note_unauthenticated(self, reject: pb.Reject, peer: str) -> None:
        """Count and log a refusal of a peer without the token. How long it stays recent is
        measured on the monotonic clock: a step of the wall clock (NTP) would otherwise hide
        it at once or show it for hours."""
        self.unauthenticated_rejects += 1
        self.last_unauthenticated = api.NodeReject(
            reason=reason_name(reject.reason),
            message=reject.message,
            at_real_ns=time.time_ns(),
            peer=peer[:512],
        )
        self.last_unauthenticated_mono_ns = time.monotonic_ns()
        self._unauthenticated_log.note(f"from {peer}: {reject.message}")

    async def _refuse_unauthenticated(self, context, reject: pb.Reject, peer: str) -> None:
        """A peer that did not prove it is one of the job's slaves: whatever node name it
        gave is not believed, so no node's record is touched."""
        self.note_unauthenticated(reject, peer)
        await context.abort(
            STATUS_OF[reject.reason],
            reject.message,
            trailing_metadata=((REJECT_KEY, reject.SerializeToString()),),
        )

    def refused_strangers(self) -> int:
        """Node records made only by refusals (never admitted)."""
        return sum(1 for r in self.nodes.values() if r.identity is None and not r.local)

    def _check_token(self, context) -> None:
        refusal = self.token_refusal(context.invocation_metadata())
        if refusal is not None:
            raise refusal

    def token_refusal(self, metadata) -> Refusal | None:
        """The refusal a call with this metadata earns for its token; None when it has the
        master's token."""
        presented = ""
        for key, value in metadata or ():
            if key == "authorization":
                text = value.decode(errors="replace") if isinstance(value, bytes) else value
                scheme, _, presented = text.partition(" ")
                presented = presented.strip() if scheme.lower() == "bearer" else ""
        if not self.token:
            return Refusal(
                pb.REJECT_REASON_WRONG_TOKEN,
                "this master has no COMMINSIGHT_AGENT_TOKEN configured and accepts no slave",
            )
        if not presented:
            return Refusal(pb.REJECT_REASON_WRONG_TOKEN, "missing 'authorization: Bearer' token")
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            return Refusal(pb.REJECT_REASON_WRONG_TOKEN, "wrong token (COMMINSIGHT_AGENT_TOKEN)")
        return None

    async def refuse_before_reading(self, refusal: Refusal, request_iterator, context) -> None:
        """TokenGate's handler: ends the call without reading a byte of its request."""
        self.rejects_total += 1
        await self._refuse_unauthenticated(context, refusal.reject, context.peer() or "")

    def collect(self):
        """/metrics: refusals of peers without the token (nobody's node carries them), and
        the stack requests this master sent its slaves."""
        yield metric_family(
            metrics_v1.MASTER_UNAUTHENTICATED_TOTAL, value=self.unauthenticated_rejects
        )
        requests = metric_family(metrics_v1.MASTER_STACK_REQUESTS_TOTAL)
        for outcome, count in self.stacks.outcomes.items():
            requests.add_metric([outcome], count)
        yield requests
        yield metric_family(metrics_v1.MASTER_STACK_REQUESTS_OPEN, value=len(self.stacks.open))

    def _session(self, session_id: int) -> NodeRecord:
        record = self.sessions.get(session_id)
        if record is None or record.session_id != session_id:
            raise Refusal(
                pb.REJECT_REASON_UNKNOWN_SESSION,
                f"session {session_id:016x} is unknown to this master (restarted, or replaced "
                "by a newer registration): register again",
            )
        return record

    # ---- Register ----------------------------------------------------------------------

    async def register(self, raw: bytes, context) -> bytes:
        name = None
        try:
            self._check_token(context)  # before the request: a stranger's bytes name nobody
            request = _parse(pb.RegisterRequest, raw, "RegisterRequest")
            name = request.node.node_name or None
            return self._register(request, context).SerializeToString()
        except Refusal as r:
            await self._refuse(context, r, name)

    def _register(self, request: pb.RegisterRequest, context) -> pb.RegisterResponse:
        if self.shutting_down:
            raise Refusal(pb.REJECT_REASON_SHUTTING_DOWN, "the master is stopping")
        if request.protocol_version != PROTOCOL_VERSION:
            raise Refusal(
                pb.REJECT_REASON_VERSION_MISMATCH,
                f"protocol_version {request.protocol_version} is not spoken by this master "
                f"(it speaks {PROTOCOL_VERSION})",
            )
        node = request.node
        if not NODE_NAME.fullmatch(node.node_name):
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"node.node_name {node.node_name!r} does not match {NODE_NAME.pattern}",
            )
        if not request.stream_epoch:
            raise Refusal(pb.REJECT_REASON_MALFORMED, "stream_epoch must not be 0")
        now = time.monotonic_ns()
        record = self.nodes.get(node.node_name)
        if record is not None and record.local:
            raise Refusal(
                pb.REJECT_REASON_NODE_CONFLICT,
                f"node_name {node.node_name!r} is the master's own node",
            )
        if (
            record is not None
            and record.state is api.NodeState.connected
            and record.identity is not None
            and (record.identity.host, record.identity.boot_id, record.identity.comminsight_home)
            != (node.host, node.boot_id, node.comminsight_home)
        ):
            raise Refusal(
                pb.REJECT_REASON_NODE_CONFLICT,
                f"node_name {node.node_name!r} is held by a live slave on {record.identity.host} "
                f"({record.identity.comminsight_home}); node names must be unique in a job",
            )
        if record is None:
            record = self.nodes[node.node_name] = NodeRecord(node.node_name, api.AgentMode.slave)
        record.mode = api.AgentMode.relay if node.relay else api.AgentMode.slave
        # a full state the last session cut short is not the start of this session's
        record.pending_classes = record.pending_subtree = record.full_state_keys = None
        record.pending_runs = None
        if record.is_relay and not node.relay:  # a relay's name reused by a slave: no classes
            record.classes, record.class_runs, record.subtree = [], [], {}
        self.sessions.pop(record.session_id, None)  # a restarted slave replaces its session
        record.session_id = secrets.randbits(64) or 1
        self.sessions[record.session_id] = record
        record.identity = node
        record.state = api.NodeState.connected
        record.offset_ns = None  # a new session may be a new boot
        record.clock_sample(request.clock, now)
        record.last_seen_mono_ns, record.last_seen_real_ns = now, time.time_ns()
        cursor = self.store.cursors.get(node.node_name)
        response = pb.RegisterResponse(
            protocol_version=PROTOCOL_VERSION,
            session_id=record.session_id,
            master_instance_id=self.instance_id,
            max_batch_bytes=self.max_batch_bytes,
            heartbeat_interval_ms=max(100, self.stale_ms // 4),
            stale_after_ms=self.stale_ms,
            master_agent_version=__version__,
            master_clock=clock(),
            full_state_requested=not record.has_state or record.epoch != request.stream_epoch,
        )
        if cursor is not None and cursor.epoch == request.stream_epoch:
            response.last_applied_batch_seq = cursor.last_applied
            record.last_applied = cursor.last_applied
        else:
            record.last_applied = None  # the first batch received starts the epoch
        record.epoch = request.stream_epoch
        for p in request.processes:
            record.rows.processes[process_key(p)] = p
        for m in request.communicators:
            record.rows.members[row_key(m)] = m
        self.version += 1
        log.info(
            "slave %s registered from %s (epoch %016x, master holds batch %s, slave built %d)",
            node.node_name,
            context.peer(),
            request.stream_epoch,
            record.last_applied,
            request.last_built_batch_seq,
        )
        return response

    # ---- StreamNodeState ---------------------------------------------------------------

    async def stream(self, requests, context):
        record: NodeRecord | None = None
        try:
            self._check_token(context)
            async for raw in requests:
                self.bytes_received += len(raw)
                # parsed first (gRPC already bounded it) so the refusal names the node
                batch = _parse(pb.NodeStateBatch, raw, "NodeStateBatch")
                record = self._session(batch.session_id)
                if len(raw) > self.max_batch_bytes:
                    raise Refusal(
                        pb.REJECT_REASON_OVERSIZED,
                        f"batch {batch.batch_seq} of {len(raw)} bytes is over max_batch_bytes "
                        f"{self.max_batch_bytes}; nothing of it was applied",
                        max_batch_bytes=self.max_batch_bytes,
                    )
                ack = self._apply(record, batch)
                yield ack.SerializeToString()
        except Refusal as r:
            await self._refuse(context, r, record.name if record is not None else None)
        except asyncio.CancelledError:
            raise
        finally:
            if record is not None and record.state is api.NodeState.connected:
                if self.sessions.get(record.session_id) is record and not self.shutting_down:
                    record.state = api.NodeState.disconnected
                    log.warning("slave %s disconnected (its stream ended)", record.name)

    def _apply(self, record: NodeRecord, batch: pb.NodeStateBatch) -> pb.BatchAck:
        now = time.monotonic_ns()
        record.last_seen_mono_ns, record.last_seen_real_ns = now, time.time_ns()
        record.clock_sample(batch.clock, now)
        if record.state is not api.NodeState.connected:
            record.state = api.NodeState.connected
        last = record.last_applied
        seq = batch.batch_seq
        if last is not None and seq <= last:  # a resend the master already holds
            self.duplicates_dropped += 1
            return pb.BatchAck(last_applied_batch_seq=last, master_clock=clock())
        if seq == 0 or (last is not None and seq != last + 1):
            raise Refusal(
                pb.REJECT_REASON_SEQUENCE_GAP,
                f"batch {seq} does not follow batch {last} of epoch {record.epoch:016x}",
                **({"last_applied_batch_seq": last} if last is not None else {}),
            )
        hang_events = [
            (self._hang_record(e), e.read_real_ns, self._origin(record, e.origin_node))
            for e in batch.hang_events
        ]
        steps = [
            (*self._step(s), self._origin(record, s.origin_node)) for s in batch.step_summaries
        ]
        dropped, runs = check_reduction(record, batch)
        if dropped:
            self._note_dropped_classes(record, dropped)
        apply_rows(record, batch, runs)
        committed = self.store.commit(record.name, record.epoch, seq, hang_events, steps)
        self.duplicates_dropped += committed.duplicates
        record.last_applied = seq
        self.batches_applied += 1
        self.version += 1
        by_origin: dict[str, list[bytes]] = {}
        for origin, event in zip(committed.hang_origins, committed.hang_events, strict=True):
            by_origin.setdefault(origin, []).append(event)
        for origin, events in by_origin.items():
            self.on_events(origin, events)
        if committed.step_lines and self.on_steps is not None:
            self.on_steps(committed.step_lines)
        return pb.BatchAck(
            last_applied_batch_seq=seq,
            master_clock=clock(),
            full_state_requested=not record.has_state and record.full_state_keys is None,
        )

    def _hang_record(self, e: pb.HangEvent) -> bytes:
        record = e.record
        if e.fifo_event_abi_version != fifo_event_v1.PROTOCOL_VERSION:
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"hang event of fifo-event version {e.fifo_event_abi_version}; this master "
                f"reads version {fifo_event_v1.PROTOCOL_VERSION}",
            )
        if len(record) != EVENT_SIZE or record[:4] != MAGIC_BYTES:
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"hang event record of {len(record)} bytes is not a fifo-event "
                f"(EVENT_SIZE {EVENT_SIZE}, magic 'CIFE')",
            )
        return record

    def _note_dropped_classes(self, record: NodeRecord, dropped: list[str]) -> None:
        """Classes taken out of a relay's batch: on the relay's record (/api/v1/nodes) and
        in the log, the rest of its batch applied."""
        message = f"{len(dropped)} rank classes dropped, the first: {dropped[0]}"
        log.error("relay %s: %s", record.name, message)
        record.rejects_total += 1
        record.last_reject = api.NodeReject(
            reason=reason_name(pb.REJECT_REASON_MALFORMED),
            message=message[:1024],
            at_real_ns=time.time_ns(),
            peer="",
        )

    def _origin(self, record: NodeRecord, origin: str) -> str:
        """The node an event came from: the sender's own, or one below a relay."""
        if not origin or origin == record.name:
            return record.name
        if not record.is_relay:
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"an event from node {origin!r} sent by {record.name!r}, which registered as "
                "a slave (only a relay passes on other nodes' events)",
            )
        below = self.nodes.get(origin)
        if below is not None and below.local:
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"an event from node {origin!r}, the master's own, sent by relay {record.name!r}",
            )
        if not NODE_NAME.fullmatch(origin):
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"origin_node {origin[:300]!r} does not match {NODE_NAME.pattern}",
            )
        return origin

    def _step(self, s: pb.StepSummaryRecord) -> tuple[StepSummary, bytes]:
        if s.step_summary_version != 1:
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"step summary of version {s.step_summary_version}; this master reads 1",
            )
        try:
            return msgspec.json.decode(s.json, type=StepSummary), s.json
        except NOT_JSON as e:  # bad UTF-8 inside a string, or nested too deep
            raise Refusal(
                pb.REJECT_REASON_MALFORMED, f"step summary is not a step-summary v1: {e}"
            ) from None

    # ---- Heartbeat ---------------------------------------------------------------------

    async def heartbeat(self, raw: bytes, context) -> bytes:
        record = None
        try:
            self._check_token(context)
            request = _parse(pb.HeartbeatRequest, raw, "HeartbeatRequest")
            record = self._session(request.session_id)
            now = time.monotonic_ns()
            record.clock_sample(request.clock, now)
            record.last_seen_mono_ns, record.last_seen_real_ns = now, time.time_ns()
            if request.shutting_down:
                record.state = api.NodeState.disconnected
                self.sessions.pop(record.session_id, None)
                log.info("slave %s said goodbye", record.name)
            elif record.state is api.NodeState.stale:
                record.state = api.NodeState.connected
            return pb.HeartbeatResponse(
                last_applied_batch_seq=record.last_applied or 0, master_clock=clock()
            ).SerializeToString()
        except Refusal as r:
            await self._refuse(context, r, record.name if record is not None else None)

    # ---- Python stacks on request ----------------------------------------------------

    async def request_stacks(
        self, node_name: str, pid: int, rank: int | None, timeout_s: float, pid_namespace: int = 0
    ) -> PythonStack:
        """Ask the slave of `node_name` for the Python stacks of its process `pid` (of PID
        namespace `pid_namespace`, 0 if unknown); always returns a python-stack document
        (`unavailable` naming the node when it cannot)."""
        record = self.nodes.get(node_name)
        identity = record.identity if record is not None else None
        host = (identity.host if identity is not None else "") or node_name
        via = None
        if node_name not in self.stacks.streams:  # a node below a relay: asked through it
            for relay in self.nodes.values():
                below = relay.subtree.get(node_name) if relay.is_relay else None
                if below is not None and relay.state is api.NodeState.connected:
                    via, host = relay.name, below.host or host
                    break
        return await self.stacks.request(node_name, host, pid, rank, timeout_s, via, pid_namespace)

    async def watch_stacks(self, raw: bytes, context):
        record = None
        queue = None
        try:
            self._check_token(context)
            request = _parse(pb.WatchStackRequestsRequest, raw, "WatchStackRequestsRequest")
            record = self._session(request.session_id)
            queue = self.stacks.watch(record.name)
            while True:
                message = await queue.get()
                if message is None:  # a newer stream of the node took over
                    return
                yield message.SerializeToString()
        except Refusal as r:
            await self._refuse(context, r, record.name if record is not None else None)
        finally:
            if queue is not None:
                self.stacks.unwatch(record.name, queue)

    async def report_stacks(self, raw: bytes, context) -> bytes:
        record = None
        try:
            self._check_token(context)
            report = _parse(pb.StackReport, raw, "StackReport")
            record = self._session(report.session_id)
            self.stacks.answer(
                record.name, report.request_id, report.python_stack_version, report.json
            )
            return pb.StackReportAck().SerializeToString()
        except Refusal as r:
            await self._refuse(context, r, record.name if record is not None else None)

    # ---- staleness ---------------------------------------------------------------------

    def mark_stale(self, now_mono_ns: int) -> list[NodeRecord]:
        """Connected slaves silent for stale_ms, now reported stale."""
        went = []
        for record in self.nodes.values():
            seen = record.last_seen_mono_ns
            if (
                record.state is api.NodeState.connected
                and not record.local
                and seen is not None
                and now_mono_ns - seen > self.stale_ms * 1_000_000
            ):
                record.state = api.NodeState.stale
                self.version += 1
                went.append(record)
                log.warning(
                    "slave %s is stale: nothing for %.1f s", record.name, (now_mono_ns - seen) / 1e9
                )
        return went


class TokenGate(grpc.aio.ServerInterceptor):
    """Checks the token in a call's metadata before gRPC reads its request. A call without it
    is answered by a request-streaming handler that never reads: gRPC receives a unary
    request whole before its handler runs, and a stream's messages only when asked for."""

    def __init__(self, server: AgentMasterServer) -> None:
        self.server = server

    async def intercept_service(self, continuation, handler_call_details):
        refusal = self.server.token_refusal(handler_call_details.invocation_metadata)
        if refusal is None:
            return await continuation(handler_call_details)
        return grpc.stream_stream_rpc_method_handler(
            functools.partial(self.server.refuse_before_reading, refusal)
        )


def _parse(message_type, raw: bytes, what: str):
    try:
        return message_type.FromString(raw)
    except Exception as e:  # protobuf's DecodeError, and anything a hostile input triggers
        raise Refusal(
            pb.REJECT_REASON_MALFORMED, f"{len(raw)} bytes that are not a {what}: {e}"
        ) from None


def apply_rows(
    record: NodeRecord, batch: pb.NodeStateBatch, runs: list[RankRuns] | None = None
) -> None:
    """State rows replace the rows with their keys; a RETIRED process takes its rows with it;
    a full state (possibly spanning batches) drops, at its last batch, every row it did not
    name. runs: the batch's rank classes' runs, when check_reduction parsed them already."""
    rows = record.rows
    keys = record.full_state_keys
    if batch.full_state and keys is None:
        keys = record.full_state_keys = set()
    for p in batch.processes:
        pkey = process_key(p)
        if p.ingest_state == pb.INGEST_STATE_RETIRED:
            rows.processes.pop(pkey, None)
            for table in (rows.members, rows.progress):
                for key in [k for k in table if k[1:3] == pkey]:
                    del table[key]
            continue
        rows.processes[pkey] = p
        if batch.full_state:
            keys.add(("p", *pkey))
    for m in batch.communicators:
        key = row_key(m)
        rows.members[key] = m
        if batch.full_state:
            keys.add(("m", *key))
    for g in batch.progress:
        key = row_key(g)
        rows.progress[key] = g
        if batch.full_state:
            keys.add(("g", *key))
    if batch.full_state and (batch.rank_classes or batch.subtree_nodes or record.is_relay):
        if record.pending_classes is None:
            record.pending_classes, record.pending_subtree, record.pending_runs = [], {}, []
        record.pending_classes.extend(batch.rank_classes)
        record.pending_runs.extend(
            runs if runs is not None else [class_runs(rc) for rc in batch.rank_classes]
        )
        for n in batch.subtree_nodes:
            record.pending_subtree[n.node_name] = n
        if batch.full_state_last:
            record.classes, record.subtree = record.pending_classes, record.pending_subtree
            record.class_runs = record.pending_runs
            record.pending_classes = record.pending_subtree = record.pending_runs = None
    record.note_waits()
    if batch.HasField("agent_counters"):
        record.counters = batch.agent_counters
    if batch.HasField("metric_totals"):
        record.metric_totals = batch.metric_totals
    if batch.full_state and batch.full_state_last:
        rows.processes = {k: p for k, p in rows.processes.items() if ("p", *k) in keys}
        rows.members = {k: m for k, m in rows.members.items() if ("m", *k) in keys}
        rows.progress = {k: g for k, g in rows.progress.items() if ("g", *k) in keys}
        record.full_state_keys = None
        record.has_state = True


# a real relay of a thousand nodes sends about a thousand classes and as many node names
MAX_SUBTREE_NODES = 1 << 17
MAX_RANK_CLASSES = 1 << 20


def check_reduction(
    record: NodeRecord, batch: pb.NodeStateBatch
) -> tuple[list[str], list[RankRuns]]:
    """A relay's classes and node list: only from a relay, only in a full state, within
    bounds, with names a node may have (else the batch is refused). A class whose ranks do not
    fit its communicator is taken out of the batch, the rest applied: what it says is one bad
    row below the relay, not the relay's whole subtree. Returns why each one was taken out,
    and the runs of those kept, parsed."""
    if not (batch.rank_classes or batch.subtree_nodes):
        return [], []
    if not record.is_relay:
        raise Refusal(
            pb.REJECT_REASON_MALFORMED,
            f"rank classes or subtree nodes from {record.name!r}, which registered as a slave, "
            "not a relay",
        )
    if not batch.full_state:
        raise Refusal(
            pb.REJECT_REASON_MALFORMED, "rank classes outside a full_state batch (they are whole)"
        )
    pending_classes = len(record.pending_classes or ()) + len(batch.rank_classes)
    pending_nodes = len(record.pending_subtree or ()) + len(batch.subtree_nodes)
    if pending_classes > MAX_RANK_CLASSES or pending_nodes > MAX_SUBTREE_NODES:
        raise Refusal(
            pb.REJECT_REASON_MALFORMED,
            f"a full state of {pending_classes} rank classes and {pending_nodes} subtree nodes "
            f"(at most {MAX_RANK_CLASSES} and {MAX_SUBTREE_NODES})",
        )
    checked = record.checked
    for rc in batch.rank_classes:
        if not checked.name_ok(rc.node_name, NODE_NAME):
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"rank class node_name {rc.node_name[:300]!r} does not match {NODE_NAME.pattern}",
            )
    for n in batch.subtree_nodes:
        names = [n.node_name, *n.via]
        if len(n.via) > 16 or not all(NODE_NAME.fullmatch(name) for name in names):
            raise Refusal(
                pb.REJECT_REASON_MALFORMED,
                f"subtree node {n.node_name[:300]!r}: a bad name on its way or more than 16 relays",
            )
    dropped, kept, runs = [], [], []
    for rc in batch.rank_classes:
        parsed = checked.runs_of(rc)
        if isinstance(parsed, RankRuns):
            kept.append(rc)
            runs.append(parsed)
        else:
            dropped.append(f"rank class of communicator {rc.member.comm_id:016x}: {parsed}")
    checked.bound(len(batch.rank_classes))
    if dropped:
        del batch.rank_classes[:]
        batch.rank_classes.extend(kept)
    return dropped, runs
