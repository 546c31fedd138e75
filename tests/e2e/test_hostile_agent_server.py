"""The Agent against hostile load, settings, homes and disks: its HTTP server under more
half-open connections than it has file descriptors, a header that never ends, request bodies
sent a byte at a time, bearer tokens that are not UTF-8, floods of requests that are not HTTP,
clients that pipeline requests and never read the answers, settings out of range, homes it
must not trust, symbolic links where segments belong, peers without the token claiming a live
node or flooding the master with large messages, and a disk that fills up under the Semantic
Engine.

Each case is run on a real `comminsight-agent` process where the process is what is at stake
(its exit status and stderr, its descriptors, its answers over TCP); nothing here waits on a
clock to decide: every wait polls for a condition with a generous deadline.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import http.client
import os
import re
import resource
import secrets
import select
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import forked_python
import grpc
import httpx
import msgspec
import pytest
from multinode_job import TOKEN, AgentProc
from ports import free_port
from waiting import wait_until

from comminsight.agent.archive.archiver import Archiver, PassReport
from comminsight.agent.archive.providers import LocalDirectoryProvider
from comminsight.agent.archive.upload import ZstdUploader
from comminsight.agent.receivers.home_check import HomeError, check_config_file, check_home
from comminsight.config import ConfigError, is_loopback, load_settings
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.config_v1 import ConfigV1

# a minute or more of simulated jobs and Agents: scheduled first (conftest)
pytestmark = pytest.mark.slow

NOBODY = 65534
DEADLINE_S = 60


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for the tests' requests: httpx.get builds one per call otherwise
    (tens of milliseconds of CPU loading the CA bundle, far more on a loaded machine, taken
    from the Agent being polled), although the API is plain HTTP and never uses it."""
    return httpx.create_ssl_context()


def agent_env(home: Path, **extra) -> dict:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_LISTEN": f"127.0.0.1:{free_port()}",
        "COMMINSIGHT_AGENT_POLL_INTERVAL_MS": "50",
        "COMMINSIGHT_COMMON_ARCHIVE_INTERVAL_S": "3600",
        **extra,
    }


