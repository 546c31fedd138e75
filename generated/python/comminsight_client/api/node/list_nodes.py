from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.node_list import NodeList
from ...models.node_state_filter import NodeStateFilter
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    state: NodeStateFilter | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_state: str | Unset = UNSET
    if not isinstance(state, Unset):
        json_state = state.value

    params["state"] = json_state

    params["limit"] = limit

    params["cursor"] = cursor


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/nodes",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | NodeList | None:
    if response.status_code == 200:
        response_200 = NodeList.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | NodeList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    state: NodeStateFilter | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> Response[Error | NodeList]:
    """ Every node of the job and the state of its agent

     On a master: this node plus every slave that registered, including slaves that went
    stale, disconnected, or were refused (wrong token, version mismatch, ...). On a
    standalone or slave agent: exactly this node.

    Args:
        state (NodeStateFilter | Unset):
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | NodeList]
     """


    kwargs = _get_kwargs(
        state=state,
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
    state: NodeStateFilter | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> Error | NodeList | None:
    """ Every node of the job and the state of its agent

     On a master: this node plus every slave that registered, including slaves that went
    stale, disconnected, or were refused (wrong token, version mismatch, ...). On a
    standalone or slave agent: exactly this node.

    Args:
        state (NodeStateFilter | Unset):
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | NodeList
     """


    return sync_detailed(
        client=client,
state=state,
limit=limit,
cursor=cursor,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    state: NodeStateFilter | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> Response[Error | NodeList]:
    """ Every node of the job and the state of its agent

     On a master: this node plus every slave that registered, including slaves that went
    stale, disconnected, or were refused (wrong token, version mismatch, ...). On a
    standalone or slave agent: exactly this node.

    Args:
        state (NodeStateFilter | Unset):
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | NodeList]
     """


    kwargs = _get_kwargs(
        state=state,
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
    state: NodeStateFilter | Unset = UNSET,
    limit: int | Unset = 100,
    cursor: str | Unset = UNSET,

) -> Error | NodeList | None:
    """ Every node of the job and the state of its agent

     On a master: this node plus every slave that registered, including slaves that went
    stale, disconnected, or were refused (wrong token, version mismatch, ...). On a
    standalone or slave agent: exactly this node.

    Args:
        state (NodeStateFilter | Unset):
        limit (int | Unset):  Default: 100.
        cursor (str | Unset): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host
            name); unique in a job.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | NodeList
     """


    return (await asyncio_detailed(
        client=client,
state=state,
limit=limit,
cursor=cursor,

    )).parsed
