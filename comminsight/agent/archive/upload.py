"""Put one local file into the archive: zstd-compressed, under a temporary name, then committed
and checked, giving the LedgerEntry that records it. Retries and the ledger are the caller's.

A file its writer stored compressed (LocalFile.compressed: a `.jsonl.zst` segment) is not
compressed again: it is first checked to be one whole zstd frame (decompressed through, its
checksum verified; DamagedFile otherwise, never archived), then sent byte for byte. Its entry
gives the uncompressed size and hash as source, like that of a file compressed here, so either
form of a file is recognized as the same content (adopting an object committed before a crash).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any, BinaryIO

import zstandard

from comminsight.agent.archive.ledger import LedgerEntry
from comminsight.agent.archive.local import LocalFile
from comminsight.agent.archive.providers import Provider
from comminsight.log_segments import decompressed_bound
from comminsight.safe_open import open_checked

log = logging.getLogger(__name__)
TEMP_SUFFIX = ".uploading"
_CHUNK = 1 << 20
# what one compressed chunk read is decompressed at a time: a few MiB at most of output, even
# from a crafted frame (a zstd block of 128 KiB can be told in a few bytes)
_FRAME_CHUNK = 1024


class UploadVerificationError(OSError):
    """The committed object does not have the size that was written."""


class DamagedFile(ValueError):
    """A local compressed file is not one whole zstd frame (truncated, corrupt, or followed
    by other bytes): it is not archived. The message names the file; `why` says the rest."""

    def __init__(self, path, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


class ZstdUploader:
    def __init__(self, provider: Provider, level: int, clock_ns: Callable[[], int]):
        self.provider = provider
        self.level = level
        self._clock_ns = clock_ns

    def upload(self, local: LocalFile, remote: str) -> LedgerEntry:
        """Archive `local` as `remote`. If `remote` already exists (committed just before a
        crash, so it has no ledger entry), it is adopted when it holds exactly this file, and
        overwritten otherwise. A compressed local file is checked first (DamagedFile)."""
        if local.compressed:
            return self._upload_compressed(local, remote)
        if self.provider.size(remote) is not None:
            adopted = self._adopt(local, remote, _content_of(local.path, local.owner))
            if adopted is not None:
                return adopted
        source_hash, archived_hash = hashlib.sha256(), hashlib.sha256()
        compressor = zstandard.ZstdCompressor(level=self.level, write_checksum=True)
        sizes = []

        def write(out: BinaryIO) -> int:
            with _open_source(local.path, local.owner) as src:
                sizes[:] = compressor.copy_stream(
                    _HashingReader(src, source_hash),
                    _HashingWriter(out, archived_hash),
                    read_size=_CHUNK,
                    write_size=_CHUNK,
                )
            return sizes[1]

        archived_bytes = self._put(remote, write)
        return self._entry(local, remote, sizes[0], source_hash, archived_bytes, archived_hash)

    def _upload_compressed(self, local: LocalFile, remote: str) -> LedgerEntry:
        """Send a file its writer compressed as it is, once it proved one whole zstd frame."""
        source_bytes, source_hash, frame_hash = _verified_frame(local.path, local.owner)
        if self.provider.size(remote) is not None:
            adopted = self._adopt(local, remote, (source_bytes, source_hash))
            if adopted is not None:
                return adopted
        archived_hash = hashlib.sha256()

        def write(out: BinaryIO) -> int:
            written = 0
            with _open_source(local.path, local.owner) as src:
                while chunk := src.read(_CHUNK):
                    archived_hash.update(chunk)
                    written += len(chunk)
                    out.write(chunk)
            if archived_hash.digest() != frame_hash.digest():
                raise UploadVerificationError(f"{local.path} changed while it was archived")
            return written

        archived_bytes = self._put(remote, write)
        return self._entry(local, remote, source_bytes, source_hash, archived_bytes, archived_hash)

    def _put(self, remote: str, write: Callable[[BinaryIO], int]) -> int:
        """An object made by `write` (which gives the bytes it wrote) under a temporary name,
        committed as `remote` and checked to hold them all; the bytes."""
        temp = remote + TEMP_SUFFIX
        try:
            with self.provider.open_for_write(temp) as out:
                written = write(out)
            self.provider.commit(temp, remote)
        except Exception:
            # Best effort, so a file that never makes it leaves no stray temporary object.
            # (A crash skips this; the next attempt overwrites the same temporary name.)
            with contextlib.suppress(Exception):
                self.provider.remove(temp)
            raise
        stored = self.provider.size(remote)
        if stored != written:
            raise UploadVerificationError(
                f"{remote}: the archive holds {stored} bytes, {written} were written"
            )
        return written

    def _adopt(self, local: LocalFile, remote: str, content: tuple[int, Any]) -> LedgerEntry | None:
        """The entry of `remote` when it decompresses to `content` (the local file's size and
        hash, uncompressed), else None."""
        source_bytes, source_hash = content
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
            # 0: sent as its writer compressed it, at a level the archive did not choose
            zstd_level=0 if local.compressed else self.level,
            uploaded_real_ns=self._clock_ns(),
            **kw,
        )


def _content_of(path, owner: int = -1) -> tuple[int, Any]:
    """The size and sha256 of a local file's bytes."""
    source_hash, source_bytes = hashlib.sha256(), 0
    with _open_source(path, owner) as src:
        while chunk := src.read(_CHUNK):
            source_hash.update(chunk)
            source_bytes += len(chunk)
    return source_bytes, source_hash


def _verified_frame(path, owner: int = -1) -> tuple[int, Any, Any]:
    """(size, sha256) of what a compressed local file decompresses to, and the sha256 of the
    file itself, once it proved one whole zstd frame (its checksum, when it has one, and its
    content size, when its header gives one, verified by zstd); DamagedFile otherwise."""
    content_hash, content_bytes, frame_hash = hashlib.sha256(), 0, hashlib.sha256()
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    with _open_source(path, owner) as src:
        # no more than a segment holds, nor more than log segments compress to (a frame of
        # repeated bytes planted in the home is refused rather than read through)
        bound = decompressed_bound(os.fstat(src.fileno()).st_size)
        try:
            while chunk := src.read(_FRAME_CHUNK):
                frame_hash.update(chunk)
                if decompressor.eof:
                    raise DamagedFile(path, "bytes follow its zstd frame")
                out = decompressor.decompress(chunk)
                content_hash.update(out)
                content_bytes += len(out)
                if content_bytes > bound:
                    raise DamagedFile(
                        path, f"decompresses past the {bound} bytes a file of its size may hold"
                    )
        except zstandard.ZstdError as e:
            raise DamagedFile(path, f"is not a whole zstd frame: {e}") from None
    if not decompressor.eof:
        raise DamagedFile(path, "is not a whole zstd frame: it ends inside it (truncated)")
    if decompressor.unused_data:
        raise DamagedFile(path, "bytes follow its zstd frame")
    return content_bytes, content_hash, frame_hash


def _open_source(path, owner: int = -1) -> BinaryIO:
    """The local file to archive, opened without following a symbolic link and checked on
    its descriptor to be a regular file of its owner's (-1: this Agent's user; a user's in a
    shared home; UntrustedFile otherwise): the scan's check of the path could be raced by a
    link swapped in after it."""
    fd, _ = open_checked(path, "regular file", owner=owner)
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
