"""The Agent Master API (protocols/agent-master-api v1) on aiohttp, plus /metrics.

Handlers only read what AgentService keeps (and, for the mutations, ask it to act); they
run on the service's event loop between poll passes, so they see one consistent pass. Every
request is checked against the protocol document (api.params) before a handler runs; every
answer is a generated model encoded by msgspec; every failure, including unknown paths and
unexpected exceptions, is the API's one `Error` body.

Mutations (resolve_hang, resolve_incident, flush_archive) need
`Authorization: Bearer <COMMINSIGHT_AGENT_TOKEN>`; with no token configured they are refused
with 403, so an agent is read-only by default. With COMMINSIGHT_AGENT_READ_AUTH=token, reads
over TCP need it too, but for /metrics and /api/v1/health (Prometheus and probes).

The same routes are served on the Agent's Unix socket (COMMINSIGHT_AGENT_SOCKET), where the
kernel names each caller: a user other than root and the Agent's own sees only their own
processes, communicators, operations, Steps, hang reports and incidents (readers).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from comminsight.agent.api import views as api_views
from comminsight.agent.api.http_guard import (
    ConnectionGuard,
    GuardedSite,
    GuardedUnixSite,
    descriptor_budget,
)
from comminsight.agent.api.job_steps_view import JobStepsView, UnknownJob
from comminsight.agent.api.params import OperationParams, ParamError, Problem, openapi_document
from comminsight.agent.api.readers import (
    EVERYTHING_OVER_TCP,
    READER_KEY,
    Reader,
    View,
    peer_uid,
    reader_for,
)
from comminsight.agent.api.unix_socket import SocketError, bind_agent_socket, socket_path
from comminsight.agent.archive.archiver import ArchiveConfigError
from comminsight.agent.hangs.incident_store import UnknownIncident
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.models.agent_master_api_v1 import (
    ArchiveFlush,
    ArchiveStatus,
    CommunicatorPage,
    Error,
    ErrorCode,
    ErrorDetail,
    ErrorLocation,
    HangReportList,
    IncidentDetail,
    IncidentList,
    InflightOpList,
    NodeList,
    OpRecordList,
    ResolveHangRequest,
    ResolveIncidentRequest,
    StepPage,
)

log = logging.getLogger(__name__)

JSON = "application/json"
RETRY_AFTER_S = 1
# what Prometheus and probes read over TCP whatever COMMINSIGHT_AGENT_READ_AUTH says
OPEN_READS = frozenset({"/metrics", "/api/v1/health"})
NOBODY = Reader(-1, "socket")  # a socket caller the kernel could not name: sees nothing
_STATUS_OF = {
    ErrorCode.invalid_parameter: 400,
    ErrorCode.malformed_body: 400,
    ErrorCode.unauthorized: 401,
    ErrorCode.forbidden: 403,
    ErrorCode.not_found: 404,
    ErrorCode.unprocessable: 422,
    ErrorCode.unavailable: 503,
    ErrorCode.internal: 500,
}


class ApiError(Exception):
    def __init__(
        self,
        code: ErrorCode,
        message: str,
        problems: list[Problem] = (),
        status: int | None = None,
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.problems = list(problems)
        self.status = status or _STATUS_OF[code]
        self.headers = headers or {}
        self.close = close  # the connection is closed after the answer


def json_response(model, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(model), status=status, content_type=JSON)


def error_response(err: ApiError) -> web.Response:
    body = Error(
        code=err.code,
        message=err.message[:2048],
        details=[
            ErrorDetail(location=ErrorLocation(p.location), name=p.name[:256], reason=p.reason)
            for p in err.problems[:64]
        ],
    )
    response = json_response(body, err.status)
    response.headers.update(err.headers)
    if err.close:
        response.force_close()
    return response


Handler = Callable[[web.Request, dict], Awaitable[web.StreamResponse]]


class AgentApi:
    """Routes of one agent; `service` is the running AgentService."""

    agent_kind = "agent"  # what its answers call it ("communicator ... is not known to this")

    def __init__(self, service) -> None:
        self.service = service
        self.token = service.settings.agent_token
        settings = service.settings
        # a shared home's local users would read everyone's data over loopback TCP, past the
        # socket's per-user view: there, reads over TCP always need the token
        self.reads_need_token = settings.agent_read_auth == "token" or settings.agent_shared_home
        self._body_timeout_s = service.settings.agent_http_body_timeout_s
        self._job_steps: JobStepsView | None = None

    # ---- plumbing --------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024)
        routes = {
            "get_health": self.health,
            "get_node": self.node,
            "list_nodes": self.nodes,
            "list_communicators": self.communicators,
            "get_communicator": self.communicator,
            "list_inflight_ops": self.inflight,
            "list_recent_ops": self.recent_ops,
            "list_steps": self.steps,
            "list_job_steps": self.job_steps,
            "list_hangs": self.hangs,
            "get_hang": self.hang,
            "resolve_hang": self.resolve_hang,
            "list_incidents": self.incidents,
            "get_incident": self.incident,
            "resolve_incident": self.resolve_incident,
            "get_archive_status": self.archive,
            "flush_archive": self.flush_archive,
            "get_openapi_document": self.openapi,
            "get_metrics": self.metrics,
        }
        for operation_id, handler in routes.items():
            params = OperationParams(operation_id)
            endpoint = self._bind(params, handler)
            app.router.add_route(params.method.upper(), params.path, endpoint)
            if params.method.upper() == "GET":
                # HEAD is GET without the body (RFC 9110): monitors probe /metrics with it
                app.router.add_route("HEAD", params.path, endpoint)
        return app

    def _bind(self, params: OperationParams, handler: Handler):
        async def endpoint(request: web.Request) -> web.StreamResponse:
            reader = self._reader(request)
            if params.secured:
                self._authorize(request)
            elif reader.via == "tcp" and self.reads_need_token and params.path not in OPEN_READS:
                self._authorize(request, "reads over TCP")
            try:
                values = params.parse(request.match_info, request.query)
            except ParamError as e:
                raise ApiError(ErrorCode.invalid_parameter, str(e), e.problems) from None
            return await handler(request, values)

        endpoint.__name__ = params.operation_id
        return endpoint

    @web.middleware
    async def _errors(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as e:
            return error_response(e)
        except web.HTTPException as e:  # routing: unknown path, method not allowed
            if e.status == 404:
                err = ApiError(ErrorCode.not_found, f"no such path: {request.path}")
            elif e.status == 405:
                err = ApiError(
                    ErrorCode.invalid_parameter,
                    f"method {request.method} is not allowed on {request.path}",
                    status=405,
                    headers={"Allow": e.headers.get("Allow", "")},
                )
            elif e.status == 413:
                err = ApiError(ErrorCode.malformed_body, "request body too large", status=413)
            else:
                err = ApiError(ErrorCode.invalid_parameter, e.reason or "bad request", status=400)
            return error_response(err)
        except Exception:
            log.exception("API %s %s failed", request.method, request.path)
            return error_response(ApiError(ErrorCode.internal, "internal error; see agent log"))

    def _reader(self, request: web.Request) -> Reader:
        """Who asks: over the Unix socket, the user the kernel names; over TCP, anyone."""
        reader = request.get(READER_KEY)
        if reader is not None:
            return reader
        transport = request.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        reader = EVERYTHING_OVER_TCP
        if sock is not None and sock.family == socket.AF_UNIX:
            try:
                reader = reader_for(peer_uid(sock), "socket")
            except OSError:
                reader = NOBODY
        request[READER_KEY] = reader
        return reader

    def _view(self, request: web.Request) -> View:
        return View(self._reader(request), self.service.owners)

    def _authorize(self, request: web.Request, what: str = "mutations") -> None:
        challenge = {"WWW-Authenticate": 'Bearer realm="comminsight"'}
        if not self.token:
            raise ApiError(
                ErrorCode.forbidden,
                f"{what} are disabled on this agent: COMMINSIGHT_AGENT_TOKEN is not set",
            )
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if not header:
            raise ApiError(
                ErrorCode.unauthorized,
                "missing bearer token",
                [Problem("header", "Authorization", "required: Bearer <token>")],
                headers=challenge,
            )
        if scheme.lower() != "bearer" or not presented.strip():
            raise ApiError(
                ErrorCode.unauthorized,
                "malformed Authorization header",
                [Problem("header", "Authorization", "must be 'Bearer <token>'")],
                headers=challenge,
            )
        # aiohttp decodes header bytes that are not UTF-8 to lone surrogates: kept as they
        # came (surrogateescape), such a token is just another wrong one
        presented_bytes = presented.strip().encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(presented_bytes, self.token.encode()):
            raise ApiError(
                ErrorCode.unauthorized,
                "wrong bearer token",
                [Problem("header", "Authorization", "token does not match")],
                headers=challenge,
            )

    def _ready(self) -> None:
        if not self.service.ready:
            raise ApiError(
                ErrorCode.unavailable,
                "the agent is starting or stopping",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )

    def _keep(self, request: web.Request):
        """Whose processes the reader may see, by uid (None: everyone's; a user: their own)."""
        view = self._view(request)
        return None if view.reader.sees_all else view.process

    def _own(self, request: web.Request) -> api_views.OwnRows:
        """The node's rows as the reader may see them."""
        self._ready()
        return self.service.own_rows(self._keep(request))

    def _member_rows(self, request: web.Request) -> tuple[list[api_views.MemberRow], int, int]:
        """The communicator rows this Agent answers for (a master: the job's), with the
        monotonic and real time they are as of."""
        own = self._own(request)
        return own.member_rows(), own.now_mono_ns, own.now_real_ns

    # ---- health and node -------------------------------------------------------------

    async def health(self, request, values):
        self._ready()
        health = self.service.health()
        view = self._view(request)
        if not view.reader.sees_all:
            health = _health_for(health, view)
        return json_response(health)

    async def node(self, request, values):
        return json_response(self.service.node_model(self._own(request)))

    async def nodes(self, request, values):
        summary = self.service.node_summary(self._own(request))
        wanted = values["state"] in ("all", summary.state.value)
        after = values["cursor"] is None or summary.node_name > values["cursor"]
        items = [summary] if wanted else []
        page = [s for s in items if after][: values["limit"]]
        return json_response(NodeList(items=page, total=len(items), next_cursor=None))

    # ---- communicators and ops -------------------------------------------------------

    async def communicators(self, request, values):
        rows, now_mono, _ = self._member_rows(request)
        full = values["view"] == "full"
        comms = api_views.communicators(rows, self.service.open_report_ids(), full, now_mono)
        if values["state"] != "all":
            comms = [c for c in comms if c.state.value == values["state"]]
        if values["name_contains"] is not None:
            comms = [c for c in comms if c.name and values["name_contains"] in c.name]
        if values["rank"] is not None:
            with_rank = {
                f"{r.member.comm_id:016x}"
                for r in rows
                if r.process.HasField("global_rank") and r.process.global_rank == values["rank"]
            }
            comms = [c for c in comms if c.comm_id in with_rank]
        if values["node_name"] is not None:
            comms = [c for c in comms if values["node_name"] in c.nodes]
        total = len(comms)
        if values["cursor"] is not None:
            comms = [c for c in comms if c.comm_id > values["cursor"]]
        page = comms[: values["limit"]]
        next_cursor = page[-1].comm_id if len(comms) > len(page) else None
        return json_response(CommunicatorPage(items=page, total=total, next_cursor=next_cursor))

    async def communicator(self, request, values):
        rows, now_mono, _ = self._member_rows(request)
        comm_id = values["comm_id"]
        rows = [r for r in rows if f"{r.member.comm_id:016x}" == comm_id]
        if not rows:
            raise ApiError(
                ErrorCode.not_found,
                f"communicator {comm_id} is not known to this {self.agent_kind}",
                [Problem("path", "comm_id", "no such communicator")],
            )
        full = values["view"] != "summary"
        report_ids = self.service.open_report_ids().get(comm_id, [])
        return json_response(api_views.communicator(rows, report_ids, full, now_mono))

    async def inflight(self, request, values):
        rows, now_mono, now_real = self._member_rows(request)
        ops = [
            op
            for op in api_views.inflight_ops(rows, now_mono)
            if op.age_ms >= values["min_age_ms"]
            and values["comm_id"] in (None, op.comm_id)
            and values["rank"] in (None, op.global_rank)
            and values["node_name"] in (None, op.node_name)
        ]
        return json_response(
            InflightOpList(as_of_real_ns=now_real, items=ops[: values["limit"]], total=len(ops))
        )

    async def recent_ops(self, request, values):
        self._ready()
        view = self._view(request)
        items = self.service.recent_ops.query(
            comm_id=int(values["comm_id"], 16) if values["comm_id"] else None,
            global_rank=values["rank"],
            func=values["func"],
            limit=values["limit"],
            process=None if view.reader.sees_all else view.pid,
        )
        return json_response(OpRecordList(items=items))

    # ---- steps and hangs -------------------------------------------------------------

    async def steps(self, request, values):
        self._ready()
        view = self._view(request)
        result = await asyncio.to_thread(
            self.service.step_files.page,
            rank=values["rank"],
            since_step=values["since_step"],
            cursor=values["cursor"],
            limit=values["limit"],
            visible=None if view.reader.sees_all else view.step_file,
        )
        return json_response(
            StepPage(items=result.items, total=result.total, next_cursor=result.next_cursor)
        )

    def step_directories(self) -> list:
        """Where the step summaries this agent answers for are: its own engine's."""
        return [self.service.step_files.directory]

    def job_nodes(self) -> dict | None:
        """Nodes known to run each job's processes (a master knows its slaves'); None here."""
        return None

    async def job_steps(self, request, values):
        self._ready()
        if not self._view(request).job(values["job"]):
            raise ApiError(
                ErrorCode.not_found,
                f"no job {values['job']!r} of yours is known to this agent",
                [Problem("query", "job", "no such job")],
            )
        if self._job_steps is None:
            self._job_steps = JobStepsView(self.step_directories())
        try:
            page = await asyncio.to_thread(
                self._job_steps.page,
                job=values["job"],
                since_step=values["since_step"],
                cursor=values["cursor"],
                limit=values["limit"],
                job_nodes=self.job_nodes(),
            )
        except UnknownJob as e:
            # the message names the jobs the Agent knows: every user's, for root's eyes only
            said = str(e) if self._reader(request).sees_all else f"no job {values['job']!r}"
            raise ApiError(
                ErrorCode.not_found, said, [Problem("query", "job", "no such job")]
            ) from None
        return json_response(page)

    async def hangs(self, request, values):
        self._ready()
        view = self._view(request)
        node = self.service.node_name
        reports = [r for r in self.service.hangs.reports.values() if view.report(r, node)]
        if values["status"] != "all":
            reports = [r for r in reports if r.status.value == values["status"]]
        if values["comm_id"] is not None:
            reports = [r for r in reports if r.comm.comm_id == values["comm_id"]]
        reports.sort(key=lambda r: (r.detected_real_ns, r.report_id), reverse=True)
        return json_response(HangReportList(items=reports[: values["limit"]], total=len(reports)))

    def _report(self, report_id: str, view: View):
        report = self.service.hangs.reports.get(report_id)
        if report is None or not view.report(report, self.service.node_name):
            raise ApiError(
                ErrorCode.not_found,
                f"no hang report {report_id}",
                [Problem("path", "report_id", "no such report")],
            )
        return report

    async def hang(self, request, values):
        self._ready()
        return json_response(self._report(values["report_id"], self._view(request)))

    async def resolve_hang(self, request, values):
        self._ready()
        note = await _resolve_note(request, ResolveHangRequest, self._body_timeout_s)
        self._report(values["report_id"], self._view(request))
        report = self.service.resolve_by_operator(values["report_id"], note)
        return json_response(report)

    # ---- incidents -------------------------------------------------------------------

    def _incident_visible(self, incident, view: View) -> bool:
        """A user's incident: one of its reports is of their communicator."""
        if view.reader.sees_all:
            return True
        reports = self.service.hangs.reports
        for report_id in self.service.incidents.report_ids(incident):
            report = reports.get(report_id)
            if report is not None and view.report(report, self.service.node_name):
                return True
        return False

    async def incidents(self, request, values):
        self._ready()
        view = self._view(request)
        items = [
            i for i in self.service.incidents.incidents.values() if self._incident_visible(i, view)
        ]
        if values["status"] != "all":
            items = [i for i in items if i.status.value == values["status"]]
        items.sort(key=lambda i: (i.opened_real_ns, i.incident_id), reverse=True)
        return json_response(IncidentList(items=items[: values["limit"]], total=len(items)))

    def _incident(self, incident_id: str, view: View):
        incident = self.service.incidents.incidents.get(incident_id)
        if incident is None or not self._incident_visible(incident, view):
            raise ApiError(
                ErrorCode.not_found,
                f"no incident {incident_id}",
                [Problem("path", "incident_id", "no such incident")],
            )
        return incident

    async def incident(self, request, values):
        self._ready()
        incident = self._incident(values["incident_id"], self._view(request))
        reports = self.service.hangs.reports
        held = [
            reports[rid] for rid in self.service.incidents.report_ids(incident) if rid in reports
        ]
        return json_response(IncidentDetail(incident=incident, reports=held))

    async def resolve_incident(self, request, values):
        self._ready()
        note = await _resolve_note(request, ResolveIncidentRequest, self._body_timeout_s)
        self._incident(values["incident_id"], self._view(request))
        try:
            incident = self.service.resolve_incident_by_operator(values["incident_id"], note)
        except UnknownIncident as e:  # resolved away between the check and now: not on one loop
            raise ApiError(
                ErrorCode.not_found, str(e), [Problem("path", "incident_id", "no such incident")]
            ) from None
        return json_response(incident)

    # ---- archive ---------------------------------------------------------------------

    def _archiver(self):
        self._ready()
        archiver = self.service.archiver
        if archiver is None:
            raise ApiError(
                ErrorCode.unavailable,
                f"archiving is off: {self.service.archive_error}",
                headers={"Retry-After": "60"},
            )
        return archiver

    async def archive(self, request, values):
        archiver = self._archiver()
        status = await asyncio.to_thread(archiver.status)
        return json_response(msgspec.convert(status.to_dict(), ArchiveStatus))

    async def flush_archive(self, request, values):
        archiver = self._archiver()
        try:
            result = await asyncio.to_thread(archiver.flush, False)
        except ArchiveConfigError as e:
            raise ApiError(ErrorCode.unavailable, str(e)) from None
        return json_response(msgspec.convert(result.to_dict(), ArchiveFlush), status=202)

    # ---- meta ------------------------------------------------------------------------

    async def openapi(self, request, values):
        return web.json_response(openapi_document())

    async def metrics(self, request, values):
        if not self._reader(request).sees_all:
            # every user's series: the cluster's Prometheus reads them over TCP
            raise ApiError(
                ErrorCode.forbidden,
                "/metrics holds every user's processes: it is served over TCP (to the "
                "cluster's Prometheus) and to root, not to one user on the Agent's socket",
            )
        # OpenMetrics for a client that asks for it (Prometheus does, by default), the text
        # format 0.0.4 for everyone else
        body, content_type = self.service.metrics.exposition(request.headers.get("Accept"))
        response = web.Response(body=body, headers={"Content-Type": content_type})
        if accepts_gzip(request.headers.get("Accept-Encoding")):
            # a page of a big node is megabytes of repetitive text: gzip makes it a tenth
            response.enable_compression(web.ContentCoding.gzip)
        return response


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header accepts gzip: named with q > 0, or else `*` with
    q > 0 (RFC 9110 12.5.3). A malformed q refuses."""
    weights: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        coding, *params = (p.strip().lower() for p in item.split(";"))
        q = next((p.split("=", 1)[1] for p in params if p.startswith("q=")), "1")
        try:
            weights[coding] = float(q)
        except ValueError:
            weights[coding] = 0.0
    for coding in ("gzip", "x-gzip", "*"):
        if coding in weights:
            return weights[coding] > 0
    return False


async def _resolve_note(request: web.Request, model, timeout_s: float) -> str | None:
    """The note of a resolve request's optional JSON body (ResolveHangRequest or
    ResolveIncidentRequest); ApiError naming what is wrong with the body.

    aiohttp waits for a body as long as its bytes keep coming: one sent a byte at a time
    would hold its connection busy for hours, and enough of them every connection the guard
    allows. So the whole body must arrive within timeout_s."""
    try:
        body = await asyncio.wait_for(request.read(), timeout_s)
    except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
        raise ApiError(
            ErrorCode.malformed_body,
            f"the request body did not arrive within {timeout_s:g} s",
            status=408,
            close=True,
        ) from None
    except (ConnectionError, RequestPayloadError) as e:  # the client left, or a broken chunk
        raise ApiError(
            ErrorCode.malformed_body, f"the request body could not be read: {e}", close=True
        ) from None
    if not body.strip():
        return None
    if request.content_type != JSON:
        raise ApiError(
            ErrorCode.malformed_body,
            f"the body must be {JSON}, not {request.content_type}",
            [Problem("header", "Content-Type", f"must be {JSON}")],
        )
    try:
        raw = msgspec.json.decode(body)
    except NOT_JSON as e:  # msgspec's word for bad UTF-8
        raise ApiError(
            ErrorCode.malformed_body,
            f"body is not JSON: {e}",
            [Problem("body", "", str(e))],
        ) from None
    try:
        note = msgspec.convert(raw, model).note
    except msgspec.ValidationError as e:
        where = _json_pointer(str(e))
        raise ApiError(
            ErrorCode.unprocessable,
            f"body does not match {model.__name__}: {e}",
            [Problem("body", where, str(e)[:1024])],
        ) from None
    return None if note is msgspec.UNSET else note


def _json_pointer(message: str) -> str:
    """msgspec says `... - at `$.note``; the API names body fields as JSON Pointers."""
    _, sep, where = message.rpartition("at `$")
    if not sep:
        return ""
    return "/" + where.rstrip("`").lstrip(".").replace(".", "/")


def parse_listen(address: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' (COMMINSIGHT_AGENT_LISTEN, already pattern-checked)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def start_server(service, address: str) -> web.AppRunner:
    """Serve the API on address; OSError (address in use, ...) propagates to the caller.
    Connections are admitted through a ConnectionGuard (limit, header deadline, clients that
    do not read their answers, pipelining, EMFILE),
    whose counts /metrics serves and whose descriptor trouble health reports."""
    settings = service.settings
    # a master answers some endpoints for the whole job (master.agent.MasterApi)
    api_class = getattr(service, "api_class", AgentApi)
    runner = web.AppRunner(
        api_class(service).app(),
        access_log=None,
        keepalive_timeout=settings.agent_http_idle_timeout_s,
    )
    await runner.setup()
    guard = ConnectionGuard(
        settings.agent_http_max_connections,
        settings.agent_http_header_timeout_s,
        settings.agent_http_write_timeout_s,
        settings.agent_http_max_pipelined,
    )
    budget = descriptor_budget()
    if budget is not None and guard.max_connections > budget:
        log.warning(
            "COMMINSIGHT_AGENT_HTTP_MAX_CONNECTIONS=%d is more than the open-file limit leaves "
            "for connections (about %d): past it, accept() fails with EMFILE and waits",
            guard.max_connections,
            budget,
        )
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(guard.loop_exception_handler(loop.get_exception_handler()))
    service.http_guard = guard
    service.metrics.registry.register(guard)
    host, port = parse_listen(address)
    site = GuardedSite(runner, host, port, guard, https_context(settings))
    try:
        await site.start()
    except OSError as e:
        if not settings.agent_shared_home:
            await runner.cleanup()
            raise
        # any local user may take the port first: the node's users still reach the Agent on
        # its socket, and the Agent says what it cannot serve
        service.listen_error = f"cannot listen on {address}: {e.strerror or e}"
        log.error("the Agent serves on its socket only: %s", service.listen_error)
    await _start_socket(runner, service, guard)
    return runner


def _health_for(health, view: View):
    """Health as one user may see it: reasons, and processes whose watchdog differs, about
    what is theirs alone."""
    kept = [r for r in health.reasons if view.health_reason(r)]
    threshold = health.hang_threshold
    if threshold not in (None, msgspec.UNSET):
        mine = [d for d in threshold.differing if view.pid(d.pid)]
        threshold = msgspec.structs.replace(
            threshold, differing=mine, processes_differing=len(mine)
        )
    return msgspec.structs.replace(health, reasons=kept, hang_threshold=threshold)


def https_context(settings) -> ssl.SSLContext | None:
    """TLS for the API over TCP when COMMINSIGHT_AGENT_HTTP_TLS_CERT names a certificate (its
    files were checked at start: agent.main.http_tls_problem)."""
    if not settings.agent_http_tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.agent_http_tls_cert, settings.agent_http_tls_key)
    return context


async def _start_socket(runner: web.AppRunner, service, guard: ConnectionGuard) -> None:
    """The node's users' way in; without it (a path that cannot be used) the Agent serves on
    over TCP and says why in its log and health."""
    settings = service.settings
    path = socket_path(settings)
    try:
        sock = bind_agent_socket(path, settings.agent_shared_home)
    except SocketError as e:
        service.socket_error = str(e)
        log.error("the Agent's socket is off: %s", e)
        return
    await GuardedUnixSite(runner, sock, guard).start()
    service.socket_path = path
    log.info("Agent API for this node's users on %s", path)
