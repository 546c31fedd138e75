"""Calls an NCCL profiler plugin `.so` exactly through the generated nccl-profiler bindings.

The FFI is the generated CDEF plus one `extern` line for the plugin symbol, opened in ABI mode
(dlopen, no compiler at run time). Descriptors are filled field by field from those types; no
struct is defined here. What differs between v4 and v5 is what NCCL's own v4 adapter does:
v4 has a one-byte `type`, drops the *Api/KernelLaunch events and the Group API states, puts the
parent Group handle into `parentObj` of Coll/P2p, leaves P2p `nChannels` unset, and takes
`commHash` as init's fourth argument.

Strings are NCCL's and valid only during the call: every string here is a fresh buffer that is
overwritten with '?' and freed as soon as the call returns, so a plugin that keeps the pointer
reads garbage instead of silently working.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import cffi

from comminsight_gen.abi import (
    nccl_profiler_v4,
    nccl_profiler_v5,
    nccl_profiler_v6,
    nccl_profiler_v7,
)
from comminsight_gen.abi.nccl_profiler_v5 import EventState, EventType

_MODULES = {4: nccl_profiler_v4, 5: nccl_profiler_v5, 6: nccl_profiler_v6, 7: nccl_profiler_v7}
# states NCCL records with no arguments (as ints: an Enum's hash runs in Python)
_ARGLESS_STATES = frozenset(
    int(s) for s in (EventState.GROUP_START_API_STOP, EventState.GROUP_END_API_START)
)
POISON = b"?"

# NCCL's activation mask is a static of libnccl: it outlives the plugin's threads, which read it
# until the plugin's destructor at exit() joins them. Memory owned by a Python object is freed
# as the interpreter finalizes, before that destructor runs; so the mask is taken from the C
# heap and never freed, as NCCL's never is.
_LIBC_FFI = cffi.FFI()
_LIBC_FFI.cdef("void *calloc(size_t nmemb, size_t size);")
_LIBC = _LIBC_FFI.dlopen(None)
_LIBC_FFI.typeof("uintptr_t")  # parsed here, once, not by each process new_activation_mask runs in


# the simulated NCCL's C part (sim_channels.c), built by `make build-sim` into the checkout's
# build/; without it (an installed package), or where a process's COMMINSIGHT_SIM_NATIVE is
# 0, the same calls are made from Python
NATIVE_LIBRARY = Path(__file__).resolve().parents[2] / "build" / "sim" / "libcisim.so"
NATIVE_SWITCH = "COMMINSIGHT_SIM_NATIVE"


def _native_cdef(version: int) -> str:
    plugin = f"const ci_nccl_profiler_v{version}_t *"
    return (
        f"int ci_sim_start_kernel_channels_v{version}({plugin}, void *, void *, int,"
        " const uint64_t *, void **);\n"
        f"int ci_sim_stop_kernel_channels_v{version}({plugin}, int, void * const *,"
        " const uint64_t *);\n"
    )


@functools.cache
def abi_ffi(version: int) -> cffi.FFI:
    """The FFI of one ABI version (the generated CDEF and the plugin's symbol), its types
    parsed: one per process, shared by every plugin it opens. Parsing the CDEF (pycparser)
    costs a rank process more CPU than its start-up, so the simulator's fork parent parses it
    once for all the ranks it forks (forks). So does every type named by a string here: cffi
    parses each on its first use, with every typedef of the CDEF, a tenth of a second."""
    ffi = cffi.FFI()
    ffi.cdef(
        _MODULES[version].CDEF
        + f"\nextern ci_nccl_profiler_v{version}_t ncclProfiler_v{version};\n"
        + _native_cdef(version)
    )
    for ctype in (
        f"ci_nccl_event_descr_v{version}_t *",
        f"ci_nccl_state_args_v{version}_t *",
        "char[]",
        "void **",
        "void *",
        "void *[]",
        "uint64_t[]",
        "int32_t",
        "int32_t *",
    ):
        ffi.typeof(ctype)
    return ffi


@functools.cache
def native_functions(version: int):
    """The C part's start and stop loops for one ABI version, opened in abi_ffi(version);
    None where it is not built. The fork parent opens them for the ranks it forks."""
    if not NATIVE_LIBRARY.is_file():
        return None
    try:
        library = abi_ffi(version).dlopen(str(NATIVE_LIBRARY))
    except OSError:
        return None  # a build for another machine: the Python calls do the same
    return (
        getattr(library, f"ci_sim_start_kernel_channels_v{version}"),
        getattr(library, f"ci_sim_stop_kernel_channels_v{version}"),
    )


class PluginLoadError(RuntimeError):
    """The plugin file cannot be opened or does not export the requested symbol."""


@dataclass(frozen=True)
class InitResult:
    result: int
    context: object  # cdata void*, or None when init failed (NCCL then disables the plugin)


class _CallStrings:
    """Fresh C strings for one call, poisoned and freed right after it."""

    def __init__(self, ffi: cffi.FFI):
        self._ffi = ffi
        self._buffers: list = []

    def __call__(self, text: str | None):
        if text is None:
            return self._ffi.NULL
        # surrogateescape: a test can hand the plugin bytes that are not UTF-8, as C callers can
        buf = self._ffi.new("char[]", text.encode("utf-8", "surrogateescape"))
        self._buffers.append(buf)
        return buf

    def release(self) -> None:
        for buf in self._buffers:
            n = len(buf) - 1
            if n:
                self._ffi.memmove(buf, POISON * n, n)
            self._ffi.release(buf)
        self._buffers.clear()


class ProfilerAbi:
    """One loaded plugin: its entry points, called the way NCCL 2.28 calls them."""

    version: int

    def __init__(self, path: str):
        symbol = f"ncclProfiler_v{self.version}"
        self.ffi = abi_ffi(self.version)
        try:
            self._lib = self.ffi.dlopen(path)
        except OSError as e:
            raise PluginLoadError(f"cannot load profiler plugin {path}: {e}") from None
        try:
            self._plugin = self.ffi.addressof(self._lib, symbol)
        except (AttributeError, cffi.FFIError) as e:
            raise PluginLoadError(f"{path} does not export {symbol}: {e}") from None
        # the types themselves, not their names: ffi.new looks a name up on every call
        self._descr_type = self.ffi.typeof(f"ci_nccl_event_descr_v{self.version}_t *")
        self._state_type = self.ffi.typeof(f"ci_nccl_state_args_v{self.version}_t *")
        self._handle_type = self.ffi.typeof("void **")
        self._null = self.ffi.NULL
        native = None if os.environ.get(NATIVE_SWITCH) == "0" else native_functions(self.version)
        self._native_start, self._native_stop = native or (None, None)
        # which loop makes the KernelCh calls, for the run's ground truth
        self.kernel_channels = "c" if native else "python"
        raw_name = self._plugin.name
        self.name = (
            ""
            if raw_name == self.ffi.NULL
            else self.ffi.string(raw_name).decode("utf-8", "replace")
        )
        self.nonzero_returns = 0  # entry points other than init must return success
        self._count_lock = threading.Lock()
        # NCCL's debug logger handed to init (an address in NCCL's library), NULL by default
        self.logger = self.ffi.NULL

    # ---- the activation mask and communicators ----

    def new_activation_mask(self):
        """The ONE process-global int NCCL passes to every init (zero until a plugin sets it),
        alive until the process ends (see _LIBC)."""
        raw = _LIBC.calloc(1, self.ffi.sizeof("int32_t"))
        if raw == _LIBC_FFI.NULL:
            raise MemoryError("calloc of the activation mask failed")
        return self.ffi.cast("int32_t *", int(_LIBC_FFI.cast("uintptr_t", raw)))

    def init(self, mask, comm_id: int, name: str | None, nnodes: int, nranks: int, rank: int):
        context = self.ffi.new("void **")
        strings = _CallStrings(self.ffi)
        try:
            result = self._call_init(context, mask, comm_id, strings(name), nnodes, nranks, rank)
        finally:
            strings.release()
        handle = context[0]
        return InitResult(int(result), handle if result == 0 and handle != self.ffi.NULL else None)

    def _call_init(self, context, mask, comm_id, name, nnodes, nranks, rank):
        raise NotImplementedError

    def finalize(self, context) -> None:
        self._check(self._plugin.finalize(context))

    # ---- events (each returns the plugin's handle, or None for NULL / not delivered) ----

    def start_group_api(self, context, depth: int):
        return None

    def start_coll_api(self, context, parent, func, count, datatype, root, stream):
        return None

    def start_p2p_api(self, context, parent, func, count, datatype, stream):
        return None

    def start_kernel_launch(self, context, parent, stream):
        return None

    def start_group(self, context):
        return self._start(context, EventType.GROUP, None, 0, lambda d, s: None)

    def start_coll(self, context, api_parent, group, rank: int, coll: dict):
        def fill(d, s):
            c = d.u.coll
            c.seqNumber = coll["seq"]
            c.func = s(coll["func"])
            c.sendBuff = self.ffi.cast("void *", coll["send_buff"])
            c.recvBuff = self.ffi.cast("void *", coll["recv_buff"])
            c.count = coll["count"]
            c.root = coll["root"]
            c.datatype = s(coll["datatype"])
            c.nChannels = coll["n_channels"]
            c.nWarps = coll["n_warps"]
            c.algo = s(coll["algo"])
            c.proto = s(coll["proto"])
            self._set_parent_group(c, group)
            self._fill_coll_v7(c, s, coll)

        return self._start(
            context, EventType.COLL, self._task_parent(api_parent, group), rank, fill
        )

    def start_p2p(self, context, api_parent, group, rank: int, p2p: dict):
        def fill(d, s):
            p = d.u.p2p
            p.func = s(p2p["func"])
            p.buff = self.ffi.cast("void *", p2p["buff"])
            p.datatype = s(p2p["datatype"])
            p.count = p2p["count"]
            p.peer = p2p["peer"]
            p.nChannels = self._p2p_channels(p2p["n_channels"])
            self._set_parent_group(p, group)
            self._fill_p2p_v7(p, s, p2p)

        return self._start(context, EventType.P2P, self._task_parent(api_parent, group), rank, fill)

    def start_proxy_op(self, context, parent, rank, pid, channel, peer, n_steps, chunk, is_send):
        def fill(d, s):
            p = d.u.proxyOp
            p.pid, p.channelId, p.peer = pid, channel, peer
            p.nSteps, p.chunkSize, p.isSend = n_steps, chunk, int(is_send)

        return self._start(context, EventType.PROXY_OP, parent, rank, fill)

    def start_proxy_step(self, context, parent, rank: int, step: int):
        def fill(d, s):
            d.u.proxyStep.step = step

        return self._start(context, EventType.PROXY_STEP, parent, rank, fill)

    def start_kernel_ch(self, context, parent, channel: int, ptimer: int):
        # NCCL leaves rank 0 in KernelCh descriptors: the plugin must take it from the parent.
        def fill(d, s):
            d.u.kernelCh.channelId = channel
            d.u.kernelCh.pTimer = ptimer

        return self._start(context, EventType.KERNEL_CH, parent, 0, fill)

    def start_kernel_channels(self, context, parent, ptimers: list[int]):
        """start_kernel_ch for channels 0, 1, ... of one kernel, at their ticks: the same
        calls, in one loop (in C where it is built). The channels' handles, for
        stop_kernel_channels; len() is the number of channels."""
        if self._native_start is not None:
            handles = self.ffi.new("void *[]", len(ptimers))
            nonzero = self._native_start(
                self._plugin,
                self._null if context is None else context,
                self._null if parent is None else parent,
                len(ptimers),
                ptimers,
                handles,
            )
            for _ in range(nonzero):
                self._count_nonzero()
            return handles
        # As in NCCL, whose descriptor is a variable of the calling function, one descriptor
        # serves every call, zeroed and filled afresh for each (as the C loop does: the plugin
        # may write into it)
        descr = self.ffi.new(self._descr_type)
        size, zeros = self.ffi.sizeof(descr[0]), bytes(self.ffi.sizeof(descr[0]))
        parent = self._null if parent is None else parent
        out = self.ffi.new(self._handle_type)
        start, null, handles = self._plugin.startEvent, self._null, []
        kernel_ch = int(EventType.KERNEL_CH)
        for channel, ptimer in enumerate(ptimers):
            self.ffi.memmove(descr, zeros, size)
            descr.type, descr.parentObj, descr.rank = kernel_ch, parent, 0
            descr.u.kernelCh.channelId = channel
            descr.u.kernelCh.pTimer = ptimer
            out[0] = null
            if start(context, out, descr):
                self._count_nonzero()
            handle = out[0]
            handles.append(None if handle == null else handle)
        return handles

    def stop_kernel_channels(self, handles, ptimers: list[int]) -> None:
        """Per channel, KernelChStop at its end tick, then its stop: the calls NCCL's proxy
        makes as each channel of a kernel finishes. `handles`: start_kernel_channels'."""
        if self._native_stop is not None:
            nonzero = self._native_stop(self._plugin, len(ptimers), handles, ptimers)
            for _ in range(nonzero):
                self._count_nonzero()
            return
        args = self.ffi.new(self._state_type)
        size, zeros = self.ffi.sizeof(args[0]), bytes(self.ffi.sizeof(args[0]))
        record, stop = self._plugin.recordEventState, self._plugin.stopEvent
        state = int(EventState.KERNEL_CH_STOP)
        for handle, ptimer in zip(handles, ptimers, strict=True):
            if handle is None:
                continue
            self.ffi.memmove(args, zeros, size)
            args.kernelCh.pTimer = ptimer
            if record(handle, state, args):
                self._count_nonzero()
            if stop(handle):
                self._count_nonzero()

    def stop(self, handle) -> None:
        if handle is not None:
            self._check(self._plugin.stopEvent(handle))

    def record_state(self, handle, state: EventState, *, ptimer=None, trans_size=None) -> None:
        if handle is None:
            return
        if state in _ARGLESS_STATES:
            args = self._null  # NCCL passes no arguments with the Group API states
        else:
            args = self.ffi.new(self._state_type)
            if ptimer is not None:
                args.kernelCh.pTimer = ptimer
            if trans_size is not None:
                args.proxyStep.transSize = trans_size
        self._check(self._plugin.recordEventState(handle, int(state), args))

    # ---- plumbing ----

    def _start(self, context, event_type: EventType, parent, rank: int, fill):
        descr = self.ffi.new(self._descr_type)
        descr.type = int(event_type)
        descr.parentObj = self._null if parent is None else parent
        descr.rank = rank
        strings = _CallStrings(self.ffi)
        handle = self.ffi.new(self._handle_type)
        try:
            fill(descr, strings)
            self._check(self._plugin.startEvent(context, handle, descr))
        finally:
            strings.release()
            self.ffi.release(descr)
        value = handle[0]
        return None if value == self._null else value

    def _check(self, result: int) -> None:
        if result != 0:
            self._count_nonzero()

    def _count_nonzero(self) -> None:
        with self._count_lock:
            self.nonzero_returns += 1

    def _task_parent(self, api_parent, group):
        raise NotImplementedError

    def _set_parent_group(self, task_descr, group) -> None:
        raise NotImplementedError

    def _p2p_channels(self, n_channels: int) -> int:
        return n_channels

    def _fill_coll_v7(self, c, s, coll: dict) -> None:
        pass  # fields of ABI v7 only

    def _fill_p2p_v7(self, p, s, p2p: dict) -> None:
        pass


class ProfilerAbiV5(ProfilerAbi):
    version = 5

    def _call_init(self, context, mask, comm_id, name, nnodes, nranks, rank):
        return self._plugin.init(context, comm_id, mask, name, nnodes, nranks, rank, self.logger)

    def start_group_api(self, context, depth: int):
        def fill(d, s):
            d.u.groupApi.graphCaptured = False
            d.u.groupApi.groupDepth = depth

        return self._start(context, EventType.GROUP_API, None, 0, fill)

    def start_coll_api(self, context, parent, func, count, datatype, root, stream):
        def fill(d, s):
            a = d.u.collApi
            a.func, a.count, a.datatype, a.root = s(func), count, s(datatype), root
            a.stream = self.ffi.cast("void *", stream)
            a.graphCaptured = False

        return self._start(context, EventType.COLL_API, parent, 0, fill)

    def start_p2p_api(self, context, parent, func, count, datatype, stream):
        def fill(d, s):
            a = d.u.p2pApi
            a.func, a.count, a.datatype = s(func), count, s(datatype)
            a.stream = self.ffi.cast("void *", stream)
            a.graphCaptured = False

        return self._start(context, EventType.P2P_API, parent, 0, fill)

    def start_kernel_launch(self, context, parent, stream):
        def fill(d, s):
            d.u.kernelLaunch.stream = self.ffi.cast("void *", stream)

        return self._start(context, EventType.KERNEL_LAUNCH, parent, 0, fill)

    def _task_parent(self, api_parent, group):
        return api_parent  # v5: the CollApi/P2pApi event; the Group goes into parentGroup

    def _set_parent_group(self, task_descr, group) -> None:
        task_descr.parentGroup = self.ffi.NULL if group is None else group


class ProfilerAbiV4(ProfilerAbi):
    version = 4

    def _call_init(self, context, mask, comm_id, name, nnodes, nranks, rank):
        return self._plugin.init(context, mask, name, comm_id, nnodes, nranks, rank, self.logger)

    def record_state(self, handle, state: EventState, *, ptimer=None, trans_size=None) -> None:
        if state in _ARGLESS_STATES:
            return  # v4 has no Group API states; NCCL's adapter drops them
        super().record_state(handle, state, ptimer=ptimer, trans_size=trans_size)

    def _task_parent(self, api_parent, group):
        return group  # NCCL's v4 adapter: parentObj = the parent Group

    def _set_parent_group(self, task_descr, group) -> None:
        pass  # no such field in v4

    def _p2p_channels(self, n_channels: int) -> int:
        return 0  # NCCL's v4 adapter never copies it


class ProfilerAbiV6(ProfilerAbiV5):
    """NCCL 2.29+: v5's calls and layouts (v6 only adds copy-engine events, not simulated)."""

    version = 6


class ProfilerAbiV7(ProfilerAbiV5):
    """NCCL 2.31+: v5's calls; tasks and API calls carry the call's user tag, collectives the
    kernel variant NCCL picked and whether it is a symmetric-memory kernel."""

    version = 7

    def start_coll_api(self, context, parent, func, count, datatype, root, stream, user_tag=0):
        def fill(d, s):
            a = d.u.collApi
            a.func, a.count, a.datatype, a.root = s(func), count, s(datatype), root
            a.stream = self.ffi.cast("void *", stream)
            a.graphCaptured = False
            a.userTag = user_tag

        return self._start(context, EventType.COLL_API, parent, 0, fill)

    def start_p2p_api(self, context, parent, func, count, datatype, stream, user_tag=0):
        def fill(d, s):
            a = d.u.p2pApi
            a.func, a.count, a.datatype = s(func), count, s(datatype)
            a.stream = self.ffi.cast("void *", stream)
            a.graphCaptured = False
            a.userTag = user_tag

        return self._start(context, EventType.P2P_API, parent, 0, fill)

    def _fill_coll_v7(self, c, s, coll: dict) -> None:
        c.userTag = coll.get("user_tag", 0)
        variant = coll.get("kernel_variant")
        c.kernelVariant = self.ffi.NULL if variant is None else s(variant)
        c.isSymColl = bool(coll.get("sym_coll", False))

    def _fill_p2p_v7(self, p, s, p2p: dict) -> None:
        p.userTag = p2p.get("user_tag", 0)


def load_plugin(path: str, version: int) -> ProfilerAbi:
    cls = {4: ProfilerAbiV4, 5: ProfilerAbiV5, 6: ProfilerAbiV6, 7: ProfilerAbiV7}[version]
    return cls(path)
