"""Edge-case scenarios for the Profiler plugin, each run in a fresh process.

    python tests/plugin_scenarios.py SCENARIO PLUGIN.so

The plugin keeps per-process state (SHM file, threads), so every scenario gets its own
interpreter; it prints one JSON object (what it observed through the SHM reader) for the test
to check. COMMINSIGHT_* settings come from the environment the test sets.

A scenario waits for what the plugin does on its own threads by what it can see of them (the
background thread's heartbeat count, a counter, a line on disk), never by sleeping.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from waiting import wait_until

from comminsight.shm_reader import RingCursor, ShmRegion
from comminsight.sim.abi import load_plugin
from comminsight_gen.abi.nccl_profiler_v5 import EventType

COLL = {
    "seq": 0,
    "func": "AllReduce",
    "send_buff": 0x1000,
    "recv_buff": 0x2000,
    "count": 1024,
    "root": 0,
    "datatype": "ncclFloat32",
    "n_channels": 4,
    "n_warps": 8,
    "algo": "RING",
    "proto": "SIMPLE",
}


class Driver:
    def __init__(self, plugin: str, version: int = 5):
        self.abi = load_plugin(plugin, version)
        self.mask = self.abi.new_activation_mask()

    def init(self, comm_id: int, name: str | None = None, nranks: int = 2, rank: int = 0):
        return self.abi.init(self.mask, comm_id, name, 1, nranks, rank)

    def coll(self, ctx, seq: int, channels: int = 4, finish: bool = True, **fields):
        coll = {**COLL, "seq": seq, "n_channels": channels, **fields}
        op = self.abi.start_coll(ctx, None, None, 0, coll)
        self.abi.stop(op)
        if not finish:
            return op
        self.channels(ctx, op, channels, base=1_000_000 * (seq + 1))
        return op

    def channels(self, ctx, op, n: int, base: int = 1000):
        handles = [self.abi.start_kernel_ch(ctx, op, c, base + c) for c in range(n)]
        for h in handles:
            self.abi.record_state(h, shm_v1_kernel_ch_stop(), ptimer=base + 5000)
            self.abi.stop(h)
        return handles


def shm_v1_kernel_ch_stop():
    from comminsight_gen.abi.nccl_profiler_v5 import EventState

    return EventState.KERNEL_CH_STOP


def home() -> Path:
    return Path(os.environ["COMMINSIGHT_HOME"])


def hold_agent_lock():
    """Pretend an Agent runs, so the plugin leaves its SHM file for us to read at exit."""
    (home() / "metadata").mkdir(parents=True, exist_ok=True)
    f = open(home() / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held until exit
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def region() -> ShmRegion | None:
    shms = sorted((home() / "shms").glob("*.shm")) if (home() / "shms").exists() else []
    return ShmRegion(shms[0]) if shms else None


DEADLINE_S = 60.0  # bounds a wait that went wrong (sanitizer builds on a loaded box); no measure


def settled(r: ShmRegion) -> ShmRegion:
    """r once the plugin's background thread has made a whole pass after what the scenario did
    so far: ops reach the ring on the caller's thread, but the thread derives records_published
    and runs the watchdog and the config check once per heartbeat. The count is raised at the
    start of a pass, so two more mean one pass began and ended after now."""
    beat = r.counter("heartbeat_count")
    wait_until(lambda: r.counter("heartbeat_count") >= beat + 2, DEADLINE_S, "a heartbeat")
    return r


def snapshot(r: ShmRegion | None) -> dict:
    if r is None:
        return {"shm": False}
    records = RingCursor(r).poll()
    counters = [
        "records_published",
        "records_dropped_busy",
        "events_dropped_pool",
        "comms_dropped",
        "events_unknown",
        "hangs_flagged",
        "fifo_events_written",
        "fifo_events_dropped",
        "comms_active",
    ]
    return {
        "shm": True,
        "counters": {c: r.counter(c) for c in counters},
        "kinds": [int(k) for k in records["kind"]],
        "funcs": [int(f) for f in records["func"]],
        "seqs": [int(s) for s in records["op_seq"]],
        "flags": [int(f) for f in records["flags"]],
        "datatypes": [int(d) for d in records["datatype"]],
        "raw_names": [
            bytes(n).split(b"\0")[0].decode("utf-8", "replace") for n in records["raw_name"]
        ],
        "channels": [int(c) for c in records["kernel_ch_count"]],
        "timing": [int(t) for t in records["timing_source"]],
    }


# ---- scenarios: each returns a JSON-able dict ----


def odd_strings(d: Driver) -> dict:
    ctx = d.init(0xA1, name="x" * 500).context  # a name longer than the SHM field
    d.coll(ctx, 0, func=None, datatype=None, algo=None, proto=None)
    d.coll(ctx, 1, func="Frobnicate" * 10, datatype="ncclNotAType", algo="", proto="\xff\xfe")
    d.coll(ctx, 2, func="Gather", datatype="ncclBfloat16")
    out = snapshot(settled(region()))
    out["name"] = bytes(region().comms[0]["name"]).split(b"\0")[0].decode()
    d.abi.finalize(ctx)
    return out


def names_at_page_end(d: Driver) -> dict:
    """One name buffer rewritten between ops (same pointer, new text), at the very end of a
    readable page with an unreadable page after it, and 26 bytes before that end: the plugin
    confirms a cached pointer's text and must never read past the page."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    area = mmap.mmap(-1, 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(base + page, page, 0) != 0:  # PROT_NONE: a read there faults
        raise OSError(ctypes.get_errno(), "mprotect")
    ctx = d.init(0xA2).context
    ffi = d.abi.ffi
    names = ["AllReduce", "Broadcast", "AllGather", "AllReduce", "Broadcast"]  # 9 bytes each
    for seq, name in enumerate(names * 2):
        end = page if seq < len(names) else page - 16
        at = end - len(name) - 1
        area[at : at + len(name) + 1] = name.encode() + b"\0"
        dt = "ncclInt8" if seq % 2 else "ncclFloat32"
        dt_at = end - 64 - len(dt) - 1
        area[dt_at : dt_at + len(dt) + 1] = dt.encode() + b"\0"

        def fill(desc, s, seq=seq, at=at, dt_at=dt_at):
            c = desc.u.coll
            c.seqNumber = seq
            c.func = ffi.cast("char *", base + at)
            c.datatype = ffi.cast("char *", base + dt_at)
            c.count = 1024
            c.nChannels = 1
            c.algo = s("RING")
            c.proto = s("SIMPLE")

        op = d.abi._start(ctx, EventType.COLL, None, 0, fill)
        d.abi.stop(op)
        d.channels(ctx, op, 1, base=1000 * (seq + 1))
    out = snapshot(settled(region()))
    d.abi.finalize(ctx)
    return out


