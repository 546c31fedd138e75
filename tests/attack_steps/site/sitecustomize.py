"""Registers the adversarial workloads (comminsight/sim/workloads/adv_*.py) in every
interpreter started with this directory on PYTHONPATH: the attack runner's rank processes
(the launcher starts them as new interpreters when a sitecustomize is on PYTHONPATH)."""

import os


def register() -> None:
    import importlib

    from comminsight.sim import config
    from comminsight.sim import workloads

    for name in os.environ.get("ADV_ATTACK_WORKLOADS", "").split(","):
        if not name:
            continue
        module = name.replace("-", "_")
        config.WORKLOAD_MODULES[name] = module
        workloads.BUILDERS[name] = importlib.import_module(
            f"comminsight.sim.workloads.{module}"
        ).build
    config.WORKLOADS = tuple(config.WORKLOAD_MODULES)


if os.environ.get("ADV_ATTACK_WORKLOADS"):
    register()
