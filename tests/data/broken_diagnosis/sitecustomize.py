"""A broken hang diagnosis, for tests/e2e/test_demo.py: with this directory on PYTHONPATH,
every Python process (the demo, its `comminsight-agent`, the simulated ranks) imports this
first, and the Agent's diagnosis blames the wrong rank wherever a rank has not joined an op:
`not_joined` (comminsight/agent/hangs/rules/not_joined.py, which picks the ranks missing from
the op the others wait in; verdict_rules.py looks it up there when it runs) names a rank that
did join instead. The demo must then say that the faulted rank was not named, and fail.

The module is patched when it is first imported, by an import hook: nothing is imported
here, so processes that never load the diagnosis are untouched. When it patches, it appends
the process id to the file that DEMO_BROKEN_DIAGNOSIS_MARKER names (not a COMMINSIGHT_
variable: the demo keeps those from its Agent), so that the test knows the Agent ran it.
"""

import dataclasses
import importlib.machinery
import os
import sys

TARGET = "comminsight.agent.hangs.rules.not_joined"


def break_diagnosis(module) -> None:
    right = module.not_joined

    def not_joined(comm, *args, **kwargs):
        finding = right(comm, *args, **kwargs)
        if finding is None:
            return None
        joined = [m.rank for m in comm.members if m.rank not in finding.culprits]
        if not joined:
            return finding
        return dataclasses.replace(
            finding, culprits={joined[0]: "blamed by the test's broken diagnosis"}
        )

    module.not_joined = not_joined
    marker = os.environ.get("DEMO_BROKEN_DIAGNOSIS_MARKER")
    if marker:
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\n")


class BreakDiagnosisOnImport:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_break(module) -> None:
            exec_module(module)
            break_diagnosis(module)

        spec.loader.exec_module = exec_then_break
        return spec


sys.meta_path.insert(0, BreakDiagnosisOnImport)
