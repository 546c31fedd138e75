"""What a simulation run did, from its ground truth, as a dict (`comminsight sim` prints it:
cli.simulate)."""

from __future__ import annotations

from comminsight.sim.launcher import SimResult
from comminsight.sim.truth import read_ground_truth


def summarize(result: SimResult) -> dict:
    config, plan = result.config, result.plan
    truths = read_ground_truth(result.run_dir, config.ranks)
    dying = {f.rank for f in config.faults if f.kind == "die"}
    ranks = []
    for truth, code in zip(truths, result.exit_codes, strict=True):
        end = truth.end
        if end is not None:
            status = end["status"]
        elif truth.rank in dying and code == -9:
            status = "died"
        else:
            status = "error"
        ops = truth.ops
        ranks.append(
            {
                "rank": truth.rank,
                "pid": truth.run["pid"] if truth.of("run") else None,
                "exit_code": code,
                "status": status,
                "ops_planned": len(plan.rank_ops(truth.rank)),
                "ops_issued": len(ops),
                "ops_completed": sum(1 for o in ops if o["completed"]),
                "steps_completed": sum(1 for s in truth.of("step") if s["completed"]),
                "nonzero_returns": end["nonzero_returns"] if end else None,
            }
        )
    completed_by_comm: dict[str, list[int]] = {}
    for truth in truths:
        for comm in truth.of("comm"):
            done = sum(1 for o in truth.ops if o["comm_id"] == comm["comm_id"] and o["completed"])
            completed_by_comm.setdefault(comm["comm_id"], []).append(done)
    comms = [
        {
            "comm_id": c.comm_id_hex,
            "name": c.name,
            "role": c.role,
            "nranks": c.nranks,
            "nnodes": c.nnodes,
            "ops_per_rank": len([o for o in plan.rank_ops(c.members[0]) if o.comm == c.index]),
            "completed_min": min(completed_by_comm.get(c.comm_id_hex, [0])),
        }
        for c in plan.comms
    ]
    if result.errors:
        status = "error"
    elif result.abort_reason:
        status = "aborted"
    else:
        status = "completed"
    return {
        "status": status,
        "ok": not result.errors,
        "abort_reason": result.abort_reason,
        "errors": result.errors,
        "workload": config.workload,
        "ranks": config.ranks,
        "nodes": config.nodes,
        "abi": config.abi,
        "plugin": config.plugin,
        "plugin_name": next((t.run["plugin_name"] for t in truths if t.of("run")), None),
        "seed": config.seed,
        "steps": config.steps,
        "warmup_steps": config.warmup_steps,
        "grad_accum": config.grad_accum,
        "time_scale": config.time_scale,
        "faults": [str(f) for f in config.faults],
        "elapsed_s": round(result.elapsed_s, 3),
        "run_dir": str(result.run_dir),
        "ops": {
            "planned": sum(r["ops_planned"] for r in ranks),
            "issued": sum(r["ops_issued"] for r in ranks),
            "completed": sum(r["ops_completed"] for r in ranks),
        },
        "rank_results": ranks,
        "communicators": comms,
    }
