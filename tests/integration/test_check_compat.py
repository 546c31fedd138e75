"""make check-compat: a live protocol version may not change incompatibly after a release.

A throwaway repository holds a copy of protocols/ tagged v0.1.0; each case edits a copy of
that release and expects exactly the breaks it made (or none). The comparisons run in-process;
one case runs the command end to end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from codegen import compat

ROOT = Path(__file__).resolve().parents[2]
TAG = "v0.1.0"
SHM = "protocols/shm/v1/shm.abi.yaml"
STEP_SUMMARY = "protocols/step-summary/v1/step-summary.schema.json"
API = "protocols/agent-master-api/v1/agent-master-api.openapi.yaml"
PROTO = (
    "protocols/agent-master-slave/v1/comminsight_gen/agent_master_slave/v1/agent_master_slave.proto"
)
RANK = "{name: rank, type: i32, offset: 32, "
PEER = "{name: peer, type: i32, offset: 36, "
SLOT_RESERVED = (
    '{name: reserved, type: u8, count: 72, offset: 184, description: "Zero; room for fields."}'
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose only commit, tagged v0.1.0, holds this checkout's protocols/."""
    repo = tmp_path_factory.mktemp("release")
    shutil.copytree(ROOT / "protocols", repo / "protocols")
    git(repo, "init", "-q")
    git(repo, "add", "protocols")
    git(repo, "commit", "-q", "-m", "release")
    git(repo, "tag", TAG)
    return repo


@pytest.fixture(scope="module")
def base(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's protocols/ as check-compat reads it from git."""
    dest = tmp_path_factory.mktemp("base")
    assert compat.release_base(release) == TAG
    assert compat.extract_protocols(release, TAG, dest)
    return dest


@pytest.fixture
def work(tmp_path: Path, base: Path) -> Path:
    """A working tree: the release's protocols/, free to edit."""
    shutil.copytree(base / "protocols", tmp_path / "protocols")
    return tmp_path


def edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{rel} no longer holds {old!r} once: update the test"
    path.write_text(text.replace(old, new))


def edit_json(root: Path, rel: str, change) -> None:
    path = root / rel
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def cabi(base: Path, work: Path) -> list[str]:
    return [f"{w}: {m}" for w, m in compat.compare_cabi(base / SHM, work / SHM)]


def json_schema(base: Path, work: Path) -> list[str]:
    changes = compat.compare_json_schema(base / STEP_SUMMARY, work / STEP_SUMMARY)
    return [f"{w}: {m}" for w, m in changes]


# ---- the whole registry


def test_unchanged_release_is_compatible(base: Path, work: Path) -> None:
    result = compat.compare_trees(base, work, TAG)
    assert result.breaks == []
    for label in ("shm v1", "step-summary v1", "agent-master-api v1", "agent-master-slave v1"):
        assert label in result.compared


def test_deprecating_a_live_version_is_compatible(base: Path, work: Path) -> None:
    reg = work / "protocols/registry.yaml"
    doc = yaml.safe_load(reg.read_text())
    entry = next(e for e in doc["protocols"] if e["id"] == "step-summary")
    entry["status"] = "deprecated"
    reg.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert compat.compare_trees(base, work, TAG).breaks == []


def test_dropping_a_live_version_from_the_registry_breaks(base: Path, work: Path) -> None:
    reg = work / "protocols/registry.yaml"
    doc = yaml.safe_load(reg.read_text())
    doc["protocols"] = [e for e in doc["protocols"] if e["id"] != "hang-report"]
    reg.write_text(yaml.safe_dump(doc, sort_keys=False))
    breaks = [str(b) for b in compat.compare_trees(base, work, TAG).breaks]
    assert breaks == ["hang-report v1: registry: removed while live (deprecate it instead)"]


# ---- c-abi


def test_renamed_cabi_field_breaks(base: Path, work: Path) -> None:
    edit(work, SHM, RANK, "{name: comm_rank, type: i32, offset: 32, ")
    assert cabi(base, work) == ["structs.op_slot.fields.rank: renamed to comm_rank"]


def test_moved_cabi_offset_breaks(base: Path, work: Path) -> None:
    # rank and peer swap places: same size and type, so the layout stays valid
    lines = (work / SHM).read_text().splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if RANK in line)
    assert PEER in lines[i + 1]
    lines[i], lines[i + 1] = (
        lines[i + 1].replace("offset: 36", "offset: 32"),
        lines[i].replace("offset: 32", "offset: 36"),
    )
    (work / SHM).write_text("".join(lines))
    assert cabi(base, work) == [
        "structs.op_slot.fields.rank: offset 32 -> 36",
        "structs.op_slot.fields.peer: offset 36 -> 32",
    ]


def test_retyped_cabi_field_and_changed_enum_and_constant_break(base: Path, work: Path) -> None:
    edit(work, SHM, RANK, "{name: rank, type: u32, offset: 32, ")
    edit(work, SHM, "{name: RING, value: 2,", "{name: RING, value: 9,")
    edit(
        work,
        SHM,
        "{name: CACHE_LINE, type: u32, value: 64,",
        "{name: CACHE_LINE, type: u32, value: 128,",
    )
    assert cabi(base, work) == [
        "structs.op_slot.fields.rank: type i32 -> u32",
        "enums.algo.values.RING: value 2 -> 9",
        "constants.CACHE_LINE: value 0x40 -> 0x80",
    ]


