"""A node's state as agent-master-slave v1 rows, read from the mapped SHM regions.

`read_node_rows` copies what a master needs out of every Profiler region of the node (one
`ProcessInfo` per process, one `CommunicatorMember` and one `CommProgress` per communicator
row), in the producing node's clock. `RowDiff` remembers what was last put on the wire, so a
slave sends only the rows that changed (each row carries absolute values and replaces the one
with the same key, so resending an old row can never double-count).

The master's own node goes through the same function, so that every node of the job, local or
remote, reaches the job view (job_view) in one shape; and a node's API answers from the same
rows, read per process (`read_process_rows`), through the master's renderers (api.views).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.receivers.producer_clock import on_reader_clock
from comminsight.agent.receivers.producers import Producer
from comminsight.agent.state.process_labels import uuid_text
from comminsight.agent.state.snapshot import NO_FLAGGED_SEQ, inflight_op, process_view
from comminsight.shm_reader import label_or_none, rank_or_none, record_text
from comminsight_gen.abi import shm_v1
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

_NAME_SOURCES = {
    shm_v1.NameSource.NONE: pb.NAME_SOURCE_NONE,
    shm_v1.NameSource.NCCL: pb.NAME_SOURCE_NCCL,
    shm_v1.NameSource.INJECT: pb.NAME_SOURCE_INJECT,
}
NO_DEVICE = 0xFFFFFFFF  # the shm v1 encoding of "no CUDA device" in unsigned fields


ProcessKey = tuple[int, int]  # (pid, pid_namespace)
# (comm_id, pid, pid_namespace, comm_rank, generation): the process key second and third
RowKey = tuple[int, int, int, int, int]


def process_key(row: pb.ProcessInfo | pb.CommunicatorMember | pb.CommProgress) -> ProcessKey:
    """The protocol key of a process, and the process a membership or progress row belongs
    to. The PID namespace is part of it: pods on one node number their processes each in a
    namespace of their own, so two training processes of one node may share a pid."""
    return row.pid, row.pid_namespace


def row_key(row: pb.CommunicatorMember | pb.CommProgress) -> RowKey:
    """The protocol key of a membership and of its progress. The rank is part of it: a
    process that drives several GPUs holds several ranks of one communicator, each a comm
    table entry of its own whose generation counts from 1 like the others'."""
    return row.comm_id, row.pid, row.pid_namespace, row.comm_rank, row.generation


@dataclass
class NodeRows:
    """State rows by their protocol keys."""

    processes: dict[ProcessKey, pb.ProcessInfo] = field(default_factory=dict)
    members: dict[RowKey, pb.CommunicatorMember] = field(default_factory=dict)
    progress: dict[RowKey, pb.CommProgress] = field(default_factory=dict)


def _opt(value: int) -> int | None:
    """Optional uint32 fields: the ABIs' NO_RANK, and negative 'unknown', become absent."""
    value = rank_or_none(value)
    return None if value is None or value < 0 or value >= NO_DEVICE else value


def process_info(producer: Producer, now_mono_ns: int, stale_ns: int) -> pb.ProcessInfo:
    region = producer.region
    h = region.header
    view = process_view(region, now_mono_ns, stale_ns, lambda _pid: producer.alive())
    info = pb.ProcessInfo(
        pid=max(0, view.pid),
        ingest_state=pb.INGEST_STATE_ACTIVE
        if producer.gone_since_mono_ns is None
        else pb.INGEST_STATE_DRAINING,
        alive=view.alive,
        heartbeat_mono_ns=view.heartbeat_mono_ns,
        heartbeat_real_ns=int(h["heartbeat_real_ns"]),
        device_uuid=uuid_text(h["cuda_uuid"]),
        job_id=view.job_id,
        process_name=record_text(h["process_name"])[:256],
        shm_file=str(producer.path),
        shm_abi_version=int(h["abi_version"]),
        nccl_profiler_abi_version=max(0, int(h["nccl_abi_version"])),
        profiler_version=max(0, int(h["plugin_version"])),
        event_mask=max(0, int(h["event_mask"])),
        hang_threshold_ms=max(0, int(h["hang_threshold_ms"])),
        started_real_ns=view.start_real_ns,
        started_mono_ns=view.start_mono_ns,
        records_read_total=max(0, producer.cursor.next_ticket - producer.cursor.lost),
        records_overwritten_total=producer.cursor.lost,
        fifo_events_dropped_total=region.counter("fifo_events_dropped"),
        log_records_lost_total=region.counter("log_records_lost"),
        pid_namespace=producer.pid_namespace,
    )
    for name, value in (
        ("global_rank", int(h["rank"])),
        ("local_rank", int(h["local_rank"])),
        ("world_size", int(h["world_size"])),
        ("local_world_size", int(h["local_world_size"])),
        ("cuda_device", int(h["cuda_device"])),
    ):
        if (v := _opt(value)) is not None and not (name.endswith("size") and v == 0):
            setattr(info, name, v)
    return info


