from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.hang_report import HangReport
from ...models.resolve_hang_request import ResolveHangRequest
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    report_id: str,
    *,
    body: ResolveHangRequest | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/hangs/{report_id}/resolve".format(report_id=quote(str(report_id), safe=""),),
    }

    
    if not isinstance(body, Unset):
        _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | HangReport | None:
    if response.status_code == 200:
        response_200 = HangReport.from_dict(response.json())



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
    client: AuthenticatedClient,
    body: ResolveHangRequest | Unset = UNSET,

) -> Response[Error | HangReport]:
    """ Mark a hang report resolved

     For an operator who has dealt with a hang (for example restarted the job) and wants it
    out of the open list: sets the report's status to resolved with the hang-report
    resolution that stands for an operator's decision, and keeps the note with the report.
    Idempotent: resolving a resolved report returns it unchanged. The agent also resolves
    reports by itself (op completed, communicator finalized, process exited, ...).

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.
        body (ResolveHangRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | HangReport]
     """


    kwargs = _get_kwargs(
        report_id=report_id,
body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    report_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveHangRequest | Unset = UNSET,

) -> Error | HangReport | None:
    """ Mark a hang report resolved

     For an operator who has dealt with a hang (for example restarted the job) and wants it
    out of the open list: sets the report's status to resolved with the hang-report
    resolution that stands for an operator's decision, and keeps the note with the report.
    Idempotent: resolving a resolved report returns it unchanged. The agent also resolves
    reports by itself (op completed, communicator finalized, process exited, ...).

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.
        body (ResolveHangRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | HangReport
     """


    return sync_detailed(
        report_id=report_id,
client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    report_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveHangRequest | Unset = UNSET,

) -> Response[Error | HangReport]:
    """ Mark a hang report resolved

     For an operator who has dealt with a hang (for example restarted the job) and wants it
    out of the open list: sets the report's status to resolved with the hang-report
    resolution that stands for an operator's decision, and keeps the note with the report.
    Idempotent: resolving a resolved report returns it unchanged. The agent also resolves
    reports by itself (op completed, communicator finalized, process exited, ...).

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.
        body (ResolveHangRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | HangReport]
     """


    kwargs = _get_kwargs(
        report_id=report_id,
body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    report_id: str,
    *,
    client: AuthenticatedClient,
    body: ResolveHangRequest | Unset = UNSET,

) -> Error | HangReport | None:
    """ Mark a hang report resolved

     For an operator who has dealt with a hang (for example restarted the job) and wants it
    out of the open list: sets the report's status to resolved with the hang-report
    resolution that stands for an operator's decision, and keeps the note with the report.
    Idempotent: resolving a resolved report returns it unchanged. The agent also resolves
    reports by itself (op completed, communicator finalized, process exited, ...).

    Args:
        report_id (str): Hang report id, with the pattern of hang-report v1 report_id.
        body (ResolveHangRequest | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | HangReport
     """


    return (await asyncio_detailed(
        report_id=report_id,
client=client,
body=body,

    )).parsed
