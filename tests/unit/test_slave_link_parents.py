"""The link to its parents: a session that ends in any way moves the link to the next parent,
and the link lives on (grpc.aio raises InvalidStateError, not an RpcError, on a write to a
stream the parent ended; uncaught, it ended the link and the slave never reconnected)."""

from __future__ import annotations

import asyncio

import pytest

from comminsight.agent.slave import link as link_module
from comminsight.agent.slave.link import SlaveLink
from comminsight.agent.slave.outbox import SlaveOutbox
from comminsight.agent.slave.tls import SlaveTls
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb


@pytest.mark.parametrize(
    "failure",
    [asyncio.InvalidStateError("RPC already finished."), OSError("connection reset")],
)
def test_a_session_that_fails_moves_the_link_to_the_next_parent(tmp_path, monkeypatch, failure):
    outbox = SlaveOutbox(tmp_path, 1 << 20)
    outbox.load()
    link = SlaveLink(
        master_addr="127.0.0.1:1,127.0.0.1:2",
        token="t",
        tls=SlaveTls("", "", ""),
        outbox=outbox,
        identity=pb.NodeIdentity(node_name="node-0"),
        inventory=lambda: ([], []),
        max_batch_bytes=1 << 20,
        heartbeat_s=1.0,
    )
    dialed = []

    async def session(stop):
        dialed.append(link.master_addr)
        if len(dialed) == 3:
            stop.set()
            return
        raise failure

    monkeypatch.setattr(link, "_session", session)
    monkeypatch.setattr(link_module, "jitter", lambda wait: 0.0)

    async def main():
        stop = asyncio.Event()
        await asyncio.wait_for(link.run(stop), 10)

    asyncio.run(main())
    assert dialed == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"]
    assert link.full_state_wanted  # a new parent holds none of this node's rows
