"""`comminsight demo`: the pipeline end to end on an embedded default, stating only what it
verified.

1. A simulated 8-rank tensor+pipeline+data-parallel training run (2 nodes x 4 ranks, 3 steps
   after a warm-up) drives the real Profiler plugin through NCCL's ABI while a real
   `comminsight-agent` watches it. Checked: every rank ran to the end (the simulator's
   result and ground truth), every inspector_logs segment is sealed and verifies, the logs
   hold every op each rank issued, and the Steps the Agent's Semantic Engine recovered live
   are the simulator's, per rank, on the same ops.
2. The same run with rank 1 skipping its 6th tensor-parallel all-reduce: the others hang,
   their Profilers write hang evidence, and the Agent diagnoses the hang. Checked: the fault
   was applied and the run hung, the logs, the evidence (none from rank 1), and that the
   Agent's root cause, read through the generated API client, names rank 1 alone, the
   communicator and the op it skipped.
Each check is printed as it is made (✓, or ✗ with what was found instead) and listed again
at the end; the exit status is 0 only when all held. Files stay under var/demo/.
"""

from comminsight.demo.main import run
from comminsight.demo.simulation import DEMO_DIR

__all__ = ["DEMO_DIR", "run"]
