"""The PEM files the Agent's TLS settings name (COMMINSIGHT_AGENT_TLS_CERT, _KEY, _CA,
_CLIENT_CA), read bounded and without blocking.

A FIFO named there would make a plain read wait for ever, /dev/zero would be read without
end, a directory would be reported as a missing file. `read_pem` refuses each by name: the
setting, the path and what is wrong with it.
"""

from __future__ import annotations

import os

from comminsight.safe_open import UntrustedFile, read_regular

# a certificate chain or CA bundle is a few KiB; the system's whole bundle is about 200 KiB
MAX_PEM_BYTES = 1 << 20


class TlsFileError(OSError):
    """A TLS setting's file cannot be used; the message names the key, the path and why."""


def read_pem(key: str, path: str) -> bytes:
    """The bytes of the file `path` that setting `key` names, or TlsFileError."""
    # Certificates are symbolic links more often than not (/etc/ssl/certs, the ..data links
    # of a Kubernetes secret mount), and the operator chose this path: its links are followed
    # here, and read_regular (which follows none) checks what they lead to.
    resolved = os.path.realpath(path)
    shown = path if resolved == path else f"{path} (a link to {resolved})"
    try:
        return read_regular(resolved, MAX_PEM_BYTES)
    except UntrustedFile as e:
        raise TlsFileError(f"{key}={shown}: {e.why}") from None
    except OSError as e:
        raise TlsFileError(f"{key}={shown}: cannot be read: {e.strerror}") from None
