"""The simulator's activation mask lives as NCCL's does: for the whole process.

NCCL hands every init a pointer to one int of its own, a static that is never freed; the
plugin's watchdog reads it until the plugin's destructor at exit() joins its threads. A mask
owned by a Python object is freed while the interpreter finalizes, before that destructor: a
process that exited with a communicator still live then had its watchdog read freed memory
("corrupted size vs. prev_size", SIGABRT, in about a third of such exits)."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest
from profiler_builds import builds

from comminsight.sim.abi import load_plugin

ROOT_TESTS = Path(__file__).resolve().parents[1]

EXIT_WITH_A_LIVE_COMMUNICATOR = """
import sys
from pathlib import Path
from plugin_scenarios import Driver
d = Driver(sys.argv[1], 5)
res = d.init(0xC1, name="dp:0")
for seq in range(4):
    d.coll(res.context, seq)
if sys.argv[2] == "raise":
    raise SystemExit(3)  # as a training script that dies of an exception: no finalize
"""


def test_the_mask_is_not_owned_by_a_python_object():
    abi = load_plugin(str(builds()["plain"].path), 5)
    mask = abi.new_activation_mask()
    assert "owning" not in repr(mask)  # no Python object frees it
    address = int(abi.ffi.cast("uintptr_t", mask))
    mask[0] = 0x5A5A
    del mask
    gc.collect()
    again = abi.ffi.cast("int32_t *", address)
    assert again[0] == 0x5A5A


@pytest.mark.parametrize("how", ["return", "raise"])
def test_a_process_that_exits_with_a_live_communicator_exits_cleanly(how, tmp_path):
    asan = builds()["asan"]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{ROOT_TESTS}:{ROOT_TESTS.parent}",
        "COMMINSIGHT_HOME": str(tmp_path / "home"),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "10",  # the watchdog scans through the exit
        **asan.env,
    }
    expected = 3 if how == "raise" else 0
    for attempt in range(4):
        run = subprocess.run(
            [sys.executable, "-c", EXIT_WITH_A_LIVE_COMMUNICATOR, str(asan.path), how],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == expected, f"exit {attempt}: {run.returncode}\n{run.stderr[-4000:]}"
        assert "AddressSanitizer" not in run.stderr
