"""A GPU's UUID -> the index DCGM's exporter puts in its `gpu` label, so that a profiled
process's series join DCGM's on the node's numbering.

DCGM's `gpu` is NVML's index of the device on the node (what `nvidia-smi` prints as Index),
not the CUDA ordinal a process sees (CUDA_VISIBLE_DEVICES renumbers those from 0, and
CUDA_DEVICE_ORDER may order them by speed). The index is read, in order of trust, from:

1. `nvidia-smi --query-gpu=index,uuid --format=csv,noheader`, where nvidia-smi is on PATH: NVML's
   own numbering (run without a shell, for at most 2 s). Its numbering is the one DCGM's
   exporter sees only where both see the same GPUs: in a container given some of the node's
   GPUs, NVML numbers those from 0. Where the driver's procfs (2.) is the node's own, GPUs
   that differ from the ones it lists say so, and no index is given.
2. Without nvidia-smi, the driver's `/proc/driver/nvidia/gpus/<PCI bus id>/information` files
   (kernel-open/nvidia/nv-procfs.c: a line `GPU UUID:`, a tab, ` GPU-...`; one directory per
   GPU, named `%04x:%02x:%02x.%x`), numbered in ascending PCI bus id order. That is the order
   NVML enumerates devices in on the nodes we know of (the one CUDA_DEVICE_ORDER=PCI_BUS_ID is
   set to get nvidia-smi's numbering in CUDA), but NVML's documentation promises no order, not
   even the same one after a reboot. It differs where NVML leaves a GPU
   out that the driver lists: one excluded by NVreg_ExcludedGpus (`GPU Excluded: Yes`) or one
   whose UUID the driver cannot read (a GPU fallen off the bus): either gives no index at all.
   In a container the NVIDIA runtime mounts a tmpfs over /proc/driver/nvidia holding only the
   container's GPUs (libnvidia-container, mount_procfs): a gpus directory that is not on
   /proc's own filesystem gives no index either.

An answer that fails or does not parse (a timeout, an exit status, a `[GPU requires reset]`
in place of a UUID) gives "" for every GPU, never a guessed index; the first such problem is
logged as a warning, later ones at debug level. A GPU's index does not change while the
driver runs, so the table is read once and again only when a UUID is not in it, at most every
`refresh_after_s` (a GPU hot-added, or a source that failed).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

NVIDIA_SMI_TIMEOUT_S = 2.0
MAX_ANSWER_BYTES = 64 * 1024  # nvidia-smi's answer for a node's GPUs is ~60 bytes a GPU
MAX_GPUS = 1024

_UUID = re.compile("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SMI_LINE = re.compile(f"\\s*([0-9]{{1,4}})\\s*,\\s*({_UUID.pattern})\\s*")
# the driver's procfs directory name: domain (16 or 32 bits), bus, slot, function
_BUS_ID = re.compile("([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\\.([0-7])")


class GpuIndexProblem(Exception):
    """A source's answer that cannot be trusted."""


class GpuIndex:
    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        nvidia_smi: str | None = "nvidia-smi",
        refresh_after_s: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.nvidia_smi = nvidia_smi
        self.refresh_after_s = refresh_after_s
        self.clock = clock
        self.reads = 0
        self.source = ""  # where the table came from ("nvidia-smi", "procfs"); "" none
        self.problem: str | None = None  # why the latest read gave no table
        self._index_of: dict[str, str] = {}
        self._read_at: float | None = None
        self._warned = False
        self._lock = threading.Lock()

    def index_of(self, uuid: str) -> str:
        """The `gpu` label DCGM's exporter gives the GPU of this UUID ("GPU-xxxxxxxx-..."); ""
        where it is not known."""
        with self._lock:
            if _UUID.fullmatch(uuid) is None:
                return ""  # never in a table: no reason to read one again
            if uuid not in self._index_of and self._due():
                self._read()
            return self._index_of.get(uuid, "")

    def _due(self) -> bool:
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.refresh_after_s:
            return False
        self._read_at = now
        return True

    def _read(self) -> None:
        self.reads += 1
        binary = shutil.which(self.nvidia_smi) if self.nvidia_smi else None
        try:
            if binary is not None:
                self.source = "nvidia-smi"
                table = _nvidia_smi_table(binary)
                _check_against_driver(table, self.proc_root)
            else:
                self.source = "procfs"
                table = _procfs_table(self.proc_root)
        except GpuIndexProblem as e:
            self._index_of, self.problem = {}, f"{self.source}: {e}"
            if self._warned:
                log.debug("GPU indexes: %s", self.problem)
            else:
                log.warning("GPU indexes not known, the gpu label stays empty: %s", self.problem)
                self._warned = True
            return
        self._index_of, self.problem = table, None


