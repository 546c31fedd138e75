"""Inject on real GPUs: every NCCL communicator PyTorch makes carries `<group_desc>:<group_name>`.

Run by bench/gpu/run_inject.sh under torchrun (2 ranks, the Inject wheel installed in the
torch environment, the plugin loaded, an Agent running on the same COMMINSIGHT_HOME):

    torchrun --standalone --nproc_per_node=2 bench/gpu/inject_names.py --mode eager|lazy \
        --out DIR --api http://127.0.0.1:PORT

Each rank makes the default group (`eager`: init_process_group(device_id=...), so new groups
are split from it; `lazy`: no device, communicators appear at the first collective), two
`new_group(group_desc=...)` groups, `new_subgroups`, a 2-D DeviceMesh (1 x 2), runs one
all-reduce on every group and a send/recv pair on the default group (PyTorch's lazily made
P2P communicator). The names expected are torch's own `pg.group_desc:pg.group_name` of every
group the rank is in. Rank 0 then asks the Agent's API for its communicators while they are
alive; after torchrun, `--verify` compares the API's answer and the profiler's
inspector_logs comm_init lines with the expectations, one JSON line per check.

The API is read through the generated client (agent_api.py; run_inject.sh sets
AGENT_PYTHONPATH for what the image's python lacks), the inspector_logs and Inject's metadata
through their schemas' generated name tables (standard library only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import agent_api  # puts generated/python on sys.path
from agent_api import CommunicatorPage, NameSource
from ci_logs import F, comm_inits

from comminsight_gen.inject_metadata_v1_names import F as IM  # standard library only
from comminsight_gen.inject_metadata_v1_names import V as IMV

STEPS = 3


def expected_group(pg) -> dict:
    import torch.distributed as dist

    return {
        "name": f"{pg.group_desc}:{pg.group_name}",
        "nranks": pg.size(),
        "global_ranks": dist.get_process_group_ranks(pg),
    }


def job(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    if args.mode == "eager":
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("nccl")
    world = dist.get_world_size()
    groups = [dist.group.WORLD]
    groups.append(dist.new_group(list(range(world)), group_desc="tp_pair"))
    groups.append(dist.new_group([0], group_desc="rank0_only"))
    sub, _ = dist.new_subgroups(group_size=1, group_desc="solo")
    groups.append(sub)
    mesh = init_device_mesh("cuda", (1, world), mesh_dim_names=("dp", "tp"))
    groups += [mesh.get_group("dp"), mesh.get_group("tp")]
    mine = [g for g in groups if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER]
    for g in mine:
        t = torch.ones(4, device=device)
        dist.all_reduce(t, group=g)
    peer = (rank + 1) % world
    t = torch.full((4,), float(rank), device=device)
    if rank % 2 == 0:
        dist.send(t, dst=peer)
    else:
        dist.recv(t, src=peer)
    model = torch.nn.Linear(4, 4, device=device)  # step markers (COMMINSIGHT_INJECT_STEP_MARKERS)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        model(t).sum().backward()
        opt.step()
    torch.cuda.synchronize()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    expected = {f"{g.group_desc}:{g.group_name}": expected_group(g) for g in mine}
    (out / f"expected.rank{rank}.json").write_text(json.dumps(expected))
    dist.barrier()
    if rank == 0:
        time.sleep(2.0)  # the Agent reads SHM on its own schedule: let it catch up
        comms = agent_api.communicators(args.api)  # the full view, every page
        page = CommunicatorPage(items=comms, total=len(comms), next_cursor=None)
        (out / "api_communicators.json").write_text(json.dumps(page.to_dict()))
    dist.barrier()
    dist.destroy_process_group()


def emit(check: str, ok: bool, **detail) -> bool:
    print(
        json.dumps(
            {"bench": "gpu_inject", "metric": check, "value": bool(ok), "unit": "pass", **detail}
        )
    )
    return ok


def verify(args) -> int:
    out, home = Path(args.out), Path(args.home)
    expected = {}
    for path in sorted(out.glob("expected.rank*.json")):
        expected[int(path.stem.split("rank")[1])] = json.loads(path.read_text())
    page = CommunicatorPage.from_dict(json.loads((out / "api_communicators.json").read_text()))
    api = page.items
    names_api = {c.name or "" for c in api}
    ok = emit("api_communicators", bool(api), count=len(api), names=sorted(names_api))
    ok &= emit(
        "api_every_communicator_named",
        all(c.name for c in api),
        unnamed=[c.comm_id for c in api if not c.name],
    )
    # every name here is one Inject set (its metadata says so): the Agent tells it from NCCL's
    ok &= emit(
        "api_name_source_inject",
        bool(api) and all(c.name_source is NameSource.INJECT for c in api),
        name_sources=sorted({c.name_source.value for c in api}),
    )
    inits = comm_inits(home)
    ok &= emit("log_comm_inits", bool(inits), count=len(inits))
    ok &= emit(
        "log_every_communicator_named",
        all(x.get(F.COMM_NAME) for x in inits),
        unnamed=[x for x in inits if not x.get(F.COMM_NAME)][:5],
    )
    for rank, groups in sorted(expected.items()):
        for name, g in sorted(groups.items()):
            in_api = [c for c in api if c.name == name and c.nranks == g["nranks"]]
            in_log = [
                x
                for x in inits
                if x.get(F.COMM_NAME) == name
                and x.get(F.NRANKS) == g["nranks"]
                and x.get(F.LOCAL_RANK) == rank
            ]
            ok &= emit(
                f"rank{rank}_{name}",
                bool(in_api) and bool(in_log),
                nranks=g["nranks"],
                api=len(in_api),
                log=len(in_log),
                name_source=sorted({c.name_source.value for c in in_api}),
            )
    meta = []
    for path in sorted((home / "metadata" / "inject").glob("*.jsonl")):
        meta += [json.loads(x) for x in path.read_text().splitlines()]
    groups = [m for m in meta if m[IM.KIND] == IMV.GROUP]
    ok &= emit(
        "metadata_groups_named_in_nccl_options",
        bool(groups) and all(g[IM.NAMING] in (IMV.NCCL_CONFIG, IMV.TORCH_OPTION) for g in groups),
        namings=sorted({g[IM.NAMING] for g in groups}),
        count=len(groups),
    )
    steps = sorted((m[IM.RANK], m[IM.INDEX]) for m in meta if m[IM.KIND] == IMV.STEP)
    ok &= emit(
        "metadata_step_markers",
        steps == [(r, i) for r in sorted(expected) for i in range(STEPS)],
        count=len(steps),
    )
    known = {n for groups in expected.values() for n in groups}
    stray = sorted(names_api - known)
    ok &= emit("no_unexpected_names", not stray, stray=stray)
    emit("all_checks_pass", ok)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["eager", "lazy"], default="eager")
    ap.add_argument("--out", required=True)
    ap.add_argument("--api", default="http://127.0.0.1:19102")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--home", default=os.environ.get("COMMINSIGHT_HOME", ""))
    args = ap.parse_args()
    if args.verify:
        return verify(args)
    job(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
