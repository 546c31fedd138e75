"""How `comminsight` commands reach an agent: the generated `comminsight_client`, the options
every agent command shares, and errors that say what to do next.

A command is `func(client, args, out)`: `client` reads (it carries no token: reads need none,
and --url may name someone else's agent); a change asks `changing_client(args)` for one with
the token. `out` prints in the chosen format. `run` turns every failure into one line on
stderr and a hint, exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from rich.console import Console

from comminsight.cli.output import FORMATS, Output, stderr_console
from comminsight.config import ConfigError, load_settings
from comminsight_client import AuthenticatedClient, Client
from comminsight_client.models import Error
from comminsight_client.types import UNSET

PAGE = 1000
TIMEOUT_S = 10.0
START_HINT = (
    "start one with `comminsight-agent` (add --home DIR for a home of your own, --listen "
    "HOST:PORT for another address), or point --url at a running agent"
)
STATUS_HINTS = {
    401: "this change needs the agent's token: pass --token or set COMMINSIGHT_AGENT_TOKEN to "
    "the value the agent was started with",
    403: "the agent was started without COMMINSIGHT_AGENT_TOKEN, so it refuses every change; "
    "restart it with a token set",
    503: "the agent is starting or stopping, or lacks what this needs (see the message); "
    "retry in a moment",
}


class AgentUnavailable(Exception):
    """The agent could not be asked or refused; `hint` says what the user can do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Target:
    url: str
    chosen_by: str  # "--url", or the setting the local agent's address came from


def local_agent() -> Target:
    """The local agent, where COMMINSIGHT_AGENT_LISTEN (environment, file or default) says."""
    try:
        listen = load_settings().agent_listen
    except ConfigError:
        listen = "127.0.0.1:19102"
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    return Target(f"http://{host}:{port}", f"COMMINSIGHT_AGENT_LISTEN={listen}")


def default_url() -> str:
    return local_agent().url


def add_common_options(p: argparse.ArgumentParser, nested: bool = False) -> None:
    """--url, --format/--json, --token. `nested`: on a sub-command (`hangs resolve`), where an
    option given before the sub-command must not be reset by the sub-command's default."""

    def default(value):
        return argparse.SUPPRESS if nested else value

    p.add_argument(
        "--url", default=default(None), help="agent API base URL (default: the local agent)"
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=default("table"),
        help="table (default), plain (tab-separated, for scripts) or json (the API's bodies)",
    )
    p.add_argument(
        "--json", action="store_true", default=default(False), help="same as --format json"
    )
    p.add_argument(
        "--token",
        default=default(None),
        help="bearer token for changes (resolve, flush); default COMMINSIGHT_AGENT_TOKEN",
    )


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
    if token:
        return AuthenticatedClient(base_url=args.agent_url, token=token, timeout=timeout)
    return Client(base_url=args.agent_url, timeout=timeout)


def run(func: Callable, args: argparse.Namespace, console: Console) -> int:
    fmt = "json" if args.json else args.format
    args.json = fmt == "json"
    target = Target(args.url, "--url") if args.url else local_agent()
    args.agent_url = target.url
    client = Client(base_url=target.url, timeout=httpx.Timeout(TIMEOUT_S))
    try:
        func(client, args, Output(console, fmt))
    except AgentUnavailable as e:
        return fail(str(e), e.hint)
    except httpx.TimeoutException:
        return fail(
            f"the agent at {target.url} did not answer within {TIMEOUT_S:.0f} s",
            "it may be overloaded or stopped; `comminsight status` again, or check its log",
        )
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        hint = f"nothing answers at {target.url} (from {target.chosen_by}); {START_HINT}"
        return fail(f"cannot reach the agent at {target.url}: {e}", hint)
    except json.JSONDecodeError:
        return fail(
            f"the answer from {target.url} is not JSON",
            "is it a CommInsight agent? check --url",
        )
    return 0


def fail(message: str, hint: str | None) -> int:
    err = stderr_console()
    err.print(f"comminsight: {message}", markup=False, highlight=False, soft_wrap=True)
    if hint:
        err.print(f"  hint: {hint}", markup=False, highlight=False, soft_wrap=True)
    return 1


def answer(response, not_found_hint: str | None = None):
    """The parsed body of a 2xx answer; AgentUnavailable naming the API's error otherwise."""
    body = response.parsed
    status = int(response.status_code)
    if isinstance(body, Error) or not 200 <= status < 300:
        hint = not_found_hint if status == 404 else STATUS_HINTS.get(status)
        if isinstance(body, Error):
            raise AgentUnavailable(
                f"agent answered {status} {body.code.value}: {body.message}", hint
            )
        raise AgentUnavailable(f"agent answered {status}: {response.content[:200]!r}", hint)
    return body


def all_pages(fetch: Callable) -> list[dict]:
    """Every item of a paged list endpoint; `fetch(cursor)` gets one page."""
    items, cursor = [], UNSET
    while True:
        page = answer(fetch(cursor)).to_dict()
        items.extend(page["items"])
        if not page["next_cursor"]:
            return items
        cursor = page["next_cursor"]
