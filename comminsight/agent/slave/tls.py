"""TLS on a slave's side of agent-master-slave: the channel to the master, and what a failed
connection means when TLS is the reason.

gRPC reports a TLS mismatch as a plain UNAVAILABLE ("Socket closed" for a plaintext slave at
a TLS master; a TSI handshake failure for a certificate that does not verify), which reads
like a master that is down. A slave that keeps retrying a configuration error would only
log "unreachable" forever, so this module turns those failures into errors that name the
setting to fix. Without a CA configured, a probe (one TLS handshake, certificate unchecked:
it only asks whether the port speaks TLS) tells a TLS master from one that is down.

A master that requires client certificates (COMMINSIGHT_AGENT_TLS_CLIENT_CA) refuses a slave
without one, or with one its CA did not sign, after the handshake as TLS 1.3 has it: gRPC
sees only "Socket closed". A second probe, a handshake with the slave's own settings, tells
it apart: an accepted connection gets the master's HTTP/2 settings frame, a refused one is
closed without a byte.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import grpc

from comminsight.agent.tls_files import read_pem

PROBE_TIMEOUT_S = 2.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", 4 << 20),
    ("grpc.keepalive_time_ms", 20_000),
]


@dataclass(frozen=True)
class SlaveTls:
    """A slave's TLS settings: the CA it verifies the master with (TLS off when empty) and
    its own certificate and key, presented to a master that requires client certificates."""

    ca: str = ""
    cert: str = ""
    key: str = ""


def channel(master_addr: str, tls: SlaveTls) -> grpc.aio.Channel:
    """TlsFileError (an OSError) when a TLS setting's file cannot be used."""
    if tls.ca:
        creds = grpc.ssl_channel_credentials(
            read_pem("COMMINSIGHT_AGENT_TLS_CA", tls.ca),
            read_pem("COMMINSIGHT_AGENT_TLS_KEY", tls.key) if tls.cert else None,
            read_pem("COMMINSIGHT_AGENT_TLS_CERT", tls.cert) if tls.cert else None,
        )
        return grpc.aio.secure_channel(master_addr, creds, options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(master_addr, options=CHANNEL_OPTIONS)


async def speaks_tls(master_addr: str) -> bool:
    host, _, port = master_addr.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a question about the protocol, not about trust
    context.set_alpn_protocols(["h2"])
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port), ssl=context),
            PROBE_TIMEOUT_S,
        )
    except (OSError, ValueError, TimeoutError, ssl.SSLError):
        return False
    # no TLS goodbye: a gRPC server may never answer close_notify, and the answer is known
    writer.transport.abort()
    return True


async def refuses_client(master_addr: str, tls: SlaveTls) -> bool:
    """Whether the master closes a TLS connection made with this slave's settings before
    sending anything (its verdict on the client certificate); False when it answers, or
    when the probe cannot tell."""
    host, _, port = master_addr.rpartition(":")
    try:
        # OpenSSL opens the files itself (and would wait on a FIFO): the CA goes in as text,
        # the certificate and key, which it takes only by path, are checked first
        ca = read_pem("COMMINSIGHT_AGENT_TLS_CA", tls.ca).decode("ascii", "replace")
        if tls.cert:
            read_pem("COMMINSIGHT_AGENT_TLS_CERT", tls.cert)
            read_pem("COMMINSIGHT_AGENT_TLS_KEY", tls.key)
        context = ssl.create_default_context(cadata=ca)
        context.check_hostname = False  # the question is the client certificate
        context.set_alpn_protocols(["h2"])
        if tls.cert:
            context.load_cert_chain(tls.cert, tls.key)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port), ssl=context), PROBE_TIMEOUT_S
        )
    except (OSError, ValueError, TimeoutError, ssl.SSLError):
        return False
    try:
        first = await asyncio.wait_for(reader.read(1), PROBE_TIMEOUT_S)
    except (OSError, TimeoutError, ssl.SSLError):
        first = None  # no answer in time: not the prompt close of a refusal
    finally:
        writer.transport.abort()
    return first == b""


async def tls_failure(error: grpc.RpcError, master_addr: str, tls: SlaveTls) -> str | None:
    """A sentence naming the TLS setting that makes `error` happen, or None when TLS is not
    the reason (the master is down or unreachable: retried as usual)."""
    if error.code() is not grpc.StatusCode.UNAVAILABLE:
        return None
    details = error.details() or ""
    if tls.ca:
        if "CERTIFICATE_VERIFY_FAILED" in details:
            return (
                f"the TLS certificate of master {master_addr} does not verify against "
                f"COMMINSIGHT_AGENT_TLS_CA={tls.ca} (a different CA signed it, or it does not "
                f"name the address dialed): {details}"
            )
        if "handshake" in details.lower():
            return (
                f"TLS handshake with master {master_addr} failed (COMMINSIGHT_AGENT_TLS_CA is "
                f"set: does the master serve TLS, COMMINSIGHT_AGENT_TLS_CERT?): {details}"
            )
        if "Socket closed" in details and await refuses_client(master_addr, tls):
            if not tls.cert:
                return (
                    f"master {master_addr} requires a client certificate "
                    "(COMMINSIGHT_AGENT_TLS_CLIENT_CA there): set COMMINSIGHT_AGENT_TLS_CERT "
                    "and COMMINSIGHT_AGENT_TLS_KEY to one its CA signed"
                )
            return (
                f"master {master_addr} refused this slave's certificate "
                f"COMMINSIGHT_AGENT_TLS_CERT={tls.cert}: it is not signed by a CA in the "
                "master's COMMINSIGHT_AGENT_TLS_CLIENT_CA"
            )
        return None
    if await speaks_tls(master_addr):
        return (
            f"master {master_addr} serves TLS and this slave dials without it: set "
            "COMMINSIGHT_AGENT_TLS_CA to the CA that signed the master's certificate"
        )
    return None
