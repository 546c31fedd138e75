"""How `comminsight` commands reach an agent: the generated `comminsight_client`, and errors
that say what to do next (the options every agent command shares are in cli.options).

A command is `func(client, args, out)`: `client` reads (it carries no token: reads need none,
and --url may name someone else's agent); a change asks `changing_client(args)` for one with
the token, and that client sends it to a port of this host's loopback only when the process
listening there runs as this user or root (`local_listener`). `answer` asks an endpoint and
decodes its answer, which must be the protocol's model: anything else is named, with where it
came from. `out` prints in the chosen format. `run` turns every failure into one line on
stderr and a hint, exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import pwd
import socket
import ssl
import stat
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import httpx
from rich.console import Console

from comminsight.cli import local_listener
from comminsight.cli.options import output_format
from comminsight.cli.output import Output, error
from comminsight.config import ConfigError, load_settings
from comminsight_client import AuthenticatedClient, Client
from comminsight_client.models import Error
from comminsight_client.types import UNSET, Unset

PAGE = 1000
SOCKET_NAME = "agent.sock"  # the agent's socket in its home (agent.api.unix_socket)
TIMEOUT_S = 10.0
START_HINT = (
    "start one with `comminsight-agent` (add --home DIR for a home of your own, --listen "
    "HOST:PORT for another address), or point --url at a running agent"
)
STATUS_HINTS = {
    401: "this needs the agent's token (every change; reads too where the agent has "
    "COMMINSIGHT_AGENT_READ_AUTH=token): pass --token or set COMMINSIGHT_AGENT_TOKEN to the "
    "value the agent was started with",
    403: "the agent was started without COMMINSIGHT_AGENT_TOKEN, so it refuses every change; "
    "restart it with a token set",
    503: "the agent is starting or stopping, or lacks what this needs (see the message); "
    "retry in a moment",
}
TOKEN_SETTING = "COMMINSIGHT_AGENT_TOKEN"
NOT_AN_ANSWER_HINT = "is a CommInsight agent of this version listening there? check --url"
# what decoding a body that is not the model raises in the generated client (JSON and
# Unicode errors are ValueErrors)
DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)


T = typing.TypeVar("T")


def known(value: T | Unset) -> T | None:
    """An optional field of an answer (a generated model's attribute): None where the answer
    leaves it out (UNSET), else its value."""
    return None if isinstance(value, Unset) else value


class AgentUnavailable(Exception):
    """The agent could not be asked or refused; `hint` says what the user can do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Target:
    url: str
    chosen_by: str  # "--url", or the setting the local agent's address came from
    socket: str | None = None  # the agent's Unix socket, when the request goes there


def local_agent() -> Target:
    """The local agent: on its Unix socket (COMMINSIGHT_AGENT_SOCKET, default
    <home>/agent.sock) when one of this user's or root's answers there, where it knows who
    asks; else where COMMINSIGHT_AGENT_LISTEN (environment, file or default) says."""
    try:
        settings = load_settings()
    except ConfigError:
        settings = None
    if settings is not None:
        path = settings.agent_socket or os.path.join(settings.home, SOCKET_NAME)
        if _answers(path):
            return Target("http://localhost", f"the agent's socket {path}", path)
    listen = settings.agent_listen if settings is not None else "127.0.0.1:19102"
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    return Target(f"http://{host}:{port}", f"COMMINSIGHT_AGENT_LISTEN={listen}")


def default_url() -> str:
    return local_agent().url


def _answers(path: str) -> bool:
    """A socket of this user or root at path that takes a connection (an agent killed
    outright leaves its socket file behind: then the TCP address is tried)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid not in (os.geteuid(), 0):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def socket_transport(path: str | None) -> dict:
    """httpx arguments that send every request to the agent's Unix socket (none: TCP)."""
    return {"transport": httpx.HTTPTransport(uds=path)} if path else {}


def changing_client(args: argparse.Namespace) -> Client:
    """A client for a change (resolve, flush): with --token, else COMMINSIGHT_AGENT_TOKEN;
    without either the request goes unauthenticated and the agent's refusal is explained."""
    token = args.token
    if not token:
        try:
            token = load_settings().agent_token
        except ConfigError:
            token = None
    timeout = httpx.Timeout(TIMEOUT_S)
    through = getattr(args, "agent_socket", None)
    if token and through:  # a socket of this user or root (local_agent checked its owner)
        return AuthenticatedClient(
            base_url=args.agent_url,
            token=token,
            timeout=timeout,
            httpx_args={"trust_env": False, **socket_transport(through)},
        )
    if token:
        refuse_a_foreign_listener(args.agent_url, "--token" if args.token else TOKEN_SETTING)
        # straight to the agent: a proxy named by HTTP_PROXY/ALL_PROXY (checked by no one,
        # perhaps another user's port on this host) would be handed the token with the request
        return AuthenticatedClient(
            base_url=args.agent_url,
            token=token,
            timeout=timeout,
            httpx_args={"trust_env": False},
            **tls_options(args.agent_url),
        )
    return Client(
        base_url=args.agent_url,
        timeout=timeout,
        httpx_args=socket_transport(through),
        **tls_options(args.agent_url),
    )


def tls_options(url: str) -> dict:
    """The client's TLS setting for `url`: verified for https, as httpx does by default, with
    the CAs of SSL_CERT_FILE / SSL_CERT_DIR where they are set (an agent's certificate from a
    site CA), also for a request that ignores the rest of the environment (one with the
    token); for a plain-http URL, which never uses TLS (no redirect is followed), none, so
    that the CA bundle a verifying context loads (a tenth of a second of every command) is
    not read. The scheme is read without parsing the rest: a malformed URL is reported where
    it is used."""
    if url.partition("://")[0].lower() != "https":
        return {"verify_ssl": False}
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        return {"verify_ssl": ssl.create_default_context(cafile=cafile, capath=capath)}
    return {}


def refuse_a_foreign_listener(url: str, token_from: str) -> None:
    """AgentUnavailable when `url` is on this host's loopback and a process of another user
    (not this one, not root) listens on its port: whoever took the agent's port while the agent
    was down would get the token. Nothing listening as far as /proc says (refused anyway,
    another network namespace) and URLs elsewhere go ahead: TLS is what guards those."""
    parsed = httpx.URL(url)
    port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme)
    if not parsed.host or port is None:
        return
    allowed = {os.geteuid(), 0}
    foreign = [
        listener
        for listener in local_listener.listeners_for(parsed.host, port)
        if listener.uid not in allowed
    ]
    if not foreign:
        return
    uid = foreign[0].uid
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    raise AgentUnavailable(
        f"not sending {token_from} to {host}:{port}: the process listening there runs as "
        f"{user_text(uid)}, not as this user or root",
        f"something other than your agent may hold the port (`ss -ltnp 'sport = :{port}'` "
        "names it): stop it and start the agent, run this as the agent's user, or point "
        "--url at your agent",
    )