# Names whose bytes the SHM field cuts inside a character (2-, 3- and 4-byte characters),
# and names with bytes that were never UTF-8 (as os.fsencode writes "\udcff": 0xff).
BYTE_NAMES = ("é" * 100, "中" * 50, "x" + "😀" * 40, "grp\udcff\udcfe:fsdp", "\udcc3")


def odd_bytes_names(d: Driver) -> dict:
    ctxs = [d.init(0xB0 + i, name=name).context for i, name in enumerate(BYTE_NAMES)]
    for seq in range(3):
        for ctx in ctxs:
            d.coll(ctx, seq)
    r = settled(region())
    names = [bytes(r.comms[i]["name"]).split(b"\0")[0].hex() for i in range(len(BYTE_NAMES))]
    for ctx in ctxs:
        d.abi.finalize(ctx)
    return {"shm_names": names}


def unknown_events(d: Driver) -> dict:
    ctx = d.init(0xA2).context
    for bad_type in (1 << 20, 0x6, 1 << 40):
        descr = d.abi.ffi.new("ci_nccl_event_descr_v5_t *")
        descr.type = bad_type
        handle = d.abi.ffi.new("void **")
        rc = d.abi._plugin.startEvent(ctx, handle, descr)
        assert rc == 0 and handle[0] == d.abi.ffi.NULL
    rc = d.abi._plugin.startEvent(ctx, d.abi.ffi.NULL, d.abi.ffi.NULL)  # NULL out-pointer
    assert rc == 0
    d.coll(ctx, 0)
    out = snapshot(settled(region()))
    d.abi.finalize(ctx)
    return out


def stop_without_start(d: Driver) -> dict:
    ctx = d.init(0xA3).context
    ffi = d.abi.ffi
    for value in (0x1, 0xDEADBEEF, 0x7FFF_FFFF_FFFF, 0x0100_0000_0001, 0xFFFF_FFFF_FFFF_FFFF):
        h = ffi.cast("void *", value)
        d.abi.stop(h)
        d.abi.record_state(h, shm_v1_kernel_ch_stop(), ptimer=5)
    op = d.coll(ctx, 0)
    d.abi.stop(op)  # a second stop of a published op
    out = snapshot(settled(region()))
    out["nonzero_returns"] = d.abi.nonzero_returns
    d.abi.finalize(ctx)
    return out


