"""Put one local file into the archive: zstd-compressed, under a temporary name, then committed
and checked, giving the LedgerEntry that records it. Retries and the ledger are the caller's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from typing import BinaryIO

import zstandard

from comminsight.agent.archive.ledger import LedgerEntry
from comminsight.agent.archive.local import LocalFile
from comminsight.agent.archive.providers import Provider
from comminsight.safe_open import open_checked

log = logging.getLogger(__name__)
TEMP_SUFFIX = ".uploading"
_CHUNK = 1 << 20


class UploadVerificationError(OSError):
    """The committed object does not have the size that was written."""


class ZstdUploader:
    def __init__(self, provider: Provider, level: int, clock_ns: Callable[[], int]):
        self.provider = provider
        self.level = level
        self._clock_ns = clock_ns

    def upload(self, local: LocalFile, remote: str) -> LedgerEntry:
        """Archive `local` as `remote`. If `remote` already exists (committed just before a
        crash, so it has no ledger entry), it is adopted when it holds exactly this file, and
        overwritten otherwise."""
        if self.provider.size(remote) is not None:
            adopted = self._adopt(local, remote)
            if adopted is not None:
                return adopted
        temp = remote + TEMP_SUFFIX
        source_hash, archived_hash = hashlib.sha256(), hashlib.sha256()
        compressor = zstandard.ZstdCompressor(level=self.level, write_checksum=True)
        try:
            with _open_source(local.path) as src, self.provider.open_for_write(temp) as out:
                source_bytes, archived_bytes = compressor.copy_stream(
                    _HashingReader(src, source_hash),
                    _HashingWriter(out, archived_hash),
                    read_size=_CHUNK,
                    write_size=_CHUNK,
                )
            self.provider.commit(temp, remote)
        except Exception:
            # Best effort, so a file that never makes it leaves no stray temporary object.
            # (A crash skips this; the next attempt overwrites the same temporary name.)
            with contextlib.suppress(Exception):
                self.provider.remove(temp)
            raise
        stored = self.provider.size(remote)
        if stored != archived_bytes:
            raise UploadVerificationError(
                f"{remote}: the archive holds {stored} bytes, {archived_bytes} were written"
            )
        return self._entry(local, remote, source_bytes, source_hash, archived_bytes, archived_hash)

    def _adopt(self, local: LocalFile, remote: str) -> LedgerEntry | None:
        source_hash, source_bytes = hashlib.sha256(), 0
        with _open_source(local.path) as src:
            while chunk := src.read(_CHUNK):
                source_hash.update(chunk)
                source_bytes += len(chunk)
        archived_hash, content_hash = hashlib.sha256(), hashlib.sha256()
        try:
            with self.provider.open_for_read(remote) as obj:
                reader = zstandard.ZstdDecompressor().stream_reader(
                    _HashingReader(obj, archived_hash), read_across_frames=True
                )
                while chunk := reader.read(_CHUNK):
                    content_hash.update(chunk)
        except zstandard.ZstdError:
            return None  # not a complete zstd frame: overwrite it
        if content_hash.digest() != source_hash.digest():
            return None
        archived_bytes = self.provider.size(remote) or 0
        log.info("archive: %s was committed before a restart; recorded, not re-sent", remote)
        return self._entry(
            local, remote, source_bytes, source_hash, archived_bytes, archived_hash, adopted=True
        )

    def _entry(
        self, local, remote, source_bytes, source_hash, archived_bytes, archived_hash, **kw
    ) -> LedgerEntry:
        return LedgerEntry(
            source=local.source,
            remote=remote,
            source_bytes=source_bytes,
            source_sha256=source_hash.hexdigest(),
            archived_bytes=archived_bytes,
            archived_sha256=archived_hash.hexdigest(),
            zstd_level=self.level,
            uploaded_real_ns=self._clock_ns(),
            **kw,
        )


def _open_source(path) -> BinaryIO:
    """The local file to archive, opened without following a symbolic link and checked on
    its descriptor to be a regular file of this user's (UntrustedFile otherwise): the scan's
    check of the path could be raced by a link swapped in after it."""
    fd, _ = open_checked(path, "regular file")
    return os.fdopen(fd, "rb")


class _HashingReader:
    """A file-like reader that hashes what passes through it."""

    def __init__(self, f: BinaryIO, digest):
        self._f, self._digest = f, digest

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._digest.update(data)
        return data


class _HashingWriter:
    """A file-like writer that hashes what passes through it."""

    def __init__(self, f: BinaryIO, digest):
        self._f, self._digest = f, digest

    def write(self, data) -> int:
        self._digest.update(data)
        self._f.write(data)
        return len(data)
