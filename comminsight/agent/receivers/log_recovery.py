"""Write what only a dead process's SHM ring still holds into its inspector_logs.

A process killed without a clean end (SIGKILL, the OOM killer) leaves its log writer's last
records unwritten: the writer drains the ring every COMMINSIGHT_PROFILER_LOG_FLUSH_MS and
buffers lines before it writes them. Its SHM region still holds them until the Agent
retires it, so before that the Agent appends one segment to the process's logs: the ring
records after the last one its segments account for, each as the writer would have written
it, with gap lines (reason ring_overwrite) for tickets the ring no longer holds or that were
never completed, sealed like every segment and with seal reason `recovered`. The unsealed
`.partial` the writer left is not touched (readers already ignore its cut last line); the
recovered segment starts where its last whole line ends.

Segment files are `ci-<host>-<pid>-<start_mono_ns>-<index:06d>.jsonl[.partial]`, a sealed one
possibly stored compressed as `.jsonl.zst` (log_segments); the new one takes the index after
every one of them. What they account for is read from their ends: a compressed segment's end
is reached by decompressing it whole, so only those that can still raise the answer are read
(segments follow ring order: one after a segment whose end was read accounts for more).

A process dead before its writer's first pass leaves no logs directory (in a fresh home there
is none yet): the recovery makes it, through the home's trust checks
(home_check.make_trusted_dirs: no link of another user followed, nobody else's directory
written into); a failure for want of space is retried like the segment's own.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import zstandard

from comminsight.agent.receivers.home_check import HomeError, make_trusted_dirs
from comminsight.agent.receivers.inspector_lines import ProcessLines, timings
from comminsight.durable_files import fsync_directory
from comminsight.log_segments import (
    COMPRESSED_SUFFIX,
    SEGMENT_BYTES_MAX,
    SegmentError,
    read_segment,
    ring_seq_of,
)
from comminsight.safe_open import open_regular
from comminsight.shm_reader import ShmRegion, record_text
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.abi import shm_v1
from comminsight_gen.inspector_log_v1_fields import V
from comminsight_gen.models.inspector_log_v1 import (
    CiGap,
    CiSeal,
    CiSegmentStart,
    InspectorLogRecord,
)

log = logging.getLogger(__name__)

TAIL_BYTES = 64 * 1024  # enough for a seal line and then some
# what the end of an unsealed segment is searched for its last whole line, at most (the
# Profiler's lines are about 1 KiB: thousands of them)
MAX_TAIL_BYTES = 4 * 1024 * 1024
MAX_TAIL_LINES = 4096
_DECODER = msgspec.json.Decoder(InspectorLogRecord)


class RecoveryError(OSError):
    """The recovered segment could not be written; the message names the file."""

    def __str__(self) -> str:  # the sentence naming the file, without "[Errno N]"
        return str(self.strerror)


@dataclass
class Recovered:
    path: Path | None  # None: nothing was missing
    records: int = 0  # ring records written
    ops: int = 0
    lost: int = 0  # tickets in gap lines
    first_ring_seq: int = 0


def segment_prefix(region: ShmRegion) -> str:
    h = region.header
    return f"ci-{record_text(h['hostname'])}-{int(h['pid'])}-{int(h['start_mono_ns'])}-"


def logged_through(logs: Path, prefix: str) -> tuple[int, int]:
    """(the highest ring seq the process's segments account for, the next segment index)."""
    last, next_index = 0, 0
    # an index of more digits than the writer makes (a planted name) is not a segment of ours
    pattern = re.compile(re.escape(prefix) + r"(\d{1,9})\.jsonl(\.partial|\.zst)?$")
    try:
        names = os.listdir(logs)
    except FileNotFoundError:
        return 0, 0
    read_through = -1  # the highest index whose end said what it accounts for
    compressed: dict[int, Path] = {}
    for name in names:
        m = pattern.match(name)
        if not m:
            continue
        index = int(m.group(1))
        next_index = max(next_index, index + 1)
        if m.group(2) == COMPRESSED_SUFFIX:
            compressed[index] = logs / name
            continue
        seq = _last_ring_seq(logs / name, m.group(2) is not None)
        if seq is None:  # sealed or compressed since it was listed
            sealed = logs / name.removesuffix(".partial")
            seq = _last_ring_seq(sealed, False)
            if seq is None:
                compressed[index] = sealed.with_name(sealed.name + COMPRESSED_SUFFIX)
                continue
        last = max(last, seq)
        if seq > 0:
            read_through = max(read_through, index)
    # those after every segment read, newest first, up to the first that says something
    for index in sorted((i for i in compressed if i > read_through), reverse=True):
        seq = _last_ring_seq_compressed(compressed[index])
        last = max(last, seq)
        if seq > 0:
            break
    return last, next_index


def _last_ring_seq(path: Path, partial: bool) -> int | None:
    """What one segment accounts for: its seal's last_ring_seq, or for an unsealed one the
    ring seq of its last whole line that decodes (the one after it may be cut). None where
    the file is gone.

    The work is bounded whatever the file holds (this runs in the Agent's pass): the end is
    read back in growing windows up to MAX_TAIL_BYTES, and at most MAX_TAIL_LINES lines are
    tried. A segment whose end says nothing within that (garbage, a sealed file whose last
    line is no seal) accounts for what its first line says it starts after: what its garbage
    may hold beyond that is written again, never lost."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        size = os.fstat(fd).st_size
        step = TAIL_BYTES
        while True:
            start = max(0, size - step)
            data = os.pread(fd, size - start, start)
            found = _last_seq_in(data, whole_first=start == 0, sealed=not partial)
            if found is not None:
                return found
            if start == 0 or step >= MAX_TAIL_BYTES or not partial:
                break
            step *= 4
        log.warning(
            "%s: no %s in its last %d bytes; taken to hold only what its first line says",
            path,
            "seal line" if not partial else "whole record line",
            min(size, step),
        )
        return _starts_after(fd)
    finally:
        os.close(fd)


def _last_ring_seq_compressed(path: Path) -> int:
    """What a sealed segment stored compressed accounts for: its seal's last_ring_seq (the
    frame is decompressed whole, within the bound every segment has). One that is no whole
    zstd frame, or whose last line is no seal, accounts for what its first line says it
    starts after, as a garbled uncompressed one does: what it held is written again, never
    lost."""
    try:
        data = read_segment(path)
    except SegmentError as e:  # the message names the file
        log.warning("%s; taken to hold only what its first line says", e)
        return _first_line_after(_compressed_head(path))
    except OSError:
        return 0
    found = _last_seq_in(data, whole_first=True, sealed=True)
    if found is not None:
        return found
    log.warning("%s: no seal line at its end; taken to hold only what its first line says", path)
    return _first_line_after(data[:TAIL_BYTES])


def _compressed_head(path: Path) -> bytes:
    """As much of a damaged compressed segment's start as decompresses (TAIL_BYTES at most)."""
    head = b""
    try:
        with open_regular(path, SEGMENT_BYTES_MAX) as f:
            reader = zstandard.ZstdDecompressor().stream_reader(f)
            while len(head) < TAIL_BYTES and (chunk := reader.read(TAIL_BYTES - len(head))):
                head += chunk
    except (OSError, zstandard.ZstdError):
        pass
    return head


