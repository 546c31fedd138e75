"""Run a command in a time namespace of its own: `python -m comminsight.sim.time_namespace
MONOTONIC_S BOOTTIME_S -- COMMAND...` shifts its CLOCK_MONOTONIC and CLOCK_BOOTTIME by the
given seconds (negative too, as far as the clocks stay positive), as a container restored from
a checkpoint has them. The command keeps this process's pid (it is exec'd), so a launcher's
view of its ranks holds. Needs CAP_SYS_ADMIN and a kernel with time namespaces (5.6+).

`SimConfig.process_prefixes` takes `prefix(...)` for the ranks to shift.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWTIME = 0x80


def prefix(monotonic_s: int, boottime_s: int = 0) -> tuple[str, ...]:
    return (sys.executable, "-m", __name__, str(monotonic_s), str(boottime_s), "--")


def enter(monotonic_s: int, boottime_s: int) -> None:
    """A new time namespace for what this process execs next (the kernel moves a process into
    its time_for_children namespace at execve), its clocks shifted from this process's: the
    kernel takes offsets from the host's clocks, so a caller in a time namespace of its own
    (a restored container) adds its own."""
    own = _own_offsets_ns()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWTIME) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWTIME): {os.strerror(err)}")
    lines = []
    for clock, shift_s in (("monotonic", monotonic_s), ("boottime", boottime_s)):
        seconds, nanoseconds = divmod(own.get(clock, 0) + shift_s * 1_000_000_000, 1_000_000_000)
        lines.append(f"{clock} {seconds} {nanoseconds}\n")
    with open("/proc/self/timens_offsets", "w") as f:
        f.write("".join(lines))


def _own_offsets_ns() -> dict[str, int]:
    """This process's time-namespace offsets from the host's clocks ({} where the kernel has
    no time namespaces: none to add)."""
    try:
        with open("/proc/self/timens_offsets") as f:
            text = f.read()
    except OSError:
        return {}
    offsets = {}
    for line in text.splitlines():
        clock, seconds, nanoseconds = line.split()
        offsets[clock] = int(seconds) * 1_000_000_000 + int(nanoseconds)
    return offsets


def supported() -> str | None:
    """None where a child can be put in a time namespace here, else why not."""
    import subprocess

    try:
        done = subprocess.run(
            [*prefix(1, 0), "cat", "/proc/self/timens_offsets"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot run the time-namespace helper: {e}"
    if done.returncode != 0 or "monotonic" not in done.stdout:
        return f"no time namespaces here: {done.stderr.strip() or done.stdout.strip()}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(
            "usage: python -m comminsight.sim.time_namespace MONOTONIC_S BOOTTIME_S -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    try:
        enter(int(argv[0]), int(argv[1]))
        os.execvp(argv[3], argv[3:])
    except (OSError, ValueError) as e:
        print(f"comminsight.sim.time_namespace: {e}", file=sys.stderr)
        return 1
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
