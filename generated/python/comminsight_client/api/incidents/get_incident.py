from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.incident_detail import IncidentDetail
from typing import cast



def _get_kwargs(
    incident_id: str,

) -> dict[str, Any]:
    

    

    

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/incidents/{incident_id}".format(incident_id=quote(str(incident_id), safe=""),),
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | IncidentDetail | None:
    if response.status_code == 200:
        response_200 = IncidentDetail.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())



        return response_400

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())



        return response_404

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | IncidentDetail]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    incident_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Response[Error | IncidentDetail]:
    """ One incident with its reports

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | IncidentDetail]
     """


    kwargs = _get_kwargs(
        incident_id=incident_id,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    incident_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Error | IncidentDetail | None:
    """ One incident with its reports

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | IncidentDetail
     """


    return sync_detailed(
        incident_id=incident_id,
client=client,

    ).parsed

async def asyncio_detailed(
    incident_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Response[Error | IncidentDetail]:
    """ One incident with its reports

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | IncidentDetail]
     """


    kwargs = _get_kwargs(
        incident_id=incident_id,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    incident_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Error | IncidentDetail | None:
    """ One incident with its reports

    Args:
        incident_id (str): Incident id, with the pattern of hang-report v1 Incident.incident_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | IncidentDetail
     """


    return (await asyncio_detailed(
        incident_id=incident_id,
client=client,

    )).parsed
