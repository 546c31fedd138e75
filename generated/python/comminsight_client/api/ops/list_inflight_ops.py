from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.inflight_op_list import InflightOpList
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    min_age_ms: int | Unset = 0,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["min_age_ms"] = min_age_ms

    params["comm_id"] = comm_id

    params["rank"] = rank

    params["node_name"] = node_name

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/inflight",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | InflightOpList | None:
    if response.status_code == 200:
        response_200 = InflightOpList.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | InflightOpList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    min_age_ms: int | Unset = 0,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | InflightOpList]:
    """ Operations in flight now, across ranks, oldest first

     A snapshot, not a page: ops are ordered by age (oldest first) and `limit` keeps the
    oldest; `total` says how many matched.

    Args:
        min_age_ms (int | Unset):  Default: 0.
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | InflightOpList]
     """


    kwargs = _get_kwargs(
        min_age_ms=min_age_ms,
comm_id=comm_id,
rank=rank,
node_name=node_name,
limit=limit,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    min_age_ms: int | Unset = 0,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | InflightOpList | None:
    """ Operations in flight now, across ranks, oldest first

     A snapshot, not a page: ops are ordered by age (oldest first) and `limit` keeps the
    oldest; `total` says how many matched.

    Args:
        min_age_ms (int | Unset):  Default: 0.
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | InflightOpList
     """


    return sync_detailed(
        client=client,
min_age_ms=min_age_ms,
comm_id=comm_id,
rank=rank,
node_name=node_name,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    min_age_ms: int | Unset = 0,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | InflightOpList]:
    """ Operations in flight now, across ranks, oldest first

     A snapshot, not a page: ops are ordered by age (oldest first) and `limit` keeps the
    oldest; `total` says how many matched.

    Args:
        min_age_ms (int | Unset):  Default: 0.
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | InflightOpList]
     """


    kwargs = _get_kwargs(
        min_age_ms=min_age_ms,
comm_id=comm_id,
rank=rank,
node_name=node_name,
limit=limit,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    min_age_ms: int | Unset = 0,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    node_name: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | InflightOpList | None:
    """ Operations in flight now, across ranks, oldest first

     A snapshot, not a page: ops are ordered by age (oldest first) and `limit` keeps the
    oldest; `total` says how many matched.

    Args:
        min_age_ms (int | Unset):  Default: 0.
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        node_name (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | InflightOpList
     """


    return (await asyncio_detailed(
        client=client,
min_age_ms=min_age_ms,
comm_id=comm_id,
rank=rank,
node_name=node_name,
limit=limit,

    )).parsed
