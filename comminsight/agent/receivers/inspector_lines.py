"""inspector-log v1 lines made from SHM op slots, as the Profiler's log writer makes them
(profiler/src/logwriter.c): the Agent writes them when a process died before its writer
could (log_recovery). Field for field the writer's choices: the same names, the same optional
fields left out in the same cases, the same execution time and bandwidth formulas, so a
reader cannot tell a recovered line from a written one but by its segment's seal. Every
field name and kind is the schema's (comminsight_gen.inspector_log_v1_fields, the names the
writer's C header gives it), and so is every op line object's key order
(comminsight_gen.inspector_log_v1_codec, the order of the writer's generated encoders).
"""

from __future__ import annotations

import math
import zlib

import msgspec
import numpy as np

from comminsight.shm_reader import ROOTED_FUNCS, record_text
from comminsight.slot_timing import bandwidths_gbs, durations_ns
from comminsight_gen.abi import shm_v1
from comminsight_gen.inspector_log_v1_codec import O, in_order, ordered
from comminsight_gen.inspector_log_v1_fields import SCHEMA_VERSION, F, V

_ENCODE = msgspec.json.Encoder().encode
_U64 = (1 << 64) - 1
Timing = tuple[int, float, float]  # exec_us, algbw, busbw
_NAME_SOURCES = {
    int(shm_v1.NameSource.INJECT): V.INJECT,
    int(shm_v1.NameSource.NCCL): V.NCCL,
}


def _label(labels: dict, enum_type, code: int, fallback: str) -> str:
    try:
        return labels[enum_type(code)]
    except (ValueError, KeyError):
        return fallback


