"""The process of a rank that has no row in a communicator, where the communicator tells it:
its job's world. PyTorch creates a group's NCCL communicator at the group's first collective,
so a rank stuck in host code before that has no row in it; in the world group (the default
group, of as many ranks as the job's WORLD_SIZE, each at its global rank) comm rank r is the
process of global rank r, which has a region on its node whether it reached NCCL or not."""

from __future__ import annotations

from comminsight.agent.state.snapshot import CommView, NodeSnapshot, ProcessView


def world_process(comm: CommView, snapshot: NodeSnapshot, rank: int) -> ProcessView | None:
    """The process of comm rank `rank`, when `comm` is its job's world (as many ranks as the
    job's world size, every row here at its process's global rank) and exactly one process
    of that job, node and world has that global rank; else None."""
    members = comm.members
    if not members:
        return None
    worlds = {m.process.world_size for m in members}
    if worlds != {comm.nranks} or any(m.process.global_rank != m.rank for m in members):
        return None
    jobs = {m.process.job_id for m in members}
    nodes = {m.process.node_name for m in members}
    found = [
        p
        for p in snapshot.processes
        if p.global_rank == rank
        and p.world_size == comm.nranks
        and p.job_id in jobs
        and p.node_name in nodes
    ]
    return found[0] if len(found) == 1 else None