def user_text(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def run(func: Callable, args: argparse.Namespace, console: Console) -> int:
    fmt = output_format(args)
    args.json = fmt == "json"
    target = Target(args.url, "--url") if args.url else local_agent()
    args.agent_url = target.url
    args.agent_socket = target.socket
    try:
        client = reading_client(args, target)
        func(client, args, Output(console, fmt))
    except AgentUnavailable as e:
        return fail(str(e), e.hint)
    except httpx.TimeoutException:
        return fail(
            f"the agent at {target.url} did not answer within {TIMEOUT_S:.0f} s",
            "it may be overloaded or stopped; `comminsight status` again, or check its log",
        )
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        where = target.socket or target.url
        hint = f"nothing answers at {where} (from {target.chosen_by}); {START_HINT}"
        return fail(f"cannot reach the agent at {where}: {e}", hint)
    return 0


def reading_client(args: argparse.Namespace, target: Target) -> Client:
    """The client for reads. An agent's socket knows who asks: no token. Over TCP an agent may
    need one for reads too (COMMINSIGHT_AGENT_READ_AUTH=token): --token is sent wherever
    --url says; the configured token only to the local agent, and only when the process
    listening there runs as this user or root (refuse_a_foreign_listener)."""
    plain = Client(
        base_url=target.url,
        timeout=httpx.Timeout(TIMEOUT_S),
        httpx_args=socket_transport(target.socket),
        **tls_options(target.url),
    )
    if target.socket:
        return plain
    token = getattr(args, "token", None)
    named_by = "--token"
    if not token and not args.url:
        try:
            token = load_settings().agent_token
        except ConfigError:
            token = None
        named_by = TOKEN_SETTING
    if not token:
        return plain
    refuse_a_foreign_listener(target.url, named_by)
    return AuthenticatedClient(
        base_url=target.url,
        token=token,
        timeout=httpx.Timeout(TIMEOUT_S),
        httpx_args={"trust_env": False},
        **tls_options(target.url),
    )


def fail(message: str, hint: str | None) -> int:
    error(message, hint)
    return 1


def answer(endpoint: ModuleType, *args, not_found_hint: str | None = None, **params):
    """Ask `endpoint` (a module of `comminsight_client.api`) with `args` and `params` (its
    `client` among them); the decoded body of a 2xx answer. AgentUnavailable naming the API's
    error otherwise, or naming what answered and why when the body is not the protocol's model
    (the generated client's own decoding, then the protocol's types, which it does not check)."""
    client = params.pop("client")
    http = client.get_httpx_client().request(**endpoint._get_kwargs(*args, **params))
    status = http.status_code
    expected = answer_model(endpoint) if 200 <= status < 300 else Error
    try:
        response = endpoint._build_response(client=client, response=http)
        if response.parsed is not None:
            conforms(http.content, type(response.parsed))
    except DECODE_ERRORS as e:
        raise not_a(http, expected, why_not(http.content, expected, e)) from None
    body = response.parsed
    if isinstance(body, Error) or not 200 <= status < 300:
        hint = not_found_hint if status == 404 else STATUS_HINTS.get(status)
        if isinstance(body, Error):
            raise AgentUnavailable(
                f"agent answered {status} {body.code.value}: {body.message}", hint
            )
        raise AgentUnavailable(f"agent answered {status}: {http.content[:200]!r}", hint)
    if body is None:
        raise not_a(http, expected, f"{status} is no status this operation answers with")
    return body


def all_pages(endpoint: ModuleType, **params) -> list[typing.Any]:
    """Every item (a generated model) of a paged list endpoint, asked with `params` and each
    page's cursor."""
    items: list[typing.Any] = []
    cursor: str | Unset = UNSET
    while True:
        page = answer(endpoint, **params, cursor=cursor)
        items.extend(page.items)
        if not page.next_cursor:
            return items
        cursor = page.next_cursor


def answer_model(endpoint: ModuleType) -> type:
    """The model of `endpoint`'s 2xx answer (`str` for a text one)."""
    (union,) = typing.get_args(typing.get_type_hints(endpoint.sync_detailed)["return"])
    return next(t for t in typing.get_args(union) or (union,) if t is not Error)


def conforms(content: bytes, model: type) -> None:
    """Raises msgspec's error (a ValueError) unless `content` is the JSON of the protocol's
    `model` (agent-master-api v1, the types the agent encodes with); a text answer is one."""
    import msgspec

    from comminsight_gen.models import agent_master_api_v1 as api

    struct = getattr(api, model.__name__, None)
    if struct is not None:
        msgspec.json.decode(content, type=struct)


def why_not(content: bytes, model: type, error: Exception) -> str:
    """Why `content` is not a `model`: as msgspec says it (`Object missing required field
    `schema_version``), else as the generated client's decoding failed."""
    try:
        conforms(content, model)
    except ValueError as e:
        return str(e)
    except RecursionError:
        pass
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"


def not_a(http: httpx.Response, model: type, reason: str) -> AgentUnavailable:
    """'<url> answered something that is not a HangReport: <reason>'."""
    url = http.request.url
    where = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"
    if model is Error:
        what = f"an API error (it answered {http.status_code})"
    elif model is str:
        what = "text"
    else:  # the schema's name, as the API's description has it
        what = ("an " if model.__name__[0] in "AEIOU" else "a ") + model.__name__
    return AgentUnavailable(
        f"{printable(where)} answered something that is not {what}: {printable(reason)}",
        NOT_AN_ANSWER_HINT,
    )


def printable(text: str, limit: int = 200) -> str:
    """`text` shortened, each character a terminal would act on written as an escape."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
