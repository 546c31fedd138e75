"""The name Inject writes into an ncclConfig_t reaches the real Profiler plugin through the
real NCCL ABI (the simulated NCCL's init), as NCCL 2.28 passes `comm->config.commName`, and
shows in the SHM communicator table the Agent reads and in the inspector_logs.

The ncclConfig_t and its Options object are ctypes structures laid out as NCCL and PyTorch lay
them out; pybind11's value pointers are the one thing stood in for (a CPU torch has no
ProcessGroupNCCL): test_inject_unit.py checks those on a real pybind11 object."""

from __future__ import annotations

import json

from inject_named_comms import run_named_comms
from log_files import segment_data


def test_injected_name_reaches_the_plugin_shm_and_logs(tmp_path):
    home = tmp_path / "home"
    result = run_named_comms(home)
    from comminsight_gen.abi.shm_v1 import NameSource

    assert result["kept"] == "user-named"
    assert result["comms"] == {
        "0x1111": ["mesh_tp:5", NameSource.NCCL],
        "0x2222": ["users-own-name", NameSource.NCCL],
        "0x3333": ["", NameSource.NONE],
    }
    inits = {}
    for _, data in segment_data(home / "inspector_logs"):
        for line in data.decode().splitlines():
            ci = json.loads(line).get("ci", {})
            if ci.get("kind") == "comm_init":
                inits[ci["comm"]["comm_id"]] = ci["comm"].get("comm_name")
    assert inits == {
        "0000000000001111": "mesh_tp:5",
        "0000000000002222": "users-own-name",
        "0000000000003333": None,
    }
