"""inspector-log v1 lines made from SHM op slots, as the Profiler's log writer makes them
(profiler/src/logwriter.c): the Agent writes them when a process died before its writer
could (log_recovery). Field for field the writer's choices: the same names, the same optional
fields left out in the same cases, the same execution time and bandwidth formulas, so a
reader cannot tell a recovered line from a written one but by its segment's seal.
"""

from __future__ import annotations

import msgspec
import numpy as np

from comminsight.shm_reader import ROOTED_FUNCS, record_text
from comminsight_gen.abi import shm_v1

_ENCODE = msgspec.json.Encoder().encode
_U64 = (1 << 64) - 1
_NAME_SOURCES = {
    int(shm_v1.NameSource.INJECT): "inject",
    int(shm_v1.NameSource.NCCL): "nccl",
}
_TRAFFIC_TIMES_N = {
    int(shm_v1.Func.REDUCE_SCATTER),
    int(shm_v1.Func.ALL_GATHER),
    int(shm_v1.Func.ALL_TO_ALL),
}


def _label(labels: dict, enum_type, code: int, fallback: str) -> str:
    try:
        return labels[enum_type(code)]
    except (ValueError, KeyError):
        return fallback


class ProcessLines:
    """Line maker for one process: its header (identity, clock pair) and its comm table."""

    def __init__(self, header, comms: np.ndarray) -> None:
        self.host = record_text(header["hostname"])
        self.pid = int(header["pid"])
        self.start_real_ns = int(header["start_real_ns"])
        self.start_mono_ns = int(header["start_mono_ns"])
        version = int(header["plugin_version"])
        self.version = f"{version >> 16}.{(version >> 8) & 0xFF}.{version & 0xFF}"
        self.header = header
        self.comms = comms  # the whole table, indexed by op_slot.comm_index

    def real(self, mono_ns: int) -> int:
        return (self.start_real_ns + mono_ns - self.start_mono_ns) & _U64

    def comm_row(self, index: int):
        return self.comms[index] if 0 <= index < len(self.comms) else None

    # ---- identities ----

    def comm_identity(self, e) -> dict:
        out: dict = {"comm_id": f"{int(e['comm_id']):016x}"}
        name = record_text(e["name"])
        if name:
            out["comm_name"] = name
        out["name_source"] = _NAME_SOURCES.get(int(e["name_source"]), "none")
        out.update(comm_rank=int(e["rank"]), nranks=int(e["nranks"]), nnodes=int(e["nnodes"]))
        if int(e["local_rank"]) >= 0:
            out["local_rank"] = int(e["local_rank"])
        if int(e["cuda_device"]) >= 0:
            out["cuda_device"] = int(e["cuda_device"])
        out.update(pid=self.pid, host=self.host)
        return out

    def segment_start(self, index: int, next_ring_seq: int, now_mono: int, now_real: int) -> bytes:
        h = self.header
        process: dict = {
            "host": self.host,
            "pid": self.pid,
            "start_real_ns": self.start_real_ns,
            "profiler_version": self.version,
        }
        job = record_text(h["job_id"])
        if job:
            process["job_id"] = job
        for key, field in (("global_rank", "rank"), ("local_rank", "local_rank")):
            if int(h[field]) >= 0:
                process[key] = int(h[field])
        if int(h["world_size"]) >= 0:
            process["world_size"] = int(h["world_size"])
        live = [
            self.comm_identity(e) for e in self.comms if int(e["state"]) == shm_v1.CommState.ACTIVE
        ]
        return self._line(
            {
                "kind": "segment_start",
                "schema_version": 1,
                "segment_index": index,
                "process": process,
                "clock": {"mono_ns": now_mono, "real_ns": now_real},
                "communicators": live,
                "next_ring_seq": next_ring_seq,
            }
        )

    # ---- ring records ----

    def record(self, r, ring_seq: int, now_real_ns: int) -> bytes | None:
        """The line of one slot; None for a kind the writer skips too."""
        kind = int(r["kind"])
        if kind in (shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P):
            return self.op_line(r, ring_seq, now_real_ns)
        e = self.comm_row(int(r["comm_index"]))
        if e is None:
            return None
        if kind == shm_v1.RecordKind.COMM_INIT:
            return self._line(
                {
                    "kind": "comm_init",
                    "schema_version": 1,
                    "ring_seq": ring_seq,
                    "comm": self.comm_identity(e),
                    "profiler_abi": f"v{int(e['nccl_abi_version'])}",
                    "init_mono_ns": int(e["init_mono_ns"]),
                    "init_real_ns": int(e["init_real_ns"]),
                }
            )
        if kind == shm_v1.RecordKind.COMM_FINALIZE:
            at = int(r["host_start_mono_ns"])
            line: dict = {
                "kind": "comm_finalize",
                "schema_version": 1,
                "ring_seq": ring_seq,
                "comm_id": f"{int(r['comm_id']):016x}",
                "comm_rank": int(r["rank"]),
                "finalize_mono_ns": at,
                "finalize_real_ns": self.real(at),
                "coll_count": int(e["coll_completed"]),
                "p2p_count": int(e["p2p_completed"]),
            }
            if int(e["coll_completed"]):
                line["last_coll_seq"] = int(e["coll_completed"]) - 1
            line["inflight_count"] = int(e["inflight_count"])
            return self._line(line)
        if kind == shm_v1.RecordKind.HANG:
            return self.hang_line(r, e, ring_seq)
        return None

    def op_line(self, r, ring_seq: int, now_real_ns: int) -> bytes:
        e = self.comm_row(int(r["comm_index"]))
        coll = int(r["kind"]) == shm_v1.RecordKind.COLL
        exec_us, algbw, busbw = _timing(r)
        header: dict = {"id": f"0x{int(r['comm_id']):x}"}
        if e is not None and record_text(e["name"]):
            header["comm_name"] = record_text(e["name"])
        header.update(
            rank=int(r["rank"]),
            n_ranks=int(r["nranks"]),
            nnodes=int(e["nnodes"]) if e is not None else 1,
        )
        metadata = {
            "inspector_output_format_version": "v4.0",
            "git_rev": f"comminsight-{self.version}",
            "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": now_real_ns // 1000,
            "hostname": self.host,
            "pid": self.pid,
        }
        timing = _label(
            shm_v1.TIMING_SOURCE_LABELS, shm_v1.TimingSource, int(r["timing_source"]), "none"
        )
        func = _func_name(r)
        if coll:
            perf_key, perf = (
                "coll_perf",
                {
                    "coll": func,
                    "coll_sn": int(r["op_seq"]),
                    "coll_msg_size_bytes": int(r["bytes"]),
                    "coll_exec_time_us": exec_us,
                    "coll_timing_source": timing,
                    "coll_algobw_gbs": algbw,
                    "coll_busbw_gbs": busbw,
                },
            )
        else:
            perf_key, perf = (
                "p2p_perf",
                {
                    "p2p": func,
                    "p2p_sn": int(r["op_seq"]),
                    "p2p_peer": int(r["peer"]),
                    "p2p_msg_size_bytes": int(r["bytes"]),
                    "p2p_exec_time_us": exec_us,
                    "p2p_timing_source": timing,
                    "p2p_algobw_gbs": algbw,
                    "p2p_busbw_gbs": busbw,
                },
            )
        ci: dict = {
            "kind": "coll" if coll else "p2p",
            "schema_version": 1,
            "ring_seq": ring_seq,
            "op_index": int(r["comm_op_index"]),
            "count": int(r["count"]),
            "datatype": _label(
                shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(r["datatype"]), "Unknown"
            ),
        }
        if coll:
            if func in ROOTED_FUNCS and int(r["peer"]) >= 0:
                ci["root"] = int(r["peer"])
            ci["algo"] = _label(shm_v1.ALGO_LABELS, shm_v1.Algo, int(r["algo"]), "UNKNOWN")
            ci["proto"] = _label(shm_v1.PROTO_LABELS, shm_v1.Proto, int(r["proto"]), "UNKNOWN")
            ci["n_channels"] = int(r["n_channels"])
            ci["n_warps"] = int(r["n_warps"])
        else:
            ci["n_channels"] = int(r["n_channels"])
        if int(r["stream"]):
            ci["stream"] = f"0x{int(r['stream']):x}"
        flags = int(r["flags"])
        ci["graph_captured"] = bool(flags & shm_v1.SlotFlags.GRAPH_CAPTURED)
        if int(r["group_id"]):
            ci["group_id"] = int(r["group_id"])
        ci.update(
            tid=int(r["tid"]),
            host_start_mono_ns=int(r["host_start_mono_ns"]),
            host_stop_mono_ns=int(r["host_stop_mono_ns"]),
        )
        if int(r["complete_mono_ns"]):
            ci["host_complete_mono_ns"] = int(r["complete_mono_ns"])
        if int(r["timing_source"]) == shm_v1.TimingSource.KERNEL_GPU:
            ci["gpu_start_globaltimer_ns"] = int(r["gpu_start_ticks"])
            ci["gpu_stop_globaltimer_ns"] = int(r["gpu_end_ticks"])
        ci["channels_completed"] = int(r["kernel_ch_count"])
        ci["forced_complete"] = bool(flags & shm_v1.SlotFlags.FORCED_COMPLETE)
        return _ENCODE({"header": header, "metadata": metadata, perf_key: perf, "ci": ci}) + b"\n"

    def hang_line(self, r, e, ring_seq: int) -> bytes:
        detected = int(r["complete_mono_ns"])
        line: dict = {
            "kind": "hang_evidence",
            "schema_version": 1,
            "ring_seq": ring_seq,
            "comm_id": f"{int(r['comm_id']):016x}",
            "comm_rank": int(r["rank"]),
        }
        if record_text(e["name"]):
            line["comm_name"] = record_text(e["name"])
        line["op_kind"] = "p2p" if int(r["hang_op_kind"]) == shm_v1.RecordKind.P2P else "coll"
        func = _func_name(r)
        line.update(
            func=func,
            seq=int(r["op_seq"]),
            op_index=int(r["comm_op_index"]),
            count=int(r["count"]),
            datatype=_label(shm_v1.DATATYPE_LABELS, shm_v1.Datatype, int(r["datatype"]), "Unknown"),
            size_bytes=int(r["bytes"]),
        )
        if int(r["peer"]) >= 0:
            line["root" if func in ROOTED_FUNCS else "peer"] = int(r["peer"])
        line.update(
            n_channels=int(r["n_channels"]),
            channels_started=int(r["channels_started"]),
            channels_completed=int(r["kernel_ch_count"]),
            enqueued_mono_ns=int(r["host_start_mono_ns"]),
        )
        if int(r["host_stop_mono_ns"]):
            line["gpu_started_mono_ns"] = int(r["host_stop_mono_ns"])
        line.update(
            age_ns=(detected - int(r["host_start_mono_ns"])) & _U64,
            threshold_ns=int(r["hang_threshold_ms"]) * 1_000_000,
            detected_mono_ns=detected,
            detected_real_ns=self.real(detected),
            progress=_progress(e),
            fifo_event_written=bool(int(r["flags"]) & shm_v1.SlotFlags.FIFO_WRITTEN),
        )
        return self._line(line)

    @staticmethod
    def gap(first: int, last: int, reason: str, detected_mono_ns: int) -> bytes:
        return ProcessLines._line(
            {
                "kind": "gap",
                "schema_version": 1,
                "reason": reason,
                "lost_count": last - first + 1,
                "first_lost_ring_seq": first,
                "last_lost_ring_seq": last,
                "detected_mono_ns": detected_mono_ns,
            }
        )

    @staticmethod
    def _line(ci: dict) -> bytes:
        return _ENCODE({"ci": ci}) + b"\n"


