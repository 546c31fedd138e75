"""Which GPU each op of a process belongs to, when one process drives several GPUs.

JAX's single-controller runtime and programs built on ncclCommInitAll create, in one process,
one NCCL communicator member per local device: NCCL calls the Profiler's init once per
(communicator, device), and its comm_init line says the member's communicator id, its rank in
the communicator and the CUDA device current at its init (`cuda_device`). Every op line names
its communicator and its rank in it, so the member an op belongs to is known, and with it the
op's GPU. The rule, in order:

1. Devices known: every member of the process has a `cuda_device`. The process has as many
   GPUs as distinct devices; each GPU owns the members initialized on it. NCCL runs one rank
   of a communicator per device ("Duplicate GPU detected" otherwise), so two ranks of one
   communicator on one device mean the devices are not to be trusted: the process is then
   read as one stream and the problem reported.
2. Devices unknown (no CUDA runtime in the process at init) and the process has a single
   communicator with several of its ranks (ncclCommInitAll's clique alone): each rank is
   necessarily its own GPU, so each member is one GPU, and the missing devices are reported.
3. Devices unknown and several communicators: which members share a GPU cannot be told (the
   rank in one communicator says nothing of the rank in another), so the process is read as
   one stream and the problem reported, naming its first segment.

A process with one member per communicator and at most one device is one GPU, as always.

A GPU's global rank is its rank in its largest communicator (the world communicator where
there is one; among equals, the one initialized first); the process's RANK belongs to the
process, not to each of its GPUs. Its local rank counts the GPUs of the node in process order:
the process's LOCAL_RANK times its GPU count plus the GPU's index in the process (devices in
ascending order), which is the device ordinal when the node's processes split its GPUs evenly.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from comminsight.log_segments import (
    COMPRESSED_SUFFIX,
    SEGMENT_BYTES_MAX,
    is_compressed,
    read_segment,
)
from comminsight.safe_open import open_regular, read_regular
from comminsight.semantic import native
from comminsight.untrusted_json import NOT_JSON, decode_mending_utf8
from comminsight_gen.inspector_log_v1_fields import F, V
from comminsight_gen.models.inspector_log_v1_lean import MembersCi, MembersCommIdentity, MembersLine

_DECODER = msgspec.json.Decoder(MembersLine)
# reads a segment whole (for the op reader) and gives the lines of it that are not op lines
# reads a whole segment for the op reader and gives the lines it left to Python; with
# optional=True it may decline (None)
ReadLines = Callable[..., list[bytes] | None]
# as the Profiler writes it (compact JSON), without the quotes around it: the search filters
# on a needle's first and last bytes, and quotes are everywhere in JSON
_COMM_INIT = f'{F.KIND}":"{V.COMM_INIT}'.encode()


@dataclass(frozen=True)
class Member:
    """One communicator member of the process: (communicator id, rank in it) is its key."""

    comm_id: str  # 16 lowercase hex digits, as op lines name it once normalized
    rank: int
    nranks: int
    device: int | None
    order: int  # when it was first seen (init order)

    @property
    def key(self) -> tuple[str, int]:
        return (self.comm_id, self.rank)


@dataclass
class ProcessMembers:
    """What a process's segments say about it: its members and who it is."""

    members: dict[tuple[str, int], Member] = field(default_factory=dict)
    host: str | None = None
    pid: int | None = None
    global_rank: int | None = None
    local_rank: int | None = None
    conflicts: list[str] = field(default_factory=list)

    def add(self, m: MembersCommIdentity) -> None:
        self.add_member(m.comm_id, m.comm_rank, m.nranks, m.cuda_device)

    def add_member(self, comm_id: str, rank: int, nranks: int, device: int | None) -> None:
        """One member as a comm_init line or a communicator table entry names it (members
        are added in the order they were initialized)."""
        comm_id = comm_id.removeprefix("0x").rjust(16, "0").lower()
        key = (comm_id, rank)
        seen = self.members.get(key)
        if seen is None:
            self.members[key] = Member(comm_id, rank, nranks, device, len(self.members))
        elif seen.device is None and device is not None:
            self.members[key] = Member(comm_id, rank, nranks, device, seen.order)
        elif device is not None and device != seen.device:
            self.conflicts.append(
                f"communicator {comm_id} rank {rank} is on device {seen.device} "
                f"and on device {device}"
            )