def test_new_field_in_reserved_bytes_is_compatible(base: Path, work: Path) -> None:
    edit(
        work,
        SHM,
        SLOT_RESERVED,
        '{name: retries, type: u64, offset: 184, description: "New."}\n'
        '      - {name: reserved, type: u8, count: 64, offset: 192, description: "Zero."}',
    )
    edit(
        work,
        SHM,
        "{name: PAT, value: 7,",
        '{name: NEW_ALGO, value: 8, description: "New.", label: "NEW_ALGO"}\n'
        "      - {name: PAT, value: 7,",
    )
    assert cabi(base, work) == []


def test_cabi_struct_that_grows_breaks(base: Path, work: Path) -> None:
    edit(
        work,
        SHM,
        SLOT_RESERVED,
        '{name: reserved, type: u8, count: 136, offset: 184, description: "Zero."}',
    )
    edit(work, SHM, "  - name: op_slot\n    size: 256\n", "  - name: op_slot\n    size: 320\n")
    assert cabi(base, work) == ["structs.op_slot: size 256 -> 320"]


# ---- json-schema


def test_removed_json_property_breaks(base: Path, work: Path) -> None:
    edit_json(work, STEP_SUMMARY, lambda d: d["properties"].pop("period_ns"))
    assert json_schema(base, work) == ["properties.period_ns: removed"]


def test_retyped_json_property_breaks(base: Path, work: Path) -> None:
    edit_json(work, STEP_SUMMARY, lambda d: d["properties"]["duration_ns"].update(type="string"))
    assert json_schema(base, work) == ["properties.duration_ns: type integer -> string"]


def test_new_required_json_property_breaks(base: Path, work: Path) -> None:
    edit_json(work, STEP_SUMMARY, lambda d: d["required"].append("period_ns"))
    assert json_schema(base, work) == ["required: new required property 'period_ns'"]


def test_removed_json_enum_value_breaks(base: Path, work: Path) -> None:
    edit_json(work, STEP_SUMMARY, lambda d: d["$defs"]["OpClass"]["enum"].remove("p2p"))
    assert json_schema(base, work) == ["$defs.OpClass: enum value 'p2p' removed"]


def test_closed_json_object_breaks(base: Path, work: Path, tmp_path: Path) -> None:
    # every object of step-summary is closed at the release: open one in a copy of the base
    open_base = tmp_path / "open-base.schema.json"
    doc = json.loads((base / STEP_SUMMARY).read_text())
    assert doc["$defs"]["RoleStats"].pop("additionalProperties") is False
    open_base.write_text(json.dumps(doc))
    changes = compat.compare_json_schema(open_base, work / STEP_SUMMARY)
    assert [f"{w}: {m}" for w, m in changes] == [
        "$defs.RoleStats.additionalProperties: newly false"
    ]


def test_added_optional_json_property_is_compatible(base: Path, work: Path) -> None:
    edit_json(
        work,
        STEP_SUMMARY,
        lambda d: d["properties"].update(retries={"type": "integer", "description": "New."}),
    )
    edit_json(work, STEP_SUMMARY, lambda d: d["$defs"]["OpClass"]["enum"].append("kernel"))
    assert json_schema(base, work) == []


# ---- openapi and protobuf


def test_removed_openapi_path_breaks(base: Path, work: Path) -> None:
    spec = yaml.safe_load((work / API).read_text())
    del spec["paths"]["/api/v1/nodes"]
    (work / API).write_text(yaml.safe_dump(spec, sort_keys=False))
    changes = compat.compare_openapi(base, API, work, API)
    assert [f"{w}: {m}" for w, m in changes] == ["paths./api/v1/nodes.get: removed"]


def test_renumbered_protobuf_field_breaks(base: Path, work: Path) -> None:
    edit(work, PROTO, "  string api_url = 7;\n", "  string api_url = 9;\n")
    changes = compat.compare_protobuf(base, PROTO, work, PROTO)
    assert [f"{w}: {m}" for w, m in changes] == [
        "messages.NodeIdentity.fields.api_url: number 7 -> 9"
    ]


def test_removed_protobuf_field_must_be_reserved(base: Path, work: Path) -> None:
    edit(work, PROTO, "  string api_url = 7;\n", "")
    changes = compat.compare_protobuf(base, PROTO, work, PROTO)
    assert [f"{w}: {m}" for w, m in changes] == [
        "messages.NodeIdentity.fields.api_url: removed without reserving number 7"
    ]
    edit(
        work,
        PROTO,
        "  fixed64 agent_started_real_ns = 8;\n",
        "  fixed64 agent_started_real_ns = 8;\n  reserved 7;\n",
    )
    assert compat.compare_protobuf(base, PROTO, work, PROTO) == []


# ---- the command


def test_command_end_to_end(release: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(release, repo)
    assert compat.run(repo, None) == 0
    assert "OK" in capsys.readouterr().out
    edit(repo, SHM, RANK, "{name: comm_rank, type: i32, offset: 32, ")
    proc = subprocess.run(
        [sys.executable, "-m", "codegen", "check-compat", "--root", str(repo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "shm v1: structs.op_slot.fields.rank: renamed to comm_rank" in proc.stderr.splitlines()
    assert f"1 incompatible change(s) against {TAG}" in proc.stderr


def test_no_release_tag_compares_nothing(release: Path, tmp_path: Path, capsys) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(release, repo)
    git(repo, "tag", "-d", TAG)
    edit(repo, SHM, RANK, "{name: comm_rank, type: i32, offset: 32, ")
    assert compat.run(repo, None) == 0
    assert "nothing to compare" in capsys.readouterr().out
    # an explicit base still compares
    assert compat.run(repo, "HEAD") == 1
    assert "structs.op_slot.fields.rank: renamed to comm_rank" in capsys.readouterr().err
