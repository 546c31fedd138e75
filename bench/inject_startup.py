"""What Inject's .pth costs every interpreter start (budget: under 1 ms).

Two fresh virtual environments from the same base Python, one with the built wheel
(`make build-inject`) unpacked into its site-packages as pip would install it. Printed, one
JSON line each:
- `importtime_us`: the median over runs of what `python -X importtime -c pass` reports for the
  comminsight_inject modules (cumulative, the .pth's import), byte-compiled as pip leaves them;
- `start_ms_plain`, `start_ms_inject`: median wall time of `python -c pass` in each
  environment, runs alternated; `start_overhead_ms`: their difference (noisy: a machine's
  jitter is of the same order, which is why importtime is the primary figure);
- `torch_imported_at_start`: 1 if the .pth made the interpreter import torch (it must not).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 40
IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|\s+(\S.*)$")


def emit(metric: str, value, unit: str, **extra) -> None:
    print(
        json.dumps(
            {"bench": "inject_startup", "metric": metric, "value": value, "unit": unit, **extra}
        )
    )


def make_env(where: Path, wheel: Path | None) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    if wheel is not None:
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        # pip compiles a wheel's modules when it installs them; do the same, whatever
        # PYTHONDONTWRITEBYTECODE says here, or every start would compile them again
        subprocess.run([python, "-m", "compileall", "-q", f"{site}/comminsight_inject"], check=True)
    return python


def inject_import_us(python: Path) -> int:
    err = subprocess.run(
        [python, "-X", "importtime", "-c", "pass"], capture_output=True, text=True
    ).stderr
    total = 0
    for line in err.splitlines():
        m = IMPORTTIME.match(line)
        if m and m.group(3).strip().startswith("comminsight_inject"):
            total = max(total, int(m.group(2)))
    return total


def start_ms(python: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    subprocess.run(["make", "-s", "build-inject"], cwd=ROOT, check=True, capture_output=True)
    from comminsight.inject import __version__

    wheel = ROOT / "dist" / f"comminsight_inject-{__version__}-py3-none-any.whl"
    with tempfile.TemporaryDirectory() as tmp:
        plain = make_env(Path(tmp) / "plain", None)
        inject = make_env(Path(tmp) / "inject", wheel)
        imports = [inject_import_us(inject) for _ in range(RUNS)]
        emit("importtime_us", statistics.median(imports), "us", runs=RUNS, max=max(imports))
        plain_ms, inject_ms = [], []
        for _ in range(RUNS):
            plain_ms.append(start_ms(plain))
            inject_ms.append(start_ms(inject))
        p, i = statistics.median(plain_ms), statistics.median(inject_ms)
        emit("start_ms_plain", round(p, 3), "ms", runs=RUNS)
        emit("start_ms_inject", round(i, 3), "ms", runs=RUNS)
        emit("start_overhead_ms", round(i - p, 3), "ms", budget=1.0)
        probe = "import sys; print(int('torch' in sys.modules))"
        out = subprocess.run([inject, "-c", probe], capture_output=True, text=True, check=True)
        emit("torch_imported_at_start", int(out.stdout.strip()), "bool")


if __name__ == "__main__":
    main()
