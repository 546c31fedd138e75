"""An op's ABI v7 facts (the call's user tag, the kernel variant, a symmetric kernel) reach the
API's OpRecord, and an op without them says so with nulls and false."""

from __future__ import annotations

import msgspec
import numpy as np

from comminsight.agent.state.recent_ops import Origin, op_record
from comminsight.shm_reader import SLOT
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.agent_master_api_v1 import OpRecord

ORIGIN = Origin(pid=7, global_rank=3, node_name="n0", start_real_ns=10**18, start_mono_ns=10**9)


def slot(kind=shm_v1.RecordKind.COLL, user_tag=0, variant=b"", flags=0):
    s = np.zeros(1, SLOT)[0]
    s["kind"], s["func"] = (
        kind,
        shm_v1.Func.ALL_REDUCE if kind == shm_v1.RecordKind.COLL else shm_v1.Func.SEND,
    )
    s["comm_id"], s["rank"], s["nranks"], s["peer"] = 0xAB, 0, 2, 1
    s["count"], s["bytes"], s["datatype"] = 256, 1024, shm_v1.Datatype.FLOAT32
    s["host_start_mono_ns"], s["host_stop_mono_ns"], s["complete_mono_ns"] = (
        2 * 10**9,
        2 * 10**9 + 5,
        2 * 10**9 + 9,
    )
    s["timing_source"] = shm_v1.TimingSource.COLLECTIVE_CPU
    s["user_tag"], s["kernel_variant"], s["flags"] = user_tag, variant, flags
    return s


def roundtrip(record: OpRecord) -> OpRecord:
    return msgspec.json.decode(msgspec.json.encode(record), type=OpRecord)


def test_a_tagged_symmetric_collective_carries_its_tag_variant_and_flag():
    r = roundtrip(
        op_record(
            slot(
                user_tag=(1 << 64) - 1,
                variant=b"AllReduce_Sum_f32_RING_LL",
                flags=shm_v1.SlotFlags.SYM_COLL,
            ),
            ORIGIN,
        )
    )
    assert (r.user_tag, r.kernel_variant, r.sym_coll) == (
        (1 << 64) - 1,
        "AllReduce_Sum_f32_RING_LL",
        True,
    )


def test_an_untagged_op_has_nulls_and_a_send_no_variant():
    r = op_record(slot(), ORIGIN)
    assert (r.user_tag, r.kernel_variant, r.sym_coll) == (None, None, False)
    p2p = op_record(
        slot(
            kind=shm_v1.RecordKind.P2P, user_tag=5, variant=b"junk", flags=shm_v1.SlotFlags.SYM_COLL
        ),
        ORIGIN,
    )
    assert (p2p.user_tag, p2p.kernel_variant, p2p.sym_coll) == (5, None, False)
