from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.archive_flush import ArchiveFlush
from ...models.error import Error
from typing import cast



def _get_kwargs(
    
) -> dict[str, Any]:
    

    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/archive/flush",
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ArchiveFlush | Error | None:
    if response.status_code == 202:
        response_202 = ArchiveFlush.from_dict(response.json())



        return response_202

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())



        return response_403

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ArchiveFlush | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,

) -> Response[ArchiveFlush | Error]:
    """ Upload every sealed file now instead of at the next scheduled pass

     Queues every sealed segment and summary not yet archived and returns at once (202);
    follow progress with get_archive_status. Uploads stay idempotent, so a flush while
    another runs only reports what is queued. Files still being written are never sealed
    by a flush: training-side writers own sealing.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ArchiveFlush | Error]
     """


    kwargs = _get_kwargs(
        
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,

) -> ArchiveFlush | Error | None:
    """ Upload every sealed file now instead of at the next scheduled pass

     Queues every sealed segment and summary not yet archived and returns at once (202);
    follow progress with get_archive_status. Uploads stay idempotent, so a flush while
    another runs only reports what is queued. Files still being written are never sealed
    by a flush: training-side writers own sealing.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ArchiveFlush | Error
     """


    return sync_detailed(
        client=client,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,

) -> Response[ArchiveFlush | Error]:
    """ Upload every sealed file now instead of at the next scheduled pass

     Queues every sealed segment and summary not yet archived and returns at once (202);
    follow progress with get_archive_status. Uploads stay idempotent, so a flush while
    another runs only reports what is queued. Files still being written are never sealed
    by a flush: training-side writers own sealing.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ArchiveFlush | Error]
     """


    kwargs = _get_kwargs(
        
    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,

) -> ArchiveFlush | Error | None:
    """ Upload every sealed file now instead of at the next scheduled pass

     Queues every sealed segment and summary not yet archived and returns at once (202);
    follow progress with get_archive_status. Uploads stay idempotent, so a flush while
    another runs only reports what is queued. Files still being written are never sealed
    by a flush: training-side writers own sealing.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ArchiveFlush | Error
     """


    return (await asyncio_detailed(
        client=client,

    )).parsed
