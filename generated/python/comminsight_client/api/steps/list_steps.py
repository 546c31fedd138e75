from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.step_page import StepPage
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    rank: int | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["rank"] = rank

    params["since_step"] = since_step

    params["cursor"] = cursor

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/steps",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | StepPage | None:
    if response.status_code == 200:
        response_200 = StepPage.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | StepPage]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    rank: int | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | StepPage]:
    """ Step summaries, ordered by step index then rank

     Returns step summaries with step index >= `since_step` that sort after `cursor`
    (if given). Pass a page's `next_cursor` as `cursor` to continue; a page may end in the
    middle of a step when no rank filter is given.

    Args:
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): `<step>:<global_rank>` of the last step summary of a page.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | StepPage]
     """


    kwargs = _get_kwargs(
        rank=rank,
since_step=since_step,
cursor=cursor,
limit=limit,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    rank: int | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | StepPage | None:
    """ Step summaries, ordered by step index then rank

     Returns step summaries with step index >= `since_step` that sort after `cursor`
    (if given). Pass a page's `next_cursor` as `cursor` to continue; a page may end in the
    middle of a step when no rank filter is given.

    Args:
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): `<step>:<global_rank>` of the last step summary of a page.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | StepPage
     """


    return sync_detailed(
        client=client,
rank=rank,
since_step=since_step,
cursor=cursor,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    rank: int | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | StepPage]:
    """ Step summaries, ordered by step index then rank

     Returns step summaries with step index >= `since_step` that sort after `cursor`
    (if given). Pass a page's `next_cursor` as `cursor` to continue; a page may end in the
    middle of a step when no rank filter is given.

    Args:
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): `<step>:<global_rank>` of the last step summary of a page.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | StepPage]
     """


    kwargs = _get_kwargs(
        rank=rank,
since_step=since_step,
cursor=cursor,
limit=limit,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    rank: int | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | StepPage | None:
    """ Step summaries, ordered by step index then rank

     Returns step summaries with step index >= `since_step` that sort after `cursor`
    (if given). Pass a page's `next_cursor` as `cursor` to continue; a page may end in the
    middle of a step when no rank filter is given.

    Args:
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): `<step>:<global_rank>` of the last step summary of a page.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | StepPage
     """


    return (await asyncio_detailed(
        client=client,
rank=rank,
since_step=since_step,
cursor=cursor,
limit=limit,

    )).parsed