def _starts_after(fd: int) -> int:
    """The ring seq a segment's first line (its segment_start) says came before it."""
    return _first_line_after(os.pread(fd, TAIL_BYTES, 0))


def _first_line_after(head: bytes) -> int:
    """The ring seq the segment_start line `head` begins with says came before it; 0 where
    it begins with none."""
    line = head[: head.find(b"\n")] if b"\n" in head else b""
    try:
        ci = _DECODER.decode(line).ci
    except NOT_JSON:
        return 0
    return ci.next_ring_seq - 1 if isinstance(ci, CiSegmentStart) else 0


def _last_seq_in(data: bytes, whole_first: bool, sealed: bool) -> int | None:
    """The ring seq the last decodable line of `data` accounts for; None when the lines tried
    (at most MAX_TAIL_LINES, from the end; for a sealed segment only its last) say nothing."""
    end = data.rfind(b"\n")
    tries = 0
    while end > 0 and tries < MAX_TAIL_LINES:
        begin = data.rfind(b"\n", 0, end) + 1
        if begin == 0 and not whole_first:
            return None  # may be cut at the front: a longer window reads it whole
        line, end = data[begin:end], begin - 1
        tries += 1
        try:
            ci = _DECODER.decode(line).ci
        except NOT_JSON:
            if sealed:
                return None
            continue
        if ci is None:
            continue
        if isinstance(ci, CiSeal):
            return ci.last_ring_seq or 0
        if isinstance(ci, CiGap):
            return ci.last_lost_ring_seq
        if isinstance(ci, CiSegmentStart):
            return ci.next_ring_seq - 1
        seq = ring_seq_of(ci)
        if seq is not None:
            return seq
    return None


# slots copied out of a dead process's ring at a time: their timing is taken together (a
# slot at a time costs forty times as much), and a ring of millions is never copied whole
SLOT_CHUNK = 4096


def _slots(region, first: int, end: int):
    """(ticket, slot, timing) for tickets first .. end-1 of the region's ring, in order."""
    cap = region.ring_capacity
    for at in range(first, end, SLOT_CHUNK):
        tickets = np.arange(at, min(at + SLOT_CHUNK, end), dtype=np.int64)
        slots = region.ring[tickets & (cap - 1)]  # a copy
        yield from zip(tickets.tolist(), slots, timings(slots), strict=True)


class _Gaps:
    """Runs of ring seqs a recovered segment holds no line for, each one gap line of its
    reason where the run ends (a new reason ends the run before it)."""

    def __init__(self, lines: ProcessLines, out: list, done: Recovered, now_mono: int) -> None:
        self.lines, self.out, self.done, self.now_mono = lines, out, done, now_mono
        self.first: int | None = None
        self.reason = ""

    def lost(self, seq: int, reason: str) -> None:
        """seq has no line (the run it begins or continues is one gap of its reason)."""
        if self.first is not None and reason != self.reason:
            self.close(seq)
        if self.first is None:
            self.first, self.reason = seq, reason

    def close(self, end: int) -> None:
        """The run before ring seq `end`, if any, as its gap line."""
        if self.first is None:
            return
        self.out.append(self.lines.gap(self.first, end - 1, self.reason, self.now_mono))
        self.done.lost += end - self.first
        self.first = None


