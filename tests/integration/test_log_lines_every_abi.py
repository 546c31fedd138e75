"""Every line the Profiler writes decodes with the inspector-log schema's full model, whichever
profiler ABI NCCL drives it through: a v7 Profiler's comm_init lines once named an ABI
(`"profiler_abi":"v7"`) the schema's enum did not have, and the Agent's log readers
(log_records, log_recovery) skipped them as malformed."""

from __future__ import annotations

import msgspec
import pytest
import zstandard
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation
from comminsight_gen.models.inspector_log_v1 import CiCommInit, InspectorLogRecord, ProfilerAbi
from comminsight_gen.registry import PROTOCOLS

FULL = msgspec.json.Decoder(InspectorLogRecord)
ABIS = sorted(p.version for p in PROTOCOLS if p.id == "nccl-profiler" and p.status == "live")


def test_the_schema_names_every_abi_the_profiler_serves():
    assert [f"v{abi}" for abi in ABIS] == [v.value for v in ProfilerAbi]


@pytest.mark.parametrize("abi", ABIS)
def test_every_line_decodes_under_each_abi(abi, tmp_path):
    sim = run_simulation(
        SimConfig(
            plugin=str(builds()["plain"].path),
            home=str(tmp_path),
            workload="ddp",
            ranks=2,
            steps=1,
            abi=abi,
            time_scale=0.01,
            env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
        )
    )
    assert not sim.errors, sim.errors
    inits = 0
    for path in sorted((tmp_path / "inspector_logs").iterdir()):
        data = path.read_bytes()
        if path.suffix == ".zst":
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        for line in data.splitlines():
            ci = FULL.decode(line).ci
            if isinstance(ci, CiCommInit):
                assert ci.profiler_abi.value == f"v{abi}"
                inits += 1
    assert inits >= 2  # each rank's world communicator at least
