"""Admission of HTTP connections to the Agent's API server: how many may be open, how long a
new one may take to send its request header, and what an exhausted file table does to accept.

aiohttp closes a connection idle between requests (keepalive_timeout, also armed when a
connection opens) but has no limit on open connections and no deadline of its own for the
first request's header. Left alone, a thousand half-open connections take a thousand file
descriptors; past RLIMIT_NOFILE every open() of the Agent fails (SHM files, the FIFO, logs).
So each connection is admitted here first:

- at most `max_connections` are open; one beyond it closes the oldest connection that has no
  request in progress (a client that opened it and sent nothing loses it first), or, when
  every one is busy, the oldest of the client (peer address) holding the most, if it holds
  more than one: a client whose requests never end (a body sent a byte at a time) cannot lock
  the others out. Only when every busy connection is a different client's is the new one
  closed at once, without a handler being made for it;
- one that has not sent a complete request header within `header_timeout_s` is closed;
- one whose client does not read its answers (asyncio paused writing to it: the socket and
  the transport's buffer are full) for `write_timeout_s` is aborted, its unsent answer
  dropped; aiohttp would otherwise wait on it forever, a "busy" connection nobody can evict.
  Over the limit such a stalled connection is evicted before a new one is refused;
- at most `max_pipelined` requests of a connection are read ahead of its answers (aiohttp
  reads 32): a client that sends requests and never reads costs a few parsed requests;
- a request aiohttp cannot parse (a bad request line or header, bytes that are not HTTP) is
  answered 400 (in the API's JSON error body) and its connection closed, as aiohttp does,
  but counted and logged one line per period instead of aiohttp's traceback each: garbage
  sent in a loop cannot fill the log;
- asyncio already backs off accept() for a second when it fails with EMFILE or ENFILE; its
  report of that (a traceback every second) becomes a count and one log line per
  PERSISTENT_PERIOD_S.

Every closure is counted by reason for /metrics (comminsight_agent_http_connections_closed).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
import time
from collections import Counter

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpRequestParser
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

from comminsight.agent.core.metric_family import counts_family, metric_family
from comminsight.agent.core.rate_limited_log import PERSISTENT_PERIOD_S, RateLimitedLog
from comminsight_gen import metrics_v1
from comminsight_gen.models.agent_master_api_v1 import Error, ErrorCode

log = logging.getLogger(__name__)

# descriptors the Agent needs besides its connections (SHM files, FIFO, logs, gRPC, threads)
FD_RESERVE = 128
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
# The kernel's send buffer of a connection (Linux doubles it). Left to autotuning it grows to
# megabytes, which a client that never reads fills with dozens of answers the Agent renders
# before asyncio pauses writing and the connection shows as stalled. Answers are small; this
# still lets one of them out in a few round trips.
SEND_BUFFER_BYTES = 128 * 1024


class ConnectionGuard:
    def __init__(
        self,
        max_connections: int,
        header_timeout_s: float,
        write_timeout_s: float = 10.0,
        max_pipelined: int = 4,
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_pipelined = max_pipelined
        self.open: dict[RequestHandler, asyncio.TimerHandle | None] = {}  # oldest first
        self.client_of: dict[RequestHandler, str] = {}  # the peer address of each open one
        self.stalled: dict[RequestHandler, asyncio.TimerHandle] = {}  # writing paused, oldest first
        self.closed: Counter[str] = Counter()  # reason -> connections closed by the guard
        self.accept_errors: Counter[str] = Counter()  # errno name -> failed accept()s
        self.last_accept_error_mono_s: float | None = None
        self._accept_log = RateLimitedLog(
            log, "the API cannot accept connections", PERSISTENT_PERIOD_S, logging.ERROR
        )
        self._bad_request_log = RateLimitedLog(log, "the API refused a malformed request")

    # ---- admission -----------------------------------------------------------------------

    def admit(
        self, handler: RequestHandler, loop: asyncio.AbstractEventLoop, client: str = ""
    ) -> bool:
        if len(self.open) >= self.max_connections:
            victim = next((h for h in self.open if _idle(h)), None)
            if victim is not None:
                self.closed["limit_idle"] += 1
                self._close(victim)
            elif self.stalled:  # busy only because its client does not read
                self.closed["limit_stalled"] += 1
                self._close(next(iter(self.stalled)))
            elif (victim := self._oldest_of_largest_client()) is not None:
                self.closed["limit_client"] += 1
                self._close(victim)
            else:
                self.closed["limit_busy"] += 1
                return False
        self.open[handler] = loop.call_later(self.header_timeout_s, self._header_due, handler)
        self.client_of[handler] = client
        return True

    def _oldest_of_largest_client(self) -> RequestHandler | None:
        held = Counter(self.client_of[h] for h in self.open)
        if not held:
            return None
        client, count = held.most_common(1)[0]
        if count < 2:
            return None
        return next(h for h in self.open if self.client_of[h] == client)

    def forget(self, handler: RequestHandler) -> None:
        self.client_of.pop(handler, None)
        for timer in (self.open.pop(handler, None), self.stalled.pop(handler, None)):
            if timer is not None:
                timer.cancel()

    def _close(self, handler: RequestHandler) -> None:
        transport = handler.transport
        self.forget(handler)
        handler.force_close()  # closes the transport; aiohttp ends the handler's task
        if transport is not None and transport.get_write_buffer_size():
            # close() would wait for the client to read what is buffered: it may never
            transport.abort()

    # ---- clients that do not read --------------------------------------------------------

    def writing_paused(self, handler: RequestHandler, loop: asyncio.AbstractEventLoop) -> None:
        if handler in self.open and handler not in self.stalled:
            self.stalled[handler] = loop.call_later(self.write_timeout_s, self._write_due, handler)

    def writing_resumed(self, handler: RequestHandler) -> None:
        timer = self.stalled.pop(handler, None)
        if timer is not None:
            timer.cancel()

    def _write_due(self, handler: RequestHandler) -> None:
        if self.stalled.pop(handler, None) is None or handler not in self.open:
            return
        self.closed["write_stalled"] += 1
        self._close(handler)

    def _header_due(self, handler: RequestHandler) -> None:
        if handler not in self.open:
            return
        self.open[handler] = None
        if handler._request_count == 0 and not handler._request_in_progress:
            self.closed["header_timeout"] += 1
            self._close(handler)

    # ---- requests aiohttp cannot parse ---------------------------------------------------

    def bad_request(self, client: str, error: HttpProcessingError) -> None:
        self.closed["bad_request"] += 1
        summary = " ".join(str(error.message).split())[:200]  # aiohttp's is several lines
        self._bad_request_log.note(f"from {client}: {type(error).__name__}: {summary}")

    # ---- accept() failures ---------------------------------------------------------------

    def loop_exception_handler(self, previous):
        """An asyncio exception handler that turns accept()'s EMFILE/ENFILE reports into a
        count and a line a minute, and passes everything else on."""

        def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
            error = context.get("exception")
            if (
                isinstance(error, OSError)
                and error.errno in OUT_OF_DESCRIPTORS
                and "accept" in str(context.get("message", ""))
            ):
                name = errno.errorcode.get(error.errno, str(error.errno))
                self.accept_errors[name] += 1
                self.last_accept_error_mono_s = time.monotonic()
                self._accept_log.note(
                    f"{name} ({error.strerror}); {len(self.open)} connections open, "
                    "accept retried in 1 s"
                )
                return
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        return handle

    # ---- what health and /metrics read ---------------------------------------------------

    def health_reasons(self, now_mono_s: float, recent_s: float = 300.0) -> list[str]:
        last = self.last_accept_error_mono_s
        if last is None or now_mono_s - last > recent_s:
            return []
        return [
            f"the API ran out of file descriptors {sum(self.accept_errors.values())} times "
            f"({', '.join(sorted(self.accept_errors))}), the latest {now_mono_s - last:.0f} s "
            "ago: new connections waited"
        ]

    def collect(self):
        closed = metric_family(metrics_v1.AGENT_HTTP_CONNECTIONS_CLOSED_TOTAL)
        for reason in (
            "limit_idle",
            "limit_stalled",
            "limit_client",
            "limit_busy",
            "header_timeout",
            "write_stalled",
            "bad_request",
        ):
            closed.add_metric([reason], self.closed[reason])
        yield closed
        yield metric_family(metrics_v1.AGENT_HTTP_CONNECTIONS_OPEN, value=len(self.open))
        yield metric_family(
            metrics_v1.AGENT_HTTP_CONNECTIONS_BUSY,
            value=sum(not _idle(handler) for handler in self.open),
        )
        yield counts_family(metrics_v1.AGENT_HTTP_ACCEPT_ERRORS_TOTAL, self.accept_errors)


def _idle(handler: RequestHandler) -> bool:
    """No request being handled or queued on the connection."""
    return not handler._request_in_progress and not handler._messages


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection handler, admitted by the guard before it sets anything up."""

    def __init__(self, manager, guard: ConnectionGuard, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._admitted = False
        self._limit_pipelining(guard.max_pipelined, kwargs.get("auto_decompress", True))

    def _limit_pipelining(self, limit: int, auto_decompress: bool) -> None:
        """aiohttp's parser stops at its queue limit and its protocol stops reading the
        socket there; both take the limit only when made, so the parser is made again."""
        self._max_msg_queue_size = limit
        self._msg_queue_resume_size = limit // 2
        self._parser = HttpRequestParser(
            self,
            self._loop,
            self._read_bufsize,
            max_line_size=self.max_line_size,
            max_field_size=self.max_field_size,
            max_headers=self.max_headers,
            payload_exception=RequestPayloadError,
            auto_decompress=auto_decompress,
            max_msg_queue_size=limit,
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self._guard.admit(self, self._loop, client):
            transport.abort()  # the descriptor is freed now; nothing else was made for it
            return
        self._admitted = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
            except OSError:  # not a TCP socket of ours to tune; autotuning stays
                pass
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._guard.forget(self)
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # what aiohttp answers, without its traceback for every request it could not parse,
        # in the API's one error body (a request line past its limit, a header with a NUL)
        self._guard.bad_request(request.remote or "", exc)
        body = Error(
            code=ErrorCode.invalid_parameter,
            message=f"the request could not be parsed: {message or exc}"[:2048],
            details=[],
        )
        response = web.Response(
            status=status, body=msgspec.json.encode(body), content_type="application/json"
        )
        response.force_close()
        return response

    def pause_writing(self) -> None:
        super().pause_writing()
        self._guard.writing_paused(self, self._loop)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._guard.writing_resumed(self)


class GuardedSite(web.TCPSite):
    """A TCPSite whose connections go through a ConnectionGuard."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        ssl_context: ssl.SSLContext | None = None,
    ):
        super().__init__(runner, host, port, reuse_address=True, ssl_context=ssl_context)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server

        def handler() -> GuardedRequestHandler:
            return GuardedRequestHandler(server, self.guard, loop=loop, **server._kwargs)

        self._server = await loop.create_server(
            handler,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


class GuardedUnixSite(web.BaseSite):
    """A listening Unix socket, bound and given its mode by the caller, whose connections go
    through a ConnectionGuard: the node's users reach the Agent here, under the same limits
    as over TCP."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket, guard: ConnectionGuard):
        super().__init__(runner)
        self._sock = sock
        self.guard = guard

    @property
    def name(self) -> str:
        return f"http://unix:{self._sock.getsockname()}:"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server

        def handler() -> GuardedRequestHandler:
            return GuardedRequestHandler(server, self.guard, loop=loop, **server._kwargs)

        self._server = await loop.create_unix_server(
            handler, sock=self._sock, backlog=self._backlog
        )


def descriptor_budget() -> int | None:
    """Connections RLIMIT_NOFILE leaves room for (None: no limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(1, soft - FD_RESERVE)
