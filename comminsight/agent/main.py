"""`comminsight-agent` entry point.

The Agent itself is not built yet (it is the next piece of work after the Profiler); until
then this command says so and exits non-zero rather than pretending to run.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print(
        "comminsight-agent: the Agent is not implemented in this build yet; "
        "nothing is being monitored.",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