def late_kernel_channels(d: Driver) -> dict:
    """KernelCh events naming a parent that was already published and recycled."""
    ctx = d.init(0xA4).context
    op = d.coll(ctx, 0, channels=2)  # complete: published, entry back in the pool
    late = d.abi.start_kernel_ch(ctx, op, 0, 123)  # stale parent: must give no handle
    d.coll(ctx, 1, channels=2)  # reuses the pool entry
    d.abi.stop(late)
    out = snapshot(settled(region()))
    out["late_handle"] = late is not None
    d.abi.finalize(ctx)
    return out


def finalize_in_flight(d: Driver) -> dict:
    lock = hold_agent_lock()
    ctx = d.init(0xA5).context
    d.coll(ctx, 0)
    op = d.coll(ctx, 1, finish=False)
    started = d.abi.start_kernel_ch(ctx, op, 0, 77)  # one channel running, three never start
    d.abi.finalize(ctx)
    d.abi.stop(started)  # NCCL's proxy thread after finalize: must be harmless
    out = snapshot(region())
    lock.close()
    return out


def many_inits(d: Driver) -> dict:
    n = int(os.environ.get("SCENARIO_COMMS", "300"))
    for i in range(n):  # init/finalize cycles reuse comm slots
        ctx = d.init(0x1000 + i, name=f"c{i}").context
        d.coll(ctx, 0, channels=1)
        d.abi.finalize(ctx)
    lock = hold_agent_lock()
    keep = [d.init(0x9000 + i) for i in range(20)]  # more than COMMINSIGHT_PROFILER_COMM_SLOTS
    results = [k.result for k in keep]
    out = snapshot(region())
    out["init_results"] = results
    for k in keep:
        d.abi.finalize(k.context)
    lock.close()
    return out


def crowded_segment_start(d: Driver) -> dict:
    """More live communicators than a segment_start line lists within the writer's bound: each
    named with 126 quotes (252 bytes once escaped). The first segment is sealed by its age
    (COMMINSIGHT_PROFILER_LOG_SEGMENT_S=1), so the op after it opens a segment while every
    communicator is live."""
    n = int(os.environ["SCENARIO_COMMS"])
    ctxs = [d.init(0xE0000 + i, name='"' * 126).context for i in range(n)]
    settled(region())
    time.sleep(1.5)
    for seq in range(3):
        d.coll(ctxs[0], seq, channels=1)
    settled(region())
    time.sleep(0.5)  # the writer flushes every COMMINSIGHT_PROFILER_LOG_FLUSH_MS
    for ctx in ctxs:
        d.abi.finalize(ctx)
    return {"comms": n}


def unusable_home(d: Driver) -> dict:
    res = d.init(0xA7)
    d.coll(res.context, 0)
    d.abi.finalize(res.context)
    return {"init_result": res.result, "context": res.context is not None}


def mask_change(d: Driver) -> dict:
    """KernelCh off at start: ops complete at host stop with host timing."""
    ctx = d.init(0xA8).context
    out = {"mask": int(d.mask[0])}
    d.coll(ctx, 0)
    out.update(snapshot(settled(region())))
    d.abi.finalize(ctx)
    return out


def hang(d: Driver) -> dict:
    lock = hold_agent_lock()
    ctx = d.init(0xA9, name="dp:0").context
    d.coll(ctx, 0)
    op = d.coll(ctx, 1, finish=False)  # never completes
    d.abi.start_kernel_ch(ctx, op, 0, 5)
    r = region()
    # the flag is counted once the FIFO event was tried and the HANG record is in the ring
    wait_until(lambda: r.counter("hangs_flagged") >= 1, DEADLINE_S, "the watchdog's flag")
    e = r.comm_entries()[0]
    out = snapshot(r)
    out["progress"] = {
        k: int(e[k])
        for k in (
            "coll_enqueued",
            "coll_started",
            "coll_completed",
            "inflight_count",
            "inflight_seq",
            "hang_flagged_seq",
            "inflight_channels_started",
        )
    }
    d.abi.finalize(ctx)
    lock.close()
    return out


