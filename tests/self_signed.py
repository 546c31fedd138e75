"""A self-signed certificate for 127.0.0.1, made with the openssl command, for tests of an
agent's or a client's TLS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(where: Path) -> tuple[Path, Path]:
    """(key, certificate) files under `where`."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is required to make the test certificate")
    key, cert = where / "key.pem", where / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt"),
            *("ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert
