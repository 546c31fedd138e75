"""make check-compat: a live protocol version may not change incompatibly once frozen.

The baseline every clone checks against is committed (protocols/compat-baseline/, written by
`make compat-baseline`). A throwaway repository holds a copy of this checkout's protocols/,
baseline included, tagged v0.1.0 (for `--base`, i.e. COMPAT_BASE); the command's cases run in
a shallow `git clone --no-tags` of it, where no release tag exists. The comparisons of single
kinds run in-process on a copy of the release.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from codegen_in_process import remembered_safe_load

from codegen import compat
from codegen.__main__ import main as codegen_main

ROOT = Path(__file__).resolve().parents[2]
TAG = "v0.1.0"
ENGINE_CORE = "protocols/engine-core/v1/engine-core.abi.yaml"
SHM = "protocols/shm/v1/shm.abi.yaml"
STEP_SUMMARY = "protocols/step-summary/v1/step-summary.schema.json"
API = "protocols/agent-master-api/v1/agent-master-api.openapi.yaml"
PROTO = (
    "protocols/agent-master-slave/v1/comminsight_gen/agent_master_slave/v1/agent_master_slave.proto"
)
REGISTRY = "protocols/registry.yaml"
BASELINE = "protocols/compat-baseline"
RANK = "{name: rank, type: i32, offset: 32, "
PEER = "{name: peer, type: i32, offset: 36, "
SLOT_RESERVED = (
    '{name: reserved, type: u8, count: 32, offset: 224, description: "Zero; room for fields."}'
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module", autouse=True)
def _parse_each_protocol_text_once():
    """Every case parses the release's unchanged sources again (twice where it compares two
    trees): remembered, each distinct text is parsed once per module (codegen_in_process)."""
    with remembered_safe_load():
        yield


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
    """The release's protocols/ as `check-compat --base v0.1.0` reads it from git."""
    dest = tmp_path_factory.mktemp("base")
    assert compat.extract_protocols(release, TAG, dest)
    return dest


@pytest.fixture
def clone(release: Path, tmp_path: Path) -> Path:
    """A fresh clone of the release as a contributor gets one: shallow, without its tags."""
    repo = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", "--no-tags", f"file://{release}", str(repo))
    assert git(repo, "tag", "--list").strip() == ""
    assert git(repo, "rev-parse", "--is-shallow-repository").strip() == "true"
    return repo


