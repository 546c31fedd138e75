"""The `comminsight` CLI and whatever listens on the agent's port.

A change's token goes to a loopback port only when the process listening there runs as the
CLI's user or root: a real HTTP server run as nobody (uid 65534) on a free loopback port never
sees it, and the CLI names that uid; the same server run as root gets it. An answer that is
not the protocol's model (`{}`, not JSON, a wrong type) is a named error, never a traceback.
The /proc/net/tcp parser is checked on crafted text.
"""

from __future__ import annotations

import http.server
import importlib
import ipaddress
import json
import os
import pkgutil
import shutil
import socket
import subprocess
import sys
import threading

import pytest
from cli_in_process import run_cli
from home_files import FIXTURES

import comminsight_client.api as api
from comminsight.cli import client, local_listener
from comminsight.cli.client import answer_model
from comminsight.cli.local_listener import Listener
from comminsight_gen.models import agent_master_api_v1

TOKEN = "s3cret-token"
REPORT_ID = "0123456789abcdef"
NOBODY = 65534
DEADLINE_S = 30
HANG_REPORT = (FIXTURES / "hang-report" / "v1" / "valid" / "rank-not-joined-open.json").read_bytes()

# Answers every request with one status and the body read from stdin; prints
# "METHOD PATH auth=..." for each.
SERVER = r"""
import http.server, socket, sys
host, status, body = sys.argv[1], int(sys.argv[2]), sys.stdin.buffer.read()

class Server(http.server.HTTPServer):
    address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        print(f"{self.command} {self.path} auth={self.headers.get('Authorization')}", flush=True)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass

server = Server((host, 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs a server as another user: root only")


class Server:
    """The SERVER script as a process (as `uid` when given) on a free port of `host`."""

    def __init__(self, body: bytes, status: int = 200, uid: int | None = None, host="127.0.0.1"):
        command = [sys.executable, "-c", SERVER, host, str(status)]
        if uid is not None:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.skip("setpriv (util-linux) is not installed")
            command = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command]
        self.host = host
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",  # one nobody may enter
        )
        self.process.stdin.write(body)
        self.process.stdin.close()
        first = self.process.stdout.readline().decode()
        if not first.strip().isdigit():
            self.process.kill()
            error = self.process.stderr.read().decode()
            raise AssertionError(f"the server did not start: {first}{error}")
        self.port = int(first)
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"
        self.requests: list[str] = []

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.requests = self.process.stdout.read().decode().splitlines()
        self.process.wait(timeout=DEADLINE_S)
        self.process.stdout.close()
        self.process.stderr.close()


class LocalServer:
    """What the SERVER script does, in a thread of this process (so as this user, whom the
    guard lets have the token): no interpreter to start for each answer a test wants."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        seen: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append(f"{self.command} {self.path} auth={self.headers.get('Authorization')}")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._seen = seen
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(DEADLINE_S)
        self.requests = list(self._seen)


