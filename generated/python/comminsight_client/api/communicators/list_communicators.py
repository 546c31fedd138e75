from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.communicator_page import CommunicatorPage
from ...models.communicator_state_filter import CommunicatorStateFilter
from ...models.communicator_view import CommunicatorView
from ...models.error import Error
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    state: CommunicatorStateFilter | Unset = UNSET,
    name_contains: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    view: CommunicatorView | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_state: str | Unset = UNSET
    if not isinstance(state, Unset):
        json_state = state.value

    params["state"] = json_state

    params["name_contains"] = name_contains

    params["rank"] = rank

    params["node_name"] = node_name

    json_view: str | Unset = UNSET
    if not isinstance(view, Unset):
        json_view = view.value

    params["view"] = json_view

    params["limit"] = limit

    params["cursor"] = cursor


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/communicators",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> CommunicatorPage | Error | None:
    if response.status_code == 200:
        response_200 = CommunicatorPage.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[CommunicatorPage | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    state: CommunicatorStateFilter | Unset = UNSET,
    name_contains: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    view: CommunicatorView | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> Response[CommunicatorPage | Error]:
    """ Communicators, with identity and live progress per rank

     Ordered by comm_id. Pagination is keyset: pass the `next_cursor` of a page as `cursor`
    to get the communicators whose comm_id sorts after it.

    Args:
        state (CommunicatorStateFilter | Unset):
        name_contains (str | Unset):
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[CommunicatorPage | Error]
     """


    kwargs = _get_kwargs(
        state=state,
name_contains=name_contains,
rank=rank,
node_name=node_name,
view=view,
limit=limit,
cursor=cursor,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    state: CommunicatorStateFilter | Unset = UNSET,
    name_contains: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    view: CommunicatorView | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> CommunicatorPage | Error | None:
    """ Communicators, with identity and live progress per rank

     Ordered by comm_id. Pagination is keyset: pass the `next_cursor` of a page as `cursor`
    to get the communicators whose comm_id sorts after it.

    Args:
        state (CommunicatorStateFilter | Unset):
        name_contains (str | Unset):
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        CommunicatorPage | Error
     """


    return sync_detailed(
        client=client,
state=state,
name_contains=name_contains,
rank=rank,
node_name=node_name,
view=view,
limit=limit,
cursor=cursor,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    state: CommunicatorStateFilter | Unset = UNSET,
    name_contains: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    view: CommunicatorView | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> Response[CommunicatorPage | Error]:
    """ Communicators, with identity and live progress per rank

     Ordered by comm_id. Pagination is keyset: pass the `next_cursor` of a page as `cursor`
    to get the communicators whose comm_id sorts after it.

    Args:
        state (CommunicatorStateFilter | Unset):
        name_contains (str | Unset):
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[CommunicatorPage | Error]
     """


    kwargs = _get_kwargs(
        state=state,
name_contains=name_contains,
rank=rank,
node_name=node_name,
view=view,
limit=limit,
cursor=cursor,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    state: CommunicatorStateFilter | Unset = UNSET,
    name_contains: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    view: CommunicatorView | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> CommunicatorPage | Error | None:
    """ Communicators, with identity and live progress per rank

     Ordered by comm_id. Pagination is keyset: pass the `next_cursor` of a page as `cursor`
    to get the communicators whose comm_id sorts after it.

    Args:
        state (CommunicatorStateFilter | Unset):
        name_contains (str | Unset):
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        CommunicatorPage | Error
     """


    return (await asyncio_detailed(
        client=client,
state=state,
name_contains=name_contains,
rank=rank,
node_name=node_name,
view=view,
limit=limit,
cursor=cursor,

    )).parsed
