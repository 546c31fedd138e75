"""A GPU's UUID -> DCGM's `gpu` label (gpu_index): from a fake nvidia-smi (a small script the
test writes) or a fake /proc/driver/nvidia/gpus tree in the driver's format; any doubt gives
"" for every GPU, never a guessed index."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from comminsight.agent.state import gpu_index
from comminsight.agent.state.gpu_index import GpuIndex

A = "GPU-5cb2c9a4-7d1f-3b0e-8a21-96c0f3f0d6a1"
B = "GPU-0e4f6a3b-91c2-4d77-b1e8-2f6a9c3d5e70"
C = "GPU-a17d3e52-6b0c-48f9-9e13-7c5d2b8a4f06"
D = "GPU-f3b8c6d1-2e4a-4c5b-8d9e-0a1b2c3d4e5f"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def driver_gpu(
    proc: Path, bus_id: str, uuid: str | None, excluded: str = "No", minor: int = 0
) -> Path:
    """One GPU's directory as kernel-open/nvidia/nv-procfs.c writes it (the UUID line is left
    out when the driver cannot read it)."""
    d = proc / "driver" / "nvidia" / "gpus" / bus_id
    d.mkdir(parents=True)
    lines = ["Model: \t\t NVIDIA H100 80GB HBM3", "IRQ:   \t\t 0"]
    if uuid is not None:
        lines.append(f"GPU UUID: \t {uuid}")
    lines += [
        "Video BIOS: \t 96.00.99.00.01",
        "Bus Type: \t PCIe",
        "DMA Size: \t 52 bits",
        "DMA Mask: \t 0xfffffffffffff",
        f"Bus Location: \t {bus_id}",
        f"Device Minor: \t {minor}",
        "GPU Firmware: \t 550.54.15",
        f"GPU Excluded:\t {excluded}",
    ]
    (d / "information").write_text("\n".join(lines) + "\n")
    return d


def fake_nvidia_smi(directory: Path, body: str, name: str = "nvidia-smi") -> str:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


def answering(directory: Path, answer: str, status: int = 0) -> str:
    """A nvidia-smi that records its arguments and prints `answer`."""
    args = directory / "args"
    return fake_nvidia_smi(
        directory,
        f"printf '%s\\n' \"$@\" > '{args}'\nprintf '%s' '{answer}'\nexit {status}\n",
    )


@pytest.fixture
def proc(tmp_path) -> Path:
    p = tmp_path / "proc"
    p.mkdir()
    return p


# --- the driver's procfs ------------------------------------------------------------------------


def test_without_nvidia_smi_gpus_are_numbered_in_pci_bus_id_order(proc):
    driver_gpu(proc, "0000:ab:00.0", C, minor=2)
    driver_gpu(proc, "0000:18:00.0", A, minor=0)
    driver_gpu(proc, "0000:3d:00.0", D, minor=1)  # the minor number is not the index
    driver_gpu(proc, "0000:2a:00.0", B, minor=3)
    index = GpuIndex(proc, nvidia_smi=None, clock=Clock())
    assert [index.index_of(u) for u in (A, B, C, D)] == ["0", "1", "3", "2"]
    assert index.source == "procfs" and index.problem is None


def test_a_32_bit_pci_domain_is_ordered_by_number_not_by_text(proc):
    driver_gpu(proc, "10000:01:00.0", A)  # "10000" < "ffff" as text
    driver_gpu(proc, "ffff:01:00.0", B)
    driver_gpu(proc, "0000:01:00.1", C)
    index = GpuIndex(proc, nvidia_smi=None, clock=Clock())
    assert [index.index_of(u) for u in (C, B, A)] == ["0", "1", "2"]


def test_nvidia_smi_not_on_path_leaves_the_driver_s_procfs(proc, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    driver_gpu(proc, "0000:18:00.0", A)
    index = GpuIndex(proc, clock=Clock())
    assert index.index_of(A) == "0"
    assert index.source == "procfs"


@pytest.mark.parametrize(
    "problem",
    [
        pytest.param(lambda p: driver_gpu(p, "0000:5e:00.0", C, excluded="Yes"), id="excluded"),
        pytest.param(lambda p: driver_gpu(p, "0000:5e:00.0", None), id="no-uuid"),
        pytest.param(lambda p: driver_gpu(p, "0000:5e:00.0", "[Unknown Error]"), id="bad-uuid"),
        pytest.param(lambda p: driver_gpu(p, "0000:5e:00.0", A), id="uuid-twice"),
        pytest.param(lambda p: driver_gpu(p, "gpu-at-5e", C), id="not-a-bus-id"),
        pytest.param(
            lambda p: (p / "driver/nvidia/gpus/0000:5e:00.0").mkdir(), id="no-information"
        ),
        pytest.param(
            lambda p: (driver_gpu(p, "0000:5e:00.0", C) / "information").write_bytes(
                b"GPU UUID: \t " + C.encode() + b"\n" + b"#" * (1024 * 1024)
            ),
            id="huge-information",
        ),
        pytest.param(
            lambda p: (driver_gpu(p, "0000:5e:00.0", C) / "information").write_bytes(
                bytes(range(256)) * 16
            ),
            id="binary-information",
        ),
    ],
)
def test_any_doubt_about_one_gpu_gives_no_index_for_any(proc, problem):
    driver_gpu(proc, "0000:18:00.0", A)
    driver_gpu(proc, "0000:2a:00.0", B)
    assert GpuIndex(proc, nvidia_smi=None, clock=Clock()).index_of(A) == "0"
    problem(proc)
    index = GpuIndex(proc, nvidia_smi=None, clock=Clock())
    assert [index.index_of(u) for u in (A, B, C)] == ["", "", ""]
    assert index.problem


def test_a_gpus_dir_on_another_filesystem_is_a_container_s_copy(proc, tmp_path):
    # the NVIDIA runtime mounts a tmpfs over /proc/driver/nvidia holding the container's GPUs
    elsewhere = Path("/dev/shm")
    if not elsewhere.is_dir() or os.stat(elsewhere).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem to put the copy on")
    copy = elsewhere / f"gpus-{os.getpid()}-{tmp_path.name}"
    copy.mkdir()
    try:
        driver_gpu(copy, "0000:18:00.0", A)
        (proc / "driver" / "nvidia").mkdir(parents=True)
        (proc / "driver" / "nvidia" / "gpus").symlink_to(copy / "driver" / "nvidia" / "gpus")
        index = GpuIndex(proc, nvidia_smi=None, clock=Clock())
        assert index.index_of(A) == ""
        assert "filesystem" in index.problem
    finally:
        for d in sorted(copy.rglob("*"), reverse=True):
            d.unlink() if d.is_file() else d.rmdir()
        copy.rmdir()


def test_no_source_at_all_gives_no_index(proc):
    index = GpuIndex(proc, nvidia_smi=None, clock=Clock())
    assert index.index_of(A) == ""
    assert "cannot list" in index.problem


# --- nvidia-smi --------------------------------------------------------------------------------


def test_nvidia_smi_s_numbering_is_taken_as_it_answers(proc, tmp_path):
    # nvidia-smi's order is NVML's, whatever the PCI order; no procfs to check it against here
    smi = answering(tmp_path / "bin", f"0, {C}\n1, {A}\n2, {B}\n")
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert [index.index_of(u) for u in (A, B, C, D)] == ["1", "2", "0", ""]
    assert index.source == "nvidia-smi"
    args = (tmp_path / "bin" / "args").read_text().split("\n")[:2]
    assert args == ["--query-gpu=index,uuid", "--format=csv,noheader"]


def test_nvidia_smi_is_found_on_path(proc, tmp_path, monkeypatch):
    answering(tmp_path / "bin", f"0, {A}\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert GpuIndex(proc, clock=Clock()).index_of(A) == "0"


def test_nvidia_smi_runs_without_a_shell(proc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # a shell would run what the directory's name says: touch PWNED, here
    smi = answering(tmp_path / "bin;touch PWNED;", f"0, {A}\n")
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert index.index_of(A) == "0"
    assert not (tmp_path / "PWNED").exists()


def test_nvidia_smi_agreeing_with_the_driver_s_procfs_is_taken(proc, tmp_path):
    driver_gpu(proc, "0000:18:00.0", A)
    driver_gpu(proc, "0000:2a:00.0", B)
    smi = answering(tmp_path / "bin", f"0, {B}\n1, {A}\n")
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert [index.index_of(A), index.index_of(B)] == ["1", "0"]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(f"0, {A}\n", id="fewer"),  # a container given one GPU of two: numbered 0
        pytest.param(f"0, {A}\n1, {C}\n", id="others"),
    ],
)
def test_nvidia_smi_seeing_other_gpus_than_the_driver_gives_no_index(proc, tmp_path, answer):
    driver_gpu(proc, "0000:18:00.0", A)
    driver_gpu(proc, "0000:2a:00.0", B)
    index = GpuIndex(proc, nvidia_smi=answering(tmp_path / "bin", answer), clock=Clock())
    assert [index.index_of(u) for u in (A, B, C)] == ["", "", ""]
    assert "only some" in index.problem


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(f"0, {A}\n1, [GPU requires reset]\n", id="gpu-requires-reset"),
        pytest.param(f"0, {A}\n1 {B}\n", id="no-comma"),
        pytest.param(f"0, {A}\n0, {B}\n", id="index-twice"),
        pytest.param(f"0, {A}\n1, {A}\n", id="uuid-twice"),
        pytest.param(f"0, {A}\n2, {B}\n", id="not-0-to-n"),
        pytest.param(f"index, uuid\n0, {A}\n", id="a-header"),
        pytest.param(f"0, {A}, extra\n", id="extra-field"),
        pytest.param(f"0, {A.upper()}\n", id="upper-uuid"),
        pytest.param(f"-1, {A}\n", id="negative"),
        pytest.param("\x00\x01\x02\xff", id="binary"),
        pytest.param(f"0, {A}\n" + "x" * (70 * 1024), id="huge"),
    ],
)
def test_a_malformed_nvidia_smi_answer_gives_no_index_for_any_gpu(proc, tmp_path, answer):
    smi = answering(tmp_path / "bin", answer)
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert [index.index_of(A), index.index_of(B)] == ["", ""]
    assert index.problem


def test_a_failing_nvidia_smi_gives_no_index_and_no_guess_from_procfs(proc, tmp_path):
    driver_gpu(proc, "0000:18:00.0", A)
    smi = answering(tmp_path / "bin", "No devices were found\n", status=6)
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert index.index_of(A) == ""
    assert "exit status 6" in index.problem and "No devices" in index.problem


def test_a_hung_nvidia_smi_is_killed_with_its_children(proc, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_index, "NVIDIA_SMI_TIMEOUT_S", 0.2)
    # its child holds the output pipe: killing nvidia-smi alone would leave the read waiting
    # (for longer than pytest's timeout, which would then fail this test)
    smi = fake_nvidia_smi(tmp_path / "bin", f"printf '0, {A}\\n'\nsleep 1000 &\nwait\n")
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert index.index_of(A) == ""
    assert "no answer" in index.problem


def test_a_nvidia_smi_that_cannot_run_gives_no_index(proc, tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", "")
    Path(smi).write_bytes(b"\x7fELF not really")  # executable, but no program
    index = GpuIndex(proc, nvidia_smi=smi, clock=Clock())
    assert index.index_of(A) == ""
    assert "cannot run" in index.problem


# --- when to read again ------------------------------------------------------------------------


def test_a_known_uuid_never_reads_again_and_an_unknown_one_at_most_once_a_period(proc):
    clock = Clock()
    driver_gpu(proc, "0000:18:00.0", A)
    index = GpuIndex(proc, nvidia_smi=None, refresh_after_s=60.0, clock=clock)
    assert index.index_of(A) == "0"
    clock.now += 1000
    assert index.index_of(A) == "0"
    assert index.reads == 1
    driver_gpu(proc, "0000:2a:00.0", B)  # hot-added
    assert index.index_of(B) == "1"  # read again: the first miss since the last read
    assert index.reads == 2
    clock.now += 30
    driver_gpu(proc, "0000:3d:00.0", C)
    assert index.index_of(C) == ""  # 30 s since the last read
    assert index.reads == 2
    clock.now += 30
    assert index.index_of(C) == "2"
    assert index.reads == 3


def test_a_uuid_that_cannot_be_a_gpu_s_reads_nothing(proc):
    driver_gpu(proc, "0000:18:00.0", A)
    index = GpuIndex(proc, nvidia_smi=None, refresh_after_s=0.0, clock=Clock())
    for uuid in ("", "MIG-5cb2c9a4-7d1f-3b0e-8a21-96c0f3f0d6a1", A[:-1], A.upper()):
        assert index.index_of(uuid) == ""
    assert index.reads == 0


def test_a_failure_is_logged_once_and_a_later_read_can_recover(proc, tmp_path, caplog):
    clock = Clock()
    smi = fake_nvidia_smi(tmp_path / "bin", "exit 9\n")
    index = GpuIndex(proc, nvidia_smi=smi, refresh_after_s=60.0, clock=clock)
    with caplog.at_level(logging.DEBUG, logger=gpu_index.__name__):
        for _ in range(3):
            assert index.index_of(A) == ""
            clock.now += 60
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "exit status 9" in warnings[0].getMessage()
    assert index.reads == 3
    answering(tmp_path / "bin", f"0, {A}\n")  # the driver came back
    assert index.index_of(A) == "0"
    assert index.problem is None
