from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.incident_list import IncidentList
from ...models.incident_status_filter import IncidentStatusFilter
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    status: IncidentStatusFilter | Unset = UNSET,
    limit: int | Unset = 100,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_status: str | Unset = UNSET
    if not isinstance(status, Unset):
        json_status = status.value

    params["status"] = json_status

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/incidents",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | IncidentList | None:
    if response.status_code == 200:
        response_200 = IncidentList.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())



        return response_400

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | IncidentList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    status: IncidentStatusFilter | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | IncidentList]:
    """ Incidents, newest first

     One incident per fault: its root (the report whose culprits explain the others) and
    its consequences (reports of ranks blocked behind it). A master groups the whole job.

    Args:
        status (IncidentStatusFilter | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | IncidentList]
     """


    kwargs = _get_kwargs(
        status=status,
limit=limit,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    status: IncidentStatusFilter | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | IncidentList | None:
    """ Incidents, newest first

     One incident per fault: its root (the report whose culprits explain the others) and
    its consequences (reports of ranks blocked behind it). A master groups the whole job.

    Args:
        status (IncidentStatusFilter | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | IncidentList
     """


    return sync_detailed(
        client=client,
status=status,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    status: IncidentStatusFilter | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | IncidentList]:
    """ Incidents, newest first

     One incident per fault: its root (the report whose culprits explain the others) and
    its consequences (reports of ranks blocked behind it). A master groups the whole job.

    Args:
        status (IncidentStatusFilter | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | IncidentList]
     """


    kwargs = _get_kwargs(
        status=status,
limit=limit,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    status: IncidentStatusFilter | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | IncidentList | None:
    """ Incidents, newest first

     One incident per fault: its root (the report whose culprits explain the others) and
    its consequences (reports of ranks blocked behind it). A master groups the whole job.

    Args:
        status (IncidentStatusFilter | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | IncidentList
     """


    return (await asyncio_detailed(
        client=client,
status=status,
limit=limit,

    )).parsed
