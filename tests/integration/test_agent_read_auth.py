"""Reads over TCP on a shared cluster: with COMMINSIGHT_AGENT_READ_AUTH=token every read but
/metrics and /api/v1/health needs the bearer token, and with COMMINSIGHT_AGENT_HTTP_TLS_CERT the
API speaks TLS; the cluster's Prometheus still scrapes without the token, and the CLI reads
with it (given by --token, or the local agent's configured one)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys

import httpx
import pytest
from live_agent import LiveAgent
from self_signed import self_signed

from comminsight.agent.main import http_tls_problem
from comminsight.config import load_settings

TOKEN = "s3cret-token"


@pytest.fixture
def tls_agent(tmp_path):
    key, cert = self_signed(tmp_path)
    agent = LiveAgent(
        tmp_path / "home",
        agent_token=TOKEN,
        agent_read_auth="token",
        agent_http_tls_cert=str(cert),
        agent_http_tls_key=str(key),
    )
    with agent:
        yield agent, cert


def test_reads_over_tcp_need_the_token_but_metrics_and_health_do_not(tls_agent):
    agent, cert = tls_agent
    verify = ssl.create_default_context(cafile=str(cert))
    assert agent.base_url.startswith("https://")
    with httpx.Client(base_url=agent.base_url, verify=verify) as client:
        assert client.get("/metrics").status_code == 200
        assert client.get("/api/v1/health").status_code == 200
        for path in ("/api/v1/node", "/api/v1/hangs", "/api/v1/steps", "/openapi.json"):
            refused = client.get(path)
            assert refused.status_code == 401, path
            assert "reads over TCP" not in refused.text or refused.json()["code"]
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/api/v1/node", headers=bearer).status_code == 200
        assert client.get("/api/v1/node", headers={"Authorization": "Bearer no"}).status_code == 401


def test_the_api_over_tls_refuses_plain_http_and_an_unverified_client(tls_agent):
    agent, _ = tls_agent
    plain = agent.base_url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{plain}/metrics", timeout=10)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{agent.base_url}/metrics", timeout=10)  # the system's CAs: not ours


def test_the_cli_reads_with_the_token_it_is_given(tls_agent, tmp_path):
    agent, cert = tls_agent
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env |= {"SSL_CERT_FILE": str(cert), "HOME": str(tmp_path), "COLUMNS": "200"}
    base = [sys.executable, "-m", "comminsight.cli", "processes", "--url", agent.base_url]
    without = subprocess.run(base, env=env, capture_output=True, text=True, timeout=60)
    assert without.returncode == 1 and "token" in without.stderr
    given = subprocess.run(
        [*base, "--token", TOKEN], env=env, capture_output=True, text=True, timeout=60
    )
    assert given.returncode == 0, given.stderr


def test_a_tls_setting_without_its_pair_or_with_a_bad_file_is_named(tmp_path):
    def problem(**env):
        return http_tls_problem(load_settings(env={"COMMINSIGHT_HOME": str(tmp_path), **env}))

    assert problem() is None
    assert "go together" in problem(COMMINSIGHT_AGENT_HTTP_TLS_CERT=str(tmp_path / "c.pem"))
    os.mkfifo(tmp_path / "fifo.pem")
    said = problem(
        COMMINSIGHT_AGENT_HTTP_TLS_CERT=str(tmp_path / "fifo.pem"),
        COMMINSIGHT_AGENT_HTTP_TLS_KEY=str(tmp_path / "fifo.pem"),
    )
    assert said.startswith("COMMINSIGHT_AGENT_HTTP_TLS_CERT=") and "FIFO" in said