def cli_environment(**env: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    environment.update(COMMINSIGHT_HOME="/nonexistent", COLUMNS="200", **env)
    return environment


def cli(*args: str, url: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """`comminsight ARGS` run in this process: its stdout, stderr and exit status. The guard
    and the decoding are the CLI's code whichever process runs it; cli_process is the real
    process, for the tests that also stand for its exit status and streams."""
    return run_cli([*args, *(["--url", url] if url else [])], cli_environment(**env))


def cli_process(*args: str, url: str | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "comminsight.cli", *args, *(["--url", url] if url else [])],
        capture_output=True,
        text=True,
        env=cli_environment(**env),
        timeout=DEADLINE_S,
    )


def resolve(
    server: Server, *extra: str, process: bool = False, **env: str
) -> subprocess.CompletedProcess:
    env.setdefault("COMMINSIGHT_AGENT_TOKEN", TOKEN)
    run = cli_process if process else cli
    return run("hangs", "resolve", REPORT_ID, "--note", "x", *extra, url=server.url, **env)


def no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr, out.stderr
    assert TOKEN not in out.stdout + out.stderr


# ---- the token and whoever listens on the port ---------------------------------------------


@as_root
def test_a_listener_of_another_user_never_gets_the_token():
    with Server(b"{}", uid=NOBODY) as server:
        out = resolve(server)
    assert out.returncode == 1, out.stderr
    assert (
        f"comminsight: not sending COMMINSIGHT_AGENT_TOKEN to 127.0.0.1:{server.port}: the "
        f"process listening there runs as uid {NOBODY} (nobody), not as this user or root"
    ) in out.stderr
    assert "hint:" in out.stderr and f"sport = :{server.port}" in out.stderr
    no_traceback(out)
    assert server.requests == []  # nothing was sent at all


@as_root
def test_the_local_agents_address_a_token_flag_and_a_host_name_are_guarded_alike():
    """Without --url (COMMINSIGHT_AGENT_LISTEN, as in the report), with --token, `localhost`."""
    with Server(b"{}", uid=NOBODY) as server:
        by_listen = cli(
            "hangs",
            "resolve",
            REPORT_ID,
            COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{server.port}",
            COMMINSIGHT_AGENT_TOKEN=TOKEN,
        )
        by_flag = cli("incidents", "resolve", "x", "--token", TOKEN, url=server.url)
        by_name = cli(
            "hangs", "resolve", REPORT_ID, "--token", TOKEN, url=f"http://localhost:{server.port}"
        )
    assert "not sending COMMINSIGHT_AGENT_TOKEN to 127.0.0.1:" in by_listen.stderr
    assert "not sending --token to 127.0.0.1:" in by_flag.stderr
    assert f"not sending --token to localhost:{server.port}" in by_name.stderr
    for out in (by_listen, by_flag, by_name):
        assert out.returncode == 1 and f"uid {NOBODY} (nobody)" in out.stderr, out.stderr
        no_traceback(out)
    assert server.requests == []


@as_root
def test_a_listener_of_another_user_on_ipv6_loopback_never_gets_the_token():
    try:
        listening = Server(b"{}", uid=NOBODY, host="::1")
    except AssertionError as e:
        pytest.skip(f"cannot listen on ::1 here: {e}")
    with listening as server:
        out = resolve(server)
    assert out.returncode == 1
    assert f"to [::1]:{server.port}: the process listening there runs as uid {NOBODY}" in (
        out.stderr
    )
    assert server.requests == []


def test_a_listener_of_this_user_gets_the_token():
    with LocalServer(HANG_REPORT) as server:  # as this user (root where the others run)
        out = resolve(server, process=True)
    assert out.returncode == 0, out.stderr
    report = json.loads(HANG_REPORT)
    assert f"resolved {report['report_id']}" in out.stdout
    assert server.requests == [f"POST /api/v1/hangs/{REPORT_ID}/resolve auth=Bearer {TOKEN}"], (
        server.requests
    )


@as_root
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_in_the_environment_never_gets_the_token(variable):
    """A proxy is never checked like the agent's port: the token goes straight to the agent,
    whatever proxy the environment names (here another user's port on this host)."""
    with Server(b"{}", uid=NOBODY) as proxy, LocalServer(HANG_REPORT) as agent:
        out = resolve(agent, **{variable: proxy.url, "NO_PROXY": "", "no_proxy": ""})
    assert out.returncode == 0, out.stderr
    assert proxy.requests == []
    assert agent.requests == [f"POST /api/v1/hangs/{REPORT_ID}/resolve auth=Bearer {TOKEN}"]


def test_nothing_listening_goes_ahead_and_fails_on_its_own():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = cli_process(
        "hangs", "resolve", REPORT_ID, url=f"http://127.0.0.1:{port}", COMMINSIGHT_AGENT_TOKEN=TOKEN
    )
    assert out.returncode == 1 and "cannot reach the agent" in out.stderr, out.stderr
    assert "not sending" not in out.stderr
    no_traceback(out)


# ---- answers that are not the model -------------------------------------------------------

NOT_JSON = b"<html>not an agent</html>"
WRONG_TYPE = json.dumps({**json.loads(HANG_REPORT), "threshold_ms": "soon"}).encode()


@pytest.mark.parametrize(
    ("command", "path", "model"),
    [
        (
            ["hangs", "resolve", REPORT_ID, "--note", "x"],
            f"/api/v1/hangs/{REPORT_ID}/resolve",
            "a HangReport",
        ),
        (["archive", "flush"], "/api/v1/archive", "an ArchiveStatus"),
        (["status"], "/api/v1/health", "a Health"),
        (["hangs"], "/api/v1/hangs", "a HangReportList"),
        (["comms"], "/api/v1/communicators", "a CommunicatorPage"),
    ],
)
@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"{}", "Object missing required field"), (NOT_JSON, "JSON is malformed")],
)
def test_an_answer_that_is_not_the_model_is_named(command, path, model, body, reason):
    with LocalServer(body) as server:
        out = cli(*command, url=server.url, COMMINSIGHT_AGENT_TOKEN=TOKEN)
    assert out.returncode == 1, out.stdout + out.stderr
    no_traceback(out)
    assert (
        f"comminsight: {server.url}{path} answered something that is not {model}: {reason}"
    ) in out.stderr
    assert "hint:" in out.stderr


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        # decodes into the generated client's model, but not the protocol's types
        (200, WRONG_TYPE, "not a HangReport: Expected `int`, got `str` - at `$.threshold_ms`"),
        (404, b"{}", "not an API error (it answered 404): Object missing required field"),
        (204, b"", "not a HangReport: 204 is no status this operation answers with"),
        (299, HANG_REPORT, "not a HangReport: 299 is not a valid HTTPStatus"),
        (200, b"[" * 100_000 + b"]" * 100_000, "not a HangReport"),
        # a field name of the server's choosing, with an escape sequence: shown escaped
        (200, b'{"\\u001b[31m": 1}', "unknown field `\\x1b[31m`"),
    ],
)
def test_a_malformed_resolve_answer_is_named(status, body, says):
    with LocalServer(body, status=status) as server:
        out = resolve(server)
    assert out.returncode == 1, out.stdout + out.stderr
    no_traceback(out)
    assert says in out.stderr
    assert "\x1b" not in out.stderr  # what the server sent is never a terminal's command