def _nvidia_smi_table(binary: str) -> dict[str, str]:
    stdout = _run_nvidia_smi(binary)
    if len(stdout) > MAX_ANSWER_BYTES:
        raise GpuIndexProblem(f"an answer of {len(stdout)} bytes")
    table: dict[str, str] = {}
    for line in stdout.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        match = _SMI_LINE.fullmatch(line)
        if match is None:
            raise GpuIndexProblem(f"a line that is not 'index, uuid': {line[:120]!r}")
        index, uuid = str(int(match.group(1))), match.group(2)
        if uuid in table or index in table.values():
            raise GpuIndexProblem(f"{uuid} or index {index} twice")
        table[uuid] = index
    # NVML numbers the GPUs it sees 0..n-1: anything else is not its numbering
    if sorted(int(i) for i in table.values()) != list(range(len(table))):
        raise GpuIndexProblem(f"indexes {sorted(table.values())} are not 0..{len(table) - 1}")
    return table


def _run_nvidia_smi(binary: str) -> bytes:
    """Its standard output. Run in a session of its own, so that on a timeout its whole process
    group is killed: a child left holding the output pipe would keep the read waiting."""
    try:
        process = subprocess.Popen(
            [binary, "--query-gpu=index,uuid", "--format=csv,noheader"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        raise GpuIndexProblem(f"cannot run {binary}: {e.strerror}") from None
    with process:
        try:
            stdout, stderr = process.communicate(timeout=NVIDIA_SMI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.communicate()
            raise GpuIndexProblem(f"no answer in {NVIDIA_SMI_TIMEOUT_S:g} s") from None
    if process.returncode != 0:
        said = (stderr or stdout).decode("utf-8", "replace").strip()[:200]
        raise GpuIndexProblem(f"exit status {process.returncode}: {said!r}")
    return stdout


def _check_against_driver(table: dict[str, str], proc_root: Path) -> None:
    """nvidia-smi sees the GPUs of its container; where the driver's procfs is the node's own,
    it lists the node's: other GPUs say nvidia-smi's numbering is not the node's."""
    try:
        listed = _driver_gpus(proc_root)
    except GpuIndexProblem:
        return  # nothing to compare with: nvidia-smi's answer stands
    if len(listed) != len(table) or {uuid for _, uuid in listed} != table.keys():
        raise GpuIndexProblem(
            f"it lists {len(table)} GPUs, the driver {len(listed)}: it may see only some of "
            "the node's, numbered from 0"
        )


def _procfs_table(proc_root: Path) -> dict[str, str]:
    listed = sorted(_driver_gpus(proc_root))
    return {uuid: str(i) for i, (_, uuid) in enumerate(listed)}


def _driver_gpus(proc_root: Path) -> list[tuple[tuple[int, ...], str]]:
    """(PCI bus id as numbers, UUID) of every GPU the driver's own procfs lists."""
    gpus = proc_root / "driver" / "nvidia" / "gpus"
    try:
        if os.stat(gpus).st_dev != os.stat(proc_root).st_dev:
            raise GpuIndexProblem(f"{gpus} is not on {proc_root}'s filesystem (a container's copy)")
        names = [entry.name for entry in os.scandir(gpus)]
    except OSError as e:
        raise GpuIndexProblem(f"cannot list {gpus}: {e.strerror}") from None
    if len(names) > MAX_GPUS:
        raise GpuIndexProblem(f"{len(names)} entries in {gpus}")
    listed = []
    for name in names:
        bus_id = _BUS_ID.fullmatch(name)
        if bus_id is None:
            raise GpuIndexProblem(f"{name!r} in {gpus} is not a PCI bus id")
        listed.append((tuple(int(part, 16) for part in bus_id.groups()), _uuid_of(gpus / name)))
    if len({uuid for _, uuid in listed}) != len(listed):
        raise GpuIndexProblem("a UUID listed twice")
    return listed


def _uuid_of(gpu_dir: Path) -> str:
    """The UUID of one GPU's `information` file; a problem for an excluded GPU (NVML may not
    number it) or one whose UUID the driver could not read (it leaves the line out)."""
    try:
        with open(gpu_dir / "information", "rb") as f:
            text = f.read(MAX_ANSWER_BYTES + 1)
    except OSError as e:
        raise GpuIndexProblem(f"cannot read {gpu_dir}/information: {e.strerror}") from None
    if len(text) > MAX_ANSWER_BYTES:
        raise GpuIndexProblem(f"{gpu_dir}/information is {len(text)} bytes")
    fields = {}
    for line in text.decode("utf-8", "replace").splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields[key.strip()] = value.strip()
    if fields.get("GPU Excluded", "No") != "No":
        raise GpuIndexProblem(f"{gpu_dir.name} is excluded from use")
    uuid = fields.get("GPU UUID", "")
    if _UUID.fullmatch(uuid) is None:
        raise GpuIndexProblem(f"{gpu_dir.name} has no UUID ({uuid!r})")
    return uuid