def _func_name(r) -> str:
    if int(r["func"]) == shm_v1.Func.UNKNOWN and record_text(r["raw_name"]):
        return record_text(r["raw_name"])
    return _label(shm_v1.FUNC_LABELS, shm_v1.Func, int(r["func"]), "Unknown")


def _timing(r) -> tuple[int, float, float]:
    """Execution time (us), algorithm and bus bandwidth (GB/s), as NCCL Inspector defines
    them (the log writer's op_timing)."""
    source = int(r["timing_source"])
    if source == shm_v1.TimingSource.KERNEL_GPU:
        ns = int(r["gpu_end_ticks"]) - int(r["gpu_start_ticks"])
    elif source == shm_v1.TimingSource.KERNEL_CPU:
        ns = int(r["complete_mono_ns"]) - int(r["host_start_mono_ns"])
    else:
        ns = int(r["host_stop_mono_ns"]) - int(r["host_start_mono_ns"])
    exec_us = (ns & _U64) // 1000
    n = float(int(r["nranks"])) if int(r["nranks"]) > 0 else 1.0
    traffic, factor = float(int(r["bytes"])), 1.0
    func = int(r["func"])
    if func == shm_v1.Func.ALL_REDUCE:
        factor = 2.0 * (n - 1.0) / n
    elif func in _TRAFFIC_TIMES_N:
        traffic *= n
        factor = (n - 1.0) / n
    secs = exec_us / 1e6
    algbw = traffic / 1e9 / secs if secs > 0 else 0.0
    return exec_us, round(algbw, 6), round(algbw * factor, 6)


