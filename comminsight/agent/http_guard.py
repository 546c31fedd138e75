"""Admission of HTTP connections to the Agent's API server: how many may be open, how long a
new one may take to send its request header, and what an exhausted file table does to accept.

aiohttp closes a connection idle between requests (keepalive_timeout, also armed when a
connection opens) but has no limit on open connections and no deadline of its own for the
first request's header. Left alone, a thousand half-open connections take a thousand file
descriptors; past RLIMIT_NOFILE every open() of the Agent fails (SHM files, the FIFO, logs).
So each connection is admitted here first:

- at most `max_connections` are open; one beyond it closes the oldest connection that has no
  request in progress (a client that opened it and sent nothing loses it first), or, when
  every one is busy, is closed at once without a handler being made for it;
- one that has not sent a complete request header within `header_timeout_s` is closed;
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
import time
from collections import Counter

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from comminsight.agent.rate_limited_log import PERSISTENT_PERIOD_S, RateLimitedLog

log = logging.getLogger(__name__)

# descriptors the Agent needs besides its connections (SHM files, FIFO, logs, gRPC, threads)
FD_RESERVE = 128
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ConnectionGuard:
    def __init__(self, max_connections: int, header_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open: dict[RequestHandler, asyncio.TimerHandle | None] = {}  # oldest first
        self.closed: Counter[str] = Counter()  # reason -> connections closed by the guard
        self.accept_errors: Counter[str] = Counter()  # errno name -> failed accept()s
        self.last_accept_error_mono_s: float | None = None
        self._accept_log = RateLimitedLog(
            log, "the API cannot accept connections", PERSISTENT_PERIOD_S, logging.ERROR
        )

    # ---- admission -----------------------------------------------------------------------

    def admit(self, handler: RequestHandler, loop: asyncio.AbstractEventLoop) -> bool:
        if len(self.open) >= self.max_connections:
            victim = next((h for h in self.open if _idle(h)), None)
            if victim is None:
                self.closed["limit_busy"] += 1
                return False
            self.closed["limit_idle"] += 1
            self._close(victim)
        self.open[handler] = loop.call_later(self.header_timeout_s, self._header_due, handler)
        return True

    def forget(self, handler: RequestHandler) -> None:
        timer = self.open.pop(handler, None)
        if timer is not None:
            timer.cancel()

    def _close(self, handler: RequestHandler) -> None:
        self.forget(handler)
        handler.force_close()  # closes the transport; aiohttp ends the handler's task

    def _header_due(self, handler: RequestHandler) -> None:
        if handler not in self.open:
            return
        self.open[handler] = None
        if handler._request_count == 0 and not handler._request_in_progress:
            self.closed["header_timeout"] += 1
            self._close(handler)

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
        closed = CounterMetricFamily(
            "comminsight_agent_http_connections_closed",
            "HTTP connections the Agent closed itself: over the connection limit (the oldest "
            "idle one, or the new one when all were busy) or no request header in time",
            labels=["reason"],
        )
        for reason in ("limit_idle", "limit_busy", "header_timeout"):
            closed.add_metric([reason], self.closed[reason])
        yield closed
        yield GaugeMetricFamily(
            "comminsight_agent_http_connections_open",
            "HTTP connections open now",
            value=len(self.open),
        )
        errors = CounterMetricFamily(
            "comminsight_agent_http_accept_errors",
            "accept() calls of the API that failed for lack of descriptors or memory",
            labels=["errno"],
        )
        for name, count in sorted(self.accept_errors.items()):
            errors.add_metric([name], count)
        yield errors


def _idle(handler: RequestHandler) -> bool:
    """No request being handled or queued on the connection."""
    return not handler._request_in_progress and not handler._messages


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection handler, admitted by the guard before it sets anything up."""

    def __init__(self, manager, guard: ConnectionGuard, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit(self, self._loop):
            transport.abort()  # the descriptor is freed now; nothing else was made for it
            return
        self._admitted = True
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._guard.forget(self)
        super().connection_lost(exc)


class GuardedSite(web.TCPSite):
    """A TCPSite whose connections go through a ConnectionGuard."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard):
        super().__init__(runner, host, port, reuse_address=True)
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
            backlog=self._backlog,
            reuse_address=self._reuse_address,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def descriptor_budget() -> int | None:
    """Connections RLIMIT_NOFILE leaves room for (None: no limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(1, soft - FD_RESERVE)