def _stage(count: int, at: int) -> tuple[int, int]:
    return count, at if count else 0


def comm_rows(
    row,
    pid: int,
    host: str = "",
    inject_names: InjectNames | None = None,
    off: int = 0,
    uid: int | None = None,
    pid_namespace: int = 0,
) -> tuple[pb.CommunicatorMember, pb.CommProgress]:
    """off: the region's mono_offset_ns (its times go onto this Agent's clock); uid: the user
    the process's files belong to (whose Inject lines speak for it); pid_namespace: the one
    its pid is numbered in."""
    comm_id, generation = int(row["comm_id"]), int(row["generation"])
    rank = max(0, int(row["rank"]))
    name = record_text(row["name"])[:1024]
    source = int(row["name_source"])
    if inject_names is not None:
        source = inject_names.name_source(source, host, pid, name, uid)
    member = pb.CommunicatorMember(
        comm_id=comm_id,
        pid=pid,
        pid_namespace=pid_namespace,
        generation=generation,
        comm_rank=rank,
        nranks=max(0, int(row["nranks"])),
        nnodes=max(0, int(row["nnodes"])),
        name=name,
        name_source=_NAME_SOURCES.get(source, pb.NAME_SOURCE_UNSPECIFIED),
        nccl_profiler_abi_version=max(0, int(row["nccl_abi_version"])),
        init_real_ns=int(row["init_real_ns"]),
        init_mono_ns=on_reader_clock(int(row["init_mono_ns"]), off),
        finalize_mono_ns=on_reader_clock(int(row["finalize_mono_ns"]), off)
        or (1 if int(row["state"]) == shm_v1.CommState.FINALIZED else 0),
        device_uuid=uuid_text(row["cuda_uuid"]),
    )
    if (v := _opt(int(row["local_rank"]))) is not None:
        member.local_rank = v
    if (v := _opt(int(row["cuda_device"]))) is not None:
        member.cuda_device = v
    progress = pb.CommProgress(
        comm_id=comm_id,
        pid=pid,
        pid_namespace=pid_namespace,
        generation=generation,
        comm_rank=rank,
        collectives=pb.StageCounters(
            enqueued=int(row["coll_enqueued"]),
            enqueued_mono_ns=on_reader_clock(int(row["coll_enqueued_mono_ns"]), off),
            gpu_started=int(row["coll_started"]),
            gpu_started_mono_ns=on_reader_clock(int(row["coll_started_mono_ns"]), off),
            completed=int(row["coll_completed"]),
            completed_mono_ns=on_reader_clock(int(row["coll_completed_mono_ns"]), off),
        ),
        p2p=pb.StageCounters(
            enqueued=int(row["p2p_enqueued"]),
            enqueued_mono_ns=on_reader_clock(int(row["p2p_enqueued_mono_ns"]), off),
            gpu_started=int(row["p2p_started"]),
            gpu_started_mono_ns=on_reader_clock(int(row["p2p_started_mono_ns"]), off),
            completed=int(row["p2p_completed"]),
            completed_mono_ns=on_reader_clock(int(row["p2p_completed_mono_ns"]), off),
        ),
        inflight_count=max(0, int(row["coll_enqueued"]) - int(row["coll_completed"]))
        + max(0, int(row["p2p_enqueued"]) - int(row["p2p_completed"])),
        hang_flagged_mono_ns=on_reader_clock(int(row["hang_flagged_mono_ns"]), off),
        ops_completed_total=int(row["coll_completed"]) + int(row["p2p_completed"]),
        bytes_completed_total=int(row["bytes_total"]),
    )
    flagged = int(row["hang_flagged_seq"])
    if flagged != NO_FLAGGED_SEQ:
        progress.hang_flagged_seq = flagged
    op = inflight_op(row, off)
    if op is not None:
        inflight = pb.InflightOp(
            seq=op.seq,
            kind=pb.OP_KIND_COLL if op.is_coll else pb.OP_KIND_P2P,
            func=op.func,
            datatype=op.datatype,
            algo=label_or_none(shm_v1.ALGO_LABELS, shm_v1.Algo, int(row["inflight_algo"])) or "",
            proto=label_or_none(shm_v1.PROTO_LABELS, shm_v1.Proto, int(row["inflight_proto"]))
            or "",
            count=op.count,
            size_bytes=op.bytes,
            channels_started=op.channels_started,
            channels_completed=op.channels_stopped,
            enqueued_mono_ns=op.enqueue_mono_ns,
            gpu_started_mono_ns=op.start_mono_ns or 0,
            n_channels=op.n_channels,
            op_index=op.op_index,
            unproven=op.unproven,
        )
        if op.peer is not None:
            inflight.peer_or_root = op.peer
        progress.oldest_inflight.CopyFrom(inflight)
    return member, progress


