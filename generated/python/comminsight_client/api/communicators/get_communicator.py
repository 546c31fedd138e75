from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.communicator import Communicator
from ...models.communicator_view import CommunicatorView
from ...models.error import Error
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    comm_id: str,
    *,
    view: CommunicatorView | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_view: str | Unset = UNSET
    if not isinstance(view, Unset):
        json_view = view.value

    params["view"] = json_view


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/communicators/{comm_id}".format(comm_id=quote(str(comm_id), safe=""),),
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Communicator | Error | None:
    if response.status_code == 200:
        response_200 = Communicator.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Communicator | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    comm_id: str,
    *,
    client: AuthenticatedClient | Client,
    view: CommunicatorView | Unset = UNSET,

) -> Response[Communicator | Error]:
    """ One communicator, with every rank this agent sees

    Args:
        comm_id (str): NCCL communicator id (commId in profiler ABI v5+, commHash in v4), 16
            lowercase hex digits, zero padded.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Communicator | Error]
     """


    kwargs = _get_kwargs(
        comm_id=comm_id,
view=view,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    comm_id: str,
    *,
    client: AuthenticatedClient | Client,
    view: CommunicatorView | Unset = UNSET,

) -> Communicator | Error | None:
    """ One communicator, with every rank this agent sees

    Args:
        comm_id (str): NCCL communicator id (commId in profiler ABI v5+, commHash in v4), 16
            lowercase hex digits, zero padded.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Communicator | Error
     """


    return sync_detailed(
        comm_id=comm_id,
client=client,
view=view,

    ).parsed

async def asyncio_detailed(
    comm_id: str,
    *,
    client: AuthenticatedClient | Client,
    view: CommunicatorView | Unset = UNSET,

) -> Response[Communicator | Error]:
    """ One communicator, with every rank this agent sees

    Args:
        comm_id (str): NCCL communicator id (commId in profiler ABI v5+, commHash in v4), 16
            lowercase hex digits, zero padded.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Communicator | Error]
     """


    kwargs = _get_kwargs(
        comm_id=comm_id,
view=view,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    comm_id: str,
    *,
    client: AuthenticatedClient | Client,
    view: CommunicatorView | Unset = UNSET,

) -> Communicator | Error | None:
    """ One communicator, with every rank this agent sees

    Args:
        comm_id (str): NCCL communicator id (commId in profiler ABI v5+, commHash in v4), 16
            lowercase hex digits, zero padded.
        view (CommunicatorView | Unset): summary: identity and totals, `ranks` is null; full: also
            one entry per rank seen.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Communicator | Error
     """


    return (await asyncio_detailed(
        comm_id=comm_id,
client=client,
view=view,

    )).parsed
