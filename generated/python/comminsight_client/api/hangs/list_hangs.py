from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.hang_report_list import HangReportList
from ...models.hang_status_filter import HangStatusFilter
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    status: HangStatusFilter | Unset = UNSET,
    comm_id: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_status: str | Unset = UNSET
    if not isinstance(status, Unset):
        json_status = status.value

    params["status"] = json_status

    params["comm_id"] = comm_id

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/hangs",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | HangReportList | None:
    if response.status_code == 200:
        response_200 = HangReportList.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | HangReportList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    status: HangStatusFilter | Unset = UNSET,
    comm_id: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | HangReportList]:
    """ Hang reports, newest first

    Args:
        status (HangStatusFilter | Unset):
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | HangReportList]
     """


    kwargs = _get_kwargs(
        status=status,
comm_id=comm_id,
limit=limit,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    status: HangStatusFilter | Unset = UNSET,
    comm_id: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | HangReportList | None:
    """ Hang reports, newest first

    Args:
        status (HangStatusFilter | Unset):
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | HangReportList
     """


    return sync_detailed(
        client=client,
status=status,
comm_id=comm_id,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    status: HangStatusFilter | Unset = UNSET,
    comm_id: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | HangReportList]:
    """ Hang reports, newest first

    Args:
        status (HangStatusFilter | Unset):
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | HangReportList]
     """


    kwargs = _get_kwargs(
        status=status,
comm_id=comm_id,
limit=limit,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    status: HangStatusFilter | Unset = UNSET,
    comm_id: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | HangReportList | None:
    """ Hang reports, newest first

    Args:
        status (HangStatusFilter | Unset):
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | HangReportList
     """


    return (await asyncio_detailed(
        client=client,
status=status,
comm_id=comm_id,
limit=limit,

    )).parsed