class Agent:
    """A comminsight-agent process; `nofile` lowers its RLIMIT_NOFILE before it starts."""

    def __init__(self, home: Path, nofile: int | None = None, **extra) -> None:
        self.home = home
        self.env = agent_env(home, **extra)
        self.listen = self.env["COMMINSIGHT_AGENT_LISTEN"]
        self.log = home.parent / f"{home.name}-agent.log"

        with open(self.log, "wb") as out:
            self.proc = forked_python.popen(
                [sys.executable, "-m", "comminsight.agent.main"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                rlimits={} if nofile is None else {resource.RLIMIT_NOFILE: (nofile, nofile)},
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(f"http://{self.listen}{path}", timeout=10, verify=tls_context(), **kw)

    def health(self) -> httpx.Response | None:
        try:
            return self.get("/api/v1/health")
        except httpx.TransportError:
            return None

    def wait_ready(self) -> None:
        def ready():
            assert self.proc.poll() is None, f"the agent exited:\n{self.text()}"
            h = self.health()
            return h is not None and h.status_code == 200

        wait_until(ready, DEADLINE_S, lambda: f"the agent never answered:\n{self.text()}")

    def wait_exit(self) -> int:
        return self.proc.wait(DEADLINE_S)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample of the Prometheus text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", text, re.M)
    return float(found.group(1)) if found else 0.0


def raise_own_nofile(at_least: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= at_least:
        return
    if hard != resource.RLIM_INFINITY and hard < at_least:
        pytest.skip(f"this test needs {at_least} descriptors, RLIMIT_NOFILE allows {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (at_least, hard))


def open_connections(address: str, n: int, source: str | None = None) -> list[socket.socket]:
    """n connections to address; from the loopback address `source` (127.0.0.2, ...), a
    client other than the test's own requests, which come from 127.0.0.1."""
    host, _, port = address.rpartition(":")
    out = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(DEADLINE_S)
        if source is not None:
            s.bind((source, 0))
        s.connect((host, int(port)))
        out.append(s)
    return out


def close_all(sockets: list[socket.socket]) -> None:
    for s in sockets:
        s.close()


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


# ---- the HTTP server under load ------------------------------------------------------------


def test_1100_half_open_connections_under_ulimit_1024_leave_the_agent_answering(tmp_path):
    raise_own_nofile(4096)
    agent = Agent(
        tmp_path / "home",
        nofile=1024,
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_HTTP_HEADER_TIMEOUT_S="3600",  # the limit must do it, not the clock
    )
    held: list[socket.socket] = []
    try:
        agent.wait_ready()
        held = open_connections(agent.listen, 1100)
        # the connection limit (256) closed the oldest idle ones to admit the newer: a
        # client with a request still gets an answer while the flood is held open
        health = agent.health()
        assert health is not None and health.status_code == 200, agent.text()
        close_all(held)
        held = []
        agent.wait_ready()
        metrics = agent.get("/metrics").text
        closed = metric(
            metrics, "comminsight_agent_http_connections_closed_total", reason="limit_idle"
        )
        assert closed >= 1100 - 256, metrics
        assert agent.proc.poll() is None
        assert len(agent.text()) < 100_000  # no log line per connection
        no_traceback(agent.text())
    finally:
        close_all(held)
        agent.stop()


def test_accept_out_of_descriptors_is_counted_logged_once_and_the_agent_recovers(tmp_path):
    raise_own_nofile(4096)
    agent = Agent(
        tmp_path / "home",
        nofile=1024,
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_HTTP_MAX_CONNECTIONS="4000",  # above what 1024 descriptors allow
        COMMINSIGHT_AGENT_HTTP_HEADER_TIMEOUT_S="3600",
    )
    held: list[socket.socket] = []
    try:
        agent.wait_ready()
        assert "more than the open-file limit leaves" in agent.text()
        # connect until accept() fails: past it the listen backlog (128) still completes
        # handshakes, so the connects that follow do not wait, and stopping there keeps the
        # backlog from filling up
        for _ in range(0, 1100, 16):
            if "cannot accept connections: EMFILE" in agent.text():
                break
            held += open_connections(agent.listen, 16)
        # a loaded machine's agent may not yet have accepted what the backlog holds
        wait_until(
            lambda: "cannot accept connections: EMFILE" in agent.text(),
            DEADLINE_S,
            lambda: agent.text()[-3000:],
        )
        assert agent.proc.poll() is None
        close_all(held)
        held = []
        agent.wait_ready()  # answers again once the connections went away
        metrics = agent.get("/metrics").text
        assert metric(metrics, "comminsight_agent_http_accept_errors_total", errno="EMFILE") >= 1
        health = agent.get("/api/v1/health").json()
        assert any("ran out of file descriptors" in r for r in health["reasons"]), health
        text = agent.text()
        assert text.count("cannot accept connections") <= 2, text[-3000:]
        assert len(text) < 100_000
        no_traceback(text)
    finally:
        close_all(held)
        agent.stop()


def test_a_connection_that_sends_half_a_header_is_closed_and_counted(tmp_path):
    agent = Agent(
        tmp_path / "home",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_HTTP_HEADER_TIMEOUT_S="0.2",
    )
    try:
        agent.wait_ready()
        (slow,) = open_connections(agent.listen, 1)
        slow.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: agent\r\nX-Half: ")
        try:
            assert slow.recv(4096) == b""  # closed by the agent, no answer
        except ConnectionResetError:
            pass
        slow.close()
        metrics = agent.get("/metrics").text
        assert (
            metric(
                metrics, "comminsight_agent_http_connections_closed_total", reason="header_timeout"
            )
            >= 1
        )
        assert agent.get("/api/v1/health").status_code == 200  # others are served on
    finally:
        agent.stop()


def test_a_kept_alive_connection_left_idle_is_closed(tmp_path):
    agent = Agent(
        tmp_path / "home",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_HTTP_IDLE_TIMEOUT_S="0.2",
    )
    try:
        agent.wait_ready()
        (conn,) = open_connections(agent.listen, 1)
        conn.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: agent\r\n\r\n")
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            assert chunk, "closed before answering"
            received += chunk
        assert received.startswith(b"HTTP/1.1 200")
        rest = b""
        while chunk := conn.recv(65536):  # the body, then the close of the idle connection
            rest += chunk
        conn.close()
        assert agent.get("/api/v1/health").status_code == 200
    finally:
        agent.stop()


API_TOKEN = "hostile-server-token"


SLOW_BODY_BYTES = 60000


def slow_resolve(token: str | None = API_TOKEN) -> bytes:
    """The header of a resolve request announcing a SLOW_BODY_BYTES body, and its first byte."""
    auth = b"" if token is None else b"Authorization: Bearer " + token.encode() + b"\r\n"
    return (
        b"POST /api/v1/hangs/some-report/resolve HTTP/1.1\r\nHost: agent\r\n"
        + auth
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{" % SLOW_BODY_BYTES
    )


def read_answer(s: socket.socket) -> bytes:
    """One whole HTTP answer read from s: its header, then as many body bytes as it announces
    (the server may send the two apart, and a reader can wake up between them)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed before a whole header: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    while length is not None and len(body) < int(length.group(1)):
        chunk = s.recv(65536)
        assert chunk, f"closed before the whole body: {data!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def still_open(s: socket.socket) -> bool:
    """Neither answered nor closed by the agent: nothing to read, not even the end."""
    return not select.select([s], [], [], 0)[0]


def test_slow_bodies_on_every_connection_do_not_lock_other_clients_out(tmp_path):
    raise_own_nofile(2048)
    agent = Agent(
        tmp_path / "home",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_TOKEN=API_TOKEN,
        COMMINSIGHT_AGENT_HTTP_BODY_TIMEOUT_S="3600",  # the limit must do it, not the clock
    )
    held: list[socket.socket] = []
    try:
        agent.wait_ready()
        # another client with one slow body (held too: a request still in progress keeps a
        # stopping Agent waiting for it, here until the test's stop gives up and kills it)
        (other,) = held = open_connections(agent.listen, 1)
        other.sendall(slow_resolve())
        # its request read (busy, as the request for /metrics itself is) before the flood: an
        # idle connection is rightly closed first
        wait_until(
            lambda: (
                metric(agent.get("/metrics").text, "comminsight_agent_http_connections_busy") >= 2
            ),
            DEADLINE_S,
            "the Agent to read the slow request",
        )
        # one client with the token fills every connection the limit (256) allows with a
        # resolve whose body never ends: each a request in progress, none idle
        flood = open_connections(agent.listen, 256, source="127.0.0.2")
        held = [other, *flood]
        for s in flood:
            s.sendall(slow_resolve())

        def served():
            health = agent.health()
            if health is None or health.status_code != 200:
                return False
            try:
                text = agent.get("/metrics").text
            except httpx.TransportError:
                return False
            evicted = metric(
                text, "comminsight_agent_http_connections_closed_total", reason="limit_client"
            )
            if not evicted:
                # the newcomer came before the Agent had read the request of every flooding
                # connection: it took the place of one still idle (closed first, rightly),
                # and a place is free since. Flood it again for the next newcomer.
                (again,) = open_connections(agent.listen, 1, source="127.0.0.2")
                held.append(again)
                flood.append(again)
                again.sendall(slow_resolve())
            return evicted

        # the client holding the most busy connections loses its oldest to a newcomer
        wait_until(served, DEADLINE_S, lambda: f"other clients were locked out:\n{agent.text()}")
        for _ in range(5):
            health = agent.health()
            assert health is not None and health.status_code == 200, agent.text()
        assert still_open(other), "the client with one connection lost it"
        assert sum(still_open(s) for s in flood) < len(flood)
        no_traceback(agent.text())
    finally:
        close_all(held)
        agent.stop()


@pytest.fixture(scope="module")
def token_agent(tmp_path_factory):
    """One Agent with a token for the tests of how it reads a request (its credentials, its
    body, bytes that are not HTTP): each opens connections of its own and changes nothing
    another one looks at, counts and log lines taken as differences."""
    agent = Agent(
        tmp_path_factory.mktemp("token-agent") / "home",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_TOKEN=API_TOKEN,
        COMMINSIGHT_AGENT_HTTP_BODY_TIMEOUT_S="1",
    )
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.stop()


def test_a_body_sent_a_byte_at_a_time_is_answered_408_and_its_connection_closed(token_agent):
    agent = token_agent
    (anonymous,) = open_connections(agent.listen, 1)
    anonymous.sendall(slow_resolve(token=None))
    # the token is checked before the body is read: no body byte more is waited for
    assert anonymous.recv(65536).startswith(b"HTTP/1.1 401"), agent.text()
    anonymous.close()
    (slow,) = open_connections(agent.listen, 1)
    slow.sendall(slow_resolve())
    body_sent = 1  # slow_resolve's first byte

    def answered() -> bool:  # a byte now and then (the select's pace), not the body
        nonlocal body_sent
        if select.select([slow], [], [], 0.2)[0]:
            return True
        slow.sendall(b" ")
        body_sent += 1
        return False

    wait_until(answered, DEADLINE_S, lambda: f"an answer to the slow body:\n{agent.text()}")
    answer = read_answer(slow)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"Connection: close" in answer and b"did not arrive within 1 s" in answer, answer
    # The rest of the body: aiohttp reads and drops it after the answer, then ends the
    # connection as the answer said (without it aiohttp waits out its 10 s lingering read and
    # closes an unfinished request whatever the answer said). The connection must end: a
    # kept-alive one would leave the recv below waiting until its timeout fails the test.
    try:
        slow.sendall(b" " * (SLOW_BODY_BYTES - body_sent))
    except (BrokenPipeError, ConnectionResetError):
        pass  # a very slow test: the lingering read gave up and closed it already
    try:
        while slow.recv(65536):
            pass
    except ConnectionResetError:
        pass
    slow.close()
    assert agent.get("/api/v1/health").status_code == 200
    no_traceback(agent.text())


@pytest.mark.parametrize("token", [b"t\xf6k\xe9n", "tökén".encode()], ids=["latin-1", "utf-8"])
def test_a_bearer_token_that_is_not_ascii_is_a_wrong_token(token_agent, token):
    agent = token_agent
    host, _, port = agent.listen.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
    conn.putrequest("POST", "/api/v1/hangs/some-report/resolve")
    conn.putheader("Authorization", b"Bearer " + token)  # the bytes as they are
    conn.putheader("Content-Length", "0")
    conn.endheaders()
    answer = conn.getresponse()
    body = msgspec.json.decode(answer.read())
    conn.close()
    assert answer.status == 401, (answer.status, body)
    assert body["code"] == "unauthorized" and body["message"] == "wrong bearer token", body
    assert answer.getheader("WWW-Authenticate") == 'Bearer realm="comminsight"'
    no_traceback(agent.text())


MALFORMED = (
    b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",  # a header without a colon
    b"GET /api/v1/health HTTP/9.9\r\n\r\n",  # no such version
    b"GET /api/v1/health HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # bad chunk
    b"G@T / HTTP/1.1\r\n\r\n",  # no such method
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello, not HTTP
)


def test_a_flood_of_malformed_requests_logs_a_bounded_number_of_lines(token_agent):
    agent = token_agent
    closed = "comminsight_agent_http_connections_closed_total"
    before = metric(agent.get("/metrics").text, closed, reason="bad_request")
    logged = len(agent.text())  # what the Agent says from here on is this test's
    started = time.monotonic()
    for i in range(200):
        (s,) = open_connections(agent.listen, 1)
        s.sendall(MALFORMED[i % len(MALFORMED)])
        assert s.recv(65536).startswith(b"HTTP/1.0 400"), MALFORMED[i % len(MALFORMED)]
        s.close()
    periods = (time.monotonic() - started) / 10 + 1  # one line per 10 s at most
    assert agent.get("/api/v1/health").status_code == 200
    metrics = agent.get("/metrics").text
    assert metric(metrics, closed, reason="bad_request") - before == 200, metrics
    text = agent.text()
    no_traceback(text)
    text = text[logged:]
    assert text.count("refused a malformed request") <= periods + 1, text
    assert len(text.splitlines()) < 20, text


def test_a_request_aiohttp_cannot_parse_gets_the_api_s_json_error_body(token_agent):
    """A request line past aiohttp's limit (a fuzzer's long cursor) is answered 400 with the
    API's one error body, as the OpenAPI document says every 400 is, not aiohttp's text."""
    (s,) = open_connections(token_agent.listen, 1)
    s.sendall(b"GET /api/v1/nodes?cursor=" + b"%C3%BE" * 2000 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    answer = read_answer(s)
    s.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400"), head
    assert b"content-type: application/json" in head.lower(), head
    error = msgspec.json.decode(body)
    assert error["code"] == "invalid_parameter" and error["details"] == [], error
    assert error["message"].startswith("the request could not be parsed"), error


# ---- settings --------------------------------------------------------------------------------


def test_the_default_listen_address_is_loopback():
    settings = load_settings({"COMMINSIGHT_HOME": "/nonexistent-home"})
    assert is_loopback(settings.agent_listen.rpartition(":")[0]), settings.agent_listen


def test_listening_beyond_loopback_without_a_token_is_said_loudly(tmp_path):
    agent = Agent(
        tmp_path / "home",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_LISTEN=f"0.0.0.0:{free_port()}",
    )
    try:
        agent.listen = agent.listen.replace("0.0.0.0", "127.0.0.1")
        agent.wait_ready()
        assert "WARNING" in agent.text() and "beyond loopback" in agent.text()
    finally:
        agent.stop()


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("COMMINSIGHT_AGENT_LISTEN", "127.0.0.1:99999", "port 99999 is outside 0..65535"),
        ("COMMINSIGHT_AGENT_LISTEN", "300.1.1.1:80", "300.1.1.1 is not an IPv4 address"),
        ("COMMINSIGHT_AGENT_LISTEN", "-bad-.host:80", "is not a host name"),
        ("COMMINSIGHT_AGENT_MASTER_ADDR", "master:0", "port 0 is outside 1..65535"),
        ("COMMINSIGHT_AGENT_HTTP_MAX_CONNECTIONS", "0", "COMMINSIGHT_AGENT_HTTP_MAX_CONNECTIONS"),
    ],
)
def test_a_bad_setting_is_a_named_error_and_exit_2(tmp_path, key, value, named):
    with pytest.raises(ConfigError, match=re.escape(key)) as info:
        load_settings({"COMMINSIGHT_HOME": str(tmp_path), key: value})
    assert named in str(info.value)
    agent = Agent(tmp_path / "home", **{key: value})
    assert agent.wait_exit() == 2
    text = agent.text()
    assert "configuration error" in text and key in text and named in text, text
    no_traceback(text)
    assert not (tmp_path / "home").exists()  # nothing was created before the check


# ---- homes the Agent must not use ------------------------------------------------------------


def _refused_home(tmp_path, home: Path, named: str, code: int = 1) -> None:
    agent = Agent(home, COMMINSIGHT_SEMANTIC_ENABLE="0")
    assert agent.wait_exit() == code, agent.text()
    text = agent.text()
    assert named in text and str(home) in text, text
    no_traceback(text)


def test_a_home_of_mode_000_is_a_named_error(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    home.chmod(0)
    try:
        _refused_home(tmp_path, home, "cannot read, write and enter it")
    finally:
        home.chmod(0o700)
    assert not (home / "metadata").exists()


def test_an_unreadable_subdirectory_is_a_named_error(tmp_path):
    home = tmp_path / "home"
    (home / "metadata").mkdir(parents=True)
    (home / "metadata").chmod(0)
    try:
        _refused_home(tmp_path, home, f"{home / 'metadata'}: its owner cannot read")
    finally:
        (home / "metadata").chmod(0o700)


def test_a_home_writable_by_others_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    _refused_home(tmp_path, home, "writable by group or others (mode 0777)")
    assert not (home / "metadata").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a home to another user needs root")
def test_a_home_owned_by_another_user_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    _refused_home(tmp_path, home, f"owned by uid {NOBODY}")
    assert not (home / "metadata").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize(
    "how", ["parent_other_owner", "parent_world_writable", "link_of_other", "final_link"]
)
def test_a_home_whose_parents_others_control_is_refused(tmp_path, how):
    """Whoever can rename a parent of the home, or re-point a link on its way, can swap the
    home for one of their own after the check: refused, named, nothing created."""
    if how == "parent_other_owner":
        parent = tmp_path / "theirs"
        parent.mkdir()
        os.chown(parent, NOBODY, NOBODY)
        home, named = parent / "home", f"{parent} (a parent of {parent / 'home'}"
    elif how == "parent_world_writable":
        parent = tmp_path / "open"
        parent.mkdir()
        parent.chmod(0o777)
        (parent / "a").mkdir()
        home, named = parent / "a" / "home", "without the sticky bit (mode 0777)"
    elif how == "final_link":  # ours, into a directory whose owner can swap what it holds
        theirs = tmp_path / "theirs"
        (theirs / "home").mkdir(parents=True)
        os.chown(theirs, NOBODY, NOBODY)
        home = tmp_path / "link"
        home.symlink_to("theirs/home")
        named = f"{theirs} (a parent of {home}"
    else:
        sticky = tmp_path / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        (tmp_path / "target").mkdir()
        link = sticky / "link"
        link.symlink_to(tmp_path / "target")
        os.lchown(link, NOBODY, NOBODY)
        home, named = link / "home", f"{link} (on the way to {link / 'home'}"
    with pytest.raises(HomeError, match=re.escape(named)):
        check_home(home)
    _refused_home(tmp_path, home, named)
    assert not home.exists() or not list(home.iterdir())
    with pytest.raises(HomeError, match=re.escape(named)):
        check_home(Path(f"{home}/"))  # the same with a trailing slash
    with pytest.raises(HomeError, match=re.escape(named)):
        check_config_file(home / "etc" / "comminsight.conf")


def test_a_home_behind_sticky_directories_and_own_links_passes(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "real" / "home").mkdir(parents=True)
    (tmp_path / "via").symlink_to("sticky/real/../real")
    (tmp_path / "loop").symlink_to("loop")
    check_home(tmp_path / "via" / "home")
    check_home(tmp_path / "via" / "not-yet" / "home")  # created by the Agent, 0700
    with pytest.raises(HomeError, match="symbolic link"):
        check_home(tmp_path / "loop" / "home")


@pytest.mark.parametrize(
    "sub", ["metadata", "metadata/hangs", "metadata/slave", "semantics/step", "shms/quarantine"]
)
def test_a_symlinked_directory_inside_the_home_is_refused(tmp_path, sub):
    home = tmp_path / "home"
    (home / sub).parent.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / sub).symlink_to(elsewhere)
    _refused_home(tmp_path, home, "is a symbolic link")
    assert not list(elsewhere.iterdir())  # no lock was taken through it


@pytest.mark.parametrize("how", ["other_owner", "writable"])
def test_a_config_file_others_control_is_refused(tmp_path, how):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True)
    conf = home / "etc" / "comminsight.conf"
    conf.write_text("COMMINSIGHT_AGENT_LOG_LEVEL=debug\n")
    if how == "writable":
        conf.chmod(0o666)
        named = "writable by group or others"
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(conf, NOBODY, NOBODY)
        named = f"owned by uid {NOBODY}"
    with pytest.raises(HomeError, match=re.escape(str(conf))):
        check_config_file(conf)
    _refused_home(tmp_path, home, named, code=2)


def test_a_trusted_home_passes_the_checks(tmp_path):
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True)
    (home / "etc" / "comminsight.conf").write_text("")
    check_home(home)
    check_config_file(home / "etc" / "comminsight.conf")


# ---- templates -------------------------------------------------------------------------------


def test_a_non_utf8_template_is_named_and_the_agent_serves_on(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "broken.yaml").write_bytes(b"name: \xff\xfe\n")
    agent = Agent(tmp_path / "home", COMMINSIGHT_SEMANTIC_TEMPLATE_DIRS=str(templates))
    try:
        agent.wait_ready()
        text = agent.text()
        assert f"{templates / 'broken.yaml'}: not UTF-8 text" in text, text
        no_traceback(text)
    finally:
        agent.stop()
    logs = tmp_path / "logs"
    logs.mkdir()
    out = forked_python.run(
        [
            sys.executable,
            "-m",
            "comminsight.cli",
            "steps",
            str(logs),
            "--templates",
            str(templates),
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert f"{templates / 'broken.yaml'}: not UTF-8 text" in out.stderr, out.stderr
    no_traceback(out.stderr)


# ---- the Archiver and links ------------------------------------------------------------------


def _archiver(home: Path) -> Archiver:
    return Archiver(home, LocalDirectoryProvider(home.parent / "archive"), sleep=lambda s: None)


def test_a_symlinked_segment_is_refused_named_counted_and_not_archived(tmp_path):
    home = tmp_path / "home"
    logs = home / "inspector_logs"
    logs.mkdir(parents=True)
    secret = tmp_path / "root-only.txt"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    (logs / "rank0.0001.jsonl").write_text('{"ok": 1}\n')
    (logs / "rank1.0001.jsonl").symlink_to(secret)
    archiver = _archiver(home)
    report = archiver.run_once()
    assert report.uploaded_files == 1 and not report.failed_files  # the real one went
    archived = sorted(p.name for p in (tmp_path / "archive").rglob("*.zst"))
    assert archived == ["rank0.0001.jsonl.zst"]
    assert archiver.refused() == {"inspector_logs/rank1.0001.jsonl": "is a symbolic link"}
    assert archiver.local.refused_total == 1
    archiver.run_once()  # seen again: still refused, counted once
    assert archiver.local.refused_total == 1
    (family,) = list(archiver.collect())
    assert family.samples[0].value == 1


def test_a_segment_swapped_for_a_link_after_the_scan_is_refused_when_opened(tmp_path):
    home = tmp_path / "home"
    logs = home / "inspector_logs"
    logs.mkdir(parents=True)
    segment = logs / "rank0.0001.jsonl"
    segment.write_text('{"ok": 1}\n')
    archiver = _archiver(home)
    (pending,) = archiver._pending()
    segment.unlink()
    segment.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("not yours\n")
    uploader = ZstdUploader(archiver.provider, 3, time.time_ns)
    assert archiver._upload_with_retries(uploader, pending, PassReport())
    assert not list((tmp_path / "archive").rglob("*.zst"))
    assert "symbolic link" in archiver.refused()["inspector_logs/rank0.0001.jsonl"]
    assert archiver.last_error is None  # a refusal, not an upload failure to retry


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_segment_owned_by_another_user_is_refused_and_named_in_health(tmp_path):
    from comminsight.agent.node.service import AgentService

    home = tmp_path / "home"
    logs = home / "inspector_logs"
    logs.mkdir(parents=True)
    planted = logs / "rank0.0001.jsonl"
    planted.write_text('{"ok": 1}\n')
    os.chown(planted, NOBODY, NOBODY)
    settings = msgspec.convert(
        {"home": str(home), "semantic_enable": False, "common_archive_url": str(tmp_path / "a")},
        ConfigV1,
    )
    service = AgentService(settings)
    try:
        service.archiver.run_once()
        reasons = service.health().reasons
        assert any(str(planted) in r and f"owned by uid {NOBODY}" in r for r in reasons), reasons
        assert "comminsight_archive_files_refused_total 1.0" in service.metrics.render().decode()
        assert not list((tmp_path / "a").rglob("*.zst"))
    finally:
        service.producers.close()


def _one_segment_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "inspector_logs").mkdir(parents=True)
    (home / "inspector_logs" / "rank0.0001.jsonl").write_text('{"ok": 1}\n')
    return home


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_shared_archive_directory_another_user_prepared_is_not_written_into(tmp_path):
    # a shared mount (mode 1777): another user made the Agent's directories there first and
    # planted a link at the temporary name to a root-only file, and a FIFO at the final name
    home = _one_segment_home(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    planted = shared / "n1" / "inspector_logs"
    planted.mkdir(parents=True)
    for d in (shared / "n1", planted):
        os.chown(d, NOBODY, NOBODY)
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    victim.chmod(0o600)
    (planted / "rank0.0001.jsonl.zst.uploading").symlink_to(victim)
    os.mkfifo(planted / "rank0.0001.jsonl.zst")
    archiver = Archiver(home, LocalDirectoryProvider(shared), prefix="n1", sleep=lambda s: None)
    report = archiver.run_once()  # returns: no open() waits on the FIFO
    assert report.uploaded_files == 0 and report.failed_files
    assert victim.read_text() == "root only\n"
    error = archiver.last_error
    assert error is not None and f"{shared / 'n1'}: is owned by uid {NOBODY}" in error.message
    assert archiver.refused() == {}  # the segment itself is fine: it waits for a usable archive


def test_links_and_fifos_in_the_archive_are_replaced_never_followed_or_waited_on(tmp_path):
    home = _one_segment_home(tmp_path)
    archive = tmp_path / "archive"
    objects = archive / "inspector_logs"
    objects.mkdir(parents=True, mode=0o700)
    archive.chmod(0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (objects / "rank0.0001.jsonl.zst.uploading").symlink_to(victim)
    os.mkfifo(objects / "rank0.0001.jsonl.zst", 0o600)
    archiver = _archiver(home)
    report = archiver.run_once()
    assert report.uploaded_files == 1 and not report.failed_files
    assert victim.read_text() == "keep\n"
    final = objects / "rank0.0001.jsonl.zst"
    assert final.is_file() and not final.is_symlink()
    assert not (objects / "rank0.0001.jsonl.zst.uploading").exists()


def test_a_symlinked_directory_in_the_archive_is_refused_by_name(tmp_path):
    home = _one_segment_home(tmp_path)
    archive = tmp_path / "archive"
    archive.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (archive / "inspector_logs").symlink_to(elsewhere)
    archiver = _archiver(home)
    report = archiver.run_once()
    assert report.uploaded_files == 0
    assert not list(elsewhere.iterdir())
    message = archiver.last_error.message
    assert f"{archive / 'inspector_logs'}: not a directory of this Agent" in message


# ---- what the Agent creates ------------------------------------------------------------------


def test_files_the_agent_creates_are_0600_and_directories_0700(tmp_path):
    home = tmp_path / "home"
    (home / "shms").mkdir(parents=True, mode=0o700)
    (home / "shms" / "garbage.shm").write_bytes(b"\0" * 64)  # quarantined, with a .reason
    old = os.umask(0o022)  # the Agent must not depend on the umask it inherits
    try:
        agent = Agent(home)
    finally:
        os.umask(old)
    try:
        agent.wait_ready()
        wait_until(lambda: list(home.rglob("*.reason")), DEADLINE_S, lambda: agent.text()[-3000:])
    finally:
        agent.stop()
    assert (home / "metadata" / "agent.lock").exists()
    # everything but the test's own file (moved to quarantine/ by the Agent)
    created = [p for p in home.rglob("*") if p.name != "garbage.shm"]
    assert any(p.name.endswith(".reason") for p in created)
    wrong = {
        str(p.relative_to(home)): oct(p.lstat().st_mode & 0o777)
        for p in created
        if not p.is_symlink()
        and (p.lstat().st_mode & 0o777) != (0o700 if p.is_dir() else 0o600)
        and not p.is_fifo()
    }
    fifos = [p for p in created if p.is_fifo()]
    assert all(p.lstat().st_mode & 0o077 == 0 for p in fifos), fifos
    assert not wrong, wrong


# ---- a peer without the token ------------------------------------------------------------------


def _register(channel, node: str, token: str) -> bytes:
    request = pb.RegisterRequest(
        protocol_version=pb.PROTOCOL_VERSION_1,
        node=pb.NodeIdentity(node_name=node, host="good-host", comminsight_home="/h"),
        stream_epoch=secrets.randbits(64) | 1,
    )
    register = channel.unary_unary(
        "/comminsight.agent_master_slave.v1.AgentMaster/Register",
        request_serializer=None,
        response_deserializer=None,
    )
    return register(
        request.SerializeToString(), metadata=(("authorization", f"Bearer {token}"),), timeout=10
    )


def test_an_unauthenticated_registration_claiming_a_live_node_changes_nothing_of_it(tmp_path):
    grpc_address = f"127.0.0.1:{free_port()}"
    home = tmp_path / "master"
    home.mkdir()
    master = AgentProc(
        home,
        "master",
        "master",
        f"127.0.0.1:{free_port()}",
        {"COMMINSIGHT_AGENT_MASTER_LISTEN": grpc_address, "COMMINSIGHT_SEMANTIC_ENABLE": "0"},
    ).start()
    try:
        master.wait_ready()
        with grpc.insecure_channel(grpc_address) as channel:
            _register(channel, "node-0", TOKEN)
            before = next(
                n for n in master.get("/api/v1/nodes").json()["items"] if n["node_name"] == "node-0"
            )
            for token in ("guess", ""):
                with pytest.raises(grpc.RpcError) as refused:
                    _register(channel, "node-0", token)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        nodes = {n["node_name"]: n for n in master.get("/api/v1/nodes").json()["items"]}
        after = nodes["node-0"]
        assert after["state"] == before["state"] == "connected"
        assert after["rejects_total"] == 0 and after["last_reject"] is None
        assert sorted(nodes) == ["master", "node-0"]
        health = master.get("/api/v1/health").json()
        assert any(
            "2 registrations or streams without the token refused" in r for r in health["reasons"]
        ), health["reasons"]
        assert master.log_text().count("refused a peer without the token") == 1  # rate-limited
    finally:
        master.stop()


def _memory_kib(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (the peak so far) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


FLOOD_CALLS = 64  # concurrent registrations without a token
FLOOD_ROUNDS = 8
FLOOD_MESSAGE = b"\x32\xff\xff\xff\x01" + b"A" * (3_900 * 1024)  # under max_batch_bytes


async def _flood(address: str) -> dict[str, int]:
    """FLOOD_CALLS x FLOOD_ROUNDS Register calls of 3.9 MB without a token; their codes."""
    codes: dict[str, int] = {}
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        register = channel.unary_unary(
            "/comminsight.agent_master_slave.v1.AgentMaster/Register",
            request_serializer=None,
            response_deserializer=None,
        )

        async def caller() -> None:
            for _ in range(FLOOD_ROUNDS):
                try:
                    await register(FLOOD_MESSAGE, timeout=DEADLINE_S)
                    codes["OK"] = codes.get("OK", 0) + 1
                except grpc.aio.AioRpcError as e:
                    codes[e.code().name] = codes.get(e.code().name, 0) + 1

        await asyncio.gather(*(caller() for _ in range(FLOOD_CALLS)))
    return codes


def test_a_flood_of_large_registrations_without_a_token_leaves_the_master_memory_bounded(
    tmp_path,
):
    grpc_address = f"127.0.0.1:{free_port()}"
    home = tmp_path / "master"
    home.mkdir()
    master = AgentProc(
        home,
        "master",
        "master",
        f"127.0.0.1:{free_port()}",
        {"COMMINSIGHT_AGENT_MASTER_LISTEN": grpc_address, "COMMINSIGHT_SEMANTIC_ENABLE": "0"},
    ).start()
    try:
        master.wait_ready()
        pid = master.proc.pid
        before_kib = _memory_kib(pid, "VmRSS")
        codes = asyncio.run(_flood(grpc_address))
        calls = FLOOD_CALLS * FLOOD_ROUNDS
        assert codes == {"UNAUTHENTICATED": calls}, codes
        # ~2 GB were sent; refused from their metadata, none of it was buffered whole
        growth_mib = (_memory_kib(pid, "VmHWM") - before_kib) / 1024
        assert growth_mib < 300, f"the master's peak RSS grew {growth_mib:.0f} MiB"
        metrics = master.get("/metrics").text
        assert metric(metrics, "comminsight_master_unauthenticated_total") == calls
        with grpc.insecure_channel(grpc_address) as channel:  # a slave with the token still joins
            pb.RegisterResponse.FromString(_register(channel, "node-0", TOKEN))
        nodes = {n["node_name"]: n for n in master.get("/api/v1/nodes").json()["items"]}
        assert nodes["node-0"]["state"] == "connected"
        no_traceback(master.log_text())
    finally:
        master.stop()


# ---- clients that send requests and never read the answers -------------------------------------


PIPELINED = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * 64


def test_connections_that_pipeline_and_never_read_are_closed_and_the_api_answers(tmp_path):
    raise_own_nofile(2048)
    agent = Agent(
        tmp_path / "home",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
        COMMINSIGHT_AGENT_HTTP_WRITE_TIMEOUT_S="1",
    )
    attackers: list[socket.socket] = []
    try:
        agent.wait_ready()
        attackers = open_connections(agent.listen, 300)  # more than the 256 allowed
        for s in attackers:
            s.sendall(PIPELINED)  # and never a byte read back

        def answers():
            h = agent.health()
            return h is not None and h.status_code == 200

        wait_until(answers, DEADLINE_S, lambda: f"the API stopped answering:\n{agent.text()}")

        def closures():
            text = agent.get("/metrics").text
            stalled = metric(
                text, "comminsight_agent_http_connections_closed_total", reason="write_stalled"
            ) + metric(
                text, "comminsight_agent_http_connections_closed_total", reason="limit_stalled"
            )
            return stalled >= len(attackers) - 256 and text

        text = wait_until(closures, DEADLINE_S, lambda: "stalled connections were not counted")
        assert (
            metric(text, "comminsight_agent_http_connections_closed_total", reason="write_stalled")
            > 0
        ), "no connection was closed for not reading its answers"
        assert agent.get("/api/v1/node").status_code == 200  # nothing else lost
        no_traceback(agent.text())
    finally:
        close_all(attackers)
        agent.stop()


# ---- a full disk under the Semantic Engine -----------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_engine_survives_a_full_disk_names_it_in_health_and_writes_once_space_returns(
    small_disk, monkeypatch
):
    from engine_inputs import BUCKETS, COMMS, GPU, TEMPLATES, batches, ddp_slots

    from comminsight.agent.steps import summary_disk
    from comminsight.agent.steps.health import engine_health
    from comminsight.agent.steps.semantic_hook import SemanticEngineHook
    from comminsight.semantic.live_cut import FIRST_OPS

    monkeypatch.setattr(summary_disk, "STORAGE_RETRY_S", 0.2)
    home = small_disk / "home"
    hook = SemanticEngineHook(home, TEMPLATES, checkpoint_s=0.5)
    hook.live_cut.interval_s = 0.1  # no more ops come: the Steps settle by the clock
    filler = small_disk / "filler"
    try:
        with open(filler, "wb", buffering=0) as f:  # full before the engine writes a Step
            with pytest.raises(OSError) as full:
                while True:
                    f.write(b"\0" * 65536)
            assert full.value.errno == errno.ENOSPC
        slots = ddp_slots(4 * FIRST_OPS // len(BUCKETS))  # past the cut's first placement
        for part in batches(slots, 100):
            hook.feed(GPU, part, COMMS)
        # the worker keeps the summaries, then notes the fault: wait for both
        wait_until(
            lambda: hook.pending_summaries()[0] > 0 and hook.storage_fault is not None,
            DEADLINE_S,
            "no Step waited for the disk",
        )
        assert hook.running and hook.storage_fault is not None
        _, reasons = engine_health(hook)
        assert any(
            "cannot write" in r and "No space left on device" in r and "wait in memory" in r
            for r in reasons
        ), reasons
        assert not hook.counts.failures  # a full disk is not a failure of the engine
        filler.unlink()  # space returns
        wait_until(
            lambda: hook.storage_fault is None and hook.pending_summaries()[0] == 0,
            DEADLINE_S,
            lambda: f"the waiting Steps were never written: {hook.storage_fault}",
        )
        assert hook.running and hook.steps_written > 0
        (partial,) = (home / "semantics" / "step").glob("live-*.jsonl.partial")
        lines = partial.read_bytes().split(b"\n")
        assert lines[-1] == b""  # no torn line
        indices = [msgspec.json.decode(line)["step_index"] for line in lines[:-1]]
        assert len(indices) == hook.steps_written
        assert indices == sorted(set(indices))  # each Step once, in order
    finally:
        hook.stop()
        filler.unlink(missing_ok=True)