def _progress(e) -> dict:
    coll: dict = {}
    if int(e["coll_enqueued"]):
        coll.update(
            last_enqueued_seq=int(e["coll_enqueued"]) - 1,
            last_enqueued_mono_ns=int(e["coll_enqueued_mono_ns"]),
        )
    if int(e["coll_started"]):
        coll.update(
            last_gpu_started_seq=int(e["coll_started"]) - 1,
            last_gpu_started_mono_ns=int(e["coll_started_mono_ns"]),
        )
    if int(e["coll_completed"]):
        coll.update(
            last_completed_seq=int(e["coll_completed"]) - 1,
            last_completed_mono_ns=int(e["coll_completed_mono_ns"]),
        )
    p2p: dict = {}
    if int(e["p2p_enqueued"]):
        p2p.update(
            last_enqueued_seq=int(e["p2p_enqueued"]) - 1,
            last_enqueued_mono_ns=int(e["p2p_enqueued_mono_ns"]),
        )
    if int(e["p2p_completed"]):
        p2p.update(
            last_completed_seq=int(e["p2p_completed"]) - 1,
            last_completed_mono_ns=int(e["p2p_completed_mono_ns"]),
        )
    return {"collectives": coll, "p2p": p2p, "inflight_count": int(e["inflight_count"])}