class ProcessLines:
    """Line maker for one process: its header (identity, clock pair) and its comm table."""

    def __init__(self, header, comms: np.ndarray, compact: bool = True) -> None:
        self.host = record_text(header["hostname"])
        self.pid = int(header["pid"])
        self.start_real_ns = int(header["start_real_ns"])
        self.start_mono_ns = int(header["start_mono_ns"])
        version = int(header["plugin_version"])
        self.version = f"{version >> 16}.{(version >> 8) & 0xFF}.{version & 0xFF}"
        self.header = header
        self.comms = comms  # the whole table, indexed by op_slot.comm_index
        self.compact = compact  # op lines in the compact form (COMMINSIGHT_PROFILER_LOG_FORMAT)

    def real(self, mono_ns: int) -> int:
        return (self.start_real_ns + mono_ns - self.start_mono_ns) & _U64

    def comm_row(self, index: int):
        return self.comms[index] if 0 <= index < len(self.comms) else None

    # ---- identities ----

    def comm_identity(self, e) -> dict:
        out: dict = {F.COMM_ID: f"{int(e['comm_id']):016x}"}
        name = record_text(e["name"])
        if name:
            out[F.COMM_NAME] = name
        out[F.NAME_SOURCE] = _NAME_SOURCES.get(int(e["name_source"]), V.NONE)
        out[F.COMM_RANK] = int(e["rank"])
        out[F.NRANKS] = int(e["nranks"])
        out[F.NNODES] = int(e["nnodes"])
        if int(e["local_rank"]) >= 0:
            out[F.LOCAL_RANK] = int(e["local_rank"])
        if int(e["cuda_device"]) >= 0:
            out[F.CUDA_DEVICE] = int(e["cuda_device"])
        out[F.PID] = self.pid
        out[F.HOST] = self.host
        return out

    def segment_start(self, index: int, next_ring_seq: int, now_mono: int, now_real: int) -> bytes:
        h = self.header
        process: dict = {
            F.HOST: self.host,
            F.PID: self.pid,
            F.START_REAL_NS: self.start_real_ns,
            F.PROFILER_VERSION: self.version,
        }
        job = record_text(h["job_id"])
        if job:
            process[F.JOB_ID] = job
        for key, field in ((F.GLOBAL_RANK, "rank"), (F.LOCAL_RANK, "local_rank")):
            if int(h[field]) >= 0:
                process[key] = int(h[field])
        if int(h["world_size"]) >= 1:  # WORLD_SIZE=0 is no world: left out, as the writer does
            process[F.WORLD_SIZE] = int(h["world_size"])
        live = [
            self.comm_identity(e) for e in self.comms if int(e["state"]) == shm_v1.CommState.ACTIVE
        ]
        return self._line(
            {
                F.KIND: V.SEGMENT_START,
                F.SCHEMA_VERSION: SCHEMA_VERSION,
                F.SEGMENT_INDEX: index,
                F.PROCESS: process,
                F.CLOCK: {F.MONO_NS: now_mono, F.REAL_NS: now_real},
                F.COMMUNICATORS: live,
                F.NEXT_RING_SEQ: next_ring_seq,
            }
        )

    # ---- ring records ----

    def record(
        self, r, ring_seq: int, now_real_ns: int, timing: Timing | None = None
    ) -> bytes | None:
        """The line of one slot; None for a kind the writer skips too. `timing`: the op's,
        where the caller took a whole batch's at once (timings)."""
        kind = int(r["kind"])
        if kind in (shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P):
            return self.op_line(r, ring_seq, now_real_ns, timing)
        e = self.comm_row(int(r["comm_index"]))
        if e is None:
            return None
        if kind == shm_v1.RecordKind.COMM_INIT:
            return self._line(
                {
                    F.KIND: V.COMM_INIT,
                    F.SCHEMA_VERSION: SCHEMA_VERSION,
                    F.RING_SEQ: ring_seq,
                    F.COMM: self.comm_identity(e),
                    F.PROFILER_ABI: f"v{int(e['nccl_abi_version'])}",
                    F.INIT_MONO_NS: int(e["init_mono_ns"]),
                    F.INIT_REAL_NS: int(e["init_real_ns"]),
                }
            )
        if kind == shm_v1.RecordKind.COMM_FINALIZE:
            at = int(r["host_start_mono_ns"])
            line: dict = {
                F.KIND: V.COMM_FINALIZE,
                F.SCHEMA_VERSION: SCHEMA_VERSION,
                F.RING_SEQ: ring_seq,
                F.COMM_ID: f"{int(r['comm_id']):016x}",
                F.COMM_RANK: int(r["rank"]),
                F.FINALIZE_MONO_NS: at,
                F.FINALIZE_REAL_NS: self.real(at),
                F.COLL_COUNT: int(e["coll_completed"]),
                F.P2P_COUNT: int(e["p2p_completed"]),
            }
            if int(e["coll_completed"]):
                line[F.LAST_COLL_SEQ] = int(e["coll_completed"]) - 1
            line[F.INFLIGHT_COUNT] = int(e["inflight_count"])
            return self._line(line)
        if kind == shm_v1.RecordKind.HANG:
            return self.hang_line(r, e, ring_seq)
        return None

    def op_line(self, r, ring_seq: int, now_real_ns: int, timing: Timing | None = None) -> bytes:
        if self.compact:
            return self.compact_op_line(r, ring_seq, timing)
        e = self.comm_row(int(r["comm_index"]))
        coll = int(r["kind"]) == shm_v1.RecordKind.COLL
        exec_us, algbw, busbw = timing or timings(_one(r))[0]
        header: dict = {F.ID: f"0x{int(r['comm_id']):x}"}
        if e is not None and record_text(e["name"]):
            header[F.COMM_NAME] = record_text(e["name"])
        header[F.RANK] = int(r["rank"])
        header[F.N_RANKS] = int(r["nranks"])
        header[F.NNODES] = int(e["nnodes"]) if e is not None else 1
        metadata = {
            F.INSPECTOR_OUTPUT_FORMAT_VERSION: "v4.0",
            F.GIT_REV: f"comminsight-{self.version}",
            F.REC_MECHANISM: "nccl_profiler_interface",
            F.DUMP_TIMESTAMP_US: now_real_ns // 1000,
            F.HOSTNAME: self.host,
            F.PID: self.pid,
        }
        timing = _label(
            shm_v1.TIMING_SOURCE_LABELS, shm_v1.TimingSource, int(r["timing_source"]), "none"
        )
        func = _func_name(r)
        if coll:
            perf_key, perf = (
                F.COLL_PERF,
                {
                    F.COLL: func,
                    F.COLL_SN: int(r["op_seq"]),
                    F.COLL_MSG_SIZE_BYTES: int(r["bytes"]),
                    F.COLL_EXEC_TIME_US: exec_us,
                    F.COLL_TIMING_SOURCE: timing,
                    F.COLL_ALGOBW_GBS: algbw,
                    F.COLL_BUSBW_GBS: busbw,
                },
            )
        else:
            perf_key, perf = (
                F.P2P_PERF,
                {
                    F.P2P: func,
                    F.P2P_SN: int(r["op_seq"]),
                    F.P2P_PEER: int(r["peer"]),
                    F.P2P_MSG_SIZE_BYTES: int(r["bytes"]),
                    F.P2P_EXEC_TIME_US: exec_us,
                    F.P2P_TIMING_SOURCE: timing,
                    F.P2P_ALGOBW_GBS: algbw,
                    F.P2P_BUSBW_GBS: busbw,
                },
            )
        ci: dict = {
            F.KIND: V.COLL if coll else V.P2P,
            F.SCHEMA_VERSION: SCHEMA_VERSION,
            F.RING_SEQ: ring_seq,
            F.OP_INDEX: int(r["comm_op_index"]),
            F.COUNT: int(r["count"]),
            F.DATATYPE: _label(
                shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(r["datatype"]), "Unknown"
            ),
        }
        if coll:
            if func in ROOTED_FUNCS and int(r["peer"]) >= 0:
                ci[F.ROOT] = int(r["peer"])
            ci[F.ALGO] = _label(shm_v1.ALGO_LABELS, shm_v1.Algo, int(r["algo"]), "UNKNOWN")
            ci[F.PROTO] = _label(shm_v1.PROTO_LABELS, shm_v1.Proto, int(r["proto"]), "UNKNOWN")
            ci[F.N_CHANNELS] = int(r["n_channels"])
            ci[F.N_WARPS] = int(r["n_warps"])
        else:
            ci[F.N_CHANNELS] = int(r["n_channels"])
        if int(r["stream"]):
            ci[F.STREAM] = f"0x{int(r['stream']):x}"
        flags = int(r["flags"])
        ci[F.GRAPH_CAPTURED] = bool(flags & shm_v1.SlotFlags.GRAPH_CAPTURED)
        if int(r["group_id"]):
            ci[F.GROUP_ID] = int(r["group_id"])
        if int(r["user_tag"]):
            ci[F.USER_TAG] = int(r["user_tag"])
        if coll and record_text(r["kernel_variant"]):  # collectives' only
            ci[F.KERNEL_VARIANT] = record_text(r["kernel_variant"])
        if coll and flags & shm_v1.SlotFlags.SYM_COLL:
            ci[F.SYM_COLL] = True
        ci[F.TID] = int(r["tid"])
        ci[F.HOST_START_MONO_NS] = int(r["host_start_mono_ns"])
        ci[F.HOST_STOP_MONO_NS] = int(r["host_stop_mono_ns"])
        if int(r["complete_mono_ns"]):
            ci[F.HOST_COMPLETE_MONO_NS] = int(r["complete_mono_ns"])
        if int(r["timing_source"]) == shm_v1.TimingSource.KERNEL_GPU:
            ci[F.GPU_START_GLOBALTIMER_NS] = int(r["gpu_start_ticks"])
            ci[F.GPU_STOP_GLOBALTIMER_NS] = int(r["gpu_end_ticks"])
        ci[F.CHANNELS_COMPLETED] = int(r["kernel_ch_count"])
        ci[F.FORCED_COMPLETE] = bool(flags & shm_v1.SlotFlags.FORCED_COMPLETE)
        line = {F.HEADER: header, F.METADATA: metadata, perf_key: perf, F.CI: ci}
        return _ENCODE(ordered(O.INSPECTOR_LOG_RECORD, line)) + b"\n"

    def compact_op_line(self, r, ring_seq: int, timing: Timing | None = None) -> bytes:
        """The compact form of an op line (kinds c and p), value for value the writer's."""
        e = self.comm_row(int(r["comm_index"]))
        coll = int(r["kind"]) == shm_v1.RecordKind.COLL
        ci: dict = {
            F.KIND: V.C if coll else V.P,
            F.Q: ring_seq,
            F.C: f"{int(r['comm_id']):016x}",
        }
        if e is not None and record_text(e["name"]):
            ci[F.CN] = record_text(e["name"])
        ci[F.R] = int(r["rank"])
        ci[F.N] = int(r["nranks"])
        ci[F.NN] = int(e["nnodes"]) if e is not None else 1
        func = _func_name(r)
        ci[F.F] = func
        ci[F.S] = int(r["op_seq"])
        ci[F.I] = int(r["comm_op_index"])
        ci[F.E] = int(r["count"])
        ci[F.B] = int(r["bytes"])
        ci[F.D] = _label(shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(r["datatype"]), "Unknown")
        peer = int(r["peer"])
        if coll:
            if func in ROOTED_FUNCS and peer >= 0:
                ci[F.RT] = peer
            ci[F.A] = _label(shm_v1.ALGO_LABELS, shm_v1.Algo, int(r["algo"]), "UNKNOWN")
            ci[F.PT] = _label(shm_v1.PROTO_LABELS, shm_v1.Proto, int(r["proto"]), "UNKNOWN")
            ci[F.CH] = int(r["n_channels"])
            ci[F.W] = int(r["n_warps"])
        else:
            if peer >= 0:
                ci[F.PE] = peer
            ci[F.CH] = int(r["n_channels"])
        if int(r["stream"]):
            ci[F.ST] = f"{int(r['stream']):x}"
        flags = int(r["flags"])
        if flags & shm_v1.SlotFlags.GRAPH_CAPTURED:
            ci[F.GC] = True
        if int(r["group_id"]):
            ci[F.GR] = int(r["group_id"])
        if int(r["user_tag"]):
            ci[F.UT] = int(r["user_tag"])
        if coll and record_text(r["kernel_variant"]):  # collectives' only
            ci[F.KV] = record_text(r["kernel_variant"])
        if coll and flags & shm_v1.SlotFlags.SYM_COLL:
            ci[F.SY] = True
        if int(r["tid"]):
            ci[F.T] = int(r["tid"])
        source = int(r["timing_source"])
        ci[F.TS] = _label(shm_v1.TIMING_SOURCE_LABELS, shm_v1.TimingSource, source, "none")
        _, _, busbw = timing or timings(_one(r))[0]
        if math.isfinite(busbw):
            ci[F.BW] = busbw
        start = int(r["host_start_mono_ns"])
        ci[F.H] = start
        ci[F.HS] = _signed(int(r["host_stop_mono_ns"]) - start)
        if int(r["complete_mono_ns"]):
            ci[F.HC] = _signed(int(r["complete_mono_ns"]) - start)
        g0, g1 = int(r["gpu_start_ticks"]), int(r["gpu_end_ticks"])
        if source == shm_v1.TimingSource.KERNEL_GPU:
            ci[F.G0] = g0
            ci[F.GD] = _signed(g1 - g0)
        ci[F.CC] = int(r["kernel_ch_count"])
        if flags & shm_v1.SlotFlags.FORCED_COMPLETE:
            ci[F.FC] = True
        return self._line(ci)

    def hang_line(self, r, e, ring_seq: int) -> bytes:
        detected = int(r["complete_mono_ns"])
        line: dict = {
            F.KIND: V.HANG_EVIDENCE,
            F.SCHEMA_VERSION: SCHEMA_VERSION,
            F.RING_SEQ: ring_seq,
            F.COMM_ID: f"{int(r['comm_id']):016x}",
            F.COMM_RANK: int(r["rank"]),
        }
        if record_text(e["name"]):
            line[F.COMM_NAME] = record_text(e["name"])
        p2p = int(r["hang_op_kind"]) == shm_v1.RecordKind.P2P
        line[F.OP_KIND] = V.P2P if p2p else V.COLL
        func = _func_name(r)
        line[F.FUNC] = func
        line[F.SEQ] = int(r["op_seq"])
        line[F.OP_INDEX] = int(r["comm_op_index"])
        line[F.COUNT] = int(r["count"])
        line[F.DATATYPE] = _label(
            shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(r["datatype"]), "Unknown"
        )
        line[F.SIZE_BYTES] = int(r["bytes"])
        if int(r["peer"]) >= 0:
            line[F.ROOT if func in ROOTED_FUNCS else F.PEER] = int(r["peer"])
        line[F.N_CHANNELS] = int(r["n_channels"])
        line[F.CHANNELS_STARTED] = int(r["channels_started"])
        line[F.CHANNELS_COMPLETED] = int(r["kernel_ch_count"])
        line[F.ENQUEUED_MONO_NS] = int(r["host_start_mono_ns"])
        if int(r["host_stop_mono_ns"]):
            line[F.GPU_STARTED_MONO_NS] = int(r["host_stop_mono_ns"])
        line[F.AGE_NS] = (detected - int(r["host_start_mono_ns"])) & _U64
        line[F.THRESHOLD_NS] = int(r["hang_threshold_ms"]) * 1_000_000
        line[F.DETECTED_MONO_NS] = detected
        line[F.DETECTED_REAL_NS] = self.real(detected)
        line[F.PROGRESS] = _progress(e)
        line[F.FIFO_EVENT_WRITTEN] = bool(int(r["flags"]) & shm_v1.SlotFlags.FIFO_WRITTEN)
        return self._line(line)

    @staticmethod
    def gap(first: int, last: int, reason: str, detected_mono_ns: int) -> bytes:
        return ProcessLines._line(
            {
                F.KIND: V.GAP,
                F.SCHEMA_VERSION: SCHEMA_VERSION,
                F.REASON: reason,
                F.LOST_COUNT: last - first + 1,
                F.FIRST_LOST_RING_SEQ: first,
                F.LAST_LOST_RING_SEQ: last,
                F.DETECTED_MONO_NS: detected_mono_ns,
            }
        )

    @staticmethod
    def seal(
        index: int,
        body: bytes,
        records: int,
        ops: int,
        ring_records: int,
        lost: int,
        first_ring_seq: int,
        last_ring_seq: int,
        reason: str,
        sealed_mono_ns: int,
        sealed_real_ns: int,
    ) -> bytes:
        """The seal line of a segment whose lines before it are `body` (`records` of them)."""
        return ProcessLines._line(
            {
                F.KIND: V.SEAL,
                F.SCHEMA_VERSION: SCHEMA_VERSION,
                F.SEGMENT_INDEX: index,
                F.RECORD_COUNT: records,
                F.BYTE_COUNT: len(body),
                F.CRC32: zlib.crc32(body),
                F.OP_COUNT: ops,
                F.RING_RECORD_COUNT: ring_records,
                F.LOST_COUNT: lost,
                F.FIRST_RING_SEQ: first_ring_seq,
                F.LAST_RING_SEQ: last_ring_seq,
                F.REASON: reason,
                F.SEALED_MONO_NS: sealed_mono_ns,
                F.SEALED_REAL_NS: sealed_real_ns,
            }
        )

    @staticmethod
    def _line(ci: dict) -> bytes:
        """A line of CommInsight's own kinds: the ci object alone (the line's one key), every
        object of it in the schema's key order."""
        return _ENCODE({F.CI: in_order(ci)}) + b"\n"


