"""What a node Agent that reports to a parent (a slave, or a relay toward its own parent) needs
whatever it reports: its identity, the link and outbox to the parent, the Steps it has not
forwarded yet, and its answer to the parent's question about a process of its own node. Both
modes are built from these, neither from the other."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import msgspec

from comminsight import __version__
from comminsight.agent.node.service import AgentService, _boot_id
from comminsight.agent.slave.link import SlaveLink
from comminsight.agent.slave.outbox import SlaveOutbox
from comminsight.agent.slave.tls import SlaveTls
from comminsight.agent.steps.files import NewStepSummaries
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb


def node_identity(service: AgentService, relay: bool = False) -> pb.NodeIdentity:
    """How the node introduces itself to its parent (its API's URL where it listens on a
    port)."""
    host, _, port = service.settings.agent_listen.rpartition(":")
    if host in ("0.0.0.0", "[::]", ""):
        host = socket.gethostname()
    return pb.NodeIdentity(
        node_name=service.node_name,
        host=socket.gethostname(),
        boot_id=_boot_id() or "",
        agent_version=__version__,
        agent_pid=os.getpid(),
        comminsight_home=str(service.home),
        api_url=f"http://{host}:{port}" if port not in ("", "0") else "",
        agent_started_real_ns=service.started_real_ns,
        relay=relay,
    )


def parent_link(
    service: AgentService,
    outbox: SlaveOutbox,
    identity: pb.NodeIdentity,
    inventory: Callable[[], tuple[list, list]],
    answer_stacks,
) -> SlaveLink:
    """The link to the parent the settings name, with its TLS, draining `outbox`."""
    s = service.settings
    return SlaveLink(
        master_addr=s.agent_master_addr,
        token=s.agent_token,
        tls=SlaveTls(s.agent_tls_ca, s.agent_tls_cert, s.agent_tls_key),
        outbox=outbox,
        identity=identity,
        inventory=inventory,
        max_batch_bytes=s.agent_master_max_batch_bytes,
        heartbeat_s=s.agent_master_stale_ms / 4000,
        answer_stacks=answer_stacks,
    )


def new_step_records(
    outbox: SlaveOutbox, new_steps: NewStepSummaries
) -> tuple[list[pb.StepSummaryRecord], dict[str, int]]:
    """Summaries past the highest step index forwarded for their GPU (host, rank and pid:
    two pods' processes of one node may share a pid, and two jobs a rank), and the indexes
    they move each GPU's cursor to."""
    sent = dict(outbox.steps_sent)
    out, moved = [], {}
    summaries = new_steps.read()
    summaries.sort(key=lambda s: (s.host, s.global_rank, _pid(s), s.step_index))
    for s in summaries:
        key = f"{s.host}:{s.global_rank}:{_pid(s)}"
        if s.step_index <= sent.get(key, -1):
            continue
        sent[key] = moved[key] = s.step_index
        out.append(pb.StepSummaryRecord(step_summary_version=1, json=msgspec.json.encode(s)))
    return out, moved


def _pid(s) -> int:
    return s.pid if isinstance(s.pid, int) else 0


async def answer_own_stack_request(service: AgentService, request: pb.StackRequest) -> bytes:
    """The parent's question about a process of this node, answered by this node's rules
    (stack_capture): only a process Inject announced, at most one signal per interval. The
    node's own capture (AgentService.stacks), the one its own incidents ask too: with a
    second one the process would get a signal from each within the interval."""
    rank = request.global_rank if request.HasField("global_rank") else None
    producer = service.producer_of(request.pid, request.pid_namespace)
    host = producer.host if producer is not None else socket.gethostname()
    uid = producer.uid if producer is not None else None
    stack = await service.stacks.request(host, request.pid, rank, uid)
    return msgspec.json.encode(stack)
