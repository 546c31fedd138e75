"""Bad input at a master's gRPC port: wrong token, protocol version mismatch, bytes that are not
a message, batches over the size limit, an unknown session and a sequence gap. Each gets a
clear refusal (the gRPC status of its RejectReason and a Reject naming the problem), is
recorded on the node it names, and the master goes on serving the slave that behaves."""

from __future__ import annotations

import secrets

import grpc
import pytest
from multinode_job import TOKEN, start_job
from waiting import wait_until

from comminsight.agent.master.rejects import REJECT_KEY
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

MAX_BATCH = 65536
SERVICE = "/comminsight.agent_master_slave.v1.AgentMaster/"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    job = start_job(
        tmp_path_factory.mktemp("refusals"),
        1,
        master_extra={"COMMINSIGHT_AGENT_MASTER_MAX_BATCH_BYTES": str(MAX_BATCH)},
        slave_extra={"COMMINSIGHT_SEMANTIC_ENABLE": "0"},
    )
    wait_until(lambda: _node(job, "node-0")["state"] == "connected", 60, "the slave connected")
    yield job
    job.stop()


@pytest.fixture
def channel(job):
    with grpc.insecure_channel(job.grpc) as ch:
        yield ch


def _node(job, name):
    nodes = {n["node_name"]: n for n in job.master.get("/api/v1/nodes").json()["items"]}
    return nodes.get(name, {"state": None})


def _raw(channel, method):
    return channel.unary_unary(
        SERVICE + method, request_serializer=None, response_deserializer=None
    )


def _register_request(node="intruder", version=1) -> pb.RegisterRequest:
    return pb.RegisterRequest(
        protocol_version=version,
        node=pb.NodeIdentity(node_name=node, host="elsewhere", comminsight_home="/nowhere"),
        stream_epoch=secrets.randbits(64) | 1,
    )


def _auth(token=TOKEN):
    return (("authorization", f"Bearer {token}"),)


def _refusal(call) -> tuple[grpc.StatusCode, pb.Reject | None]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    err = info.value
    reject = next(
        (pb.Reject.FromString(v) for k, v in err.trailing_metadata() or () if k == REJECT_KEY),
        None,
    )
    return err.code(), reject


def _still_serving(job):
    """The well-behaved slave stays connected: its heartbeats keep arriving."""
    before = _node(job, "node-0")["last_seen_real_ns"]
    wait_until(
        lambda: _node(job, "node-0")["last_seen_real_ns"] > before,
        60,
        "the good slave's next heartbeat",
    )
    assert _node(job, "node-0")["state"] == "connected"
    assert job.master.get("/api/v1/health").status_code == 200


def test_wrong_token_is_refused_and_reported(job, channel):
    register = _raw(channel, "Register")
    data = _register_request("intruder").SerializeToString()
    code, reject = _refusal(lambda: register(data, metadata=_auth("not-the-token"), timeout=10))
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert reject.reason == pb.REJECT_REASON_WRONG_TOKEN and "wrong token" in reject.message
    code, reject = _refusal(lambda: register(data, timeout=10))
    assert code is grpc.StatusCode.UNAUTHENTICATED and "missing" in reject.message
    # counted on the master, attributed to no node: the name it claimed is not believed
    names = [n["node_name"] for n in job.master.get("/api/v1/nodes").json()["items"]]
    assert "intruder" not in names
    health = job.master.get("/api/v1/health").json()
    assert any(
        "registrations or streams without the token refused" in r and "missing" in r
        for r in health["reasons"]
    ), health["reasons"]
    _still_serving(job)


def test_protocol_version_mismatch_names_both_versions(job, channel):
    data = _register_request("future", version=2).SerializeToString()
    code, reject = _refusal(lambda: _raw(channel, "Register")(data, metadata=_auth(), timeout=10))
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert reject.reason == pb.REJECT_REASON_VERSION_MISMATCH
    assert "protocol_version 2" in reject.message and reject.master_protocol_version == 1
    assert _node(job, "future")["last_reject"]["reason"] == "version_mismatch"
    _still_serving(job)