def recover(
    region: ShmRegion, logs: Path, compact: bool = True, owner: int | None = None
) -> Recovered:
    """Append the records the process's logs lack as one sealed, recovered segment, its op
    lines in the compact form or (`compact` false) the Inspector form. `owner`: the user whose
    directory `logs` is, whom the caller acts as (acting_as); default this Agent's."""
    h = region.header
    if not int(h["flags"]) & shm_v1.HeaderFlags.LOGS_ENABLED:
        return Recovered(None)
    prefix = segment_prefix(region)
    _remove_unfinished_frames(logs, prefix)
    last, index = logged_through(logs, prefix)
    head = int(h["ring_head"])
    if head <= last:
        return Recovered(None)
    cap = region.ring_capacity
    lines = ProcessLines(h, region.comms.copy(), compact)
    now_mono, now_real = time.monotonic_ns(), time.time_ns()
    out = [lines.segment_start(index, last + 1, now_mono, now_real)]
    done = Recovered(None, first_ring_seq=last + 1)
    # tickets last .. head-1 carry ring seqs last+1 .. head; those older than one ring are
    # overwritten (one gap, whatever their number: the work is one ring at most)
    oldest = max(last, head - cap)
    gaps = _Gaps(lines, out, done, now_mono)
    if oldest > last:
        gaps.lost(last + 1, V.RING_OVERWRITE)
    unmade = 0
    for ticket, slot, timing in _slots(region, oldest, head):
        seq = ticket + 1
        if int(slot["seq"]) != seq:
            gaps.lost(seq, V.RING_OVERWRITE)
            continue
        try:
            line = lines.record(slot, seq, now_real, timing)
        except Exception as e:  # one record the line maker cannot take loses it alone
            if not unmade:
                log.error(
                    "pid %d: ring seq %d made no line (%r); counted lost", int(h["pid"]), seq, e
                )
            unmade += 1
            gaps.lost(seq, V.WRITE_ERROR)
            continue
        if line is None:  # a kind the writer skips too
            gaps.lost(seq, V.RING_OVERWRITE)
            continue
        gaps.close(seq)
        out.append(line)
        done.records += 1
        done.ops += int(slot["kind"]) in (shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P)
    gaps.close(head + 1)
    done.path = _write_sealed(
        logs, f"{prefix}{index:06d}.jsonl", index, out, done, last + 1, head, owner
    )
    log.warning(
        "pid %d died without sealing its logs: %d records (%d ops) only its SHM region held "
        "written to %s%s",
        int(h["pid"]),
        done.records,
        done.ops,
        done.path,
        f", {done.lost} lost" if done.lost else "",
    )
    return done


def _remove_unfinished_frames(logs: Path, prefix: str) -> None:
    """A process killed while its writer compressed a sealed segment leaves the frame half
    written (`<name>.jsonl.zst.partial`) beside the segment it was made from, which stays
    whole: nobody finishes the frame, so it goes. Only regular files of this process's own
    naming are removed; anything else there (a directory planted under such a name) stays."""
    try:
        entries = list(os.scandir(logs))
    except FileNotFoundError:
        return
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".jsonl.zst.partial")):
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("cannot remove %s, left unfinished by a dead writer: %s", entry.path, e)


def _write_sealed(
    logs: Path,
    name: str,
    index: int,
    lines: list[bytes],
    done: Recovered,
    first: int,
    last: int,
    owner: int | None,
) -> Path:
    body = b"".join(lines)
    seal = ProcessLines.seal(
        index,
        body,
        records=len(lines),
        ops=done.ops,
        ring_records=done.records,
        lost=done.lost,
        first_ring_seq=first,
        last_ring_seq=last,
        reason=V.RECOVERED,
        sealed_mono_ns=time.monotonic_ns(),
        sealed_real_ns=time.time_ns(),
    )
    final = logs / name
    partial = logs / (name + ".partial")
    try:
        # a process that died before its writer's first pass left no logs directory (a fresh
        # home has none): made here, as the Profiler would have, through the home's checks
        made = not os.path.lexists(logs)
        make_trusted_dirs(logs, owner)
        if made:  # the segment is durable only once the directory's own entry is
            fsync_directory(logs.parent)
    except HomeError as e:
        raise RecoveryError(
            errno.EPERM, f"cannot write the recovered segment {final}: {e}"
        ) from None
    except OSError as e:  # ENOSPC, EMFILE: tried again, as for the segment itself
        raise RecoveryError(
            e.errno, f"cannot write the recovered segment {final}: {e.strerror}"
        ) from None
    try:
        fd = os.open(
            partial,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            view = memoryview(body + seal)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(partial, final)
        fsync_directory(logs)
    except OSError as e:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise RecoveryError(
            e.errno, f"cannot write the recovered segment {final}: {e.strerror}"
        ) from None
    return final
