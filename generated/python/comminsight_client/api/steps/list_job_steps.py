from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.job_step_page import JobStepPage
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    job: str | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 20,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["job"] = job

    params["since_step"] = since_step

    params["cursor"] = cursor

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/job-steps",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | JobStepPage | None:
    if response.status_code == 200:
        response_200 = JobStepPage.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Error | JobStepPage]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    job: str | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 20,

) -> Response[Error | JobStepPage]:
    """ The job's Steps, reconciled across nodes

     Every rank of a job takes the same Steps, but each node's Semantic Engine numbers them
    on its own, so one node's Step 7 may be another's Step 6 (an Agent started late, a
    start-up misjudged). The agent links GPUs of different nodes through the communicators
    they share: NCCL's collective seq is the same on every member of a communicator, so two
    GPUs took the same iteration exactly when their `comm_seqs` spans on it coincide. For
    each node it finds the offset that makes the most shared spans coincide, numbers the
    job's Steps (job step index = a node's local step index + its offset; the node that
    saw the earliest Step has offset 0) and names every disagreement: nodes no offset
    reconciles, GPUs whose boundaries differ, summaries without `comm_seqs`.

    A master answers for every node whose slave reports to it; any other agent for its own
    node. The answer covers a bounded recent window of each GPU's Steps
    (`window_steps_per_gpu`), not the whole run. Job steps are returned in ascending index
    from `since_step`, after `cursor` if given.

    Args:
        job (str | Unset): A job id as the step summaries carry it (SLURM_JOB_ID,
            TORCHELASTIC_RUN_ID, ...).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): The job step index of the last item of a page.
        limit (int | Unset):  Default: 20.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | JobStepPage]
     """


    kwargs = _get_kwargs(
        job=job,
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
    job: str | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 20,

) -> Error | JobStepPage | None:
    """ The job's Steps, reconciled across nodes

     Every rank of a job takes the same Steps, but each node's Semantic Engine numbers them
    on its own, so one node's Step 7 may be another's Step 6 (an Agent started late, a
    start-up misjudged). The agent links GPUs of different nodes through the communicators
    they share: NCCL's collective seq is the same on every member of a communicator, so two
    GPUs took the same iteration exactly when their `comm_seqs` spans on it coincide. For
    each node it finds the offset that makes the most shared spans coincide, numbers the
    job's Steps (job step index = a node's local step index + its offset; the node that
    saw the earliest Step has offset 0) and names every disagreement: nodes no offset
    reconciles, GPUs whose boundaries differ, summaries without `comm_seqs`.

    A master answers for every node whose slave reports to it; any other agent for its own
    node. The answer covers a bounded recent window of each GPU's Steps
    (`window_steps_per_gpu`), not the whole run. Job steps are returned in ascending index
    from `since_step`, after `cursor` if given.

    Args:
        job (str | Unset): A job id as the step summaries carry it (SLURM_JOB_ID,
            TORCHELASTIC_RUN_ID, ...).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): The job step index of the last item of a page.
        limit (int | Unset):  Default: 20.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | JobStepPage
     """


    return sync_detailed(
        client=client,
job=job,
since_step=since_step,
cursor=cursor,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    job: str | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 20,

) -> Response[Error | JobStepPage]:
    """ The job's Steps, reconciled across nodes

     Every rank of a job takes the same Steps, but each node's Semantic Engine numbers them
    on its own, so one node's Step 7 may be another's Step 6 (an Agent started late, a
    start-up misjudged). The agent links GPUs of different nodes through the communicators
    they share: NCCL's collective seq is the same on every member of a communicator, so two
    GPUs took the same iteration exactly when their `comm_seqs` spans on it coincide. For
    each node it finds the offset that makes the most shared spans coincide, numbers the
    job's Steps (job step index = a node's local step index + its offset; the node that
    saw the earliest Step has offset 0) and names every disagreement: nodes no offset
    reconciles, GPUs whose boundaries differ, summaries without `comm_seqs`.

    A master answers for every node whose slave reports to it; any other agent for its own
    node. The answer covers a bounded recent window of each GPU's Steps
    (`window_steps_per_gpu`), not the whole run. Job steps are returned in ascending index
    from `since_step`, after `cursor` if given.

    Args:
        job (str | Unset): A job id as the step summaries carry it (SLURM_JOB_ID,
            TORCHELASTIC_RUN_ID, ...).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): The job step index of the last item of a page.
        limit (int | Unset):  Default: 20.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | JobStepPage]
     """


    kwargs = _get_kwargs(
        job=job,
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
    job: str | Unset = UNSET,
    since_step: int | Unset = 0,
    cursor: str | Unset = UNSET,
    limit: int | Unset = 20,

) -> Error | JobStepPage | None:
    """ The job's Steps, reconciled across nodes

     Every rank of a job takes the same Steps, but each node's Semantic Engine numbers them
    on its own, so one node's Step 7 may be another's Step 6 (an Agent started late, a
    start-up misjudged). The agent links GPUs of different nodes through the communicators
    they share: NCCL's collective seq is the same on every member of a communicator, so two
    GPUs took the same iteration exactly when their `comm_seqs` spans on it coincide. For
    each node it finds the offset that makes the most shared spans coincide, numbers the
    job's Steps (job step index = a node's local step index + its offset; the node that
    saw the earliest Step has offset 0) and names every disagreement: nodes no offset
    reconciles, GPUs whose boundaries differ, summaries without `comm_seqs`.

    A master answers for every node whose slave reports to it; any other agent for its own
    node. The answer covers a bounded recent window of each GPU's Steps
    (`window_steps_per_gpu`), not the whole run. Job steps are returned in ascending index
    from `since_step`, after `cursor` if given.

    Args:
        job (str | Unset): A job id as the step summaries carry it (SLURM_JOB_ID,
            TORCHELASTIC_RUN_ID, ...).
        since_step (int | Unset):  Default: 0.
        cursor (str | Unset): The job step index of the last item of a page.
        limit (int | Unset):  Default: 20.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | JobStepPage
     """


    return (await asyncio_detailed(
        client=client,
job=job,
since_step=since_step,
cursor=cursor,
limit=limit,

    )).parsed
