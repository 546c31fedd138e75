"""A slave's batches on disk until the master acknowledges them: `<home>/metadata/slave/`.

agent-master-slave v1 delivers events exactly once by sequence numbers within a
`stream_epoch`: every batch is written here (fsynced) before it is sent, and deleted once an
acknowledgement covers it. A slave that restarts with this directory intact continues the same
epoch and resends what the master lacks; one that lost it starts a new epoch (the master then
drops duplicates by the events' natural keys).

Files: `link.json` (epoch, next sequence, the highest step index forwarded per GPU) and
`outbox/<seq>.pb` (one serialized NodeStateBatch each, without its session id, which belongs
to the connection). The total is bounded by COMMINSIGHT_AGENT_OUTBOX_MAX_BYTES: past it the
oldest batches are dropped, their events counted as dropped, and the link starts a new epoch
with a full state (the master could not fill the hole otherwise).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
from pathlib import Path

from google.protobuf.message import DecodeError

from comminsight.durable_files import make_private_dirs, write_atomically
from comminsight.safe_open import read_regular
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb
from comminsight_gen.config_v1 import KEY_BY_NAME

log = logging.getLogger(__name__)

# a batch is split below the master's batch limit, of which this is the largest allowed: a
# bigger file in the outbox (a sparse one planted there) is no batch and is not read whole
BATCH_BYTES_MAX = int(KEY_BY_NAME["COMMINSIGHT_AGENT_MASTER_MAX_BATCH_BYTES"].maximum)
LINK_STATE_BYTES_MAX = 64 << 20  # link.json: the epoch, a sequence number, a step per GPU


def _events_in(data: bytes) -> int:
    batch = pb.NodeStateBatch.FromString(data)
    return len(batch.hang_events) + len(batch.step_summaries)


class SlaveOutbox:
    def __init__(self, home: str | os.PathLike, max_bytes: int) -> None:
        self.dir = Path(home) / home_names.METADATA / home_names.SLAVE
        self.batches_dir = self.dir / home_names.OUTBOX
        self.max_bytes = max_bytes
        self.epoch = 0
        self.next_seq = 1
        self.steps_sent: dict[str, int] = {}  # GPU key -> highest step index put in a batch
        self.sizes: dict[int, int] = {}  # seq -> bytes of the pending batches
        self.events_dropped_total = 0
        self.lost_batches = False  # batches were dropped unsent: a new epoch is needed

    # ---- state on disk -----------------------------------------------------------------

    def load(self) -> None:
        make_private_dirs(self.batches_dir)
        state = None
        try:
            state = json.loads(read_regular(self.dir / home_names.LINK_JSON, LINK_STATE_BYTES_MAX))
            self.epoch = int(state["epoch"])
            self.next_seq = int(state["next_seq"])
            self.steps_sent = {str(k): int(v) for k, v in state.get("steps_sent", {}).items()}
        except FileNotFoundError:
            pass
        except (OSError, *NOT_JSON, KeyError, TypeError, AttributeError) as e:
            log.error("slave link state %s is unreadable (%s): starting a new epoch", self.dir, e)
            state = None
        for path in self.batches_dir.glob("*.pb"):
            try:
                seq = int(path.stem)
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode):  # a link or FIFO: nothing this Agent wrote
                    raise ValueError(f"{path} is not a regular file")
                self.sizes[seq] = st.st_size
            except (ValueError, OSError):
                path.unlink(missing_ok=True)
        if state is None or not self.epoch:
            self.new_epoch()
            return
        # a batch written just before a crash that link.json does not count yet
        self.next_seq = max(self.next_seq, max(self.sizes, default=0) + 1)

    def _save_state(self) -> None:
        state = {"epoch": self.epoch, "next_seq": self.next_seq, "steps_sent": self.steps_sent}
        write_atomically(
            self.dir / home_names.LINK_JSON, json.dumps(state, sort_keys=True).encode()
        )

    def new_epoch(self) -> None:
        """Forget every pending batch and number from 1 in a fresh sequence space."""
        for seq in list(self.sizes):
            self._drop(seq)
        self.epoch = secrets.randbits(64) or 1
        self.next_seq = 1
        self.lost_batches = False
        self._save_state()
        log.info("slave outbox: new stream epoch %016x", self.epoch)

    def _path(self, seq: int) -> Path:
        return self.batches_dir / f"{seq:020d}.pb"

    def _drop(self, seq: int) -> None:
        self._path(seq).unlink(missing_ok=True)
        self.sizes.pop(seq, None)

    # ---- batches -----------------------------------------------------------------------

    @property
    def last_built(self) -> int:
        return self.next_seq - 1

    @property
    def pending_bytes(self) -> int:
        return sum(self.sizes.values())

    def append(self, batch: pb.NodeStateBatch, steps_sent: dict[str, int] | None = None) -> int:
        """Number the batch, make it durable, and return its sequence number."""
        seq = self.next_seq
        batch.batch_seq = seq
        data = batch.SerializeToString()
        write_atomically(self._path(seq), data)
        self.sizes[seq] = len(data)
        self.next_seq = seq + 1
        if steps_sent:
            self.steps_sent.update(steps_sent)
        self._save_state()
        self._bound()
        return seq

    def _bound(self) -> None:
        while self.pending_bytes > self.max_bytes and len(self.sizes) > 1:
            oldest = min(self.sizes)
            try:
                dropped = _events_in(read_regular(self._path(oldest), BATCH_BYTES_MAX))
            except (OSError, ValueError, DecodeError):  # counted as 0: it held nothing readable
                dropped = 0
            self.events_dropped_total += dropped
            self._drop(oldest)
            self.lost_batches = True
            log.error(
                "slave outbox over %d bytes: batch %d dropped unsent (%d events lost)",
                self.max_bytes,
                oldest,
                dropped,
            )

    def pending(self, after: int = 0) -> list[int]:
        return sorted(seq for seq in self.sizes if seq > after)

    def read(self, seq: int) -> bytes | None:
        try:
            return read_regular(self._path(seq), BATCH_BYTES_MAX)
        except FileNotFoundError:
            return None
        except OSError as e:  # not a file, a link, or too big: no batch this Agent wrote
            log.error("slave outbox batch %d refused (%s): dropped unsent", seq, e)
            self._drop(seq)
            self.lost_batches = True
            return None

    def ack(self, last_applied: int) -> None:
        for seq in [s for s in self.sizes if s <= last_applied]:
            self._drop(seq)
