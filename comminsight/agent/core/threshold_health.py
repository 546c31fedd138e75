"""The hang threshold's part of `/api/v1/health`: the value every verdict uses (the Agent's)
and the profiled processes whose watchdog uses another, read from their SHM headers
(hang_threshold_ms and its source beside the process's own value).

A process with the key in its own environment keeps its value (it never follows the Agent's),
and so does a Profiler too old to say where its value comes from: those are judged at once.
One that follows the Agent's file is judged once it has certainly looked at the file since the
Agent published it: its background thread looks once per heartbeat, after stamping the
heartbeat, so two heartbeats after the count seen at publication its header shows what it made
of the file (a refused file is counted there too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from comminsight.shm_reader import record_text
from comminsight_gen.abi import shm_v1
from comminsight_gen.models import agent_master_api_v1 as api

MAX_LISTED = 64  # the schema's bound on HangThreshold.differing
MAX_NAMED = 8  # processes named in the health reason; the rest are counted
KEPT_OWN = (shm_v1.ThresholdSource.ENVIRONMENT, shm_v1.ThresholdSource.UNKNOWN)
SOURCES = {
    shm_v1.ThresholdSource.UNKNOWN: api.ThresholdSource.unknown,
    shm_v1.ThresholdSource.DEFAULT: api.ThresholdSource.default,
    shm_v1.ThresholdSource.FILE: api.ThresholdSource.file,
    shm_v1.ThresholdSource.ENVIRONMENT: api.ThresholdSource.environment,
    shm_v1.ThresholdSource.AGENT: api.ThresholdSource.agent,
}


@dataclass
class Publication:
    """Whether the Agent published its threshold (error: why not), and each producer's
    heartbeat count as first seen after that (`note`, every pass)."""

    ok: bool = False
    error: str | None = None
    heartbeats: dict[object, int] = field(default_factory=dict)  # producer key -> count

    def note(self, producers: Mapping[object, object]) -> None:
        """Counts of producers not noted yet; those gone are forgotten (a bound)."""
        if not self.ok:
            return
        for key in [k for k in self.heartbeats if k not in producers]:
            del self.heartbeats[key]
        for key, p in producers.items():
            if key not in self.heartbeats:
                self.heartbeats[key] = int(p.region.header["heartbeat_count"])


def threshold_health(
    producers: Mapping[object, object], verdict_ms: int, published: Publication
) -> tuple[api.HangThreshold, list[str]]:
    """`producers`: the ProducerSet's producers by key (those gone are skipped)."""
    agreeing, differing = 0, []
    for key, p in producers.items():
        if p.gone_since_mono_ns is not None or p.closed:
            continue
        h = p.region.header
        source = _source(int(h["hang_threshold_source"]))
        if published.ok and source not in KEPT_OWN:
            noted = published.heartbeats.get(key)
            if noted is None or int(h["heartbeat_count"]) < noted + 2:
                continue  # it has not looked at the Agent's file for sure yet
        watchdog_ms = int(h["hang_threshold_ms"])
        if watchdog_ms == verdict_ms:
            agreeing += 1
            continue
        own_source = _source(int(h["own_hang_threshold_source"]))
        differing.append(
            api.ThresholdDifference(
                pid=max(1, int(h["pid"])),
                global_rank=rank if (rank := int(h["rank"])) >= 0 else None,
                host=record_text(h["hostname"])[:64],
                watchdog_threshold_ms=watchdog_ms,
                source=SOURCES[source],
                own_threshold_ms=None
                if own_source == shm_v1.ThresholdSource.UNKNOWN
                else int(h["own_hang_threshold_ms"]),
                own_source=SOURCES[own_source],
                agent_file_refused=int(h["agent_settings_refused"]),
            )
        )
    differing.sort(key=lambda d: d.pid)
    health = api.HangThreshold(
        verdict_threshold_ms=verdict_ms,
        published=published.ok,
        processes_agreeing=agreeing,
        processes_differing=len(differing),
        differing=differing[:MAX_LISTED],
    )
    return health, reasons(health, published.error)


def reasons(health: api.HangThreshold, publish_error: str | None) -> list[str]:
    out = []
    if publish_error:
        out.append(
            f"the hang threshold is not published to the Profilers ({publish_error}): their "
            "watchdogs keep their own values"
        )
    if not health.processes_differing:
        return out
    # processes alike (value and why) said once: a job's ranks usually all differ alike
    alike: dict[tuple, list[api.ThresholdDifference]] = {}
    for d in health.differing:
        alike.setdefault((d.watchdog_threshold_ms, d.source, d.agent_file_refused > 0), []).append(
            d
        )
    groups = []
    for (ms, source, refused), ds in alike.items():
        who = ", ".join(_who(d) for d in ds[:MAX_NAMED])
        if len(ds) > MAX_NAMED:
            who += f" and {len(ds) - MAX_NAMED} more"
        groups.append(f"{_seconds(ms)} {_why(source, refused)}: {who}")
    unlisted = health.processes_differing - len(health.differing)
    out.append(
        f"hang threshold: verdicts use the Agent's {_seconds(health.verdict_threshold_ms)} "
        f"(its COMMINSIGHT_PROFILER_HANG_TIMEOUT_S); {health.processes_differing} profiled "
        f"process(es) watch with another: "
        + "; ".join(groups)
        + (f"; and {unlisted} not listed" if unlisted > 0 else "")
    )
    return out


def _who(d: api.ThresholdDifference) -> str:
    return f"pid {d.pid}" + (f" (rank {d.global_rank})" if d.global_rank is not None else "")


def _why(source: api.ThresholdSource, refused: bool) -> str:
    if source is api.ThresholdSource.environment:
        return "set in the process's own environment, kept over the Agent's"
    if source is api.ThresholdSource.unknown:
        return "of a Profiler too old to follow the Agent's"
    if source is api.ThresholdSource.agent:
        return "of an earlier Agent, not yet replaced"
    if refused:
        return f"its own ({source.value}): it refused the Agent's file (its log says why)"
    return f"its own ({source.value}), not the Agent's"


def _seconds(ms: int) -> str:
    return "off (0)" if ms == 0 else f"{ms / 1000:g} s"


def _source(value: int) -> shm_v1.ThresholdSource:
    try:
        return shm_v1.ThresholdSource(value)
    except ValueError:  # a value a newer Profiler may add: said as unknown, never a crash
        return shm_v1.ThresholdSource.UNKNOWN
