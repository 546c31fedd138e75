from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.incident import Incident
from ...models.resolve_incident_request import ResolveIncidentRequest
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    incident_id: str,
    *,
    body: ResolveIncidentRequest | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/incidents/{incident_id}/resolve".format(incident_id=quote(str(incident_id), safe=""),),
    }

    
    if not isinstance(body, Unset):
        _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | Incident | None:
    if response.status_code == 200:
        response_200 = Incident.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())



        return response_404

    if response.status_code == 408:
        response_408 = Error.from_dict(response.json())



        return response_408

    if response.status_code == 422:
        response_422 = Error.from_dict(response.json())



        return response_422

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | Incident]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    incident_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveIncidentRequest | Unset = UNSET,

) -> Response[Error | Incident]:
    """ Mark an incident resolved

     For an operator who has dealt with the fault: the incident and its open reports are
    resolved with the resolution that stands for an operator's decision, and the note is
    kept with them; seeing the same reports again does not reopen them. Idempotent:
    resolving a resolved incident returns it unchanged. The agent also resolves incidents
    by itself (the root's op completed, its processes ended).

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.
        body (ResolveIncidentRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Incident]
     """


    kwargs = _get_kwargs(
        incident_id=incident_id,
body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    incident_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveIncidentRequest | Unset = UNSET,

) -> Error | Incident | None:
    """ Mark an incident resolved

     For an operator who has dealt with the fault: the incident and its open reports are
    resolved with the resolution that stands for an operator's decision, and the note is
    kept with them; seeing the same reports again does not reopen them. Idempotent:
    resolving a resolved incident returns it unchanged. The agent also resolves incidents
    by itself (the root's op completed, its processes ended).

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.
        body (ResolveIncidentRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Incident
     """


    return sync_detailed(
        incident_id=incident_id,
client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    incident_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveIncidentRequest | Unset = UNSET,

) -> Response[Error | Incident]:
    """ Mark an incident resolved

     For an operator who has dealt with the fault: the incident and its open reports are
    resolved with the resolution that stands for an operator's decision, and the note is
    kept with them; seeing the same reports again does not reopen them. Idempotent:
    resolving a resolved incident returns it unchanged. The agent also resolves incidents
    by itself (the root's op completed, its processes ended).

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.
        body (ResolveIncidentRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Incident]
     """


    kwargs = _get_kwargs(
        incident_id=incident_id,
body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    incident_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveIncidentRequest | Unset = UNSET,

) -> Error | Incident | None:
    """ Mark an incident resolved

     For an operator who has dealt with the fault: the incident and its open reports are
    resolved with the resolution that stands for an operator's decision, and the note is
    kept with them; seeing the same reports again does not reopen them. Idempotent:
    resolving a resolved incident returns it unchanged. The agent also resolves incidents
    by itself (the root's op completed, its processes ended).

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.
        body (ResolveIncidentRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Incident
     """


    return (await asyncio_detailed(
        incident_id=incident_id,
client=client,
body=body,

    )).parsed