def test_a_well_formed_error_is_still_the_agents_error():
    error = {"code": "not_found", "message": "no hang report 0123456789abcdef", "details": []}
    with LocalServer(json.dumps(error).encode(), status=404) as server:
        out = resolve(server)
    assert out.returncode == 1 and "agent answered 404 not_found" in out.stderr, out.stderr


# ---- /proc/net/tcp --------------------------------------------------------------------------

little_endian = pytest.mark.skipif(
    sys.byteorder != "little", reason="the crafted rows are a little-endian host's"
)
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 1 1 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0
   2: 0100007F:4A9E 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0
   3: 0200007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4 1 0
garbage
   4: 0100007F4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     5        0 5 1 0
   5: GGGGGGGG:4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     6        0 6 1 0
   6: 0100007:4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     7        0 7 1 0
   7: 0100007F:4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000    -1        0 8 1 0
   8: 0100007F:4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000   abc        0 9 1 0
   9: 0100007F:4A9E 00000000:0000 0A
  10: 0100007F:+A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     8        0 9 1 0
  11: 0100007F:4A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000 99999999999 0 1 1 0
\x00\xff\u2603 0A 0A 0A 0A 0A 0A 0A
"""


def row6(n: int, local: str, state: str, uid: str) -> str:
    """A /proc/net/tcp6 row (its header is as wide as the rows: 160 characters)."""
    rest = "00000000:00000000 00:00000000 00000000"
    return f"{n:>4}: {local} {'0' * 32}:0000 {state} {rest} {uid:>5}        0 {n} 1 0"


TCP6 = "\n".join(
    [
        "  sl  local_address" + " " * 25 + "remote_address" + " " * 24 + "st tx_queue ... uid",
        row6(0, "00000000000000000000000001000000:4A9E", "0A", "1000"),  # ::1
        row6(1, "00000000000000000000000000000000:1F91", "0A", "1001"),  # ::
        row6(2, "0000000000000000FFFF00000100007F:0051", "0A", "1002"),  # ::ffff:127.0.0.1
        row6(3, "000000000000000000000000010000:4A9E", "0A", "1003"),  # 30 digits
        row6(4, "00000000000000000000000001000000:4A9E", "06", "1004"),  # TIME_WAIT
        row6(5, "00000000000000000000000001000000:4A9E", "0A", "0x10"),
    ]
)


def ip(text: str):
    return ipaddress.ip_address(text)


@little_endian
def test_the_parser_reads_listen_rows_and_skips_the_rest():
    assert local_listener.parse(TCP) == [
        Listener(ip("127.0.0.1"), 19102, 65534),
        Listener(ip("0.0.0.0"), 8080, 0),
        Listener(ip("127.0.0.2"), 80, 1001),
    ]
    assert local_listener.parse(TCP6) == [
        Listener(ip("::1"), 19102, 1000),
        Listener(ip("::"), 8081, 1001),
        Listener(ip("::ffff:127.0.0.1"), 81, 1002),
    ]
    assert local_listener.parse("") == [] and local_listener.parse("\n\n \t\n") == []


def test_the_parser_agrees_with_the_kernel():
    """A socket of this test listening on loopback: /proc says its address, port and uid."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = local_listener.listeners_for("127.0.0.1", port)
    assert found == [Listener(ip("127.0.0.1"), port, os.geteuid())]
    assert local_listener.listeners_for("127.0.0.1", port) == []  # closed


