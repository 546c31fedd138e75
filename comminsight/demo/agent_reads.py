"""What the demo reads from its Agent, through the generated API client: the Step summaries
its Semantic Engine wrote, and its hang reports and incidents once the diagnosis settled.
An answer that is not the protocol's raises AgentUnavailable (cli.client), naming it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
from rich.console import Console

from comminsight.cli.client import AgentUnavailable, all_pages, answer
from comminsight.demo.waiting import wait_for
from comminsight_client import Client
from comminsight_client.api.hangs import list_hangs
from comminsight_client.api.incidents import list_incidents
from comminsight_client.api.steps import list_steps
from comminsight_client.models import (
    HangReport,
    HangStatusFilter,
    Incident,
    IncidentStatusFilter,
    ReportStatus,
    StepSummary,
)

# how long the Agent may take after the run to serve all of it: its engines and diagnosis work
# on their own cadence, slower on a loaded machine
CATCH_UP_S = 30.0
PAGE = 1000  # the API's largest page
T = TypeVar("T")


def api_client(url: str) -> Client:
    return Client(base_url=url, timeout=httpx.Timeout(10.0))


def read_until(
    console: Console, what: str, read: Callable[[], tuple[bool, T]], timeout_s: float
) -> tuple[T | None, list[str]]:
    """`read()` -> (done, value) until done or timeout_s passed, an error answer retried; the
    last value read (None if every read failed) and the errors."""
    errors: list[str] = []
    last: list[T] = []

    def poll() -> tuple[bool, None]:
        try:
            done, value = read()
        except AgentUnavailable as e:
            errors.append(str(e))
            return False, None
        last[:] = [value]
        return done, None

    wait_for(console, what, poll, timeout_s)
    return (last[0] if last else None), errors


def steps_served(url: str, expected: int, console: Console) -> tuple[list[StepSummary], list[str]]:
    """Every Step summary the Agent serves, once it serves `expected` of them or CATCH_UP_S
    passed (then what it serves by then); and the errors it answered with meanwhile.
    AgentUnavailable if no read succeeded."""
    client = api_client(url)

    def count() -> tuple[bool, int]:
        return answer(list_steps, client=client, limit=1).total >= expected, 0

    def read_all() -> tuple[bool, list[StepSummary]]:
        return True, all_pages(list_steps, client=client, limit=PAGE)

    what = "the Agent's Semantic Engine recovers the Steps"
    _, errors = read_until(console, what, count, CATCH_UP_S)
    steps, more = read_until(console, "reading the Agent's Steps", read_all, CATCH_UP_S)
    errors += more
    if steps is None:
        raise AgentUnavailable(f"the Agent answered no read of its Steps: {errors[-1]}")
    return steps, errors


@dataclass(frozen=True)
class Diagnosis:
    incidents: list[Incident]
    reports: list[HangReport]
    settled: bool  # every report resolved: the Agent saw the run's communicators go
    errors: list[str]  # error answers on the way, retried


def diagnosis_served(url: str, console: Console) -> Diagnosis:
    """The Agent's incidents and hang reports (open and resolved), once it has an incident and
    every report is resolved (the run's communicators were torn down, nothing more will come),
    or CATCH_UP_S passed. AgentUnavailable if no read succeeded."""
    client = api_client(url)

    def read() -> tuple[bool, tuple[list[Incident], list[HangReport]]]:
        incidents = answer(
            list_incidents, client=client, status=IncidentStatusFilter.ALL, limit=PAGE
        ).items
        reports = answer(list_hangs, client=client, status=HangStatusFilter.ALL, limit=PAGE).items
        settled = bool(incidents) and all(r.status == ReportStatus.RESOLVED for r in reports)
        return settled, (incidents, reports)

    served, errors = read_until(console, "the Agent diagnoses the hang", read, CATCH_UP_S)
    if served is None:
        raise AgentUnavailable(f"the Agent answered no read of its diagnosis: {errors[-1]}")
    incidents, reports = served
    settled = bool(incidents) and all(r.status == ReportStatus.RESOLVED for r in reports)
    return Diagnosis(incidents, reports, settled, errors)
