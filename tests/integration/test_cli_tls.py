"""The CLI verifies an https Agent's certificate (plain-http calls skip loading the CA bundle
they never use; an https URL must not lose verification with it)."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading

from self_signed import self_signed

from comminsight.cli.client import tls_options


def test_only_plain_http_urls_go_without_a_verifying_context(monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert tls_options("http://127.0.0.1:9464") == {"verify_ssl": False}
    assert tls_options("https://agent.example:9464") == {}
    assert tls_options("HTTPS://agent.example") == {}
    assert tls_options("http://[::1") == {"verify_ssl": False}  # malformed: said where used


def test_the_cas_the_environment_names_verify_an_https_agent(monkeypatch, tmp_path):
    _, cert = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = tls_options("https://127.0.0.1:9464")["verify_ssl"]
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert any(c["subject"] == ((("commonName", "127.0.0.1"),),) for c in context.get_ca_certs())


def test_an_https_agent_with_an_untrusted_certificate_is_refused(tmp_path):
    key, cert = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    handshakes: list[str] = []

    def serve() -> None:
        conn, _ = server.accept()
        try:
            with context.wrap_socket(conn, server_side=True):
                handshakes.append("completed")  # the client trusted the certificate
        except (ssl.SSLError, OSError) as e:
            handshakes.append(type(e).__name__)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    done = subprocess.run(
        [sys.executable, "-m", "comminsight.cli", "status", "--url", f"https://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
            "HOME": str(tmp_path),
        },
    )
    thread.join(timeout=30)
    server.close()
    assert done.returncode != 0, done.stdout
    assert "CERTIFICATE_VERIFY_FAILED" in done.stderr or "certificate" in done.stderr, done.stderr
    assert handshakes and handshakes != ["completed"], handshakes
