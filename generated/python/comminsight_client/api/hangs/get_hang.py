from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.hang_report import HangReport
from typing import cast



def _get_kwargs(
    report_id: str,

) -> dict[str, Any]:
    

    

    

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/hangs/{report_id}".format(report_id=quote(str(report_id), safe=""),),
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | HangReport | None:
    if response.status_code == 200:
        response_200 = HangReport.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | HangReport]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    report_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Response[Error | HangReport]:
    """ One hang report with its evidence

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | HangReport]
     """


    kwargs = _get_kwargs(
        report_id=report_id,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    report_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Error | HangReport | None:
    """ One hang report with its evidence

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | HangReport
     """


    return sync_detailed(
        report_id=report_id,
client=client,

    ).parsed

async def asyncio_detailed(
    report_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Response[Error | HangReport]:
    """ One hang report with its evidence

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | HangReport]
     """


    kwargs = _get_kwargs(
        report_id=report_id,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    report_id: str,
    *,
    client: AuthenticatedClient | Client,

) -> Error | HangReport | None:
    """ One hang report with its evidence

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | HangReport
     """


    return (await asyncio_detailed(
        report_id=report_id,
client=client,

    )).parsed
