"""An op the Profiler left untimed (GPU timing sampled) reaches hang diagnosis marked as maybe
done, on the node (SHM row to snapshot) and at a master (SHM row to gRPC batch to job view)."""

from __future__ import annotations

import numpy as np
import pytest

from comminsight.agent.master.job_view import NodeRecord, inflight_of
from comminsight.agent.state.node_state import comm_rows
from comminsight.agent.state.snapshot import inflight_op
from comminsight_gen.abi import shm_v1
from comminsight_gen.models import agent_master_api_v1 as api


def row(unproven: int) -> np.void:
    r = np.zeros(1, dtype=shm_v1.COMM_ENTRY_DTYPE)[0]
    r["comm_id"] = 0xAB
    r["nranks"] = 2
    r["coll_enqueued"] = 5
    r["coll_completed"] = 3
    r["inflight_count"] = 2
    r["inflight_kind"] = shm_v1.RecordKind.COLL
    r["inflight_func"] = shm_v1.Func.ALL_REDUCE
    r["inflight_datatype"] = shm_v1.Datatype.FLOAT32
    r["inflight_op_index"] = 3
    r["inflight_count_elems"] = 1024
    r["inflight_bytes"] = 4096
    r["inflight_peer"] = shm_v1.NO_RANK
    r["inflight_enqueue_mono_ns"] = 1_000
    r["inflight_unproven"] = unproven
    r["hang_flagged_seq"] = np.iinfo(np.uint64).max
    return r


@pytest.mark.parametrize("unproven", [0, 1])
def test_the_flag_reaches_the_nodes_view_and_the_masters(unproven):
    op = inflight_op(row(unproven))
    assert op is not None and op.op_index == 3
    assert op.unproven is bool(unproven)
    _, progress = comm_rows(row(unproven), pid=42)
    assert progress.oldest_inflight.unproven is bool(unproven)
    node = NodeRecord(name="node-b", mode=api.AgentMode.slave, offset_ns=0)
    assert inflight_of(node, progress.oldest_inflight).unproven is bool(unproven)
