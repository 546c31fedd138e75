"""NCCL's ncclConfig_t and a C++ Options object holding one, as ctypes structures laid out as
NCCL 2.28 and PyTorch lay them out, with stand-ins for what pybind11 shows Python of them. The
Inject tests use them in process and in the child process that drives the real plugin."""

from __future__ import annotations

import ctypes


class NcclConfig(ctypes.Structure):
    """ncclConfig_t as NCCL 2.28 lays it out (src/nccl.h.in)."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("cgaClusterSize", ctypes.c_int),
        ("minCTAs", ctypes.c_int),
        ("maxCTAs", ctypes.c_int),
        ("netName", ctypes.c_char_p),
        ("splitShare", ctypes.c_int),
        ("trafficClass", ctypes.c_int),
        ("commName", ctypes.c_void_p),
        ("collnetEnable", ctypes.c_int),
        ("CTAPolicy", ctypes.c_int),
        ("shrinkShare", ctypes.c_int),
        ("nvlsCTAs", ctypes.c_int),
        ("nChannelsPerNetPeer", ctypes.c_int),
        ("nvlinkCentricSched", ctypes.c_int),
    ]


class OptionsStruct(ctypes.Structure):
    """A C++ Options object with its ncclConfig_t member some way in, as in ProcessGroupNCCL."""

    _fields_ = [("before", ctypes.c_char * 40), ("config", NcclConfig)]


UNDEF = -(2**31)


def new_options_struct(version: int = 22809, magic: int = 0xCAFEBEEF) -> OptionsStruct:
    s = OptionsStruct()
    c = s.config
    c.size, c.magic, c.version = ctypes.sizeof(NcclConfig), magic, version
    c.blocking = c.cgaClusterSize = c.minCTAs = c.maxCTAs = UNDEF
    return s


class FakeConfig:
    """What pybind's NCCLConfig shows Python: the ints of the struct it references (or, to
    test the cross-check, what `lies` says instead)."""

    def __init__(self, struct: NcclConfig, lies: dict | None = None):
        self._s, self._lies = struct, lies or {}

    def _get(self, python_name, c_name):
        return self._lies.get(python_name, getattr(self._s, c_name))

    blocking = property(lambda self: self._get("blocking", "blocking"))
    cga_cluster_size = property(lambda self: self._get("cga_cluster_size", "cgaClusterSize"))
    min_ctas = property(lambda self: self._get("min_ctas", "minCTAs"))
    max_ctas = property(lambda self: self._get("max_ctas", "maxCTAs"))


class FakeOptions:
    def __init__(self, struct: OptionsStruct):
        self.struct = struct
        self.config = FakeConfig(struct.config)
