"""The complete lines of a JSON-lines file, read in bounded chunks.

Step files, master stores and log segments grow for as long as training runs, and a home may
hold one that is damaged or planted (a sparse file of zeros, a line of gigabytes): reading
one whole, or one line whole, would take the reader's memory with it. `complete_lines` holds
one chunk and at most one line of `max_line` bytes at a time; a longer line is passed over
(its place reported, its bytes not kept), so every other line is still read.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Line:
    offset: int  # of its first byte in the file
    length: int  # without the newline
    data: bytes | None  # None: longer than max_line, passed over

    @property
    def end(self) -> int:
        """The byte after its newline: where the next line starts."""
        return self.offset + self.length + 1


@dataclass
class LineCursor:
    """Where a follower of a growing file resumes: the start of the next line, or, while
    `skipping`, a place inside a line already longer than any allowed (begun at
    `line_start`), whose bytes so far were passed over and are not read again."""

    offset: int = 0
    skipping: bool = False
    line_start: int = 0


def complete_lines(
    fd: int, start: int, stop: int, max_line: int, chunk: int = CHUNK_BYTES
) -> Iterator[Line]:
    """Every line of the file between byte `start` (a line's start) and `stop` that ends with
    a newline before `stop`; what follows the last newline (a line still being written) is
    left for a later call, which starts at the last line's `end`. Blank lines are yielded
    too (their data empty): the caller decides what they mean."""
    yield from follow_lines(fd, LineCursor(start), stop, max_line, chunk)


def follow_lines(
    fd: int, cursor: LineCursor, stop: int, max_line: int, chunk: int = CHUNK_BYTES
) -> Iterator[Line]:
    """complete_lines from `cursor`, which it moves past each line before yielding it. Left
    inside a line already over max_line when `stop` is reached, the cursor stays there
    (`skipping`), so that a follower called again does not read that line's bytes anew: an
    unterminated line of gigabytes (a sparse file) costs one pass, not one per call. The
    holes of a sparse file (zeros, so no newline) are passed over without being read."""
    pending = bytearray()
    passing_over = cursor.skipping  # the current line is over max_line: its bytes not kept
    line_start = cursor.line_start if cursor.skipping else cursor.offset
    at = cursor.offset
    while at < stop:
        if passing_over:
            at = min(_next_data(fd, at, stop), stop)
            if at >= stop:
                break
        data = os.pread(fd, min(chunk, stop - at), at)
        if not data:
            break  # truncated since stop was taken
        base, at, i = at, at + len(data), 0
        while (nl := data.find(b"\n", i)) >= 0:
            length = base + nl - line_start
            if passing_over or length > max_line:
                line = Line(line_start, length, None)
            else:
                pending += data[i:nl]
                line = Line(line_start, length, bytes(pending))
            pending.clear()
            passing_over = False
            i = nl + 1
            line_start = base + i
            cursor.offset, cursor.skipping = line.end, False
            yield line
        if not passing_over:
            if len(pending) + len(data) - i > max_line:
                passing_over = True
                pending.clear()
            else:
                pending += data[i:]
    if passing_over:
        cursor.offset, cursor.skipping, cursor.line_start = max(at, cursor.offset), True, line_start


def _next_data(fd: int, at: int, stop: int) -> int:
    """The first byte at or after `at` that is not in a hole (`stop` when only holes are left
    before it); `at` where the file system cannot tell."""
    try:
        return os.lseek(fd, at, os.SEEK_DATA)
    except OSError as e:
        if e.errno == errno.ENXIO:  # nothing but a hole up to the end of the file
            return stop
        return at
