from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.op_record_list import OpRecordList
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    func: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["comm_id"] = comm_id

    params["rank"] = rank

    params["func"] = func

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/ops/recent",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | OpRecordList | None:
    if response.status_code == 200:
        response_200 = OpRecordList.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | OpRecordList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    func: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | OpRecordList]:
    """ Most recently completed operations, newest first

     Served from the agent's bounded in-memory window of completed ops; older ops are in inspector_logs.

    Args:
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        func (str | Unset): NCCL function name, e.g. AllReduce, AllGather, ReduceScatter,
            Broadcast, Reduce, AllToAll, Send, Recv.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | OpRecordList]
     """


    kwargs = _get_kwargs(
        comm_id=comm_id,
rank=rank,
func=func,
limit=limit,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    func: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | OpRecordList | None:
    """ Most recently completed operations, newest first

     Served from the agent's bounded in-memory window of completed ops; older ops are in inspector_logs.

    Args:
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        func (str | Unset): NCCL function name, e.g. AllReduce, AllGather, ReduceScatter,
            Broadcast, Reduce, AllToAll, Send, Recv.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | OpRecordList
     """


    return sync_detailed(
        client=client,
comm_id=comm_id,
rank=rank,
func=func,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    func: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Response[Error | OpRecordList]:
    """ Most recently completed operations, newest first

     Served from the agent's bounded in-memory window of completed ops; older ops are in inspector_logs.

    Args:
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        func (str | Unset): NCCL function name, e.g. AllReduce, AllGather, ReduceScatter,
            Broadcast, Reduce, AllToAll, Send, Recv.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | OpRecordList]
     """


    kwargs = _get_kwargs(
        comm_id=comm_id,
rank=rank,
func=func,
limit=limit,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    comm_id: str | Unset = UNSET,
    rank: int | Unset = UNSET,
    func: str | Unset = UNSET,
    limit: int | Unset = 100,

) -> Error | OpRecordList | None:
    """ Most recently completed operations, newest first

     Served from the agent's bounded in-memory window of completed ops; older ops are in inspector_logs.

    Args:
        comm_id (str | Unset): NCCL communicator id (commId in profiler ABI v5+, commHash in v4),
            16 lowercase hex digits, zero padded.
        rank (int | Unset): A rank (global rank in the job unless the field name says comm_rank).
        func (str | Unset): NCCL function name, e.g. AllReduce, AllGather, ReduceScatter,
            Broadcast, Reduce, AllToAll, Send, Recv.
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | OpRecordList
     """


    return (await asyncio_detailed(
        client=client,
comm_id=comm_id,
rank=rank,
func=func,
limit=limit,

    )).parsed
