"""Where archived files go: a local directory (the default; a 3FS mount is one) or an fsspec URL.

A Provider stores opaque objects under relative, '/'-separated names. The Archiver writes
each object under a temporary name and then commits it to its final name, so a reader (or an
agent restarting after a crash) never takes a half-written object for a complete one.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from comminsight.durable_files import make_private_dirs
from comminsight.redaction import redact_url, scrub_credentials
from comminsight.safe_open import UntrustedFile, check_fd, kind_of
from comminsight_gen import home_v1_names as home_names

log = logging.getLogger(__name__)
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


class ArchiveDestinationUntrusted(OSError):
    """A directory or object of a local archive is not what the Agent made: a symbolic link,
    not a directory, another user's, or writable by others. Nothing is written through it;
    the upload fails (retried, then reported) with this message naming the path."""

    def __str__(self) -> str:
        return str(self.strerror)


class LocalDirectoryProvider(Provider):
    """A directory on this machine: `<home>/archives` by default, or a shared (3FS) mount.

    A shared mount may be writable by other users, so below its root nothing is trusted that
    the Agent did not make: every directory is opened relative to its parent without
    following a link and must be a directory of the Agent's user that no one else can write;
    objects are opened the same way and never waited on (a FIFO) or written through (a link).
    A planted entry at an object's final name is replaced by the archived file, and said."""

    kind = "local"

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.url = str(self.root)

    def _parent(self, name: str, create: bool) -> tuple[int, str]:
        """(fd of the directory holding `name`, its last component). The root is the one
        path followed as given (the operator named it); FileNotFoundError when a directory
        is missing and not `create`."""
        *dirs, base = name.split("/")
        if not base or any(d in ("", ".", "..") for d in dirs) or base in (".", ".."):
            raise ValueError(f"{name!r} is not an archive object name")
        if create:
            make_private_dirs(self.root)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, d in enumerate(dirs):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(d, 0o700, dir_fd=fd)
                shown = self.root.joinpath(*dirs[: i + 1])
                try:
                    child = os.open(
                        d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                    )
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise ArchiveDestinationUntrusted(
                            e.errno, f"{shown}: not a directory of this Agent (a link or a file)"
                        ) from None
                    raise
                os.close(fd)
                fd = child
                try:
                    check_fd(fd, shown, "directory", os.geteuid())
                except UntrustedFile as e:
                    raise ArchiveDestinationUntrusted(e.errno, str(e)) from None
        except BaseException:
            os.close(fd)
            raise
        return fd, base

    @contextmanager
    def open_for_write(self, name: str) -> Iterator[BinaryIO]:
        parent, base = self._parent(name, create=True)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base, dir_fd=parent)  # a crash's leftover, or a planted entry
            fd = os.open(
                base,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o600,
                dir_fd=parent,
            )
        finally:
            os.close(parent)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())

    def commit(self, temp_name: str, name: str) -> None:
        parent, base = self._parent(name, create=False)
        try:
            temp_parent, temp_base = self._parent(temp_name, create=False)
            try:
                os.replace(temp_base, base, src_dir_fd=temp_parent, dst_dir_fd=parent)
            finally:
                os.close(temp_parent)
            os.fsync(parent)  # the rename itself must survive a power loss
        finally:
            os.close(parent)

    def size(self, name: str) -> int | None:
        try:
            parent, base = self._parent(name, create=False)
        except FileNotFoundError:
            return None
        try:
            st = os.stat(base, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)
        if not stat.S_ISREG(st.st_mode):
            log.warning(
                "archive: %s is a %s, not an archived file; the archived file will replace it",
                self.root / name,
                kind_of(st.st_mode),
            )
            return None
        return st.st_size

    @contextmanager
    def open_for_read(self, name: str) -> Iterator[BinaryIO]:
        parent, base = self._parent(name, create=False)
        try:
            fd = os.open(
                base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
            )
        finally:
            os.close(parent)
        try:
            check_fd(fd, self.root / name, "regular file", os.geteuid())
        except UntrustedFile as e:
            os.close(fd)
            raise ArchiveDestinationUntrusted(e.errno, str(e)) from None
        with os.fdopen(fd, "rb") as f:
            yield f

    def remove(self, name: str) -> None:
        try:
            parent, base = self._parent(name, create=False)
        except FileNotFoundError:
            return
        try:
            os.unlink(base, dir_fd=parent)
        except FileNotFoundError:
            pass
        finally:
            os.close(parent)


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
    path or a plain file:///path -> that directory, scheme://... -> fsspec. Anything else is
    an ArchiveConfigError."""
    text = url.strip()
    if not text:
        return LocalDirectoryProvider(Path(home) / home_names.ARCHIVES)
    if "://" not in text:
        if not os.path.isabs(text):
            # A relative path would depend on whatever directory the agent was started in.
            raise ArchiveConfigError(
                f"{URL_KEY}={text!r}: a directory must be an absolute path "
                "(or use an fsspec URL such as s3://bucket/prefix or file:///path)"
            )
        return LocalDirectoryProvider(text)
    scheme = text.split("://", 1)[0]
    local = text.removeprefix("file://")
    if scheme == "file" and os.path.isabs(local) and "::" not in text and "?" not in text:
        # a plain file:// URL is a local directory: kept with the same care as one
        return LocalDirectoryProvider(local)
    if not scheme or not all(c.isalnum() or c in "+-." for c in scheme):
        raise ArchiveConfigError(f"{URL_KEY}={redact_url(text)!r}: malformed URL scheme")
    return FsspecProvider(text)