def scan_members(segments: list[Path], read_lines: ReadLines | None = None) -> ProcessMembers:
    """The members of a process, from the segment_start and comm_init lines of its segments.
    Files that cannot be read are left to the op reader, which reports them. `read_lines`,
    when given, reads a whole segment for the op reader now and gives the lines it left to
    Python (comm_init among them): the search through the segment is then saved."""
    found = ProcessMembers()
    for path in segments:
        # a compressed segment is read for the op reader now if it takes it: decompressed once
        lines = read_lines(path, optional=True) if read_lines and is_compressed(path) else None
        if lines is not None:
            _scan_lines(lines, found)
            continue
        data = _contents(path)
        if data is None:
            continue
        # a compressed one the reader declined (its bound reached) is searched, not kept
        ahead = read_lines if read_lines and not is_compressed(path) else None
        try:
            _scan_segment(data, found, ahead and (lambda path=path, ahead=ahead: ahead(path)))
        finally:
            if isinstance(data, mmap.mmap):
                data.close()
    return found


def segment_files(path: Path) -> list[Path]:
    """Where a listed segment's bytes are, in the order to try them: the file listed, then
    what the Profiler may have made of it since (an open segment sealed by renaming
    `.jsonl.partial` to `.jsonl`, a sealed one compressed to `.jsonl.zst` and removed)."""
    files = [path]
    name = path.name
    if name.endswith(".partial"):
        name = name.removesuffix(".partial")
        files.append(path.with_name(name))
    if name.endswith(".jsonl"):
        files.append(path.with_name(name + COMPRESSED_SUFFIX))
    return files


def _contents(path: Path):
    """The segment's bytes (a sealed one mapped, a compressed one decompressed), or None
    when it cannot be read."""
    for candidate in segment_files(path):
        try:
            if candidate.name.endswith(".partial"):
                return read_regular(candidate, SEGMENT_BYTES_MAX)
            if is_compressed(candidate):
                return read_segment(candidate, SEGMENT_BYTES_MAX)
            with open_regular(candidate, SEGMENT_BYTES_MAX) as f:
                if os.fstat(f.fileno()).st_size == 0:
                    return b""
                return mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        except FileNotFoundError:  # sealed (renamed) or compressed since the listing
            continue
        except (OSError, ValueError):
            return None
    return None


def _scan_segment(data, found: ProcessMembers, lines: Callable[[], list] | None = None) -> None:
    _found_start(_decode(data, 0), found)
    if _only_ops(data):
        return
    if lines is not None:
        for line in lines():  # those the search below would find, in file order
            if _COMM_INIT in line:
                _add_comm_init(_decode(line, 0), found)
        return
    # a search for the few comm_init lines costs far less than decoding all
    for at in native.find_all(data, _COMM_INIT):
        _add_comm_init(_decode(data, data.rfind(b"\n", 0, at) + 1), found)


def _scan_lines(lines: list[bytes], found: ProcessMembers) -> None:
    """_scan_segment over the lines of a segment that are not op lines, in file order."""
    if lines:
        _found_start(_decode(lines[0], 0), found)
    for line in lines:
        if _COMM_INIT in line:
            _add_comm_init(_decode(line, 0), found)


def _found_start(start: MembersCi | None, found: ProcessMembers) -> None:
    if start is not None and start.kind == V.SEGMENT_START:
        p = start.process
        if p is not None and found.host is None:
            found.host, found.pid = p.host, p.pid
            found.global_rank, found.local_rank = p.global_rank, p.local_rank
        for m in start.communicators or ():
            found.add(m)


def _add_comm_init(ci: MembersCi | None, found: ProcessMembers) -> None:
    if ci is not None and ci.kind == V.COMM_INIT and ci.comm is not None:
        found.add(ci.comm)


def _only_ops(data) -> bool:
    """Whether the seal says every ring record of the segment is an op: then it has no
    comm_init line, and the search through it (most of a long run's segments) is saved."""
    if len(data) < 2 or data[-1:] != b"\n":
        return False
    seal = _decode(data, data.rfind(b"\n", 0, len(data) - 1) + 1)
    return (
        seal is not None
        and seal.kind == V.SEAL
        and seal.ring_record_count is not None
        and seal.ring_record_count == seal.op_count
    )


def _decode(data, line_start: int) -> MembersCi | None:
    end = data.find(b"\n", line_start)
    if end < 0:
        return None  # an unfinished last line
    try:  # (a bad line is named where every line is read)
        return decode_mending_utf8(_DECODER.decode, data[line_start:end])[0].ci
    except NOT_JSON:
        return None