def test_bytes_that_are_no_message_are_malformed(job, channel):
    code, reject = _refusal(
        lambda: _raw(channel, "Register")(b"\xff\xff\xff\x07garbage", metadata=_auth(), timeout=10)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert reject.reason == pb.REJECT_REASON_MALFORMED and "RegisterRequest" in reject.message
    for name in ("../etc", "node-1\n"):  # a final LF, which re.match's $ lets by
        bad_name = _register_request(name).SerializeToString()
        code, reject = _refusal(
            lambda data=bad_name: _raw(channel, "Register")(data, metadata=_auth(), timeout=10)
        )
        assert reject.reason == pb.REJECT_REASON_MALFORMED and "node_name" in reject.message
    _still_serving(job)


def _session(channel, node: str) -> int:
    response = _raw(channel, "Register")(
        _register_request(node).SerializeToString(), metadata=_auth(), timeout=10
    )
    return pb.RegisterResponse.FromString(response).session_id


def _stream(channel, batches: list[bytes]):
    call = channel.stream_stream(
        SERVICE + "StreamNodeState", request_serializer=None, response_deserializer=None
    )
    return list(call(iter(batches), metadata=_auth(), timeout=10))


def test_oversized_batches_are_refused_by_the_master_and_by_grpc(job, channel):
    session = _session(channel, "big")
    padding = pb.ProcessInfo(pid=1, process_name="x" * 200)
    batch = pb.NodeStateBatch(session_id=session, batch_seq=1)
    while batch.ByteSize() <= MAX_BATCH + 1000:
        batch.processes.append(padding)
    code, reject = _refusal(lambda: _stream(channel, [batch.SerializeToString()]))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reject.reason == pb.REJECT_REASON_OVERSIZED and reject.max_batch_bytes == MAX_BATCH
    assert _node(job, "big")["last_reject"]["reason"] == "oversized"
    huge = pb.NodeStateBatch(session_id=session, batch_seq=1)
    huge.step_summaries.append(pb.StepSummaryRecord(json=b"x" * (4 * MAX_BATCH)))
    code, reject = _refusal(lambda: _stream(channel, [huge.SerializeToString()]))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED and reject is None  # gRPC's own limit
    # a batch within the limit on the same session is applied
    ok = pb.NodeStateBatch(session_id=session, batch_seq=1, full_state=True, full_state_last=True)
    acks = _stream(channel, [ok.SerializeToString()])
    assert pb.BatchAck.FromString(acks[-1]).last_applied_batch_seq == 1
    _still_serving(job)


def test_malformed_batch_unknown_session_and_sequence_gap(job, channel):
    code, reject = _refusal(lambda: _stream(channel, [b"\x0a\xff\xff\xff"]))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert reject.reason == pb.REJECT_REASON_MALFORMED and "NodeStateBatch" in reject.message
    stray = pb.NodeStateBatch(session_id=12345, batch_seq=1).SerializeToString()
    code, reject = _refusal(lambda: _stream(channel, [stray]))
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert reject.reason == pb.REJECT_REASON_UNKNOWN_SESSION
    session = _session(channel, "gappy")
    first = pb.NodeStateBatch(session_id=session, batch_seq=1).SerializeToString()
    third = pb.NodeStateBatch(session_id=session, batch_seq=3).SerializeToString()
    code, reject = _refusal(lambda: _stream(channel, [first, third]))
    assert code is grpc.StatusCode.OUT_OF_RANGE
    assert reject.reason == pb.REJECT_REASON_SEQUENCE_GAP and reject.last_applied_batch_seq == 1
    bad_event = pb.NodeStateBatch(session_id=session, batch_seq=2)
    bad_event.hang_events.append(pb.HangEvent(fifo_event_abi_version=1, record=b"short"))
    code, reject = _refusal(lambda: _stream(channel, [bad_event.SerializeToString()]))
    assert reject.reason == pb.REJECT_REASON_MALFORMED and "5 bytes" in reject.message
    # nothing of the refused batch was applied: batch 2 is still the next one expected
    ok = pb.NodeStateBatch(session_id=session, batch_seq=2).SerializeToString()
    assert pb.BatchAck.FromString(_stream(channel, [ok])[-1]).last_applied_batch_seq == 2
    _still_serving(job)


def test_a_slave_with_a_wrong_token_is_refused_and_logs_why(job, tmp_path):
    from multinode_job import AgentProc
    from ports import free_port

    intruder = AgentProc(
        tmp_path,
        "slave",
        "wrong-token-node",
        f"127.0.0.1:{free_port()}",
        {"COMMINSIGHT_AGENT_MASTER_ADDR": job.grpc, "COMMINSIGHT_AGENT_TOKEN": "guess"},
    ).start()
    try:
        wait_until(lambda: "wrong_token" in intruder.log_text(), 60, intruder.log_text)
        assert "wrong-token-node" not in job.master.get("/api/v1/nodes").text
        assert intruder.proc.poll() is None  # it keeps serving its own node
        assert intruder.get("/api/v1/health").status_code == 200
    finally:
        intruder.stop()
    _still_serving(job)


def test_refusals_of_new_names_add_at_most_a_bounded_number_of_node_records():
    """A slave with the token may present new node names the master refuses (a protocol
    version it does not speak): the master records such strangers (for /api/v1/nodes) up to
    MAX_REFUSED_STRANGERS, then counts them."""
    import asyncio

    from comminsight.agent.master import grpc_service as master_grpc

    class Aborted(Exception):
        pass

    class Context:
        def peer(self):
            return "ipv4:10.0.0.9:4242"

        async def abort(self, code, details, trailing_metadata=()):
            raise Aborted(details)

    server = master_grpc.AgentMasterServer(
        nodes={}, store=None, token=TOKEN, max_batch_bytes=MAX_BATCH, stale_ms=1000,
        on_events=lambda node, events: None,
    )  # fmt: skip
    refusal = master_grpc.Refusal(pb.REJECT_REASON_VERSION_MISMATCH, "protocol_version 2")
    cap = master_grpc.MAX_REFUSED_STRANGERS

    async def refuse(name):
        with pytest.raises(Aborted):
            await server._refuse(Context(), refusal, name)

    async def main():
        for i in range(cap + 50):
            await refuse(f"stranger-{i}")
        await refuse("stranger-0")  # a name already recorded is still counted on its record

    asyncio.run(main())
    assert len(server.nodes) == cap
    assert server.strangers_unrecorded == 50
    assert server.nodes["stranger-0"].rejects_total == 2
    assert server.rejects_total == cap + 51
