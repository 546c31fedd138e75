"""Golden SHM and FIFO bytes: C writes what Python expects, Python writes what C reads.

fixtures/binary/<kind>.bin are the golden bytes and <kind>.json the field values. The C side
(c/binary_fixtures.c) sets fields by hand; Python encodes the JSON through the generated
numpy dtypes. Both must give the golden bytes, and each must decode the other's.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from comminsight_gen.abi import fifo_event_v1, shm_v1

from contract_helpers import ROOT

FIXTURES = ROOT / "contract-tests" / "fixtures" / "binary"
KINDS = {
    "shm_header": shm_v1.HEADER_DTYPE,
    "shm_comm_entry": shm_v1.COMM_ENTRY_DTYPE,
    "shm_op_slot": shm_v1.OP_SLOT_DTYPE,
    "fifo_event": fifo_event_v1.EVENT_DTYPE,
}


@pytest.fixture(scope="module")
def tool(compiler):
    return compiler.build("binary_fixtures", [ROOT / "contract-tests/c/binary_fixtures.c"])


def expected(kind: str) -> dict:
    return json.loads((FIXTURES / f"{kind}.json").read_text())


def encode(kind: str, values: dict) -> bytes:
    record = np.zeros(1, dtype=KINDS[kind])
    for name, value in values.items():
        record[name] = value.encode() if isinstance(value, str) else value
    return record.tobytes()


def decode(kind: str, data: bytes) -> dict:
    record = np.frombuffer(data, dtype=KINDS[kind])[0]
    out = {}
    for name in expected(kind):
        value = record[name]
        out[name] = value.decode() if isinstance(value, bytes) else int(value)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_c_writes_the_golden_bytes(kind, tool, tmp_path):
    subprocess.run([str(tool), "write", str(tmp_path)], check=True)
    assert (tmp_path / f"{kind}.bin").read_bytes() == (FIXTURES / f"{kind}.bin").read_bytes()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_python_encodes_the_golden_bytes(kind):
    golden = (FIXTURES / f"{kind}.bin").read_bytes()
    assert len(golden) == KINDS[kind].itemsize
    assert encode(kind, expected(kind)) == golden


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_python_decodes_the_golden_bytes(kind):
    assert decode(kind, (FIXTURES / f"{kind}.bin").read_bytes()) == expected(kind)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_c_reads_python_written_bytes(kind, tool, tmp_path):
    values = expected(kind)
    path = tmp_path / f"{kind}.bin"
    path.write_bytes(encode(kind, values))
    out = subprocess.run(
        [str(tool), "read", kind, str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == values


def test_c_refuses_a_truncated_file(tool, tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes((FIXTURES / "shm_op_slot.bin").read_bytes()[:100])
    proc = subprocess.run(
        [str(tool), "read", "shm_op_slot", str(path)], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "expected 256 bytes" in proc.stderr


def test_magic_spells_the_protocol():
    assert shm_v1.MAGIC.to_bytes(8, "little") == b"CISHM\x00v1"
    assert fifo_event_v1.MAGIC.to_bytes(4, "little") == b"CIFE"