def check_compat(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m codegen check-compat` (what `make check-compat` runs) on repo's tree."""
    return codegen("check-compat", "--root", str(repo), *args)


def compat_baseline(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return codegen("compat-baseline", "--root", str(repo), *args)


def codegen(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m codegen ARGV` in this process (the interpreter's start-up is most of a run)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = codegen_main(list(argv))
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def check_compat_process(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as make runs it: its own process."""
    return subprocess.run(
        [sys.executable, "-m", "codegen", "check-compat", "--root", str(repo), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def frozen_labels(repo: Path) -> list[str]:
    index = json.loads((repo / BASELINE / "index.json").read_text())
    return [f"{v['id']} v{v['version']}" for v in index["versions"]]


@pytest.fixture
def work(tmp_path: Path, base: Path) -> Path:
    """A working tree: the release's protocols/, free to edit."""
    shutil.copytree(base / "protocols", tmp_path / "protocols")
    return tmp_path


def edit(root: Path, rel: str, old: str, new: str, count: int | None = 1) -> None:
    """Replace old (there `count` times; None: at least once) with new in root/rel."""
    path = root / rel
    text = path.read_text()
    n = text.count(old)
    assert n == count if count else n >= 1, f"{rel} holds {old!r} {n} times: update the test"
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
        '{name: retries, type: u64, offset: 224, description: "New."}\n'
        '      - {name: reserved, type: u8, count: 24, offset: 232, description: "Zero."}',
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
        '{name: reserved, type: u8, count: 96, offset: 224, description: "Zero."}',
    )
    edit(work, SHM, "  - name: op_slot\n    size: 256\n", "  - name: op_slot\n    size: 320\n")
    assert cabi(base, work) == ["structs.op_slot: size 256 -> 320"]


def engine_core(base: Path, work: Path) -> list[str]:
    return [f"{w}: {m}" for w, m in compat.compare_cabi(base / ENGINE_CORE, work / ENGINE_CORE)]


def test_changed_or_removed_export_and_opaque_type_break(base: Path, work: Path) -> None:
    edit(work, ENGINE_CORE, "{name: max_lines, type: i64}", "{name: max_lines, type: i32}")
    edit(work, ENGINE_CORE, "  - name: ci_find_all\n", "  - name: ci_find_every\n")
    assert engine_core(base, work) == [
        "exports.ci_find_all: removed",
        "exports.ci_scan: signature i64(const char*, i64, i64, const columns*, i64, intern*, "
        "intern*, i32, i64*) -> i64(const char*, i64, i64, const columns*, i32, intern*, "
        "intern*, i32, i64*)",
    ]


def test_a_pointer_field_that_becomes_a_value_breaks(base: Path, work: Path) -> None:
    # an int64_t* in place of a double*: same size and offset, another pointee
    edit(
        work,
        ENGINE_CORE,
        "{name: exec_us, type: f64, pointer: 1,",
        "{name: exec_us, type: i64, pointer: 1,",
    )
    assert engine_core(base, work) == ["structs.columns.fields.exec_us: type f64 -> i64"]


def test_a_pointer_that_gains_a_level_breaks(base: Path, work: Path) -> None:
    edit(
        work,
        ENGINE_CORE,
        "{name: exec_us, type: f64, pointer: 1,",
        "{name: exec_us, type: f64, pointer: 2,",
    )
    assert engine_core(base, work) == ["structs.columns.fields.exec_us: pointer levels 1 -> 2"]


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
    edit(work, PROTO, "  string api_url = 7;\n", "  string api_url = 19;\n")
    changes = compat.compare_protobuf(base, PROTO, work, PROTO)
    assert [f"{w}: {m}" for w, m in changes] == [
        "messages.NodeIdentity.fields.api_url: number 7 -> 19"
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


# ---- the command against the committed baseline, in a fresh clone


def test_this_checkout_is_compatible_with_its_baseline() -> None:
    """What `make check-compat` checks here; every live version of the registry is frozen."""
    proc = check_compat(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    live = [
        f"{e['id']} v{e['version']}"
        for e in yaml.safe_load((ROOT / REGISTRY).read_text())["protocols"]
        if e["status"] == "live"
    ]
    frozen = frozen_labels(ROOT)
    assert set(frozen) <= set(live)
    assert "step-summary v1" in frozen and "shm v1" in frozen


def test_unchanged_clone_passes(clone: Path) -> None:
    proc = check_compat(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(frozen_labels(clone))
    assert f"check-compat: OK - {n} protocol version(s) of the baseline" in proc.stdout
    assert "note:" not in proc.stdout


def test_renamed_step_index_fails_in_a_fresh_clone(clone: Path) -> None:
    """The issue's case: no tag anywhere, `step_index` renamed in step-summary v1."""
    path = clone / STEP_SUMMARY
    text = path.read_text()
    assert text.count('"step_index"') >= 2  # a property, and required
    path.write_text(text.replace('"step_index"', '"step_number"'))
    proc = check_compat_process(clone)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert "step-summary v1: properties.step_index: removed" in lines
    assert "step-summary v1: required: new required property 'step_number'" in lines
    assert "against the baseline (protocols/compat-baseline/)" in proc.stderr
    assert "new version folder" in proc.stderr


def test_renamed_cabi_field_fails_in_a_fresh_clone(clone: Path) -> None:
    edit(clone, SHM, RANK, "{name: comm_rank, type: i32, offset: 32, ")
    proc = check_compat(clone)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "shm v1: structs.op_slot.fields.rank: renamed to comm_rank" in proc.stderr.splitlines()


def test_compatible_addition_passes(clone: Path) -> None:
    edit_json(
        clone,
        STEP_SUMMARY,
        lambda d: d["properties"].update(retries={"type": "integer", "description": "New."}),
    )
    edit(clone, PROTO, "  string api_url = 7;\n", "  string api_url = 7;\n  string zone = 99;\n")
    edit(
        clone,
        SHM,
        SLOT_RESERVED,
        '{name: retries, type: u64, offset: 224, description: "New."}\n'
        '      - {name: reserved, type: u8, count: 24, offset: 232, description: "Zero."}',
    )
    proc = check_compat(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_new_protocol_version_is_not_in_the_baseline_and_passes(clone: Path) -> None:
    v2 = clone / "protocols/step-summary/v2"
    v2.mkdir()
    doc = json.loads((clone / STEP_SUMMARY).read_text())
    doc["properties"].pop("step_index")  # v2 may drop what v1 may not
    doc["required"].remove("step_index")
    (v2 / "step-summary.schema.json").write_text(json.dumps(doc, indent=2))
    reg = yaml.safe_load((clone / REGISTRY).read_text())
    v1 = next(e for e in reg["protocols"] if e["id"] == "step-summary")
    reg["protocols"].append(
        {
            **v1,
            "version": 2,
            "source": "protocols/step-summary/v2/step-summary.schema.json",
            "outputs": ["generated/python/comminsight_gen/models/step_summary_v2.py"],
        }
    )
    (clone / REGISTRY).write_text(yaml.safe_dump(reg, sort_keys=False))
    proc = check_compat(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "check-compat: note: step-summary v2 is live but not in the baseline: new, frozen at "
        "the next `make compat-baseline`" in proc.stdout.splitlines()
    )


def test_frozen_version_deprecated_is_noted_and_still_compared(clone: Path) -> None:
    reg = yaml.safe_load((clone / REGISTRY).read_text())
    next(e for e in reg["protocols"] if e["id"] == "step-summary")["status"] = "deprecated"
    (clone / REGISTRY).write_text(yaml.safe_dump(reg, sort_keys=False))
    proc = check_compat(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: step-summary v1 is deprecated now: still compared" in proc.stdout
    edit_json(clone, STEP_SUMMARY, lambda d: d["properties"].pop("period_ns"))
    proc = check_compat(clone)
    assert proc.returncode == 1
    assert "step-summary v1: properties.period_ns: removed" in proc.stderr.splitlines()


def test_frozen_version_gone_from_the_registry_breaks(clone: Path) -> None:
    reg = yaml.safe_load((clone / REGISTRY).read_text())
    reg["protocols"] = [e for e in reg["protocols"] if e["id"] != "hang-report"]
    (clone / REGISTRY).write_text(yaml.safe_dump(reg, sort_keys=False))
    proc = check_compat(clone)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0] == (
        "hang-report v1: registry: removed while live (deprecate it instead)"
    )


def _truncate(repo: Path) -> None:
    path = repo / BASELINE / "step-summary-v1.json"
    path.write_bytes(path.read_bytes()[:100])


def _hand_edit(repo: Path) -> None:
    # valid JSON, and it would let the rename through: still refused (its sha256)
    path = repo / BASELINE / "step-summary-v1.json"
    doc = json.loads(path.read_text())
    doc["surface"]["properties"].pop("step_index")
    path.write_text(json.dumps(doc))


def _index_not_json(repo: Path) -> None:
    (repo / BASELINE / "index.json").write_text('{"format": 1, "versions": [\n<<<<<<< HEAD\n')


def _index_format(repo: Path) -> None:
    path = repo / BASELINE / "index.json"
    path.write_text(path.read_text().replace('"format": 1', '"format": 99'))


def _file_missing(repo: Path) -> None:
    (repo / BASELINE / "shm-v1.json").unlink()


def _stray_file(repo: Path) -> None:
    (repo / BASELINE / "shm-v2.json").write_text("{}")


def _baseline_missing(repo: Path) -> None:
    shutil.rmtree(repo / BASELINE)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_truncate, f"{BASELINE}/step-summary-v1.json: corrupt: its sha256 is not"),
        (_hand_edit, f"{BASELINE}/step-summary-v1.json: corrupt: its sha256 is not"),
        (_index_not_json, f"{BASELINE}/index.json: corrupt: not valid JSON"),
        (_index_format, f"{BASELINE}/index.json: corrupt: format must be 1, found 99"),
        (_file_missing, f"{BASELINE}/shm-v1.json: missing, but listed in index.json"),
        (_stray_file, f"{BASELINE}: shm-v2.json: not listed in index.json"),
        (_baseline_missing, f"{BASELINE}/index.json: missing: check-compat has no baseline"),
    ],
    ids=[
        "truncated",
        "hand-edited",
        "index-not-json",
        "index-format",
        "file-missing",
        "stray",
        "no-baseline",
    ],
)
def test_damaged_or_missing_baseline_is_a_named_error(clone: Path, damage, message: str) -> None:
    damage(clone)
    edit(clone, STEP_SUMMARY, '"step_index"', '"step_number"', count=None)
    proc = check_compat(clone)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"check-compat: error: {message}" in proc.stderr
    assert "OK" not in proc.stdout


# ---- compat-baseline, the release step that writes the baseline


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_compat_baseline_twice_rewrites_nothing(clone: Path) -> None:
    # the first run may catch up with compatible changes made since the baseline was frozen
    assert compat_baseline(clone).returncode == 0
    before = snapshot(clone / BASELINE)
    proc = compat_baseline(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compat-baseline: already current:" in proc.stdout
    assert snapshot(clone / BASELINE) == before


def test_compat_baseline_is_deterministic(clone: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(clone / "protocols", other / "protocols")
    for repo in (clone, other):
        shutil.rmtree(repo / BASELINE)
        proc = compat_baseline(repo)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    files = sorted(p.name for p in (clone / BASELINE).iterdir())
    assert files == sorted(p.name for p in (other / BASELINE).iterdir())
    for name in files:
        assert (clone / BASELINE / name).read_bytes() == (other / BASELINE / name).read_bytes()


def test_compat_baseline_refuses_to_freeze_a_break_without_force(clone: Path) -> None:
    edit(clone, STEP_SUMMARY, '"step_index"', '"step_number"', count=None)
    before = (clone / BASELINE / "step-summary-v1.json").read_bytes()
    proc = compat_baseline(clone)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "step-summary v1: properties.step_index: removed" in proc.stderr.splitlines()
    assert "compat-baseline: refused" in proc.stderr
    assert (clone / BASELINE / "step-summary-v1.json").read_bytes() == before
    proc = compat_baseline(clone, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"wrote {BASELINE}/step-summary-v1.json" in proc.stdout
    assert check_compat(clone).returncode == 0


def test_compat_baseline_drops_versions_no_longer_live(clone: Path) -> None:
    reg = yaml.safe_load((clone / REGISTRY).read_text())
    next(e for e in reg["protocols"] if e["id"] == "hang-report")["status"] = "deprecated"
    (clone / REGISTRY).write_text(yaml.safe_dump(reg, sort_keys=False))
    proc = compat_baseline(clone)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"removed {BASELINE}/hang-report-v1.json (no longer live)" in proc.stdout
    assert "hang-report v1" not in frozen_labels(clone)
    assert check_compat(clone).returncode == 0


def test_compat_baseline_refuses_to_replace_a_damaged_baseline(clone: Path) -> None:
    _truncate(clone)
    proc = compat_baseline(clone)
    assert proc.returncode == 2
    assert "the baseline to replace cannot be read" in proc.stderr
    assert compat_baseline(clone, "--force").returncode == 0
    assert check_compat(clone).returncode == 0


# ---- against a git ref (COMPAT_BASE=<ref>)


def test_explicit_base_ref_compares_with_that_tree(release: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(release, repo)
    proc = check_compat(repo, "--base", TAG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"of {TAG} (" in proc.stdout and "are compatible" in proc.stdout
    edit(repo, SHM, RANK, "{name: comm_rank, type: i32, offset: 32, ")
    proc = check_compat(repo, "--base", TAG)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "shm v1: structs.op_slot.fields.rank: renamed to comm_rank" in proc.stderr.splitlines()
    assert f"1 incompatible change(s) against {TAG}" in proc.stderr
    proc = check_compat(repo, "--base", "no-such-ref")
    assert proc.returncode == 2
    assert "'no-such-ref' names no commit" in proc.stderr


def test_make_passes_compat_base_through() -> None:
    def dry(*args: str) -> str:
        return subprocess.run(
            ["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "check-compat", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")},
        ).stdout

    assert dry().strip().endswith("-m codegen check-compat")
    assert dry("COMPAT_BASE=v0.1.0").strip().endswith("-m codegen check-compat --base v0.1.0")
