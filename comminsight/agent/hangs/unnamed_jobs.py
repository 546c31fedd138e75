"""Which job each process of a snapshot is in, for launchers that name none (torchrun without
--rdzv-id): processes that share a communicator are of one job, and so are those they share
one with, in turn. A job's ranks meet in its world communicator, or through its tensor-,
pipeline- and data-parallel ones; two jobs on one node share none. Processes are keyed as the
incidents key them, by node, pid and PID namespace as the reports name them."""

from __future__ import annotations

from comminsight.agent.hangs.finding_report import node_name
from comminsight.agent.hangs.incidents import Process
from comminsight.agent.hangs.ties import Ties
from comminsight.agent.state.snapshot import NodeSnapshot, ProcessView


def jobs_by_communicator(snapshot: NodeSnapshot) -> dict[Process, Process]:
    """Each process of the snapshot, as a report names it, and the one its job is named by
    (any of its processes, the same for all of them)."""
    node = node_name(snapshot.node_name)
    names: dict[str, str] = {}  # a master's snapshot holds a few nodes for many processes

    def key(p: ProcessView) -> Process:
        if not p.node_name:
            return node, p.pid, p.pid_namespace
        name = names.get(p.node_name)
        if name is None:
            name = names[p.node_name] = node_name(p.node_name)
        return name, p.pid, p.pid_namespace

    ties = Ties()
    for views in (snapshot.comms.values(), snapshot.torn_down.values()):
        for comm in views:
            keys = [key(m.process) for m in (*comm.members, *comm.departed)]
            for other in keys:
                ties.tie(keys[0], other)
    return ties.roots()
