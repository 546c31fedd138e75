"""Communicators as the frameworks create them, and named as Inject would name them.

- `init_device_mesh(shape, mesh_dim_names)` (torch/distributed/device_mesh.py,
  `DeviceMesh._init_process_groups`): a 1-D mesh over the whole world reuses the default
  group; otherwise, dimension by dimension, every rank calls `new_group` for every sub-group
  of that dimension (`group_desc=f"mesh_{name}"`), so group names count up across all of
  them, whether or not this rank is a member. A group of one rank still takes a name but never
  gets an NCCL communicator (nothing collective runs on it).
- `torch.distributed.new_group(ranks)` without `group_desc`: "undefined" (vLLM's groups).
- Communicators that NCCL creates outside torch.distributed (vLLM's `PyNcclCommunicator`
  calls ncclCommInitRank itself): no torch group, so Inject cannot name them and NCCL gets a
  NULL commName even when every torch group is named.
"""

from __future__ import annotations

import numpy as np

from comminsight.sim.plan import CommSpec, PlanBuilder, comm_id_for


def new_groups(
    b: PlanBuilder, role: str, desc: str, groups: list[tuple[int, ...]]
) -> dict[int, CommSpec]:
    """One `new_group` per entry, in order on every rank: rank -> its communicator."""
    by_rank: dict[int, CommSpec] = {}
    for members in groups:
        name = b.new_group_name()
        if len(members) > 1:
            comm = b.add_comm(role, desc, members, name)
            by_rank.update(dict.fromkeys(members, comm))
    return by_rank


def mesh_dimension_groups(shape: tuple[int, ...], dim: int) -> list[tuple[int, ...]]:
    """The sub-groups of one mesh dimension, in the order DeviceMesh creates them."""
    mesh = np.arange(int(np.prod(shape))).reshape(shape)
    rows = np.swapaxes(mesh, -1, dim).reshape(-1, shape[dim])
    return [tuple(int(r) for r in row) for row in rows]


def device_mesh(
    b: PlanBuilder, world: CommSpec, shape: tuple[int, ...], names: tuple[str, ...], roles=None
) -> dict[str, dict[int, CommSpec]]:
    """init_device_mesh: mesh dimension name -> (rank -> communicator of that dimension)."""
    roles = roles or names
    if len(shape) == 1 and shape[0] == world.nranks:
        return {names[0]: dict.fromkeys(world.members, world)}
    return {
        name: new_groups(b, role, f"mesh_{name}", mesh_dimension_groups(shape, dim))
        for dim, (name, role) in enumerate(zip(names, roles, strict=True))
    }


def unnamed_comm(b: PlanBuilder, role: str, key: str, members: tuple[int, ...]) -> CommSpec:
    """A communicator NCCL creates outside torch.distributed: its commName is NULL."""
    nodes = {r // b.config.ranks_per_node for r in members}
    spec = CommSpec(
        len(b.comms),
        role,
        None,  # type: ignore[arg-type]  # no torch group, so no name reaches NCCL
        comm_id_for(b.config.seed, key, members),
        members,
        len(nodes),
    )
    b.comms.append(spec)
    return spec
