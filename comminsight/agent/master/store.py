"""What a master keeps on disk so that a restart loses no slave's event and applies none twice:
`<home>/metadata/master/`.

Per node: `cursors/<node>.json` (the slave's stream epoch and the last batch applied in it),
`hang-events/<node>.jsonl` (every fifo-event record forwarded, base64) and
`steps/<node>.jsonl` (every step summary, one step-summary v1 JSON per line, which the API's
/steps serves beside the master's own, and /job-steps follows as they grow to reconcile the
nodes' step indices).

A batch is committed in this order: its new events appended (and fsynced when there are any),
then the cursor replaced; only then is it acknowledged. The cursor of a batch with no new
event is only kept in memory until `flush_cursors` (every second, and at stop): a master
that crashes before then tells the slave an older batch, the slave cannot resend the ones it
dropped on their acknowledgement, and starts a new epoch with a full state, which loses
nothing (state rows are absolute). Writing a file per state-only batch was a third of the
master's time per batch at 128 nodes. A crash between the two leaves events
whose batch the slave will resend; the events' natural keys (pid and FIFO event_seq; global
rank, pid and step index), loaded back from these files at start, drop the repeats. State rows
are not stored: after a restart the master asks every slave for a full state.

Node names are file names here; agent-master-api's NodeName pattern (checked at registration)
admits no separator and no leading dot.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from comminsight.agent.receivers.fifo_reader import EVENT
from comminsight.durable_files import make_private_dirs
from comminsight.line_reader import complete_lines
from comminsight.safe_open import UntrustedFile, check_fd, open_regular, read_regular
from comminsight.step_file_bounds import STEP_LINE_BYTES_MAX
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.step_summary_v1 import StepSummary

log = logging.getLogger(__name__)

CURSOR_BYTES_MAX = 1 << 20  # a cursor is two numbers; a bigger file is not one
HANG_EVENT_LINE_BYTES_MAX = 1 << 20  # a line holds one fifo-event record, under 1 KiB
# the event files grow for as long as the job runs and are read a chunk at a time; the bound
# only refuses what no run writes (a sparse file planted to make the start read for hours)
STORE_FILE_BYTES_MAX = 1 << 40
INVALID = "invalid"  # where a file refused at load is moved


@dataclass
class Cursor:
    epoch: int
    last_applied: int


def hang_event_key(record: bytes) -> tuple[bytes, int, int, int]:
    """One event of one process: its host (a pod's own), pid, count and detection time. A
    node's pods number their processes from the same pids and count events from 1 each; an
    event sent twice is the same bytes."""
    e = np.frombuffer(record, dtype=EVENT, count=1)[0]
    return bytes(e["hostname"]), int(e["pid"]), int(e["event_seq"]), int(e["detect_real_ns"])


def step_key(s: StepSummary) -> tuple[str, int, int, int]:
    """One Step of one GPU's process: its host (a pod's own), rank, pid and Step index."""
    pid = s.pid if isinstance(s.pid, int) else 0
    return s.host, s.global_rank, pid, s.step_index


@dataclass
class Committed:
    hang_events: list[bytes] = field(default_factory=list)
    # the node each new hang event came from (the sender's, or the one a relay names)
    hang_origins: list[str] = field(default_factory=list)
    steps: int = 0
    # the new step summaries, as (origin node, JSON): what a relay passes up
    step_lines: list[tuple[str, bytes]] = field(default_factory=list)
    duplicates: int = 0


class MasterStore:
    def __init__(self, home: str | os.PathLike) -> None:
        self.dir = Path(home) / home_names.METADATA / home_names.MASTER
        self.cursors: dict[str, Cursor] = {}
        self.hang_keys: dict[str, set[tuple[int, int]]] = {}
        self.step_keys: dict[str, set[tuple[str, int, int, int]]] = {}
        self.hang_events_total = 0
        self.steps_total = 0
        self.unwritten: set[str] = set()  # nodes whose cursor moved in memory only

    @property
    def steps_dir(self) -> Path:
        return self.dir / home_names.STEPS

    def load(self) -> None:
        for sub in (home_names.CURSORS, home_names.HANG_EVENTS, home_names.STEPS):
            make_private_dirs(self.dir / sub)
        for path in (self.dir / home_names.CURSORS).glob("*.json"):
            try:
                data = json.loads(read_regular(path, CURSOR_BYTES_MAX))
                self.cursors[path.stem] = Cursor(int(data["epoch"]), int(data["last_applied"]))
            except (OSError, *NOT_JSON, KeyError, TypeError) as e:
                # without it the slave's next batches start its epoch afresh; events are
                # still deduplicated by key
                log.error("master cursor %s unreadable (%s); ignored", path, e)
        for path in (self.dir / home_names.HANG_EVENTS).glob("*.jsonl"):
            keys = self.hang_keys.setdefault(path.stem, set())
            for line in _complete_lines(path, HANG_EVENT_LINE_BYTES_MAX):
                try:
                    keys.add(hang_event_key(base64.b64decode(json.loads(line)["record"])))
                except (*NOT_JSON, KeyError, TypeError):
                    continue
            self.hang_events_total += len(keys)
        decoder = msgspec.json.Decoder(StepSummary)
        for path in self.steps_dir.glob("*.jsonl"):
            keys = self.step_keys.setdefault(path.stem, set())
            for line in _complete_lines(path, STEP_LINE_BYTES_MAX):
                try:
                    keys.add(step_key(decoder.decode(line)))
                except NOT_JSON:
                    continue
            self.steps_total += len(keys)

    def commit(
        self,
        node: str,
        epoch: int,
        seq: int,
        hang_events: list[tuple],
        steps: list[tuple],
    ) -> Committed:
        """Append the events not seen before, then move the node's cursor to (epoch, seq).
        hang_events: (record, read_real_ns[, origin node]); steps: (summary, JSON[, origin
        node]). An event is kept and deduplicated under its origin (default: `node`), the node
        whose FIFO or engine it came from, whichever relay passed it on."""
        out = Committed()
        lines: dict[str, list[bytes]] = {}
        for record, read_real_ns, *origin in hang_events:
            where = origin[0] if origin and origin[0] else node
            key = hang_event_key(record)
            keys = self.hang_keys.setdefault(where, set())
            if key in keys:
                out.duplicates += 1
                continue
            keys.add(key)
            out.hang_events.append(record)
            out.hang_origins.append(where)
            entry = {"read_real_ns": read_real_ns, "record": base64.b64encode(record).decode()}
            lines.setdefault(where, []).append(json.dumps(entry).encode())
        step_lines: dict[str, list[bytes]] = {}
        for summary, raw, *origin in steps:
            where = origin[0] if origin and origin[0] else node
            key = step_key(summary)
            keys = self.step_keys.setdefault(where, set())
            if key in keys:
                out.duplicates += 1
                continue
            keys.add(key)
            step_lines.setdefault(where, []).append(raw)
            out.step_lines.append((where, raw))
        for where, chunk in lines.items():
            _append(self.dir / home_names.HANG_EVENTS / f"{where}.jsonl", chunk)
        for where, chunk in step_lines.items():
            _append(self.steps_dir / f"{where}.jsonl", chunk)
        out.steps = len(out.step_lines)
        self.hang_events_total += len(out.hang_events)
        self.steps_total += out.steps
        self.cursors[node] = Cursor(epoch, seq)
        if lines or step_lines:
            self._write_cursor(node, fsync=True)
        else:
            self.unwritten.add(node)
        return out

    def _write_cursor(self, node: str, fsync: bool) -> None:
        cursor = self.cursors[node]
        _replace(
            self.dir / home_names.CURSORS / f"{node}.json",
            json.dumps({"epoch": cursor.epoch, "last_applied": cursor.last_applied}).encode(),
            fsync=fsync,
        )
        self.unwritten.discard(node)

    def flush_cursors(self) -> None:
        """Write the cursors of state-only batches (no fsync: see the module comment)."""
        for node in sorted(self.unwritten):
            self._write_cursor(node, fsync=False)


def _complete_lines(path: Path, max_line: int) -> Iterator[bytes]:
    """The file's lines up to the last newline: a line cut by a crash is not an event, nor is
    one longer than any the master writes. A file that is not a regular one (a FIFO or a link
    planted in the store) is moved aside into `invalid/`, so that nothing is appended to it."""
    try:
        f = open_regular(path, STORE_FILE_BYTES_MAX)
    except UntrustedFile as e:
        _set_aside(path, e)
        return
    except OSError as e:
        log.error("master store file %s unreadable (%s); its events are not deduplicated", path, e)
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        for line in complete_lines(f.fileno(), 0, size, max_line):
            if line.data is None:
                log.error(
                    "%s: a line of %d bytes at byte %d skipped", path, line.length, line.offset
                )
            elif line.data.strip():
                yield line.data


def _set_aside(path: Path, err: UntrustedFile) -> None:
    target = path.parent / INVALID
    log.error("master store file %s refused (%s); moved to %s/", path, err.why, target)
    try:
        make_private_dirs(target)
        os.replace(path, target / path.name)  # a rename: never opens what it moves
    except OSError as e:
        log.error("cannot move %s aside: %s", path, e)


def _append(path: Path, lines: list[bytes]) -> None:
    # never through a link, never blocked on a FIFO, only into a regular file (read and
    # write: its last byte is read)
    fd = os.open(
        path,
        os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        0o600,
    )
    try:
        st = check_fd(fd, path, "regular file", owner=None, shared_ok=True)
        # after a line cut by a crash, the first new one starts on a line of its own: glued
        # to the cut one it would be lost with it at the next load
        cut = st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n"
        os.write(fd, b"\n" * cut + b"".join(line.rstrip(b"\n") + b"\n" for line in lines))
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(path: Path, data: bytes, fsync: bool) -> None:
    """Atomic replacement; fsynced only when it commits events (see the module comment)."""
    temp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(temp)  # left by a crash, or planted: a link or a FIFO is not opened
    except FileNotFoundError:
        pass
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
