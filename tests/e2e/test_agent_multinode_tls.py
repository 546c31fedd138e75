"""agent-master-slave over TLS: a throwaway CA (openssl CLI) signs the master's certificate;
a master and a slave as separate processes stream over TLS; the master's port refuses
plaintext; a slave without the CA, and one trusting another CA, are refused with errors that
name the setting to fix, while the good slave keeps streaming. With mutual TLS
(COMMINSIGHT_AGENT_TLS_CLIENT_CA) a slave must also present a certificate the master's client
CA signed: one without, and one signed by another CA, are refused in the handshake, each with
an error naming the setting."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import grpc
import msgspec
import pytest
from multinode_job import AgentProc, start_job
from ports import free_port
from waiting import wait_until

from comminsight.agent.main import multinode_problem
from comminsight.agent.master.grpc_service import AgentMasterServer
from comminsight.agent.slave.tls import SlaveTls, channel
from comminsight.agent.tls_files import TlsFileError
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.config_v1 import ConfigV1

REGISTER = "/comminsight.agent_master_slave.v1.AgentMaster/Register"


def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def make_ca(d: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is required to make the test certificates")
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=master",
        cwd=d,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
        cwd=d,
    )  # fmt: skip
    # slaves' client certificates: one signed by the CA the master trusts, one by another
    (d / "client.ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for ca in ("ca", "other-ca"):
        openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"client-{ca}.key", "-out", f"client-{ca}.csr", "-subj", "/CN=node-0",
            cwd=d,
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", f"client-{ca}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"client-{ca}.pem", "-days", "2", "-extfile", "client.ext",
            cwd=d,
        )  # fmt: skip
    return d


def _nodes(job) -> dict:
    return {n["node_name"]: n for n in job.master.get("/api/v1/nodes").json()["items"]}


def _connected_job(root, master_extra: dict, slave_extra: dict, what: str):
    """A master and one slave (node-0) with these settings, once the slave is connected."""
    job = start_job(
        root,
        1,
        master_extra=master_extra,
        slave_extra={**slave_extra, "COMMINSIGHT_SEMANTIC_ENABLE": "0"},
    )
    try:
        wait_until(
            lambda: _nodes(job).get("node-0", {}).get("state") == "connected",
            60,
            lambda: f"the {what} slave did not connect:\n{job.slaves[0].log_text()[-3000:]}",
        )
    except BaseException:
        job.stop()
        raise
    return job


def _server_tls(pki) -> dict:
    return {
        "COMMINSIGHT_AGENT_TLS_CERT": str(pki / "server.pem"),
        "COMMINSIGHT_AGENT_TLS_KEY": str(pki / "server.key"),
    }


@pytest.fixture(scope="module")
def tls_job(pki, tmp_path_factory):
    job = _connected_job(
        tmp_path_factory.mktemp("tls"),
        _server_tls(pki),
        {"COMMINSIGHT_AGENT_TLS_CA": str(pki / "ca.pem")},
        "TLS",
    )
    try:
        yield job
    finally:
        job.stop()


def _refused_while_the_good_slave_streams(job, name: str, extra: dict, message: str) -> None:
    """A slave `name` with these settings (and the right token: agent_env) is refused, says
    `message` in its log and health, never reaches the master's node list, and node-0 keeps
    streaming."""
    home = job.master.home.parent / name
    home.mkdir()
    extra = {"COMMINSIGHT_AGENT_MASTER_ADDR": job.grpc, "COMMINSIGHT_SEMANTIC_ENABLE": "0", **extra}
    bad = AgentProc(home, "slave", name, f"127.0.0.1:{free_port()}", extra).start()
    try:
        bad.wait_ready()
        wait_until(
            lambda: message in bad.log_text(),
            60,
            lambda: f"no clear TLS error in the slave's log:\n{bad.log_text()[-3000:]}",
        )
        health = bad.get("/api/v1/health").json()
        assert health["status"] == "degraded"
        assert any(message in r for r in health["reasons"]), health["reasons"]
        assert name not in _nodes(job)  # it never got past the handshake
        seen = _nodes(job)["node-0"]["last_seen_real_ns"]
        wait_until(
            lambda: _nodes(job)["node-0"]["last_seen_real_ns"] > seen,
            60,
            "the good slave's next heartbeat",
        )
        assert _nodes(job)["node-0"]["state"] == "connected"
    finally:
        bad.stop()


def _register(channel) -> grpc.RpcError:
    request = pb.RegisterRequest(
        protocol_version=pb.PROTOCOL_VERSION_1,
        node=pb.NodeIdentity(node_name="probe", host="elsewhere"),
        stream_epoch=secrets.randbits(64) | 1,
    )
    call = channel.unary_unary(REGISTER, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as refused:
        call(request.SerializeToString(), metadata=(("authorization", "Bearer wrong"),), timeout=10)
    return refused.value


def test_a_slave_streams_to_the_master_over_tls(tls_job, pki):
    job = tls_job
    node = _nodes(job)["node-0"]
    assert node["last_applied_batch_seq"] >= 1  # its full state, over TLS
    wait_until(  # and its heartbeats, on the same channel
        lambda: _nodes(job)["node-0"]["last_seen_real_ns"] > node["last_seen_real_ns"],
        60,
        "no heartbeat over TLS",
    )
    assert "TLS on" in job.master.log_text()
    # the port speaks only TLS: plaintext gets no answer from a handler, TLS with the CA does
    with grpc.insecure_channel(job.grpc) as plain:
        assert _register(plain).code() is grpc.StatusCode.UNAVAILABLE
    creds = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
    with grpc.secure_channel(job.grpc, creds) as tls:
        error = _register(tls)
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED and "wrong token" in error.details()


@pytest.mark.parametrize(
    ("ca", "message"),
    [
        (
            None,
            "serves TLS and this slave dials without it: set COMMINSIGHT_AGENT_TLS_CA",
        ),
        ("other-ca.pem", "does not verify against COMMINSIGHT_AGENT_TLS_CA="),
    ],
)
def test_a_slave_without_the_ca_is_refused_with_a_clear_error(tls_job, pki, ca, message):
    """The bad slave has the right token (agent_env): only TLS refuses it."""
    extra = {} if ca is None else {"COMMINSIGHT_AGENT_TLS_CA": str(pki / ca)}
    _refused_while_the_good_slave_streams(
        tls_job, "no-ca" if ca is None else "other-ca", extra, message
    )


# ---- mutual TLS: the master requires slaves' client certificates ----


@pytest.fixture(scope="module")
def mtls_job(pki, tmp_path_factory):
    job = _connected_job(
        tmp_path_factory.mktemp("mtls"),
        {**_server_tls(pki), "COMMINSIGHT_AGENT_TLS_CLIENT_CA": str(pki / "ca.pem")},
        {
            "COMMINSIGHT_AGENT_TLS_CA": str(pki / "ca.pem"),
            "COMMINSIGHT_AGENT_TLS_CERT": str(pki / "client-ca.pem"),
            "COMMINSIGHT_AGENT_TLS_KEY": str(pki / "client-ca.key"),
        },
        "mTLS",
    )
    try:
        yield job
    finally:
        job.stop()


def test_a_slave_with_a_certificate_the_client_ca_signed_streams(mtls_job, pki):
    job = mtls_job
    assert _nodes(job)["node-0"]["last_applied_batch_seq"] >= 1
    assert "TLS on, client certificates required" in job.master.log_text()
    # TLS that trusts the master but shows no certificate is closed before any handler runs:
    # the token is never read
    creds = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
    with grpc.secure_channel(job.grpc, creds) as tls:
        assert _register(tls).code() is grpc.StatusCode.UNAVAILABLE
    # with the slave's certificate the handshake passes and the token decides
    creds = grpc.ssl_channel_credentials(
        (pki / "ca.pem").read_bytes(),
        (pki / "client-ca.key").read_bytes(),
        (pki / "client-ca.pem").read_bytes(),
    )
    with grpc.secure_channel(job.grpc, creds) as tls:
        error = _register(tls)
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED and "wrong token" in error.details()


@pytest.mark.parametrize(
    ("client", "message"),
    [
        (None, "requires a client certificate (COMMINSIGHT_AGENT_TLS_CLIENT_CA there): set "),
        ("other-ca", "refused this slave's certificate COMMINSIGHT_AGENT_TLS_CERT="),
    ],
)
def test_a_slave_without_a_trusted_client_certificate_is_refused_clearly(
    mtls_job, pki, client, message
):
    extra = {"COMMINSIGHT_AGENT_TLS_CA": str(pki / "ca.pem")}
    if client is not None:
        extra["COMMINSIGHT_AGENT_TLS_CERT"] = str(pki / f"client-{client}.pem")
        extra["COMMINSIGHT_AGENT_TLS_KEY"] = str(pki / f"client-{client}.key")
    _refused_while_the_good_slave_streams(mtls_job, f"client-{client or 'none'}", extra, message)


@pytest.mark.parametrize(
    ("mode", "settings", "problem"),
    [
        (
            "master",
            {"agent_tls_client_ca": "ca.pem"},
            "COMMINSIGHT_AGENT_TLS_CLIENT_CA needs COMMINSIGHT_AGENT_TLS_CERT",
        ),
        (
            "slave",
            {"agent_tls_cert": "client-ca.pem", "agent_tls_key": "client-ca.key"},
            "it needs COMMINSIGHT_AGENT_TLS_CA",
        ),
        ("slave", {"agent_tls_cert": "client-ca.pem"}, "go together"),
        (
            "master",
            {
                "agent_tls_cert": "server.pem",
                "agent_tls_key": "server.key",
                "agent_tls_client_ca": "missing.pem",
            },
            "COMMINSIGHT_AGENT_TLS_CLIENT_CA=",
        ),
    ],
)
def test_tls_settings_that_cannot_work_are_named_at_start(pki, mode, settings, problem):
    values = {k: str(pki / v) for k, v in settings.items()}
    config = msgspec.convert(
        {
            "agent_mode": mode,
            "agent_token": "t",
            "agent_master_addr": "127.0.0.1:1" if mode == "slave" else "",
            **values,
        },
        ConfigV1,
    )
    found = multinode_problem(config)
    assert found is not None and problem in found, found


def _odd_file(tmp_path: Path, kind: str) -> str:
    """A path a PEM setting may name that holds no certificate to read."""
    path = tmp_path / kind
    if kind == "device":
        return "/dev/zero"  # endless
    if kind == "fifo":
        os.mkfifo(path, 0o600)  # a plain open() waits for a writer for ever
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(2 << 20)
    return str(path)


ODD_FILES = [
    ("device", "is a device, not a regular file"),
    ("fifo", "is a FIFO, not a regular file"),
    ("directory", "is a directory, not a regular file"),
    ("huge", "is 2097152 bytes, more than the 1048576 allowed"),
    ("missing", "cannot be read: No such file or directory"),
]


@pytest.mark.parametrize(("kind", "why"), ODD_FILES)
@pytest.mark.parametrize("key", ["cert", "key", "client_ca"])
def test_a_master_tls_file_that_is_not_a_pem_file_is_named_with_its_key(
    pki, tmp_path, kind, why, key
):
    settings = {
        "agent_tls_cert": str(pki / "server.pem"),
        "agent_tls_key": str(pki / "server.key"),
        "agent_tls_client_ca": str(pki / "ca.pem"),
    }
    odd = settings[f"agent_tls_{key}"] = _odd_file(tmp_path, kind)
    config = msgspec.convert({"agent_mode": "master", "agent_token": "t", **settings}, ConfigV1)
    assert multinode_problem(config) == f"COMMINSIGHT_AGENT_TLS_{key.upper()}={odd}: {why}"


@pytest.mark.parametrize(("kind", "why"), ODD_FILES)
def test_a_slave_ca_that_is_not_a_pem_file_is_named_with_its_key(tmp_path, kind, why):
    odd = _odd_file(tmp_path, kind)
    config = msgspec.convert(
        {
            "agent_mode": "slave",
            "agent_token": "t",
            "agent_master_addr": "127.0.0.1:1",
            "agent_tls_ca": odd,
        },
        ConfigV1,
    )
    assert multinode_problem(config) == f"COMMINSIGHT_AGENT_TLS_CA={odd}: {why}"


def test_the_channel_and_the_listener_refuse_a_tls_file_that_is_not_a_file(pki, tmp_path):
    """Files read again when the link dials or the master listens (they may have changed
    since the check at start): refused by name, never read without end."""
    odd = _odd_file(tmp_path, "directory")
    with pytest.raises(TlsFileError) as err:
        channel("127.0.0.1:1", SlaveTls(ca=odd))
    assert str(err.value) == f"COMMINSIGHT_AGENT_TLS_CA={odd}: is a directory, not a regular file"
    server = AgentMasterServer(
        nodes={}, store=None, token="t", max_batch_bytes=1 << 20, stale_ms=1000,
        on_events=lambda node, events: None,
    )  # fmt: skip
    with pytest.raises(TlsFileError, match=f"^COMMINSIGHT_AGENT_TLS_CLIENT_CA={odd}: is a dir"):
        asyncio.run(
            server.start("127.0.0.1:0", str(pki / "server.pem"), str(pki / "server.key"), odd)
        )


def test_tls_files_behind_symbolic_links_are_read(pki, tmp_path):
    """The way a Kubernetes secret is mounted: each file a link into ..data, itself a link to
    the directory of the current version."""
    version = tmp_path / "..2024_01_01"
    version.mkdir()
    for name in ("server.pem", "server.key", "ca.pem"):
        shutil.copy(pki / name, version / name)
    (tmp_path / "..data").symlink_to(version.name)
    for name in ("server.pem", "server.key", "ca.pem"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    config = msgspec.convert(
        {
            "agent_mode": "master",
            "agent_token": "t",
            "agent_tls_cert": str(tmp_path / "server.pem"),
            "agent_tls_key": str(tmp_path / "server.key"),
            "agent_tls_client_ca": str(tmp_path / "ca.pem"),
        },
        ConfigV1,
    )
    assert multinode_problem(config) is None
    (tmp_path / "ca.pem").unlink()
    (tmp_path / "ca.pem").symlink_to("..data/gone.pem")  # a dangling link: named, and where to
    found = multinode_problem(config)
    assert found == (
        f"COMMINSIGHT_AGENT_TLS_CLIENT_CA={tmp_path / 'ca.pem'} (a link to "
        f"{version / 'gone.pem'}): cannot be read: No such file or directory"
    )
