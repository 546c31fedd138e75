"""TLS on a slave's side of agent-master-slave: the channel to the master, and what a failed
connection means when TLS is the reason.

gRPC reports a TLS mismatch as a plain UNAVAILABLE ("Socket closed" for a plaintext slave at
a TLS master; a TSI handshake failure for a certificate that does not verify), which reads
like a master that is down. A slave that keeps retrying a configuration error would only
log "unreachable" forever, so this module turns those failures into errors that name the
setting to fix. Without a CA configured, a probe (one TLS handshake, certificate unchecked:
it only asks whether the port speaks TLS) tells a TLS master from one that is down.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import grpc

PROBE_TIMEOUT_S = 2.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", 4 << 20),
    ("grpc.keepalive_time_ms", 20_000),
]


def channel(master_addr: str, tls_ca: str) -> grpc.aio.Channel:
    if tls_ca:
        creds = grpc.ssl_channel_credentials(Path(tls_ca).read_bytes())
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


async def tls_failure(error: grpc.RpcError, master_addr: str, tls_ca: str) -> str | None:
    """A sentence naming the TLS setting that makes `error` happen, or None when TLS is not
    the reason (the master is down or unreachable: retried as usual)."""
    if error.code() is not grpc.StatusCode.UNAVAILABLE:
        return None
    details = error.details() or ""
    if tls_ca:
        if "CERTIFICATE_VERIFY_FAILED" in details:
            return (
                f"the TLS certificate of master {master_addr} does not verify against "
                f"COMMINSIGHT_AGENT_TLS_CA={tls_ca} (a different CA signed it, or it does not "
                f"name the address dialed): {details}"
            )
        if "handshake" in details.lower():
            return (
                f"TLS handshake with master {master_addr} failed (COMMINSIGHT_AGENT_TLS_CA is "
                f"set: does the master serve TLS, COMMINSIGHT_AGENT_TLS_CERT?): {details}"
            )
        return None
    if await speaks_tls(master_addr):
        return (
            f"master {master_addr} serves TLS and this slave dials without it: set "
            "COMMINSIGHT_AGENT_TLS_CA to the CA that signed the master's certificate"
        )
    return None
