"""One definition of a Step: the live engine and the offline one give the same Step the same
start, end and duration, and write the same summary for it.

Simulated jobs of the accuracy suite, through the real plugin: their logs read offline
(recover_steps) and replayed as the Agent's live engine meets them (live_replay). Every
summary must be byte-identical between the two, but for the two fields that say which of
them wrote it and what only the whole run can know: `produced_by.mode` (live or offline) and
`recovery.job_steps` (how many Steps the job had: unknown while it runs).
"""

from __future__ import annotations

import msgspec
import pytest
from profiler_builds import builds

from comminsight.semantic.live_replay import replay_live
from comminsight.semantic.offline import OfflineResult, recover_steps
from comminsight.sim.step_accuracy import SUITE, simulate_case

# families whose Steps are told by different evidence: buckets and idle time (DDP), the
# optimizer's scalars and an update's gathers (ZeRO), forward gathers (FSDP2), a pipeline's
# schedule, tensor parallelism alone, Megatron 3D, several optimizer steps per rollout (RL)
CASES = (
    "ddp",
    "ddp_dynamic_accum_skipped",
    "fsdp2",
    "zero1",
    "zero3",
    "pp_1f1b_m4",
    "tp_only_accum",
    "megatron_3d",
    "moe_grouped_p2p",
    "rl",
)
BY_NAME = {c.name: c for c in SUITE}


def comparable(result: OfflineResult) -> dict[tuple[int, int], bytes]:
    """(global rank, Step index) -> the summary's bytes, the writer's mode and the job's
    Step count left out."""
    out = {}
    for gpu in result.gpus:
        for summary in gpu.summaries:
            record = msgspec.to_builtins(summary)
            record["produced_by"].pop("mode")
            record["recovery"].pop("job_steps", None)
            out[(gpu.gpu.global_rank, summary.step_index)] = msgspec.json.encode(record)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_live_and_offline_write_the_same_steps(tmp_path, name):
    simulate_case(BY_NAME[name], str(builds()["plain"].path), tmp_path, comm_names=False)
    logs = tmp_path / "inspector_logs"
    offline, live = comparable(recover_steps(logs)), comparable(replay_live(logs))
    assert offline, "the offline engine found no Step"
    assert sorted(live) == sorted(offline)
    differing = [key for key in offline if live[key] != offline[key]]
    assert not differing, (
        f"{len(differing)} Steps differ, first {differing[0]}:\n"
        f"offline {offline[differing[0]].decode()}\nlive    {live[differing[0]].decode()}"
    )


def test_the_comparison_sees_a_moved_boundary(tmp_path):
    """The comparison is not blind: a Step whose start differs by one op reads differently."""
    simulate_case(BY_NAME["ddp"], str(builds()["plain"].path), tmp_path, comm_names=False)
    result = recover_steps(tmp_path / "inspector_logs")
    before = comparable(result)
    summary = result.gpus[0].summaries[2]
    result.gpus[0].summaries[2] = msgspec.structs.replace(
        summary, duration_ns=summary.duration_ns + 1
    )
    after = comparable(result)
    changed = [k for k in before if before[k] != after[k]]
    assert changed == [(result.gpus[0].gpu.global_rank, summary.step_index)]
