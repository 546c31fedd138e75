"""Refusals of agent-master-slave v1, shared by both ends: which gRPC status goes with each
RejectReason, how a Reject travels (trailing metadata `comminsight-reject-bin`), and how a
slave reads one back, including the two refusals gRPC makes before any handler runs."""

from __future__ import annotations

import grpc

from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

REJECT_KEY = "comminsight-reject-bin"
PROTOCOL_VERSION = pb.PROTOCOL_VERSION_1

STATUS_OF = {
    pb.REJECT_REASON_WRONG_TOKEN: grpc.StatusCode.UNAUTHENTICATED,
    pb.REJECT_REASON_VERSION_MISMATCH: grpc.StatusCode.FAILED_PRECONDITION,
    pb.REJECT_REASON_OVERSIZED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.REJECT_REASON_MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    pb.REJECT_REASON_UNKNOWN_SESSION: grpc.StatusCode.FAILED_PRECONDITION,
    pb.REJECT_REASON_SEQUENCE_GAP: grpc.StatusCode.OUT_OF_RANGE,
    pb.REJECT_REASON_NODE_CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    pb.REJECT_REASON_NOT_A_MASTER: grpc.StatusCode.FAILED_PRECONDITION,
    pb.REJECT_REASON_SHUTTING_DOWN: grpc.StatusCode.UNAVAILABLE,
}
# Refusals a slave cannot fix by retrying: it keeps trying, slowly, so that a corrected master
# is found again, and logs each at error level.
FATAL = frozenset(
    {
        pb.REJECT_REASON_WRONG_TOKEN,
        pb.REJECT_REASON_VERSION_MISMATCH,
        pb.REJECT_REASON_NOT_A_MASTER,
        pb.REJECT_REASON_MALFORMED,
    }
)


def reason_name(reason: int) -> str:
    """'wrong_token' for REJECT_REASON_WRONG_TOKEN: the API's NodeReject.reason."""
    try:
        return pb.RejectReason.Name(reason).removeprefix("REJECT_REASON_").lower()
    except ValueError:
        return f"unknown_{reason}"


class Rejected(Exception):
    """The master refused; `reject` says why."""

    def __init__(self, reject: pb.Reject) -> None:
        super().__init__(f"{reason_name(reject.reason)}: {reject.message}")
        self.reject = reject

    @property
    def fatal(self) -> bool:
        return self.reject.reason in FATAL


def reject_of(error: grpc.RpcError) -> pb.Reject | None:
    """The Reject a master attached to an error, or the one gRPC's own refusals mean; None
    for transport failures (master unreachable, connection lost), which are retried."""
    for key, value in error.trailing_metadata() or ():
        if key == REJECT_KEY:
            try:
                return pb.Reject.FromString(value)
            except Exception:  # a peer that is not a CommInsight master
                break
    code, details = error.code(), error.details() or ""
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return pb.Reject(reason=pb.REJECT_REASON_OVERSIZED, message=details)
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return pb.Reject(
            reason=pb.REJECT_REASON_NOT_A_MASTER,
            message=f"the agent dialed does not serve AgentMaster ({details})",
        )
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return pb.Reject(reason=pb.REJECT_REASON_WRONG_TOKEN, message=details)
    return None
