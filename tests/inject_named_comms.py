"""Three communicators made by the real Profiler plugin through the simulated NCCL's init, in a
child process: one named by Inject (its name written into the ncclConfig_t PyTorch passes,
as NCCL 2.28 hands `comm->config.commName` to the profiler), one the user named, one unnamed.
pybind11's value pointers are the one thing stood in for (nccl_config_structs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from profiler_builds import builds

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = textwrap.dedent(
    """
    import ctypes, json, sys, glob
    sys.path.insert(0, sys.argv[2])
    from nccl_config_structs import FakeOptions, new_options_struct
    from comminsight.inject import nccl_config
    from comminsight.shm_reader import ShmRegion
    from comminsight.sim.abi import load_plugin

    def pointer(obj):
        if isinstance(obj, FakeOptions):
            return ctypes.addressof(obj.struct)
        return ctypes.addressof(obj._s)
    nccl_config._pybind_value_pointer = pointer

    def nccl_init(abi, mask, comm_id, options, nranks, rank):
        # what ncclCommInitRankConfig does with the config PyTorch passes: keep commName
        # and hand it to the profiler's init
        at = options.struct.config.commName
        name = ctypes.string_at(at).decode() if at else None
        return abi.init(mask, comm_id, name, 1, nranks, rank)

    abi = load_plugin(sys.argv[1], 5)
    mask = abi.new_activation_mask()
    named = FakeOptions(new_options_struct())
    assert nccl_config.set_comm_name(named, "mesh_tp:5") == nccl_config.NCCL_CONFIG
    users = FakeOptions(new_options_struct())
    mine = ctypes.create_string_buffer(b"users-own-name")
    users.struct.config.commName = ctypes.addressof(mine)
    kept = nccl_config.set_comm_name(users, "default_pg:0")
    plain = FakeOptions(new_options_struct())  # no Inject: NCCL passes NULL
    contexts = [
        nccl_init(abi, mask, 0x1111, named, 2, 0).context,
        nccl_init(abi, mask, 0x2222, users, 2, 1).context,
        nccl_init(abi, mask, 0x3333, plain, 1, 0).context,
    ]
    [shm] = glob.glob(sys.argv[3] + "/shms/*.shm")
    region = ShmRegion(shm)
    rows = [r for r in region.comm_entries() if r["comm_id"]]
    seen = {}
    for r in rows:
        name = bytes(r["name"]).rstrip(b"\\0").decode()
        seen[hex(int(r["comm_id"]))] = [name, int(r["name_source"])]
    region.close()
    for c in contexts:
        abi.finalize(c)
    print(json.dumps({"kept": kept, "comms": seen}))
    """
)


def run_named_comms(home: Path) -> dict:
    """SCENARIO's three communicators (Inject-named, user-named, unnamed) made by the real
    plugin in a child process whose SHM and logs stay under `home`."""
    plugin = builds()["plain"].path
    env = {
        **os.environ,
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(plugin), str(ROOT / "tests"), str(home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
