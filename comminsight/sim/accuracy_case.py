"""One case of the Step accuracy suite: a workload as a framework runs it, and how to time it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str  # the workload name in bench lines: exact_fraction_<name>
    config: dict  # SimConfig fields besides plugin, home, comm_names
    known_gap: str | None = None  # why the engine is not exact here yet (never confidently wrong)
    # its Steps only idle time tells apart (tensor parallelism alone, no optimizer collective):
    # how exact it is depends on the machine's load, which make bench-accuracy measures; tests
    # hold it to never being wrong when sure
    timing_told: bool = False
    # modeled durations x this: a case whose Steps only idle time tells apart runs slower,
    # so that its gaps stand above the jitter of a loaded machine
    time_scale: float = 0.02
