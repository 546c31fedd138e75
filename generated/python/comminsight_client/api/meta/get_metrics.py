from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors




def _get_kwargs(
    
) -> dict[str, Any]:
    

    

    

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/metrics",
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> str | None:
    if response.status_code == 200:
        response_200 = response.text
        return response_200

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[str]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,

) -> Response[str]:
    """ Prometheus metrics (text exposition format 0.0.4, or OpenMetrics 1.0.0)

     Per job, communicator and op type: counts (`comminsight_ops_total`), bytes; per job
    and op type: latency histograms, bus bandwidth; per job and communicator: in-flight
    age; per rank: seconds in completed operations (`comminsight_rank_op_seconds_total`);
    one `comminsight_incident_open` series per open incident (job, root verdict,
    communicator, root rank and host); the node's drops and agent lag; the Agent's build
    (`comminsight_build_info`) and process (`process_*`) metrics. Series carry `job_id`
    and `host`; COMMINSIGHT_AGENT_METRICS_LEVEL=rank puts every series per process as
    well, with `rank`, `local_rank`, `gpu` (CUDA device ordinal) and `UUID` (the GPU's,
    as DCGM's exporter labels it), and the histograms per communicator. Label sets are
    bounded (size buckets, no pid or sequence number); series of ended processes and
    communicators expire after COMMINSIGHT_AGENT_METRICS_EXPIRE_S. OpenMetrics is served
    when the request's Accept header asks for `application/openmetrics-text`; the body
    is gzip-compressed (`Content-Encoding: gzip`) when Accept-Encoding accepts gzip;
    HEAD answers the same headers without a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[str]
     """


    kwargs = _get_kwargs(
        
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,

) -> str | None:
    """ Prometheus metrics (text exposition format 0.0.4, or OpenMetrics 1.0.0)

     Per job, communicator and op type: counts (`comminsight_ops_total`), bytes; per job
    and op type: latency histograms, bus bandwidth; per job and communicator: in-flight
    age; per rank: seconds in completed operations (`comminsight_rank_op_seconds_total`);
    one `comminsight_incident_open` series per open incident (job, root verdict,
    communicator, root rank and host); the node's drops and agent lag; the Agent's build
    (`comminsight_build_info`) and process (`process_*`) metrics. Series carry `job_id`
    and `host`; COMMINSIGHT_AGENT_METRICS_LEVEL=rank puts every series per process as
    well, with `rank`, `local_rank`, `gpu` (CUDA device ordinal) and `UUID` (the GPU's,
    as DCGM's exporter labels it), and the histograms per communicator. Label sets are
    bounded (size buckets, no pid or sequence number); series of ended processes and
    communicators expire after COMMINSIGHT_AGENT_METRICS_EXPIRE_S. OpenMetrics is served
    when the request's Accept header asks for `application/openmetrics-text`; the body
    is gzip-compressed (`Content-Encoding: gzip`) when Accept-Encoding accepts gzip;
    HEAD answers the same headers without a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        str
     """


    return sync_detailed(
        client=client,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,

) -> Response[str]:
    """ Prometheus metrics (text exposition format 0.0.4, or OpenMetrics 1.0.0)

     Per job, communicator and op type: counts (`comminsight_ops_total`), bytes; per job
    and op type: latency histograms, bus bandwidth; per job and communicator: in-flight
    age; per rank: seconds in completed operations (`comminsight_rank_op_seconds_total`);
    one `comminsight_incident_open` series per open incident (job, root verdict,
    communicator, root rank and host); the node's drops and agent lag; the Agent's build
    (`comminsight_build_info`) and process (`process_*`) metrics. Series carry `job_id`
    and `host`; COMMINSIGHT_AGENT_METRICS_LEVEL=rank puts every series per process as
    well, with `rank`, `local_rank`, `gpu` (CUDA device ordinal) and `UUID` (the GPU's,
    as DCGM's exporter labels it), and the histograms per communicator. Label sets are
    bounded (size buckets, no pid or sequence number); series of ended processes and
    communicators expire after COMMINSIGHT_AGENT_METRICS_EXPIRE_S. OpenMetrics is served
    when the request's Accept header asks for `application/openmetrics-text`; the body
    is gzip-compressed (`Content-Encoding: gzip`) when Accept-Encoding accepts gzip;
    HEAD answers the same headers without a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[str]
     """


    kwargs = _get_kwargs(
        
    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,

) -> str | None:
    """ Prometheus metrics (text exposition format 0.0.4, or OpenMetrics 1.0.0)

     Per job, communicator and op type: counts (`comminsight_ops_total`), bytes; per job
    and op type: latency histograms, bus bandwidth; per job and communicator: in-flight
    age; per rank: seconds in completed operations (`comminsight_rank_op_seconds_total`);
    one `comminsight_incident_open` series per open incident (job, root verdict,
    communicator, root rank and host); the node's drops and agent lag; the Agent's build
    (`comminsight_build_info`) and process (`process_*`) metrics. Series carry `job_id`
    and `host`; COMMINSIGHT_AGENT_METRICS_LEVEL=rank puts every series per process as
    well, with `rank`, `local_rank`, `gpu` (CUDA device ordinal) and `UUID` (the GPU's,
    as DCGM's exporter labels it), and the histograms per communicator. Label sets are
    bounded (size buckets, no pid or sequence number); series of ended processes and
    communicators expire after COMMINSIGHT_AGENT_METRICS_EXPIRE_S. OpenMetrics is served
    when the request's Accept header asks for `application/openmetrics-text`; the body
    is gzip-compressed (`Content-Encoding: gzip`) when Accept-Encoding accepts gzip;
    HEAD answers the same headers without a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        str
     """


    return (await asyncio_detailed(
        client=client,

    )).parsed
