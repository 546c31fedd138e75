"""Which name a process group's communicators get, and the NCCL options that carry it.

Every public way of making a group ends in one of two places in `distributed_c10d`:
`_new_process_group_helper` (init_process_group, new_group, new_subgroups, DeviceMesh through
new_group) and `split_group` (DeviceMesh on a device-bound default group, and direct calls).
These functions look at the arguments such a call is about to receive and return them with
named NCCL options; they never create a group or a communicator themselves.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from . import nccl_config
from .metadata import V

# how the name reached NCCL (inject-metadata's `naming`), and NOT_MEMBER, which is never written
NO_NCCL = V.NO_NCCL  # the group has no NCCL backend: no NCCL communicator to name
NO_NCCL_BUILD = V.NO_NCCL_BUILD  # this torch has no ProcessGroupNCCL
FOREIGN_OPTIONS = V.FOREIGN_OPTIONS  # options of a backend Inject does not know; left alone
NOT_MEMBER = "not-member"  # this rank is not in the group: it makes no communicator
UNAVAILABLE = V.UNAVAILABLE  # NCCL options exist but no name could be set (see `reason`)


def comm_name(group_desc: str | None, group_name: str) -> str:
    """`<group_desc>:<group_name>`; torch's own default description for an undescribed group."""
    return f"{group_desc if group_desc else 'undefined'}:{group_name}"


@dataclass
class Plan:
    """What Inject did to one group-creation call, recorded once the group exists."""

    api: str
    group_name: str
    group_desc: str
    comm_name: str
    naming: str
    reason: str = ""
    global_ranks: list[int] = field(default_factory=list)
    group_rank: int = -1
    group_size: int = -1


def _int(value) -> int:
    return value if isinstance(value, int) else -1


def backend_map(c10d, backend) -> dict[str, str]:
    """device type -> backend name, as torch resolves the `backend` argument."""
    config = c10d.BackendConfig(c10d.Backend(str(backend)))
    return {str(k): str(v).lower() for k, v in config.get_device_backend_map().items()}


def name_options(c10d, options, name: str) -> tuple[str, str]:
    """Set `name` on NCCL `options`: (naming, reason)."""
    nccl = getattr(c10d, "ProcessGroupNCCL", None)
    if nccl is None:
        return NO_NCCL_BUILD, ""
    if not isinstance(options, nccl.Options):
        return FOREIGN_OPTIONS, type(options).__name__
    try:
        return nccl_config.set_comm_name(options, name), ""
    except nccl_config.LayoutError as e:
        return UNAVAILABLE, str(e)


def plan_helper(c10d, arguments: dict) -> Plan:
    """For `_new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend,
    store, group_name, backend_options=None, timeout=None, pg_tag=None, device_id=None,
    group_desc=None)`: may put named NCCL options into `arguments` (a BoundArguments dict)."""
    group_name = str(arguments["group_name"])
    desc = arguments.get("group_desc") or "undefined"
    plan = Plan(
        api=V.NEW_PROCESS_GROUP,
        group_name=group_name,
        group_desc=desc,
        comm_name=comm_name(desc, group_name),
        naming=NO_NCCL,
        global_ranks=list(arguments.get("global_ranks_in_group") or []),
        group_rank=_int(arguments.get("group_rank")),  # None on ranks outside the group
        group_size=_int(arguments.get("group_size")),  # -1 until known for a default group
    )
    backends = backend_map(c10d, arguments["backend"])
    if "nccl" not in backends.values():
        return plan
    nccl = getattr(c10d, "ProcessGroupNCCL", None)
    if nccl is None:
        plan.naming = NO_NCCL_BUILD
        return plan
    options = arguments.get("backend_options")
    if options is None:
        # torch makes exactly these defaults itself when none are given; making them here
        # lets the name ride along. Backends other than gloo and nccl would receive the same
        # object, so only then.
        timeout = arguments.get("timeout")
        if not set(backends.values()) <= {"nccl", "gloo"} or timeout is None:
            plan.naming, plan.reason = FOREIGN_OPTIONS, "no default NCCL options for this backend"
            return plan
        options = nccl.Options()
        options.is_high_priority_stream = False
        options._timeout = timeout
        arguments["backend_options"] = options
    plan.naming, plan.reason = name_options(c10d, options, plan.comm_name)
    return plan


def plan_split(c10d, torch, arguments: dict) -> Plan | None:
    """For `split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None,
    group_desc=None, ...)`: None when this rank joins no split (torch then makes nothing)."""
    default_pg = c10d._get_default_group()
    parent = arguments.get("parent_pg") or default_pg
    split_ranks = arguments.get("split_ranks") or []
    parent_rank = parent.rank()
    mine = next((sorted(r) for r in split_ranks if parent_rank in r), None)
    device = default_pg.bound_device_id
    if mine is None or device is None:
        return None
    group_name = str(c10d._process_group_name(mine, use_hashed_name=True))
    parent_backend = parent._get_backend(torch.device(device.type))
    desc = arguments.get("group_desc")
    if not desc and hasattr(parent_backend, "comm_split_count"):
        desc = f"{parent.group_desc}:split:{parent_backend.comm_split_count()}"
    plan = Plan(
        api=V.SPLIT_GROUP,
        group_name=group_name,
        group_desc=desc or "undefined",
        comm_name=comm_name(desc, group_name),
        naming=NO_NCCL,
        group_rank=mine.index(parent_rank),
        group_size=len(mine),
    )
    ranks_of_parent = c10d.get_process_group_ranks(parent)
    plan.global_ranks = [ranks_of_parent[r] for r in mine]
    options = arguments.get("pg_options")
    if options is not None:
        plan.naming, plan.reason = name_options(c10d, options, plan.comm_name)
        return plan
    torchcomms = getattr(c10d, "_use_torchcomms_enabled", None)
    if torchcomms is not None and torchcomms():
        plan.naming, plan.reason = FOREIGN_OPTIONS, "torchcomms"  # torch passes no options then
        return plan
    # torch's own default (split_group): a deep copy of the parent's options
    options = copy.deepcopy(parent_backend.options)
    plan.naming, plan.reason = name_options(c10d, options, plan.comm_name)
    if plan.naming in (nccl_config.TORCH_OPTION, nccl_config.NCCL_CONFIG):
        arguments["pg_options"] = options
    return plan
