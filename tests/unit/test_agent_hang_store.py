"""metadata/hangs/: reports written atomically, updated in place, reloaded after a restart;
bad files are named and set aside without losing the good ones."""

from __future__ import annotations

import json

import msgspec
import pytest
from home_files import hang_report_fixture

from comminsight.agent.hangs.store import REFRESH_NS, HangStore
from comminsight_gen.models.hang_report_v1 import ReportStatus


def test_reports_survive_a_restart(tmp_path):
    store = HangStore(tmp_path)
    a, b = (
        hang_report_fixture("rank-not-joined-open.json"),
        hang_report_fixture("process-died-no-op.json"),
    )
    assert store.save(a) and store.save(b)
    files = sorted(p.name for p in (tmp_path / "metadata/hangs").iterdir())
    assert files == sorted([f"{a.report_id}.json", f"{b.report_id}.json"])  # no temp left
    again = HangStore(tmp_path)
    again.load()
    assert again.reports == {a.report_id: a, b.report_id: b} and again.errors == {}


def test_the_same_hang_is_rewritten_in_place_and_unchanged_reports_are_not(tmp_path):
    store = HangStore(tmp_path)
    report = hang_report_fixture("rank-not-joined-open.json")
    assert store.save(report)
    path = store.path_of(report.report_id)
    before = path.stat().st_mtime_ns
    assert not store.save(report)  # the next poll finds the same hang: no write
    assert path.stat().st_mtime_ns == before
    resolved = msgspec.structs.replace(report, status=ReportStatus.resolved)
    assert store.save(resolved)
    assert json.loads(path.read_text())["status"] == "resolved"
    assert len(list(path.parent.glob("*.json"))) == 1


def test_bad_files_are_named_and_set_aside_and_the_rest_load(tmp_path):
    store = HangStore(tmp_path)
    good = hang_report_fixture("straggler-resolved-by-operator.json")
    store.save(good)
    hangs = tmp_path / "metadata/hangs"
    (hangs / "truncated.json").write_bytes(store.path_of(good.report_id).read_bytes()[:50])
    (hangs / "wrong-version.json").write_text(
        json.dumps({**json.loads(store.path_of(good.report_id).read_text()), "schema_version": 9})
    )
    other = hang_report_fixture("process-died-no-op.json")
    (hangs / "renamed.json").write_bytes(msgspec.json.encode(other))
    again = HangStore(tmp_path)
    again.load()
    assert list(again.reports) == [good.report_id]
    assert set(again.errors) == {"truncated.json", "wrong-version.json", "renamed.json"}
    assert "schema_version" in again.errors["wrong-version.json"]
    assert "not 'renamed'" in again.errors["renamed.json"]
    assert sorted(p.name for p in (hangs / "invalid").iterdir()) == sorted(again.errors)


@pytest.mark.parametrize("bad_id", ["../escape", "a/b", ".hidden", ""])
def test_an_id_that_is_not_a_file_name_is_refused(tmp_path, bad_id):
    with pytest.raises(ValueError, match="report_id pattern"):
        HangStore(tmp_path).path_of(bad_id)


def test_evidence_only_changes_are_written_at_most_every_refresh(tmp_path):
    store = HangStore(tmp_path)
    first = hang_report_fixture("rank-not-joined-open.json")
    assert store.save(first, now_mono_ns=0)
    later = msgspec.structs.replace(
        first, detected_mono_ns=first.detected_mono_ns + 10**9, summary="same hang, older"
    )
    assert not store.save(later, now_mono_ns=10**9)  # same conclusion, written 1 s ago
    kept = store.reports[first.report_id]
    assert kept.summary == "same hang, older"  # served fresh
    assert kept.detected_mono_ns == first.detected_mono_ns  # first detection time kept
    on_disk = json.loads(store.path_of(first.report_id).read_text())
    assert on_disk["summary"] == first.summary
    assert store.save(later, now_mono_ns=REFRESH_NS + 1)  # refreshed
    assert json.loads(store.path_of(first.report_id).read_text())["summary"] == "same hang, older"
    new_culprit = msgspec.structs.replace(later.culprits[0], comm_rank=3)
    changed = msgspec.structs.replace(later, culprits=[new_culprit])
    assert store.save(changed, now_mono_ns=REFRESH_NS + 2)  # a new conclusion: at once
