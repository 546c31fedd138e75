from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # codegen is a development tool, not part of the package
    sys.path.insert(0, str(ROOT))
# A Profiler loaded by a test must not start a real Agent daemon (found on PATH where the
# package is installed) that outlives the test; tests of autostart set this themselves.
os.environ.setdefault("COMMINSIGHT_AGENT_AUTOSTART", "0")


import pytest  # noqa: E402

from comminsight.shm_reader import is_memfd_target  # noqa: E402


def remove_linked_shm(root: Path) -> None:
    """Producers whose test held the agent lock leave their SHM regions for an Agent that, in
    most tests, never comes to retire them; the regions are memory in the tmpfs (/dev/shm),
    outside the test's directory. Remove the targets of every region link under root."""
    if not root.is_dir():
        return
    for link in root.rglob("*.shm"):
        if link.is_symlink():
            target = Path(os.readlink(link))
            # a process's memfd (/proc/<pid>/fd/<n>) went with the process
            if not target.is_relative_to(root) and not is_memfd_target(target):
                target.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _release_shm_regions(request):
    # Taken before the test (it asks for tmp_path anyway) so that it outlives this teardown.
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        remove_linked_shm(tmp)


@pytest.fixture(autouse=True, scope="session")
def _release_shm_regions_of_the_session(tmp_path_factory):
    yield
    remove_linked_shm(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def plugin() -> Path:
    """The Profiler plugin as `make build-profiler` builds it (built first if out of date)."""
    subprocess.run(["make", "-s", "build-profiler"], cwd=ROOT, check=True)
    return ROOT / "dist" / "libnccl-profiler-comminsight.so"


@pytest.fixture(scope="session")
def recording_plugin(tmp_path_factory) -> Path:
    """Not the Profiler: tests/plugins/recording_plugin.c, which writes down every call the
    simulated NCCL makes to it (sim_recording.py reads it back)."""
    from sim_recording import build_recording_plugin

    return build_recording_plugin(tmp_path_factory.mktemp("recording-plugin"))


@pytest.fixture
def no_inject(tmp_path):
    """A running Python process without Inject that records the signals it receives in
    `.marker` (the stack tests ask it for stacks it cannot give)."""
    from stack_processes import NO_INJECT, ScriptProcess

    marker = tmp_path / "signals-received"
    with ScriptProcess(tmp_path, NO_INJECT, args=[marker]) as p:
        p.marker = marker
        yield p


# Accuracy figures tests want in the run's output even when they pass (pytest shows a passing
# test's prints only with -s): test modules append lines here, the summary prints them.
REPORT_LINES: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT_LINES:
        terminalreporter.section("CommInsight measurements")
        for line in REPORT_LINES:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items) -> None:
    """The longest modules first (module_weights: measured seconds), each module's tests
    together and in their order. pytest-xdist hands modules to workers in this order (--dist
    loadfile --no-loadscope-reorder), so no long module starts last, alone, while the other
    workers sit idle."""
    from module_weights import load, order_key

    items.sort(key=order_key(load()))
