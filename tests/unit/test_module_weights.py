"""module_weights: the order pytest-xdist hands modules out in (the longest first)."""

from __future__ import annotations

from types import SimpleNamespace

import module_weights


def item(nodeid: str):
    return SimpleNamespace(nodeid=nodeid)


def test_the_heaviest_module_comes_first_and_each_module_stays_together_in_order():
    weights = {"tests/e2e/a.py": 5.0, "tests/e2e/b.py": 50.0, "tests/unit/c.py": 1.0}
    items = [
        item("tests/e2e/a.py::t1"),
        item("tests/unit/c.py::t1"),
        item("tests/e2e/b.py::t1"),
        item("tests/e2e/a.py::t2[x]"),
        item("tests/e2e/b.py::T::t2"),
        item("tests/e2e/new.py::t1"),  # not measured yet: at the median's place
    ]
    items.sort(key=module_weights.order_key(weights))
    assert [i.nodeid for i in items] == [
        "tests/e2e/b.py::t1",
        "tests/e2e/b.py::T::t2",
        "tests/e2e/a.py::t1",
        "tests/e2e/a.py::t2[x]",
        "tests/e2e/new.py::t1",
        "tests/unit/c.py::t1",
    ]


def test_durations_are_summed_per_module_from_a_junit_report(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.e2e.test_x" name="a" time="1.5"/>'
        '<testcase classname="tests.e2e.test_x.TestK" name="b" time="2.0"/>'
        '<testcase classname="tests.unit.test_y" name="c" time="0.25"/>'
        '<testcase classname="contract_tests.test_z" name="d" time="9"/>'
        "</testsuite></testsuites>"
    )
    assert module_weights.from_junit(report) == {
        "tests/e2e/test_x.py": 3.5,
        "tests/unit/test_y.py": 0.2,
    }


def test_the_committed_table_names_modules_that_exist(tmp_path):
    table = module_weights.load()
    assert table, "tests/module_seconds.json is missing or empty"
    root = module_weights.SECONDS.parent.parent
    assert [p for p in table if not (root / p).is_file()] == []


def test_a_missing_or_damaged_table_orders_modules_by_path_alone(tmp_path, monkeypatch):
    for text in (None, "not json", "[1, 2]"):
        path = tmp_path / "seconds.json"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(module_weights, "SECONDS", path)
        assert module_weights.load() == {}
        items = [item("tests/b.py::t"), item("tests/a.py::t")]
        items.sort(key=module_weights.order_key({}))
        assert [i.nodeid for i in items] == ["tests/a.py::t", "tests/b.py::t"]