@dataclass(frozen=True)
class GpuOfProcess:
    """One GPU of a process: its stream suffix and the members whose ops are its ops."""

    suffix: str  # appended to the process's stream name: "" for a one-GPU process
    members: frozenset[tuple[str, int]] | None  # None: every op of the process
    device: int | None
    global_rank: int | None
    local_rank: int | None


@dataclass
class ProcessSplit:
    gpus: list[GpuOfProcess]
    problems: list[str]
    process: ProcessMembers  # who the process is, and every member its logs name

    @property
    def split(self) -> bool:
        return self.gpus[0].members is not None


def split_process(segments: list[Path], read_lines: ReadLines | None = None) -> ProcessSplit:
    """The GPUs of one process (see the module docstring for the rule); `read_lines` as
    scan_members takes it."""
    return split_members(scan_members(segments, read_lines), segments[0] if segments else "?")


def split_members(found: ProcessMembers, where: Path | str) -> ProcessSplit:
    """The GPUs of a process whose members are known (from its logs, or live from its
    communicator table); `where` names the process in problems."""
    members = list(found.members.values())
    if found.conflicts:
        problems = [f"{where}: {c}: its ops are read as one stream" for c in found.conflicts]
        return ProcessSplit([_whole(found)], problems, found)
    by_comm: dict[str, list[Member]] = {}
    for m in members:
        by_comm.setdefault(m.comm_id, []).append(m)
    shared = sorted(c for c, ms in by_comm.items() if len(ms) > 1)
    devices = sorted({m.device for m in members if m.device is not None})
    unknown = [m for m in members if m.device is None]
    if not shared and len(devices) <= 1:
        return ProcessSplit([_whole(found)], [], found)
    if not unknown:
        return _by_device(found, members, devices, where)
    ranks = ", ".join(str(m.rank) for m in by_comm[shared[0]]) if shared else "?"
    what = (
        f"{where}: one process drives several GPUs (ranks {ranks} of communicator "
        f"{shared[0] if shared else '?'}) but the CUDA device of {len(unknown)} of its "
        "communicator members is unknown (no CUDA runtime loaded at their init)"
    )
    if len(by_comm) == 1:
        gpus = _each_member_a_gpu(found, members)
        return ProcessSplit(gpus, [f"{what}: each rank of its only communicator is one GPU"], found)
    problem = f"{what}: which members share a GPU cannot be told; its ops are read as one stream"
    return ProcessSplit([_whole(found)], [problem], found)


def _whole(found: ProcessMembers) -> GpuOfProcess:
    devices = {m.device for m in found.members.values() if m.device is not None}
    device = devices.pop() if len(devices) == 1 else None
    return GpuOfProcess("", None, device, found.global_rank, found.local_rank)


def _by_device(
    found: ProcessMembers, members: list[Member], devices: list[int], where: Path | str
) -> ProcessSplit:
    on: dict[int, list[Member]] = {d: [m for m in members if m.device == d] for d in devices}
    for device, ms in on.items():
        comm_ids = [m.comm_id for m in ms]
        twice = sorted({c for c in comm_ids if comm_ids.count(c) > 1})
        if twice:
            problem = (
                f"{where}: communicator {twice[0]} has several ranks on device {device}, "
                "which NCCL does not allow: the devices recorded cannot be trusted; its ops "
                "are read as one stream"
            )
            return ProcessSplit([_whole(found)], [problem], found)
    gpus = [
        _gpu(f".dev{device}", on[device], device, index, len(devices), found.local_rank)
        for index, device in enumerate(devices)
    ]
    return ProcessSplit(gpus, [], found)


def _each_member_a_gpu(found: ProcessMembers, members: list[Member]) -> list[GpuOfProcess]:
    ordered = sorted(members, key=lambda m: m.rank)
    return [
        _gpu(f".rank{m.rank}", [m], m.device, index, len(ordered), found.local_rank)
        for index, m in enumerate(ordered)
    ]


def _gpu(
    suffix: str,
    members: list[Member],
    device: int | None,
    index: int,
    count: int,
    process_local_rank: int | None,
) -> GpuOfProcess:
    widest = min(members, key=lambda m: (-m.nranks, m.order))
    local = index if process_local_rank is None else process_local_rank * count + index
    return GpuOfProcess(suffix, frozenset(m.key for m in members), device, widest.rank, local)
