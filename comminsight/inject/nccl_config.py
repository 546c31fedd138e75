"""Put a communicator name into a `ProcessGroupNCCL.Options` object's NCCL config.

PyTorch hands `options.config` (an `ncclConfig_t`) to `ncclCommInitRankConfig` and
`ncclCommSplit` for every communicator of the group, whenever it creates them (eagerly, lazily
on the first collective, or per peer pair for send/recv); NCCL keeps `config.commName` and
passes it to the profiler's `init`. Setting it on the group's options therefore names every
communicator of that group, with no guessing which communicator is which.

Two ways, tried in order:
- `torch-option`: the torch build exposes `config.comm_name`: set it.
- `nccl-config`: it does not (torch 2.11): write the pointer into the `ncclConfig_t` that the
  Python object wraps, after proving the layout (see `_config_address`). NCCL stores the
  pointer without copying the string, so every name lives in this process until it exits.
A name already in the config that Inject did not put there is the user's and is kept.
"""

from __future__ import annotations

import ctypes
import sys
import sysconfig
import threading

from .metadata import V

# ncclConfig_t, NCCL 2.27 and later (src/nccl.h.in): size_t size; unsigned magic; unsigned
# version; int blocking, cgaClusterSize, minCTAs, maxCTAs; const char* netName; int splitShare,
# trafficClass; const char* commName; ... Fields are only ever appended, so these offsets hold
# for every config whose `version` is at least 2.27.0.
NCCL_CONFIG_MAGIC = 0xCAFEBEEF
COMM_NAME_SINCE = 22700  # NCCL_VERSION(2, 27, 0): the first config with commName
OFF_SIZE, OFF_MAGIC, OFF_VERSION = 0, 8, 12
OFF_INTS = 16  # blocking, cgaClusterSize, minCTAs, maxCTAs
OFF_COMM_NAME = 48
MIN_CONFIG_SIZE = OFF_COMM_NAME + 8
MAX_CONFIG_SIZE = 4096  # any larger `size` is not a config
# A field of a C++ object lies within it: how far past the Options object's start its `config`
# member may be before the two pointers are judged unrelated.
MAX_MEMBER_OFFSET = 4096
# Names kept for NCCL (never freed). Process groups are few; past this, stop naming.
MAX_NAMES = 65536
NAME_MAX_BYTES = 1024

TORCH_OPTION = V.TORCH_OPTION
NCCL_CONFIG = V.NCCL_CONFIG
USER_NAMED = V.USER_NAMED


class LayoutError(RuntimeError):
    """The config object is not laid out as this module requires; nothing was written."""


_lock = threading.Lock()
_buffers: dict[str, ctypes.Array] = {}
_our_addresses: set[int] = set()
_our_names: set[str] = set()


def _pybind_value_pointer(obj: object) -> int:
    """The address of the C++ value a pybind11 object wraps.

    pybind11's `instance` is PyObject_HEAD followed by `simple_value_holder[0]`, the value
    pointer, for every class with a single C++ base. The head is two words except on debug
    builds (`sys.gettotalrefcount`) and free-threaded builds, which are refused."""
    if hasattr(sys, "gettotalrefcount") or sysconfig.get_config_var("Py_GIL_DISABLED"):
        raise LayoutError("debug or free-threaded Python: pybind11 object layout not known")
    if type(obj).__basicsize__ < 3 * ctypes.sizeof(ctypes.c_void_p):
        raise LayoutError(f"{type(obj).__name__} is not a pybind11 instance")
    head = 2 * ctypes.sizeof(ctypes.c_void_p)
    value = ctypes.c_void_p.from_address(id(obj) + head).value
    if not value or value % ctypes.alignment(ctypes.c_void_p):
        raise LayoutError(f"{type(obj).__name__}: no aligned C++ value pointer")
    return value


def _read_int(address: int) -> int:
    return ctypes.c_int.from_address(address).value


def _config_address(options: object, config: object) -> int:
    """The address of the `ncclConfig_t` behind `config` (= `options.config`), proven by:
    1. it lies within the Options object (pybind returns a reference to the member, not a
       copy; a copy's address would be elsewhere and would not reach NCCL anyway), checked
       before anything is read through it;
    2. NCCL's magic number, a version with commName, and a plausible size;
    3. the four int fields read here equal what pybind's own getters return."""
    options_at = _pybind_value_pointer(options)
    config_at = _pybind_value_pointer(config)
    if not options_at <= config_at < options_at + MAX_MEMBER_OFFSET:
        raise LayoutError("options.config is not a member of the options object")
    magic = ctypes.c_uint.from_address(config_at + OFF_MAGIC).value
    version = ctypes.c_uint.from_address(config_at + OFF_VERSION).value
    size = ctypes.c_size_t.from_address(config_at + OFF_SIZE).value
    if magic != NCCL_CONFIG_MAGIC:
        raise LayoutError(f"no ncclConfig_t magic (0x{magic:x})")
    if version < COMM_NAME_SINCE:
        raise LayoutError(f"torch was built with NCCL {version} headers: no commName in config")
    if not MIN_CONFIG_SIZE <= size <= MAX_CONFIG_SIZE:
        raise LayoutError(f"implausible ncclConfig_t size {size}")
    for i, attr in enumerate(("blocking", "cga_cluster_size", "min_ctas", "max_ctas")):
        if getattr(config, attr) != _read_int(config_at + OFF_INTS + 4 * i):
            raise LayoutError(f"config.{attr} differs from the ncclConfig_t field")
    return config_at


def _keep(name: str) -> ctypes.Array:
    """The NUL-terminated bytes of `name`, kept for the life of the process (NCCL holds the
    pointer in every communicator made with it)."""
    buf = _buffers.get(name)
    if buf is None:
        if len(_buffers) >= MAX_NAMES:
            raise LayoutError(f"more than {MAX_NAMES} names: no more are kept")
        buf = ctypes.create_string_buffer(name.encode("utf-8", "replace")[:NAME_MAX_BYTES])
        _buffers[name] = buf
        _our_addresses.add(ctypes.addressof(buf))
    return buf


def set_comm_name(options: object, name: str) -> str:
    """Name the communicators created with `options`; the way used (TORCH_OPTION or
    NCCL_CONFIG) or USER_NAMED when the user's own name was there and was kept.
    LayoutError (nothing written) when neither way is available."""
    try:
        config = options.config
    except AttributeError:
        raise LayoutError("this torch build's NCCL options have no config") from None
    with _lock:
        if hasattr(config, "comm_name"):
            current = config.comm_name
            if current and current not in _our_names:
                return USER_NAMED
            config.comm_name = name
            _our_names.add(name)
            return TORCH_OPTION
        at = _config_address(options, config)
        slot = ctypes.c_void_p.from_address(at + OFF_COMM_NAME)
        if slot.value and slot.value not in _our_addresses:
            return USER_NAMED
        slot.value = ctypes.addressof(_keep(name))
        return NCCL_CONFIG


def comm_name_of(options: object) -> str | None:
    """The name the options carry now (either way), or None; for checks and metadata."""
    config = options.config
    if hasattr(config, "comm_name"):
        return config.comm_name or None
    at = _config_address(options, config)
    pointer = ctypes.c_void_p.from_address(at + OFF_COMM_NAME).value
    return ctypes.string_at(pointer).decode("utf-8", "replace") if pointer else None
