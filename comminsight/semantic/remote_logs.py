"""Logs that lie elsewhere, named by an fsspec URL (`s3://bucket/job`, the archive's
`COMMINSIGHT_COMMON_ARCHIVE_URL`, `file:///shared/job`), as input of a distributed run.

The listing is made from names alone: every segment under the URL (at any depth: the
archive keeps each node's under `<node>/inspector_logs/`), grouped into processes by their
file stem as `log_input.list_job` groups a directory's. Each worker then fetches one
process's segments into its own local directory when it reads them, so the logs are read
where they lie and never gathered in one place; archived segments (`.jsonl.zst`, compressed
as a stream) read as the Profiler's do. Only CommInsight segments are listed: an NVIDIA
Inspector file is read from a local directory.
"""

from __future__ import annotations

import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path

from comminsight.durable_files import make_private_dirs
from comminsight.log_segments import SEGMENT_BYTES_MAX
from comminsight.semantic.log_input import SEGMENT_NAME, ProcessFiles, preferred_file
from comminsight_gen import home_v1_names as home_names


def is_url(text: str | Path) -> bool:
    return isinstance(text, str) and "://" in text


@dataclass(frozen=True)
class RemoteProcess:
    """One process's segments as URLs; `fetched` copies them where a worker reads them."""

    stream: str
    urls: tuple[str, ...]

    def fetched(self, into: Path) -> ProcessFiles:
        """Copies of the segments in a directory of their own under `into` (one per call:
        two tasks never share one), each no bigger than a segment may be."""
        import fsspec

        make_private_dirs(into)
        directory = Path(tempfile.mkdtemp(prefix="fetched-", dir=into))
        local = []
        for url in self.urls:
            fs, path = fsspec.core.url_to_fs(url)
            size = fs.size(path)
            if size is not None and size > SEGMENT_BYTES_MAX:
                raise OSError(f"{url}: {size} bytes, more than a segment may hold")
            target = directory / posixpath.basename(path)
            fs.get_file(path, str(target))
            local.append(target)
        return ProcessFiles(self.stream, tuple(local))


def list_url(url: str) -> tuple[list[RemoteProcess], list[str]]:
    """The processes whose segments lie under `url`, and what could not be used: a
    segment's name in the URL's own directory or in a directory named inspector_logs (the
    archive keeps step summaries and other files beside them)."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url)
        found = fs.find(root)
    except (OSError, ValueError, ImportError) as e:
        return [], [f"{url}: cannot list: {e}"]
    protocol = url.split("://", 1)[0]
    root = root.rstrip("/")
    streams: dict[str, dict[int, str]] = {}
    for path in sorted(found):
        parent, name = posixpath.split(path)
        m = SEGMENT_NAME.match(name)
        if m is None or not (
            parent == root or posixpath.basename(parent) == home_names.INSPECTOR_LOGS
        ):
            continue
        by_index = streams.setdefault(m["stream"], {})
        index = int(m["index"])
        if index not in by_index or preferred_file(path, by_index[index]):
            by_index[index] = path
    processes = [
        RemoteProcess(stream, tuple(f"{protocol}://{p}" for _, p in sorted(files.items())))
        for stream, files in sorted(streams.items())
    ]
    if not processes:
        return [], [f"{url}: no inspector_logs segments found"]
    return processes, []
