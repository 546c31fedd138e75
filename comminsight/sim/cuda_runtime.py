"""The CUDA runtime a simulated rank process loads, as PyTorch and JAX load libcudart.

The Profiler records, per communicator, the CUDA device current when NCCL initialized it,
by asking a CUDA runtime already in the process (it never loads one). A simulated process
gets one the same way a real one does: it loads a runtime library and sets the device of each
of its ranks before each communicator init, on the thread that inits it, as NCCL does.

`SimConfig.cuda_runtime` names it: "" for none (the Profiler then records no device), "sim"
for the simulated runtime (`sim_cudart.c`, a per-thread current device and nothing else,
built here on first use), or the path of a runtime library (the real libcudart on a machine
with GPUs).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import cffi

SIM_RUNTIME = "sim"
SOURCE = Path(__file__).with_name("sim_cudart.c")
SONAME = "libcudart.so.12"  # one of the sonames the Profiler looks for


def build_sim_runtime(out_dir: Path) -> Path:
    """The simulated runtime, compiled into `out_dir` (reused while its source is unchanged)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    target_dir = out_dir / f"sim-cudart-{digest}"
    target = target_dir / SONAME
    if target.is_file():
        return target
    target_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = target.with_name(f"{SONAME}.{os.getpid()}.partial")
    cc = os.environ.get("CC", "gcc")
    command = [cc, "-std=c11", "-O2", "-shared", "-fPIC", f"-Wl,-soname,{SONAME}"]
    subprocess.run([*command, "-o", str(partial), str(SOURCE)], check=True, capture_output=True)
    os.replace(partial, target)  # whole or absent, should two runs build it at once
    return target


class CudaRuntime:
    """A loaded CUDA runtime library; only the device calls a simulated process makes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._ffi = cffi.FFI()
        self._ffi.cdef("int cudaSetDevice(int device); int cudaGetDevice(int* device);")
        try:
            self._lib = self._ffi.dlopen(path)  # stays loaded for the process's life
        except OSError as e:
            raise RuntimeError(f"cannot load the CUDA runtime {path}: {e}") from None

    def set_device(self, device: int) -> None:
        """cudaSetDevice on the calling thread."""
        status = self._lib.cudaSetDevice(device)
        if status != 0:
            raise RuntimeError(f"cudaSetDevice({device}) failed with status {status}")

    def device(self) -> int:
        """cudaGetDevice of the calling thread."""
        out = self._ffi.new("int *")
        status = self._lib.cudaGetDevice(out)
        if status != 0:
            raise RuntimeError(f"cudaGetDevice failed with status {status}")
        return int(out[0])