def disk_full(d: Driver) -> dict:
    """inspector_logs cannot grow (RLIMIT_FSIZE stands in for a full disk), then can again."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
    lock = hold_agent_lock()
    ctx = d.init(0xB1).context
    r = region()

    def handled(*counters: str):
        """Every record in the ring so far is one of `counters` (written, or dropped)."""
        return lambda: sum(r.counter(c) for c in counters) >= r.counter("ring_head")

    for seq in range(5):
        d.coll(ctx, seq)
    wait_until(handled("log_records_written"), DEADLINE_S, "written while there is room")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # "disk full"
    for seq in range(5, 25):
        d.coll(ctx, seq)
    wait_until(
        handled("log_records_written", "log_records_dropped"), DEADLINE_S, "the drops counted"
    )
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space returns
    # the writer tries again after its retry period: the gap line on disk says it did
    logs = home() / "inspector_logs"
    wait_until(
        lambda: any(b'"kind":"gap"' in p.read_bytes() for p in logs.iterdir()),
        DEADLINE_S,
        "the gap line once space returned",
    )
    for seq in range(25, 30):
        d.coll(ctx, seq)
    wait_until(
        handled("log_records_written", "log_records_dropped"), DEADLINE_S, "the last ops written"
    )
    out = snapshot(r)
    out["log_counters"] = {
        c: r.counter(c)
        for c in ("log_records_written", "log_records_dropped", "log_write_errors", "ring_head")
    }
    d.abi.finalize(ctx)
    lock.close()
    return out


def fifo_reader(d: Driver) -> dict:
    """An Agent-like reader on the FIFO receives the hang event, byte for byte a fifo-event."""
    import numpy as np

    from comminsight_gen.abi import fifo_event_v1

    fifo = home() / "fifos" / "hang-events.fifo"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    ctx = d.init(0xB2, name="tp:0").context
    op = d.coll(ctx, 0, finish=False)
    d.abi.start_kernel_ch(ctx, op, 0, 5)

    def event() -> bytes | None:
        try:
            return os.read(reader, 4096)  # an event is written whole (PIPE_BUF): one read
        except BlockingIOError:
            return None  # the watchdog has not written yet

    data = wait_until(event, DEADLINE_S, "the hang event on the FIFO")
    ev = np.frombuffer(data, dtype=fifo_event_v1.EVENT_DTYPE)
    d.abi.finalize(ctx)
    return {
        "bytes": len(data),
        "magic": int(ev["magic"][0]),
        "event_type": int(ev["event_type"][0]),
        "comm_id": int(ev["comm_id"][0]),
        "comm_name": bytes(ev["comm_name"][0]).split(b"\0")[0].decode(),
        "op_index": int(ev["op_index"][0]),
        "func": int(ev["func"][0]),
        "channels_started": int(ev["channels_started"][0]),
        "n_channels": int(ev["n_channels"][0]) if "n_channels" in ev.dtype.names else -1,
        "pid_matches": int(ev["pid"][0]) == os.getpid(),
    }


def autostart(d: Driver) -> dict:
    ctx = d.init(0xB3).context
    r = region()
    # autostart runs at the end of the background thread's first pass: over at the second beat
    wait_until(lambda: r.counter("heartbeat_count") >= 2, DEADLINE_S, "the first pass")
    d.abi.finalize(ctx)
    return {}


def fork_child(d: Driver) -> dict:
    """A process that forks after init: the child must not write into the parent's SHM, and can
    use the plugin on its own; the parent carries on."""
    lock = hold_agent_lock()
    ctx = d.init(0xB4).context
    d.coll(ctx, 0)
    pid = os.fork()
    if pid == 0:
        try:
            child_ctx = d.init(0xB5).context  # a fresh start in the child
            d.coll(child_ctx, 0)
            d.abi.finalize(child_ctx)
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    d.coll(ctx, 1)
    shm_files = sorted(p.name for p in (home() / "shms").glob("*.shm"))
    out = snapshot(settled(region_of(os.getpid())))
    out["child_status"] = status
    out["shm_files"] = len(shm_files)
    d.abi.finalize(ctx)
    lock.close()
    return out


def region_of(pid: int) -> ShmRegion:
    (path,) = [p for p in (home() / "shms").glob(f"*-{pid}-*.shm")]
    return ShmRegion(path)


def mask_reload(d: Driver) -> dict:
    """The operator edits the mask in the config file: NCCL's mask follows at run time."""
    conf = Path(os.environ["COMMINSIGHT_CONF"])
    ctx = d.init(0xB6).context
    before = int(d.mask[0])
    # the first pass notes the file's mtime; only a change after that is an edit
    settled(region())
    conf.write_text(f"COMMINSIGHT_PROFILER_EVENT_MASK={os.environ.get('SCENARIO_MASK', '6')}\n")
    os.utime(conf, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    after = wait_until(
        lambda: int(d.mask[0]) != before and int(d.mask[0]), DEADLINE_S, "the new mask"
    )
    d.abi.finalize(ctx)
    return {"before": before, "after": after}


def api_info(d: Driver) -> dict:
    """The CollApi event behind a Coll (v5) gives the op its stream and graph-capture flag."""
    ctx = d.init(0xB7).context
    api = d.abi.start_coll_api(ctx, None, "AllReduce", 1024, "ncclFloat32", 0, 0xABC000)
    d.abi.stop(api)
    op = d.abi.start_coll(ctx, api, None, 0, {**COLL, "seq": 0})
    d.abi.stop(op)
    d.channels(ctx, op, 4)
    descr = d.abi.ffi.new("ci_nccl_event_descr_v5_t *")  # a graph-captured call, by hand
    descr.type = 1 << 9
    descr.u.collApi.stream = d.abi.ffi.cast("void *", 0xDEF000)
    descr.u.collApi.graphCaptured = True
    handle = d.abi.ffi.new("void **")
    d.abi._plugin.startEvent(ctx, handle, descr)
    graph_api = handle[0]
    d.abi.stop(graph_api)
    op = d.abi.start_coll(ctx, graph_api, None, 0, {**COLL, "seq": 1})
    d.abi.stop(op)
    d.channels(ctx, op, 4)
    r = settled(region())
    records = RingCursor(r).poll()
    colls = records[records["kind"] == 1]
    out = {
        "streams": [int(x) for x in colls["stream"]],
        "graph": [bool(f & 1) for f in colls["flags"]],
        "unknown": r.counter("events_unknown"),
    }
    d.abi.finalize(ctx)
    return out


def many_threads(d: Driver) -> dict:
    """More concurrent NCCL threads than per-thread blocks: the extra ones share the fallback
    block; every op is still recorded once."""
    import threading

    lock = hold_agent_lock()
    n = int(os.environ.get("SCENARIO_THREADS", "1100"))
    ctxs = [d.init(0xC000 + i).context for i in range(4)]
    barrier = threading.Barrier(n)

    def work(i: int) -> None:
        barrier.wait()
        d.coll(ctxs[i % 4], i // 4, channels=2)
        barrier.wait()  # hold every thread alive until all have issued their op

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = RingCursor(settled(region())).poll(1 << 20)
    colls = records[records["kind"] == 1]
    out = {
        "colls": int(len(colls)),
        "distinct": len(
            {(int(c), int(s)) for c, s in zip(colls["comm_id"], colls["op_seq"], strict=True)}
        ),
    }
    for ctx in ctxs:
        d.abi.finalize(ctx)
    lock.close()
    return out


def unload_then_threads_exit(d: Driver) -> dict:
    """NCCL dlcloses the plugin when its last communicator is gone, while threads that
    called into it (its proxy threads, PyTorch's) live on; when they exit later, nothing of
    the unloaded library may run (a thread-exit destructor did, and killed the process with
    SIGSEGV at the end of every PyTorch job on real GPUs)."""
    import threading

    lock = hold_agent_lock()
    ctx = d.init(0xD000).context
    issued, release = threading.Event(), threading.Event()

    def nccl_thread() -> None:
        d.coll(ctx, 0, channels=2)  # this thread now has the plugin's per-thread block
        issued.set()
        release.wait()

    t = threading.Thread(target=nccl_thread)
    t.start()
    issued.wait()
    d.abi.finalize(ctx)
    d.abi.ffi.dlclose(d.abi._lib)
    release.set()
    t.join()  # the thread exits after the unload
    lock.close()
    return {"survived": True}


def ce_events(d: Driver) -> dict:
    """v6 copy-engine events are recognised and left alone; ordinary ops still recorded."""
    ctx = d.init(0xB8).context
    for ce_type in (1 << 12, 1 << 13, 1 << 14):
        descr = d.abi.ffi.new("ci_nccl_event_descr_v6_t *")
        descr.type = ce_type
        handle = d.abi.ffi.new("void **")
        assert d.abi._plugin.startEvent(ctx, handle, descr) == 0 and handle[0] == d.abi.ffi.NULL
    d.coll(ctx, 0)
    out = snapshot(settled(region()))
    d.abi.finalize(ctx)
    return out


SCENARIOS = {
    f.__name__: f
    for f in (
        odd_strings,
        names_at_page_end,
        odd_bytes_names,
        unknown_events,
        stop_without_start,
        late_kernel_channels,
        finalize_in_flight,
        many_inits,
        crowded_segment_start,
        unusable_home,
        mask_change,
        hang,
        disk_full,
        fifo_reader,
        autostart,
        fork_child,
        mask_reload,
        api_info,
        many_threads,
        ce_events,
        unload_then_threads_exit,
    )
}

if __name__ == "__main__":
    scenario, plugin = sys.argv[1], sys.argv[2]
    version = int(os.environ.get("SCENARIO_ABI", "5"))
    result = SCENARIOS[scenario](Driver(plugin, version))
    print(json.dumps(result))
    sys.stdout.flush()