@dataclass(frozen=True)
class ProcessRows:
    """One process's rows as read from its own region: its `ProcessInfo` and, per
    communicator row, its membership and progress. A node's own API renders from these, each
    process with its own rows: pids repeat on a node whose processes live in PID namespaces
    of their own (pods)."""

    process: pb.ProcessInfo
    comms: tuple[tuple[pb.CommunicatorMember, pb.CommProgress], ...]


def read_process_rows(
    producer: Producer,
    now_mono_ns: int,
    stale_ns: int,
    inject_names: InjectNames | None = None,
) -> ProcessRows | None:
    """None while the region is still being created: nothing in it can be trusted yet."""
    region = producer.region
    if region.state == shm_v1.FileState.CREATING:
        return None
    info = process_info(producer, now_mono_ns, stale_ns)
    host = record_text(region.header["hostname"])
    comms = tuple(
        comm_rows(
            row,
            info.pid,
            host,
            inject_names,
            region.mono_offset_ns,
            producer.uid,
            info.pid_namespace,
        )
        for row in region.comm_entries()
        if int(row["state"]) != shm_v1.CommState.FREE
    )
    return ProcessRows(info, comms)


def read_node_rows(
    producers: Iterable[Producer],
    now_mono_ns: int,
    stale_ns: int,
    inject_names: InjectNames | None = None,
) -> NodeRows:
    rows = NodeRows()
    for producer in producers:
        read = read_process_rows(producer, now_mono_ns, stale_ns, inject_names)
        if read is None:
            continue
        rows.processes[process_key(read.process)] = read.process
        for member, progress in read.comms:
            key = row_key(member)
            rows.members[key] = member
            rows.progress[key] = progress
    return rows


# ---- what changed since the last rows sent ----------------------------------------------


@dataclass
class RowChanges:
    processes: list[pb.ProcessInfo]
    members: list[pb.CommunicatorMember]
    progress: list[pb.CommProgress]
    # rows that vanished while their process stays (a comm entry reused): only a full state
    # tells the master to drop them
    vanished: bool

    def __bool__(self) -> bool:
        return bool(self.processes or self.members or self.progress)


class RowDiff:
    """The serialized form of every row last handed to the outbox, by kind and key. A
    process whose row vanished was retired by ingest (drained and closed): it is sent once
    more as INGEST_STATE_RETIRED, which tells the master to drop it with its rows."""

    def __init__(self) -> None:
        self.sent: dict[tuple, bytes] = {}

    def reset(self) -> None:
        self.sent.clear()

    def changes(self, rows: NodeRows) -> RowChanges:
        current: dict[tuple, tuple[bytes, object]] = {}
        for pkey, p in rows.processes.items():
            current[("p", *pkey)] = (p.SerializeToString(deterministic=True), p)
        for key, m in rows.members.items():
            current[("m", *key)] = (m.SerializeToString(deterministic=True), m)
        for key, g in rows.progress.items():
            current[("g", *key)] = (g.SerializeToString(deterministic=True), g)
        out = RowChanges([], [], [], vanished=False)
        lists = {"p": out.processes, "m": out.members, "g": out.progress}
        for key, (data, msg) in current.items():
            if self.sent.get(key) != data:
                lists[key[0]].append(msg)
        gone = set(self.sent) - set(current)
        # ("p", pid, pid_namespace); ("m" or "g", comm_id, pid, pid_namespace, rank, generation)
        retired = {key[1:3] for key in gone if key[0] == "p"}
        for pid, namespace in sorted(retired):
            out.processes.append(
                pb.ProcessInfo(
                    pid=pid, pid_namespace=namespace, ingest_state=pb.INGEST_STATE_RETIRED
                )
            )
        out.vanished = any(key[0] != "p" and key[2:4] not in retired for key in gone)
        self.sent = {key: data for key, (data, _) in current.items()}
        return out
