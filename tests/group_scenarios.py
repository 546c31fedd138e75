"""NCCL-group scenarios for the Profiler plugin, each run in a fresh process.

    python tests/group_scenarios.py SCENARIO PLUGIN.so

Like plugin_scenarios.py (whose driver they use), each prints one JSON object: the group id
the plugin gave each op, as its SHM ring records show them, keyed "<comm id>/<seq>". Run with
COMMINSIGHT_PROFILER_COMM_SLOTS=2, so that a third communicator is not tracked.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from plugin_scenarios import COLL, Driver, region

from comminsight.shm_reader import RingCursor
from comminsight_gen.abi import shm_v1


def op(d: Driver, ctx, group, seq: int, api=None) -> None:
    """A collective of the plan `group` (v5: parentGroup; v4: parentObj), run to completion."""
    handle = d.abi.start_coll(ctx, api, group, 0, {**COLL, "seq": seq})
    d.abi.stop(handle)
    d.channels(ctx, handle, COLL["n_channels"], base=1_000_000 * (seq + 1))


def group_ids() -> dict[str, int]:
    # nothing to wait for: an op is in the ring once its last channel stopped, on the thread
    # that stopped it (joined by now); the ring is read without the background thread
    records = RingCursor(region()).poll()
    ops = records[records["kind"] == shm_v1.RecordKind.COLL]
    return {
        f"{int(r['comm_id']):x}/{int(r['op_seq'])}": int(r["group_id"])
        for r in ops  # one line per op
    }


def on_another_thread(fn) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


def v5_groups(d: Driver) -> dict:
    """How NCCL 2.28 names groups to a v5/v6 plugin, and the threads it does it from."""
    abi = d.abi
    a, b = d.init(0xA).context, d.init(0xB).context
    untracked = d.init(0xC).context  # beyond the comm slots
    # one user group over two communicators: a GroupApi, then a plan (Group) per communicator
    assert abi.start_group_api(a, 2) is None, "the GroupApi gets no handle"
    for ctx in (a, b):
        plan = abi.start_group(ctx)
        op(d, ctx, plan, 0)
        abi.stop(plan)
    # an op alone, in its implicit group; its CollApi is its parent, as NCCL names it
    abi.start_group_api(a, 1)
    api = abi.start_coll_api(a, None, "AllReduce", 1024, "ncclFloat32", 0, 0xABC000)
    abi.stop(api)
    plan = abi.start_group(a)
    op(d, a, plan, 1, api=api)
    abi.stop(plan)

    # a plan launched from a CUDA host callback's thread, which never sees a GroupApi
    def host_callback():
        plan = abi.start_group(a)
        op(d, a, plan, 2)
        op(d, a, plan, 3)
        abi.stop(plan)

    on_another_thread(host_callback)
    # a group begun on a communicator that is not tracked: its plan on a tracked one
    abi.start_group_api(untracked, 2)
    plan = abi.start_group(a)
    op(d, a, plan, 4)
    abi.stop(plan)
    op(d, a, None, 5)  # a task that names no group
    out = group_ids()
    for ctx in (a, b, untracked):
        abi.finalize(ctx)
    return out


def v4_groups(d: Driver) -> dict:
    """v4 has no GroupApi: every Group (a plan) is a group of its own."""
    abi = d.abi
    a = d.init(0xA).context
    for seqs in ((0, 1), (2,)):
        plan = abi.start_group(a)
        for seq in seqs:
            op(d, a, plan, seq)
        abi.stop(plan)
    out = group_ids()
    abi.finalize(a)
    return out


SCENARIOS = {f.__name__: f for f in (v5_groups, v4_groups)}

if __name__ == "__main__":
    scenario, plugin = sys.argv[1], sys.argv[2]
    version = int(os.environ.get("SCENARIO_ABI", "5"))
    print(json.dumps(SCENARIOS[scenario](Driver(plugin, version))))
    sys.stdout.flush()
