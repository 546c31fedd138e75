"""The generator refuses malformed protocol sources with an error naming the file and field.

The cases run codegen's main() in this process (codegen_in_process: the same exit status and
output, without an interpreter's start-up per case); one runs `python -m codegen` as make does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from codegen_in_process import codegen, remembered_safe_load

from codegen.cabi import model
from codegen.errors import SchemaError

ROOT = Path(__file__).resolve().parents[2]
SHM = "protocols/shm/v1/shm.abi.yaml"


def make_repo(tmp_path: Path, schema_text: str, registry_entry: dict | None = None) -> Path:
    """A minimal repository holding one C-ABI protocol (the shm schema, possibly edited)."""
    (tmp_path / "protocols/shm/v1").mkdir(parents=True)
    (tmp_path / SHM).write_text(schema_text)
    entry = registry_entry or {
        "id": "shm",
        "version": 1,
        "kind": "c-abi",
        "status": "live",
        "producer": "profiler",
        "consumers": ["agent"],
        "description": "test",
        "source": SHM,
        "outputs": [
            "generated/c/include/comminsight/shm_v1.h",
            "generated/c/contract/shm_v1_layout.c",
            "generated/python/comminsight_gen/abi/shm_v1.py",
        ],
    }
    (tmp_path / "protocols/registry.yaml").write_text(
        yaml.safe_dump({"registry_version": 1, "protocols": [entry]})
    )
    return tmp_path


@pytest.fixture(scope="module", autouse=True)
def _parse_each_schema_text_once():
    """Several cases load the unchanged shm schema: parsed once (codegen_in_process)."""
    with remembered_safe_load():
        yield


def run_codegen(root: Path, command: str = "check") -> subprocess.CompletedProcess:
    return codegen(command, "--root", str(root))


def run_codegen_process(root: Path, command: str = "check") -> subprocess.CompletedProcess:
    """The command as make runs it: its own process."""
    return subprocess.run(
        [sys.executable, "-m", "codegen", command, "--root", str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def shm_text() -> str:
    return (ROOT / SHM).read_text()


def test_the_real_shm_schema_passes(tmp_path):
    proc = run_codegen(make_repo(tmp_path, shm_text()))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (
            (
                'type: u64, offset: 0, description: "MAGIC."',
                'type: u65, offset: 0, description: "MAGIC."',
            ),
            "structs.header.fields.magic.type",
            "unknown type 'u65'",
        ),
        (
            ("{name: uid, type: u32,", "{name: pid, type: u32,"),
            "structs.header.fields.pid",
            "duplicate field 'pid'",
        ),
        (
            ("{name: LIVE, value: 1,", "{name: LIVE, value: 0,"),
            "enums.file_state.values.LIVE",
            "duplicate enum value 0",
        ),
        (
            ("{name: LIVE, value: 1,", "{name: CREATING, value: 1,"),
            "enums.file_state.values.CREATING",
            "duplicate enum value name",
        ),
        (
            ("count: 192, offset: 3904", "count: 184, offset: 3904"),
            "structs.header.size",
            "declared size 4096 but the fields lay out to 4088 bytes",
        ),
        (
            (
                "{name: rank, type: i32, offset: 32, description: \"This process's rank in",
                "{name: rank, type: i32, offset: 36, description: \"This process's rank in",
            ),
            "structs.op_slot.fields.rank.offset",
            "declared offset 36 but the layout puts it at 32",
        ),
        (
            ("{name: tid, type: u32, offset: 72,", "{name: tid, type: u16, offset: 72,"),
            "structs.op_slot.fields.nranks",
            "2 byte(s) of implicit padding",
        ),
        (
            (
                '{name: NONE, value: 0, description: "Never written."}',
                '{name: NONE, value: 300, description: "Never written."}',
            ),
            "enums.record_kind.values.NONE.value",
            "does not fit in u8",
        ),
        (
            (
                "storage: u32\n    description: Life cycle",
                "storage: float\n    description: Life cycle",
            ),
            "enums.file_state.storage",
            "unknown integer type 'float'",
        ),
    ],
    ids=[
        "unknown-type",
        "duplicate-field",
        "duplicate-enum-value",
        "duplicate-enum-name",
        "size-mismatch",
        "offset-mismatch",
        "implicit-padding",
        "enum-out-of-range",
        "bad-enum-storage",
    ],
)
def test_malformed_c_abi_schema_is_refused(tmp_path, edit, where, message):
    old, new = edit
    text = shm_text()
    assert old in text, "the test's edit no longer applies to the schema"
    root = make_repo(tmp_path, text.replace(old, new, 1))
    proc = run_codegen(root)
    assert proc.returncode != 0
    assert SHM in proc.stderr and where in proc.stderr and message in proc.stderr, proc.stderr


def test_unknown_key_in_schema_is_refused(tmp_path):
    text = shm_text().replace(
        "      - {name: magic, type: u64, offset: 0,",
        "      - {name: magic, typ: u64, offset: 0,",
        1,
    )
    proc = run_codegen(make_repo(tmp_path, text))
    assert proc.returncode != 0 and "unknown key(s) ['typ']" in proc.stderr


def test_invalid_yaml_is_refused(tmp_path):
    proc = run_codegen_process(make_repo(tmp_path, "protocol: shm\n  bad: [indent\n"))
    assert proc.returncode != 0 and SHM in proc.stderr and "not valid YAML" in proc.stderr


def test_missing_source_is_refused(tmp_path):
    root = make_repo(tmp_path, shm_text())
    (root / SHM).unlink()
    proc = run_codegen(root)
    assert proc.returncode != 0
    assert "registry.yaml" in proc.stderr and "missing source file" in proc.stderr


def test_unknown_protocol_kind_is_refused(tmp_path):
    root = make_repo(tmp_path, shm_text())
    reg = yaml.safe_load((root / "protocols/registry.yaml").read_text())
    reg["protocols"][0]["kind"] = "thrift"
    (root / "protocols/registry.yaml").write_text(yaml.safe_dump(reg))
    proc = run_codegen(root)
    assert proc.returncode != 0
    assert (
        "protocols[shm v1].kind" in proc.stderr and "unknown protocol kind 'thrift'" in proc.stderr
    )


def test_registry_outputs_must_match_what_is_generated(tmp_path):
    root = make_repo(tmp_path, shm_text())
    reg = yaml.safe_load((root / "protocols/registry.yaml").read_text())
    reg["protocols"][0]["outputs"].pop()
    (root / "protocols/registry.yaml").write_text(yaml.safe_dump(reg))
    proc = run_codegen(root)
    assert proc.returncode != 0
    assert "protocols[shm v1].outputs" in proc.stderr and "shm_v1.py" in proc.stderr


def test_schema_protocol_must_match_registry(tmp_path):
    proc = run_codegen(make_repo(tmp_path, shm_text().replace("version: 1\n", "version: 2\n", 1)))
    assert proc.returncode != 0 and "registry lists it as shm v1" in proc.stderr


def test_struct_containing_itself_is_refused(tmp_path):
    path = tmp_path / "x.abi.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "protocol": "x",
                "version": 1,
                "prefix": "ci_x",
                "description": "d",
                "structs": [
                    {
                        "name": "a",
                        "description": "d",
                        "fields": [{"name": "self", "type": "a", "description": "d"}],
                    }
                ],
            }
        )
    )
    with pytest.raises(SchemaError, match="'a' contains itself"):
        model.load(path)


def test_verify_fails_on_a_stale_schema_and_names_the_file(tmp_path):
    """Change shm v1 (a field carved out of reserved space) without regenerating."""
    if shutil.which("git") is None:
        pytest.skip("git is required by verify-generated")
    root = make_repo(tmp_path, shm_text())
    assert run_codegen(root, "generate").returncode == 0
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    assert run_codegen(root, "verify").returncode == 0
    before = {p: p.read_bytes() for p in (root / "generated").rglob("*") if p.is_file()}

    text = (
        (root / SHM)
        .read_text()
        .replace(
            "      - {name: reserved4, type: u8, count: 192, offset: 3904,",
            '      - {name: new_counter, type: u64, offset: 3904, description: "Added."}\n'
            "      - {name: reserved4, type: u8, count: 184, offset: 3912,",
        )
    )
    (root / SHM).write_text(text)
    proc = run_codegen(root, "verify")
    assert proc.returncode != 0
    assert "generated/c/include/comminsight/shm_v1.h" in proc.stderr
    assert "make generate" in proc.stderr

    # Reverting the schema and generating again gives back the committed bytes exactly.
    subprocess.run([*git, "checkout", "-q", "--", SHM], check=True)
    assert run_codegen(root, "generate").returncode == 0
    after = {p: p.read_bytes() for p in (root / "generated").rglob("*") if p.is_file()}
    assert after == before


ENGINE_CORE = ROOT / "protocols/engine-core/v1/engine-core.abi.yaml"


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        (
            "{name: start, type: i64, pointer: 1, description: \"The op's start",
            "{name: start, type: intern, description: \"The op's start",
            "structs.columns.fields.start.type",
            "an opaque type needs pointer >= 1",
        ),
        (
            "{name: t, type: intern, pointer: 1}",
            "{name: t, type: intern}",
            "exports.ci_intern_free.params.t.type",
            "an opaque type is passed by pointer",
        ),
        (
            "{name: start, type: i64, pointer: 1, description: \"The op's start",
            "{name: start, type: i64, pointer: 3, description: \"The op's start",
            "structs.columns.fields.start.pointer",
            "pointer levels must be 0, 1 or 2",
        ),
        (
            "    returns: intern\n    returns_pointer: 1\n",
            "    returns: intern\n",
            "exports.ci_intern_new.returns",
            "unknown or unsupported return type 'intern'",
        ),
        (
            "  - name: ci_intern_free\n",
            "  - name: ci_intern_new\n",
            "exports.ci_intern_new",
            "duplicate export 'ci_intern_new'",
        ),
    ],
    ids=["opaque-by-value", "opaque-param", "pointer-levels", "opaque-return", "duplicate-export"],
)
def test_malformed_exports_and_pointers_are_refused(tmp_path, old, new, where, message):
    text = ENGINE_CORE.read_text()
    assert text.count(old) == 1, "the test's edit no longer applies to the schema"
    path = tmp_path / "engine-core.abi.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(SchemaError) as e:
        model.load(path)
    assert where in str(e.value) and message in str(e.value), str(e.value)
