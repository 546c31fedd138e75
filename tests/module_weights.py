"""How long each test module takes, so that pytest-xdist can hand out the longest first.

Workers take whole modules (--dist loadfile) in collection order; a long module handed out
last keeps one worker busy alone while the others sit idle. tests/module_seconds.json holds
each module's measured seconds (its tests' durations summed, from a JUnit XML report);
collection puts modules in falling order of it, a module not listed at the median's place.
Refresh it after a full run with `--junitxml=FILE`:

    python tests/module_weights.py FILE > tests/module_seconds.json
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SECONDS = Path(__file__).with_name("module_seconds.json")


def load() -> dict[str, float]:
    """Module path (tests/e2e/test_x.py) to seconds; {} when the file is missing or unreadable
    (modules then go in order of path: a worse spread over the workers, never a wrong run)."""
    try:
        table = json.loads(SECONDS.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {k: float(v) for k, v in table.items() if isinstance(v, (int, float))}


def order_key(weights: dict[str, float]):
    """A sort key for test items: the heaviest module first, a module's tests together."""
    default = statistics.median(weights.values()) if weights else 0.0

    def key(item) -> tuple[float, str]:
        path = item.nodeid.split("::", 1)[0]
        return (-weights.get(path, default), path)

    return key


def from_junit(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")
        if parts[0] == "tests" and len(parts) >= 3:
            module = "/".join(parts[:3]) + ".py"
            seconds[module] = seconds.get(module, 0.0) + float(case.get("time") or 0)
    return {k: round(v, 1) for k, v in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/module_weights.py JUNIT_XML > tests/module_seconds.json")
    json.dump(from_junit(Path(sys.argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
