"""The Agent's HTTP API as the GPU harness reads it: through the client generated from the
OpenAPI document, never through hand-written field names.

generated/python travels with the working tree to the GPU machine; what the client needs
(httpx, attrs) comes from the image's Python or, where it lacks them, from the Agent's carried
runtime wheels (AGENT_PYTHONPATH, set by run_faults.sh), searched after the image's own
packages. A field renamed or retyped in the schema then fails here, at the read, instead of
turning a driver's `.get()` into a silent None.

Every read fails soft: a driver polls an Agent that is starting, loaded or gone, so an answer
that is not the documented page (a 503 while loaded, a refused connection) is None or an empty
list, and the caller polls again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "generated" / "python"))
sys.path += [p for p in os.environ.get("AGENT_PYTHONPATH", "").split(":") if p]
import httpx  # noqa: E402

from comminsight_client import Client  # noqa: E402
from comminsight_client.api.communicators import list_communicators  # noqa: E402
from comminsight_client.api.hangs import list_hangs  # noqa: E402
from comminsight_client.api.health import get_health  # noqa: E402
from comminsight_client.api.incidents import get_incident, list_incidents  # noqa: E402
from comminsight_client.api.steps import list_steps  # noqa: E402
from comminsight_client.models import (  # noqa: E402
    Communicator,
    CommunicatorPage,
    CommunicatorView,
    HangReport,
    HangReportList,
    HangStatusFilter,
    Health,
    Incident,
    IncidentDetail,
    IncidentList,
    IncidentStackStatus,  # noqa: F401 - faults_report reads stacks through this module
    IncidentStatusFilter,
    NameSource,  # noqa: F401 - inject_names checks who named a communicator
    OpClass,  # noqa: F401 - as faults_report reads ops
    Severity,  # noqa: F401 - the drivers compare severities through this module
    StepPage,
)
from comminsight_client.types import UNSET, Unset  # noqa: E402

# the transport errors of an Agent not (yet, or no longer) answering
UNREACHABLE = (httpx.HTTPError, OSError)


def known(value):
    """An optional field's value, None where the Agent left it out."""
    return None if isinstance(value, Unset) else value


def client(url: str, timeout_s: float = 2.0) -> Client:
    return Client(base_url=url, timeout=httpx.Timeout(timeout_s))


def health(url: str, timeout_s: float = 1.0) -> Health | None:
    """The Agent's health (served with 200 or, degraded, 503); None while it cannot answer."""
    with client(url, timeout_s) as c:
        answer = get_health.sync(client=c)
    return answer if isinstance(answer, Health) else None


def hang_reports(url: str, limit: int = 100) -> list[HangReport]:
    """Every hang report the Agent holds, open and resolved, newest first."""
    with client(url) as c:
        page = list_hangs.sync(client=c, status=HangStatusFilter.ALL, limit=limit)
    return list(page.items) if isinstance(page, HangReportList) else []


def incidents(url: str, limit: int = 100) -> list[Incident]:
    with client(url) as c:
        page = list_incidents.sync(client=c, status=IncidentStatusFilter.ALL, limit=limit)
    return list(page.items) if isinstance(page, IncidentList) else []


def incident_detail(url: str, incident_id: str, timeout_s: float = 5.0) -> IncidentDetail | None:
    """The incident with its reports and stacks; None when the Agent does not serve it."""
    with client(url, timeout_s) as c:
        answer = get_incident.sync(incident_id, client=c)
    return answer if isinstance(answer, IncidentDetail) else None


def steps_total(url: str) -> int | None:
    """How many Steps the Agent's live engines have summarized; None while it cannot say."""
    with client(url) as c:
        page = list_steps.sync(client=c, limit=1)
    return page.total if isinstance(page, StepPage) else None


def communicators(url: str) -> list[Communicator]:
    """Every communicator the Agent knows, with its members (the full view), page by page."""
    items: list[Communicator] = []
    cursor = UNSET
    with client(url, 10.0) as c:
        while True:
            page = list_communicators.sync(client=c, view=CommunicatorView.FULL, cursor=cursor)
            if not isinstance(page, CommunicatorPage):
                raise RuntimeError(f"{url}/api/v1/communicators did not answer a page: {page!r}")
            items += page.items
            if not page.next_cursor:
                return items
            cursor = page.next_cursor
