"""Where archived files go: a local directory (the default; a 3FS mount is one) or an fsspec URL.

A Provider stores opaque objects under relative, '/'-separated names. The Archiver writes
each object under a temporary name and then commits it to its final name, so a reader (or an
agent restarting after a crash) never takes a half-written object for a complete one.
"""

from __future__ import annotations

import inspect
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from comminsight.durable_files import fsync_directory, make_private_dirs
from comminsight.redaction import redact_url, scrub_credentials

URL_KEY = "COMMINSIGHT_COMMON_ARCHIVE_URL"


class ArchiveConfigError(ValueError):
    """COMMINSIGHT_COMMON_ARCHIVE_URL cannot be used; the message names the key."""


class ArchiveUnreachable(OSError):
    """The archive's filesystem could not be made (its server refused or did not answer);
    an upload failure like any other, tried again on the next attempt."""


class Provider(ABC):
    """An archive destination. Names are relative, '/'-separated object names."""

    kind: str  # "local" or "fsspec": the ArchiveStatus.provider value
    url: str  # the destination with any credentials removed, safe to show

    @abstractmethod
    @contextmanager
    def open_for_write(self, name: str) -> Iterator[BinaryIO]:
        """Create or overwrite `name`; the data is durable when the block exits normally."""

    @abstractmethod
    def commit(self, temp_name: str, name: str) -> None:
        """Move a completely written `temp_name` to `name`, replacing any object there."""

    @abstractmethod
    def size(self, name: str) -> int | None:
        """Size of `name` in bytes, or None when there is no such object."""

    @abstractmethod
    @contextmanager
    def open_for_read(self, name: str) -> Iterator[BinaryIO]: ...

    @abstractmethod
    def remove(self, name: str) -> None:
        """Delete `name` if it exists."""

    def scrub(self, text: str) -> str:
        """`text` (an error about this destination) with its credentials hidden."""
        return text


class LocalDirectoryProvider(Provider):
    """A directory on this machine: `<home>/archives` by default, or a shared (3FS) mount."""

    kind = "local"

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, name: str) -> Path:
        return self.root / name

    @contextmanager
    def open_for_write(self, name: str) -> Iterator[BinaryIO]:
        path = self._path(name)
        make_private_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())

    def commit(self, temp_name: str, name: str) -> None:
        final = self._path(name)
        os.replace(self._path(temp_name), final)
        fsync_directory(final.parent)  # the rename itself must survive a power loss

    def size(self, name: str) -> int | None:
        try:
            return self._path(name).stat().st_size
        except FileNotFoundError:
            return None

    @contextmanager
    def open_for_read(self, name: str) -> Iterator[BinaryIO]:
        with open(self._path(name), "rb") as f:
            yield f

    def remove(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)


class FsspecProvider(Provider):
    """Any fsspec filesystem (s3://, gs://, file://, memory://, ...) named by a URL.

    The URL is checked when the provider is made, the filesystem made only when first used:
    some backends connect in their constructor (ftp://), and a destination that is down
    when the Agent starts is an upload failure, retried and reported, not a reason to stop."""

    kind = "fsspec"

    def __init__(self, url: str):
        self.url = redact_url(url)
        self._raw_url = url  # never shown: only to hide its credentials in errors
        self.root = _checked_fsspec_url(url, self.url).rstrip("/")
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            try:
                self._fs, _ = fsspec.core.url_to_fs(self._raw_url)
            except Exception as e:
                raise ArchiveUnreachable(
                    f"{URL_KEY}={self.url!r}: cannot reach the archive: {e}"
                ) from e
        return self._fs

    def scrub(self, text: str) -> str:
        # a backend's error names the remote path, which may hold the URL's credentials
        return scrub_credentials(text, self._raw_url)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    @contextmanager
    def open_for_write(self, name: str) -> Iterator[BinaryIO]:
        path = self._path(name)
        # Object stores have no directories (a no-op there); file:// needs them to exist.
        self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)
        with self.fs.open(path, "wb") as f:
            yield f

    def commit(self, temp_name: str, name: str) -> None:
        self.fs.mv(self._path(temp_name), self._path(name))

    def size(self, name: str) -> int | None:
        try:
            return int(self.fs.size(self._path(name)))
        except FileNotFoundError:
            return None

    @contextmanager
    def open_for_read(self, name: str) -> Iterator[BinaryIO]:
        with self.fs.open(self._path(name), "rb") as f:
            yield f

    def remove(self, name: str) -> None:
        try:
            self.fs.rm(self._path(name))
        except FileNotFoundError:
            pass


def _checked_fsspec_url(url: str, shown: str) -> str:
    """The filesystem path an fsspec URL names, checked without making its filesystem: the
    protocol is known and its backend installed, the URL parses (a port in range), and it
    gives each filesystem's constructor the arguments it requires (ftp:// needs a host).
    ArchiveConfigError naming the key and the URL otherwise."""
    import fsspec.core  # imported here so the local default works even without it installed

    try:
        # fsspec's own split of a URL (chained ones too) into (path, protocol, options),
        # the one url_to_fs makes; private, but it is what url_to_fs runs before connecting
        chain = fsspec.core._un_chain(url, {})
        for i, (_, protocol, options) in enumerate(chain):
            init = fsspec.get_filesystem_class(protocol).__init__
            given = dict(options)
            if i + 1 < len(chain):  # url_to_fs hands an outer filesystem its target too
                given.update(fo=chain[i + 1][0], target_protocol="", target_options={})
            try:
                inspect.signature(init).bind(None, **given)
            except TypeError as e:
                raise ValueError(f"{protocol}:// {e}") from None
    except (ValueError, TypeError, ImportError) as e:
        # ValueError: unknown protocol or a malformed URL; ImportError: its backend (s3fs,
        # gcsfs) is missing
        raise ArchiveConfigError(f"{URL_KEY}={shown!r}: {e}") from None
    return chain[0][0]


def provider_for_url(url: str, home: str | Path) -> Provider:
    """The Provider COMMINSIGHT_COMMON_ARCHIVE_URL names: empty -> <home>/archives, an absolute
    path -> that directory, scheme://... -> fsspec. Anything else is an ArchiveConfigError."""
    text = url.strip()
    if not text:
        return LocalDirectoryProvider(Path(home) / "archives")
    if "://" not in text:
        if not os.path.isabs(text):
            # A relative path would depend on whatever directory the agent was started in.
            raise ArchiveConfigError(
                f"{URL_KEY}={text!r}: a directory must be an absolute path "
                "(or use an fsspec URL such as s3://bucket/prefix or file:///path)"
            )
        return LocalDirectoryProvider(text)
    scheme = text.split("://", 1)[0]
    if not scheme or not all(c.isalnum() or c in "+-." for c in scheme):
        raise ArchiveConfigError(f"{URL_KEY}={redact_url(text)!r}: malformed URL scheme")
    return FsspecProvider(text)