@little_endian
def test_reads_are_bounded_and_a_missing_file_adds_nothing(tmp_path, monkeypatch):
    first = tmp_path / "tcp"
    first.write_text(TCP)
    assert len(local_listener.read_listeners((str(first), str(tmp_path / "none")))) == 3
    monkeypatch.setattr(local_listener, "MAX_BYTES", len(TCP.splitlines()[0]) + 100)
    assert local_listener.read_listeners((str(first),)) == [Listener(ip("127.0.0.1"), 19102, 65534)]


def test_which_listeners_take_a_connection():
    def accepts(bound: str, target: str, port: int = 80) -> bool:
        return local_listener.accepts(Listener(ip(bound), 80, 0), ip(target), port)

    assert accepts("127.0.0.1", "127.0.0.1") and accepts("0.0.0.0", "127.0.0.1")
    assert accepts("::", "127.0.0.1") and accepts("::", "::1") and accepts("::1", "::1")
    assert accepts("::ffff:127.0.0.1", "127.0.0.1") and accepts("::ffff:0.0.0.0", "127.0.0.1")
    assert not accepts("127.0.0.2", "127.0.0.1") and not accepts("::1", "127.0.0.1")
    assert not accepts("0.0.0.0", "::1") and not accepts("127.0.0.1", "127.0.0.1", port=81)


def test_which_hosts_are_loopback():
    targets = local_listener.loopback_targets
    assert targets("127.0.0.1", 1) == [ip("127.0.0.1")]
    assert targets("127.1.2.3", 1) == [ip("127.1.2.3")]
    assert targets("::1", 1) == targets("[::1]", 1) == [ip("::1")]
    assert targets("0.0.0.0", 1) == [ip("127.0.0.1")] and targets("::", 1) == [ip("::1")]
    assert targets("::ffff:127.0.0.1", 1) == [ip("127.0.0.1")]
    assert targets("10.1.2.3", 1) == [] and targets("2001:db8::1", 1) == []
    assert targets("no-such-host.invalid", 1) == []
    assert targets("localhost", 1) and all(a.is_loopback for a in targets("localhost", 1))


def test_a_remote_host_reads_no_proc(monkeypatch):
    def refuse(*args):
        raise AssertionError("read /proc for a host that is not loopback")

    monkeypatch.setattr(local_listener, "read_listeners", refuse)
    assert local_listener.listeners_for("192.0.2.1", 19102) == []


def test_the_cli_checks_before_sending(monkeypatch):
    """The guard in-process: refused for a foreign uid, silent for this user, root, nothing."""

    def listening(uid):
        return lambda host, port: [Listener(ip("127.0.0.1"), port, uid)] if uid is not None else []

    monkeypatch.setattr(client.local_listener, "listeners_for", listening(NOBODY))
    with pytest.raises(client.AgentUnavailable, match=f"uid {NOBODY} \\(nobody\\)"):
        client.refuse_a_foreign_listener("http://127.0.0.1:19102", "COMMINSIGHT_AGENT_TOKEN")
    for uid in (os.geteuid(), 0, None):
        monkeypatch.setattr(client.local_listener, "listeners_for", listening(uid))
        client.refuse_a_foreign_listener("http://127.0.0.1:19102", "COMMINSIGHT_AGENT_TOKEN")


def test_every_endpoint_has_a_model_the_protocol_names():
    """`answer` names what it expected: each operation's 2xx model is one of the protocol's."""
    for tag in pkgutil.iter_modules(api.__path__):
        package = importlib.import_module(f"{api.__name__}.{tag.name}")
        for op in pkgutil.iter_modules(package.__path__):
            endpoint = importlib.import_module(f"{package.__name__}.{op.name}")
            model = answer_model(endpoint)
            assert model is str or hasattr(agent_master_api_v1, model.__name__), op.name
            assert callable(endpoint._get_kwargs) and callable(endpoint._build_response)
