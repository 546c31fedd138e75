"""Numbers as a person reads them: sizes in KiB/MiB/GiB, bandwidth in GB/s, durations in the
unit that suits them, times as ISO dates. For tables only: `--format json` keeps the API's
exact values.

Sizes use binary units (what memory and buffers are counted in); bandwidth uses decimal GB/s
(1e9 bytes/s), as NCCL's tests and the API's `*_gbs` fields do.
"""

from __future__ import annotations

from datetime import datetime, timezone

NONE = "-"
_BINARY = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def size_text(n_bytes: int | float | None) -> str:
    """22000000008 -> '20.5 GiB'; below 1 KiB the exact count, '512 B'."""
    if n_bytes is None:
        return NONE
    if abs(n_bytes) < 1024:
        return f"{int(n_bytes)} B"
    value = float(n_bytes)
    for unit in _BINARY:
        value /= 1024
        if abs(value) < 1024 or unit == _BINARY[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def bandwidth_text(gbs: float | None) -> str:
    """291.6734237676506 -> '291.7 GB/s'."""
    return NONE if gbs is None else f"{gbs:.1f} GB/s"


def duration_text(ns: int | float | None) -> str:
    """A duration in the unit that keeps it short and readable: '850 ns', '12.3 µs',
    '12.3 ms', '4.21 s', '12 min 5 s', '3 h 12 min'."""
    if ns is None:
        return NONE
    if ns == 0:
        return "0 s"
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    seconds = ns / 1e9
    if seconds < 60:
        return f"{seconds:.2f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def ms_text(ms: int | float | None) -> str:
    return NONE if ms is None else duration_text(ms * 1e6)


def us_text(us: int | float | None) -> str:
    return NONE if us is None else duration_text(us * 1e3)


def time_text(real_ns: int | None) -> str:
    """CLOCK_REALTIME nanoseconds as '2026-12-02 13:02:11.123' (UTC, milliseconds)."""
    if not real_ns:
        return NONE
    moment = datetime.fromtimestamp(real_ns / 1e9, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