def _func_name(r) -> str:
    if int(r["func"]) == shm_v1.Func.UNKNOWN and record_text(r["raw_name"]):
        return record_text(r["raw_name"])
    return _label(shm_v1.FUNC_LABELS, shm_v1.Func, int(r["func"]), "Unknown")


def _signed(difference: int) -> int:
    """A difference of two unsigned 64-bit clock reads as the writer prints it: wrapped to a
    signed 64-bit number."""
    return ((difference + (1 << 63)) & _U64) - (1 << 63)


def timings(records: np.ndarray) -> list[Timing]:
    """Each record's execution time (whole us), algorithm and bus bandwidth (GB/s), as the log
    writer prints them: the one definition the writer and the Agent share (slot_timing), for
    a whole batch at once (a record at a time costs ten times as much)."""
    ns = durations_ns(records)
    algbw, busbw = bandwidths_gbs(records, ns.astype(np.float64) / 1e9)
    return [
        (int(n) // 1000, round(a, 6), round(b, 6))
        for n, a, b in zip(ns.tolist(), algbw.tolist(), busbw.tolist(), strict=True)
    ]


def _one(r) -> np.ndarray:
    return np.array([r], dtype=r.dtype)


def _progress(e) -> dict:
    coll: dict = {}
    if int(e["coll_enqueued"]):
        coll[F.LAST_ENQUEUED_SEQ] = int(e["coll_enqueued"]) - 1
        coll[F.LAST_ENQUEUED_MONO_NS] = int(e["coll_enqueued_mono_ns"])
    if int(e["coll_started"]):
        coll[F.LAST_GPU_STARTED_SEQ] = int(e["coll_started"]) - 1
        coll[F.LAST_GPU_STARTED_MONO_NS] = int(e["coll_started_mono_ns"])
    if int(e["coll_completed"]):
        coll[F.LAST_COMPLETED_SEQ] = int(e["coll_completed"]) - 1
        coll[F.LAST_COMPLETED_MONO_NS] = int(e["coll_completed_mono_ns"])
    p2p: dict = {}
    if int(e["p2p_enqueued"]):
        p2p[F.LAST_ENQUEUED_SEQ] = int(e["p2p_enqueued"]) - 1
        p2p[F.LAST_ENQUEUED_MONO_NS] = int(e["p2p_enqueued_mono_ns"])
    if int(e["p2p_completed"]):
        p2p[F.LAST_COMPLETED_SEQ] = int(e["p2p_completed"]) - 1
        p2p[F.LAST_COMPLETED_MONO_NS] = int(e["p2p_completed_mono_ns"])
    return {F.COLLECTIVES: coll, F.P2P: p2p, F.INFLIGHT_COUNT: int(e["inflight_count"])}
