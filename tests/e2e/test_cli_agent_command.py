"""`comminsight-agent` as a command (--help, --version, flags over environment over file) and
the `comminsight` commands for everything the Agent Master API offers, as a user runs them:
real processes, piped output, a live agent with data."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import httpx
import msgspec
import pytest
import yaml
from agent_home import hold_agent_lock, run_sim
from cli_in_process import run_cli
from home_files import FIXTURES, write_segment, write_step_summaries
from live_agent import LiveAgent
from ports import free_port
from rich_tables import squeezed, table_rows

from comminsight.agent.core import command_line
from comminsight.cli.options import FORMATS
from comminsight.config import ConfigError, load_settings
from comminsight.human_units import (
    bandwidth_text,
    duration_text,
    ms_text,
    size_text,
    time_text,
)
from comminsight.redaction import redact_url, shown_raw
from comminsight_gen.models.hang_report_v1 import HangReport
from comminsight_gen.registry import PROTOCOLS

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "cli-command-token"
LONG_COMM_NAME = "pipeline_parallel_stage_3_of_a_rather_long_model_replica_name:" + "x" * 40
# (no query string: fsspec's memory filesystem would take it into its paths)
ARCHIVE_URL = "memory://alice:pa55word@bucket/comminsight"
DEADLINE_S = 60


def agent_script() -> list[str]:
    script = Path(sys.executable).parent / "comminsight-agent"
    return [str(script)] if script.exists() else [sys.executable, "-m", "comminsight.agent.main"]


def cli_script() -> list[str]:
    script = Path(sys.executable).parent / "comminsight"
    return [str(script)] if script.exists() else [sys.executable, "-m", "comminsight.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.pop("COLUMNS", None)
    return {**env, **extra}


def wide(**extra: str) -> dict[str, str]:
    """Tables as wide as their cells: for assertions on what a table says, not its layout
    (at the default 80 columns a wide table folds its cells onto more lines)."""
    return clean_env(COLUMNS="250", **extra)


def cli(*args: str, url: str | None = None, env: dict | None = None, process: bool = False):
    """`comminsight ARGS` with stdout piped (not a terminal), as `| grep` would see it: run in
    this process (what a command says and prints is the same code either way, without an
    interpreter and the CLI's imports to start each time), or with process=True the console
    script in a process of its own, for what a process adds: its exit status and its two
    pipes."""
    argv = [*args] + (["--url", url] if url else [])
    if not process:
        return run_cli(argv, env or clean_env())
    return subprocess.run(
        [*cli_script(), *argv],
        capture_output=True,
        text=True,
        env=env or clean_env(),
        timeout=DEADLINE_S,
    )


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


# ---- comminsight-agent: --help, --version, flags -----------------------------------------


def test_agent_help_prints_usage_and_starts_nothing(tmp_path):
    home = tmp_path / "absent-home"
    env = clean_env(HOME=str(tmp_path / "user-home"), COMMINSIGHT_HOME=str(home))
    out = subprocess.run(
        [*agent_script(), "--help"], capture_output=True, text=True, env=env, timeout=DEADLINE_S
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: comminsight-agent")
    for flag in ("--home", "--listen", "--mode", "--log-level", "--version"):
        assert flag in out.stdout
    assert not home.exists() and not (tmp_path / "user-home").exists()
    assert out.stderr == ""


def expected_version_lines(prog: str) -> tuple[str, list[str]]:
    head = f"{prog} {metadata.version('comminsight')}"
    protocols = [f"{p.id} v{p.version}" for p in PROTOCOLS if p.id in ("shm", "fifo-event")]
    protocols += ["agent-master-api v1", "agent-master-slave v1"]
    return head, protocols


@pytest.mark.parametrize("prog", ["comminsight-agent", "comminsight"])
def test_version_names_the_package_and_protocol_versions(tmp_path, prog):
    command = agent_script() if prog == "comminsight-agent" else cli_script()
    env = clean_env(COMMINSIGHT_HOME=str(tmp_path / "absent"))
    out = subprocess.run(
        [*command, "--version"], capture_output=True, text=True, env=env, timeout=DEADLINE_S
    )
    assert out.returncode == 0, out.stderr
    head, protocols = expected_version_lines(prog)
    first, second = out.stdout.splitlines()
    assert first.startswith(head)
    assert second.startswith("protocols: ")
    for protocol in protocols:
        assert protocol in second
    abis = sorted(p.version for p in PROTOCOLS if p.id == "nccl-profiler" and p.status == "live")
    assert "nccl-profiler " + ",".join(f"v{v}" for v in abis) in second
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--listen", "127.0.0.1:99999", "port 99999 is outside 0..65535"),
        ("--listen", "no-port-here", "expected host:port"),
        ("--listen", "999.1.1.1:80", "not an IPv4 address"),
        ("--mode", "boss", "invalid choice: 'boss'"),
        ("--log-level", "loud", "invalid choice: 'loud'"),
        ("--home", "", "must name a directory"),
        ("--home", "   ", "must name a directory"),
    ],
)
def test_a_bad_flag_value_names_the_flag_and_exits_2(tmp_path, flag, value, says):
    home = tmp_path / "absent"
    out = subprocess.run(
        [*agent_script(), flag, value],
        capture_output=True,
        text=True,
        env=clean_env(COMMINSIGHT_HOME=str(home)),
        timeout=DEADLINE_S,
    )
    assert out.returncode == 2
    assert f"argument {flag}: " in out.stderr and says in out.stderr, out.stderr
    no_traceback(out.stderr)
    assert not home.exists()


def test_an_unknown_flag_exits_2_and_starts_nothing(tmp_path):
    home = tmp_path / "absent"
    out = subprocess.run(
        [*agent_script(), "--lisen", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=clean_env(COMMINSIGHT_HOME=str(home)),
        timeout=DEADLINE_S,
    )
    assert out.returncode == 2 and "unrecognized arguments: --lisen" in out.stderr
    assert not home.exists()


def write_conf(path: Path, **values: str) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)
    return path


def test_flags_beat_environment_beats_file(tmp_path):
    conf = write_conf(
        tmp_path / "comminsight.conf",
        COMMINSIGHT_HOME=str(tmp_path / "file-home"),
        COMMINSIGHT_AGENT_LISTEN="127.0.0.1:1111",
        COMMINSIGHT_AGENT_LOG_LEVEL="warning",
        COMMINSIGHT_AGENT_MODE="standalone",
    )
    env = {
        "COMMINSIGHT_CONF": str(conf),
        "COMMINSIGHT_HOME": str(tmp_path / "env-home"),
        "COMMINSIGHT_AGENT_LISTEN": "127.0.0.1:2222",
    }
    # the file alone, then the environment over it
    only_file = load_settings({"COMMINSIGHT_CONF": str(conf)})
    assert (only_file.home, only_file.agent_listen, only_file.agent_log_level) == (
        str(tmp_path / "file-home"),
        "127.0.0.1:1111",
        "warning",
    )
    with_env = load_settings(env)
    assert (with_env.home, with_env.agent_listen, with_env.agent_log_level) == (
        str(tmp_path / "env-home"),
        "127.0.0.1:2222",
        "warning",
    )
    # then the flags over both
    args = command_line.parser().parse_args(
        [
            "--home",
            str(tmp_path / "flag-home"),
            "--listen",
            "127.0.0.1:3333",
            "--log-level",
            "error",
        ]
    )
    flagged = load_settings(env, overrides=command_line.overrides(args))
    assert (flagged.home, flagged.agent_listen, flagged.agent_log_level) == (
        str(tmp_path / "flag-home"),
        "127.0.0.1:3333",
        "error",
    )
    assert flagged.agent_mode == "standalone"  # no flag given: the file's


def test_a_relative_home_flag_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = command_line.parser().parse_args(["--home", "h"])
    assert command_line.overrides(args) == {"COMMINSIGHT_HOME": (str(tmp_path / "h"), "--home")}


def test_a_flag_value_the_schema_refuses_is_an_error_naming_the_flag():
    with pytest.raises(ConfigError, match=r"COMMINSIGHT_AGENT_MODE='boss' \(--mode\)"):
        load_settings({}, overrides={"COMMINSIGHT_AGENT_MODE": ("boss", "--mode")})


def test_the_home_flag_also_chooses_the_default_configuration_file(tmp_path):
    flag_home = tmp_path / "flag-home"
    (flag_home / "etc").mkdir(parents=True)
    write_conf(flag_home / "etc" / "comminsight.conf", COMMINSIGHT_AGENT_LISTEN="127.0.0.1:4444")
    settings = load_settings(
        {"COMMINSIGHT_HOME": str(tmp_path / "env-home")},
        overrides={"COMMINSIGHT_HOME": (str(flag_home), "--home")},
    )
    assert settings.agent_listen == "127.0.0.1:4444"


def test_a_started_agent_follows_its_flags_over_environment_and_file(tmp_path):
    """The flags decide where it listens, which home it serves and how much it logs."""
    flag_home, env_home = tmp_path / "flag-home", tmp_path / "env-home"
    flag_home.mkdir(mode=0o700)
    port, env_port, file_port = free_port(), free_port(), free_port()
    conf = write_conf(
        tmp_path / "comminsight.conf",
        COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{file_port}",
        COMMINSIGHT_AGENT_LOG_LEVEL="error",
        COMMINSIGHT_SEMANTIC_ENABLE="0",
    )
    env = clean_env(
        COMMINSIGHT_CONF=str(conf),
        COMMINSIGHT_HOME=str(env_home),
        COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{env_port}",
        COMMINSIGHT_AGENT_LOG_LEVEL="warning",
    )
    agent = subprocess.Popen(
        [
            *agent_script(),
            "--home",
            str(flag_home),
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "debug",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        node = None
        deadline = time.monotonic() + DEADLINE_S
        while node is None:
            assert agent.poll() is None, agent.communicate()[1]
            assert time.monotonic() < deadline, "the agent never answered on the flag's port"
            try:
                node = httpx.get(f"http://127.0.0.1:{port}/api/v1/node", timeout=2).json()
            except httpx.HTTPError:
                time.sleep(0.1)
        assert node["comminsight_home"] == str(flag_home)
        assert not env_home.exists()
        for other in (env_port, file_port):
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{other}/api/v1/health", timeout=2)
    finally:
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=DEADLINE_S)
    assert agent.returncode == 0, stderr
    assert " DEBUG " in stderr  # --log-level debug, not the environment's warning
    assert f"COMMINSIGHT_AGENT_LISTEN='127.0.0.1:{port}'" in stderr  # the resolved settings


def test_a_listen_flag_that_cannot_be_bound_names_the_flag(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [*agent_script(), "--home", str(home), "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            env=clean_env(COMMINSIGHT_SEMANTIC_ENABLE="0"),
            timeout=DEADLINE_S,
        )
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} (--listen)" in out.stderr, out.stderr
    no_traceback(out.stderr)


# ---- human units ---------------------------------------------------------------------------


def test_human_units():
    assert size_text(22000000008) == "20.5 GiB"
    assert size_text(512) == "512 B"
    assert size_text(1536) == "1.5 KiB"
    assert size_text(3 * 2**20) == "3.0 MiB"
    assert size_text(None) == "-"
    assert bandwidth_text(291.6734237676506) == "291.7 GB/s"
    assert bandwidth_text(None) == "-"
    assert duration_text(12_345_678) == "12.3 ms"
    assert duration_text(850) == "850 ns"
    assert duration_text(12_300) == "12.3 µs"
    assert duration_text(4_210_000_000) == "4.21 s"
    assert duration_text(725 * 10**9) == "12 min 5 s"
    assert duration_text(11_520 * 10**9) == "3 h 12 min"
    assert duration_text(0) == "0 s"
    assert ms_text(350) == "350.0 ms" and ms_text(None) == "-"
    # 2026-12-02 13:02:11.123 UTC: the whole date and milliseconds, nothing cut
    assert time_text(1796216531123000000) == "2026-12-02 13:02:11.123"
    assert time_text(None) == "-"


# ---- redaction -----------------------------------------------------------------------------


def test_redact_url_hides_credentials_and_query():
    assert redact_url(ARCHIVE_URL) == "memory://***@bucket/comminsight"
    assert redact_url("s3://k:s@bucket/p?X-Amz-Signature=s1g#f") == "s3://***@bucket/p?***"
    assert redact_url("s3://bucket/prefix") == "s3://bucket/prefix"
    assert redact_url("/mnt/3fs/ci") == "/mnt/3fs/ci"


def test_config_prints_an_archive_url_redacted(tmp_path):
    env = clean_env(
        COMMINSIGHT_HOME=str(tmp_path),
        COMMINSIGHT_COMMON_ARCHIVE_URL="s3://alice:pa55word@bucket/prefix?X-Amz-Signature=s1g",
        COMMINSIGHT_AGENT_TOKEN="hunter2",
    )
    for fmt in FORMATS:  # (the table as wide as its cells: the value on one line)
        out = cli("config", "--format", fmt, env={**env, "COLUMNS": "250"})
        assert out.returncode == 0, out.stderr
        assert "s3://***@bucket/prefix?***" in out.stdout, fmt
        for secret in ("alice", "pa55word", "s1g", "hunter2"):
            assert secret not in out.stdout, (fmt, secret)


def test_values_quoted_in_errors_are_redacted_alike():
    assert shown_raw("COMMINSIGHT_AGENT_TOKEN", "hunter2") == "***"
    assert shown_raw("COMMINSIGHT_COMMON_ARCHIVE_URL", ARCHIVE_URL) == redact_url(ARCHIVE_URL)
    assert shown_raw("COMMINSIGHT_AGENT_LISTEN", "127.0.0.1:1") == "127.0.0.1:1"


# ---- the CLI against a live agent ----------------------------------------------------------


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli-command-home")
    lock = hold_agent_lock(home)
    truths = run_sim(home)
    write_step_summaries(home)
    report = msgspec.json.decode(
        (FIXTURES / "hang-report" / "v1" / "valid" / "rank-not-joined-open.json").read_bytes(),
        type=HangReport,
    )
    long_named = msgspec.structs.replace(
        report,
        report_id=report.report_id + "-long",
        comm=msgspec.structs.replace(report.comm, comm_name=LONG_COMM_NAME),
    )
    with LiveAgent(home, polling=False, agent_token=TOKEN, common_archive_url=ARCHIVE_URL) as live:
        live.call(live.service.hangs.save, report)
        live.call(live.service.hangs.save, long_named)
        yield live, truths, report, long_named
    lock.close()


def data(*args: str, url: str) -> dict | list:
    out = cli(*args, "--format", "json", url=url)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_piped_tables_fit_the_width_and_cut_nothing(agent):
    live, _, _, long_named = agent
    # (COLUMNS unset: the width of a real process's pipe)
    for env, width, process in (
        (clean_env(), 80, True),
        (clean_env(COLUMNS="40"), 40, False),
        (wide(), 250, False),
    ):
        out = cli("hangs", url=live.base_url, env=env, process=process)
        assert out.returncode == 0, out.stderr
        assert "…" not in out.stdout
        assert max(len(line) for line in out.stdout.splitlines()) <= width
        # folded onto more lines, the report's cells read back whole
        (row,) = [r for r in table_rows(out.stdout) if r[1] == long_named.report_id]
        assert row[4] == LONG_COMM_NAME
        assert squeezed(row[2]) == squeezed(time_text(long_named.detected_real_ns))
    # as wide as its cells: the whole value on the report's own line
    row = next(line for line in out.stdout.splitlines() if long_named.report_id in line)
    assert LONG_COMM_NAME in row and time_text(long_named.detected_real_ns) in row


def test_plain_format_is_tab_separated_with_a_header(agent):
    live, truths, _, long_named = agent
    out = cli("hangs", "--format", "plain", url=live.base_url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = lines.index("#\treport\tdetected (UTC)\tverdict\tcomm\tculprits\tstatus")
    rows = [line.split("\t") for line in lines[header + 1 :] if "\t" in line]
    by_id = {r[1]: r for r in rows}
    assert by_id[long_named.report_id][4] == LONG_COMM_NAME
    assert by_id[long_named.report_id][6] == "open"
    processes = cli("processes", "--format", "plain", url=live.base_url).stdout.splitlines()
    header = next(line.split("\t") for line in processes if line.startswith("rank\t"))
    pids = {line.split("\t")[header.index("pid")] for line in processes if line[:1].isdigit()}
    assert pids == {str(t.run["pid"]) for t in truths}


def test_tables_show_human_units(agent):
    live, _, _, _ = agent
    (comm,) = data("comms", url=live.base_url)
    out = cli("comms", url=live.base_url, env=wide())
    assert size_text(comm["bytes_completed_total"]) in out.stdout
    assert str(comm["bytes_completed_total"]) not in out.stdout
    ops = data("ops", "recent", "--limit", "5", url=live.base_url)["items"]
    timed = [op for op in ops if op["busbw_gbs"] is not None]
    assert timed, ops
    table = cli("ops", "recent", "--limit", "5", url=live.base_url, env=wide()).stdout
    for op in timed:
        assert bandwidth_text(op["busbw_gbs"]) in table
        assert repr(op["busbw_gbs"]) not in table
    steps = data("steps", url=live.base_url)["items"]
    table = cli("steps", url=live.base_url, env=wide()).stdout
    assert duration_text(steps[0]["duration_ns"]) in table
    assert size_text(steps[0]["total_bytes"]) in table


def test_health_processes_and_nodes(agent):
    live, truths, _, _ = agent
    health = cli("health", url=live.base_url)
    assert health.returncode == 0, health.stderr
    assert "semantic engine:" in health.stdout and "nodes current 1/1" in health.stdout
    processes = cli("processes", url=live.base_url, env=wide())
    assert processes.returncode == 0, processes.stderr
    for t in truths:
        assert str(t.run["pid"]) in processes.stdout
    nodes = data("nodes", url=live.base_url)
    assert [n["state"] for n in nodes] == ["local"]
    table = cli("nodes", url=live.base_url)
    assert "Nodes: 1" in table.stdout and nodes[0]["node_name"] in table.stdout
    assert data("nodes", "--state", "stale", url=live.base_url) == []


def test_one_communicator_with_every_rank(agent):
    live, truths, _, _ = agent
    (comm,) = data("comms", url=live.base_url)
    one = data("communicators", "--id", comm["comm_id"], url=live.base_url)
    assert one["comm_id"] == comm["comm_id"] and len(one["ranks"]) == len(truths)
    out = cli("comms", "--id", comm["comm_id"], url=live.base_url)
    assert f"{comm['comm_id']} default_pg:0: ranks" in out.stdout
    missing = cli("comms", "--id", "00000000000000ff", url=live.base_url)
    assert missing.returncode == 1 and "404 not_found" in missing.stderr
    assert "hint: list the communicators with `comminsight comms`" in missing.stderr


def test_recent_and_inflight_ops(agent):
    live, truths, _, _ = agent
    completed = [op for t in truths for op in t.ops if op["completed"]]
    recent = data("ops", "--limit", "1000", url=live.base_url)["items"]
    assert len(recent) == len(completed)
    assert data("ops", "recent", "--limit", "1000", url=live.base_url)["items"] == recent
    allreduce = data("ops", "recent", "--func", "AllReduce", url=live.base_url)["items"]
    assert allreduce and {op["func"] for op in allreduce} == {"AllReduce"}
    rank2 = data("ops", "--rank", "2", "--limit", "1000", url=live.base_url)["items"]
    assert rank2 and {op["global_rank"] for op in rank2} == {2}
    newest = recent[0]
    table = cli("ops", "recent", "--limit", "3", url=live.base_url, env=wide()).stdout
    assert "Recently completed ops: 3" in table and time_text(newest["completed_real_ns"]) in table
    inflight = cli("ops", "inflight", url=live.base_url)
    assert inflight.returncode == 0 and "In flight: 0" in inflight.stdout
    assert data("ops", "inflight", "--min-age-ms", "5", url=live.base_url)["total"] == 0


def test_job_steps(agent):
    live, _, _, _ = agent
    body = data("job-steps", url=live.base_url)
    out = cli("job-steps", url=live.base_url, env=wide())
    assert out.returncode == 0, out.stderr
    assert f"{body['total']} job steps from 0" in out.stdout
    assert f"disagreements: {body['disagreements_total']}" in out.stdout
    for d in body["disagreements"]:
        assert squeezed(d["description"]) in squeezed(out.stdout)  # (a sentence wraps)
    missing = cli("job-steps", "--job", "no-such-job", url=live.base_url)
    assert missing.returncode == 1 and "404" in missing.stderr and "hint:" in missing.stderr


def test_hangs_list_show_and_resolve(agent):
    live, _, report, long_named = agent
    # a report of its own to resolve: the module's reports stay open for the tests that list
    # them (its name no longer than theirs: what the CLI says of it fits 80 columns alike)
    own = msgspec.structs.replace(long_named, report_id=report.report_id + "-own")
    live.call(live.service.hangs.save, own)
    listed = data("hangs", "list", "--status", "all", url=live.base_url)
    assert {r["report_id"] for r in listed["items"]} >= {report.report_id, long_named.report_id}
    shown = cli("hangs", "show", long_named.report_id, url=live.base_url)
    assert shown.returncode == 0 and "Evidence per rank" in shown.stdout
    assert data("hangs", "show", report.report_id, url=live.base_url)["report_id"] == (
        report.report_id
    )
    # without the token: refused, and told how to pass it
    refused = cli("hangs", "resolve", own.report_id, url=live.base_url, process=True)
    assert refused.returncode == 1 and "401 unauthorized" in refused.stderr
    assert "hint:" in refused.stderr and "--token" in refused.stderr
    no_traceback(refused.stderr)
    done = cli(
        "hangs",
        "resolve",
        own.report_id,
        "--note",
        "restarted the job",
        "--token",
        TOKEN,
        url=live.base_url,
    )
    assert done.returncode == 0, done.stderr
    assert f"resolved {own.report_id}: resolved (operator)" in done.stdout
    # the token may come from the environment as the agent's own setting does
    again = cli(
        "hangs",
        "resolve",
        own.report_id,
        "--format",
        "json",
        url=live.base_url,
        env=clean_env(COMMINSIGHT_AGENT_TOKEN=TOKEN),
    )
    body = json.loads(again.stdout)
    assert body["status"] == "resolved" and body["resolution_note"] == "restarted the job"
    resolved = [
        r["report_id"] for r in data("hangs", "--status", "resolved", url=live.base_url)["items"]
    ]
    assert own.report_id in resolved and long_named.report_id not in resolved
    everything = data("hangs", "list", "--status", "all", url=live.base_url)["items"]
    assert sorted(resolved) == sorted(
        r["report_id"] for r in everything if r["status"] == "resolved"
    )
    missing = cli("hangs", "resolve", "no-such-report", "--token", TOKEN, url=live.base_url)
    assert missing.returncode == 1 and "404 not_found" in missing.stderr


def test_incidents_show_and_resolve(agent):
    from comminsight.agent.hangs.incidents import group_reports

    live, _, report, _ = agent
    # a report of its own: resolving the incident resolves it, and the module's stay open
    own = msgspec.structs.replace(report, report_id=report.report_id + "-inc")
    live.call(live.service.hangs.save, own)
    (incident,) = live.call(
        live.service.incidents.update, group_reports([own]), {}, 1, own.detected_real_ns
    )
    shown = cli("incidents", "show", incident.incident_id, url=live.base_url)
    assert shown.returncode == 0 and "Evidence of the root" in shown.stdout
    listed = data("incidents", "list", "--status", "all", url=live.base_url)
    assert incident.incident_id in [i["incident_id"] for i in listed["items"]]
    done = cli(
        "incidents",
        "resolve",
        incident.incident_id,
        "--note",
        "rank 2 restarted",
        "--token",
        TOKEN,
        url=live.base_url,
    )
    assert done.returncode == 0, done.stderr
    assert f"{incident.incident_id} resolved (operator)" in done.stdout
    after = data("incidents", "show", incident.incident_id, url=live.base_url)
    assert after["incident"]["status"] == "resolved"
    assert after["incident"]["resolution_note"] == "rank 2 restarted"


def test_archive_status_and_flush(agent):
    live, _, _, _ = agent
    # the agent archived what was sealed at its start; a segment sealed since waits for a pass
    write_segment(live.service.home, 7, pid=4343)
    status = data("archive", url=live.base_url)
    assert status["provider"] == "fsspec" and status["url"] == redact_url(ARCHIVE_URL)
    table = cli("archive", "status", url=live.base_url)
    assert table.returncode == 0, table.stderr
    assert re.search(rf"│ destination\s+│ {re.escape(redact_url(ARCHIVE_URL))}\s+│", table.stdout)
    assert "pa55word" not in table.stdout
    refused = cli("archive", "flush", url=live.base_url)
    assert refused.returncode == 1 and "401" in refused.stderr and "--token" in refused.stderr
    flushed = cli("archive", "flush", "--wait", "--token", TOKEN, url=live.base_url)
    assert flushed.returncode == 0, flushed.stderr
    assert "flushed:" in flushed.stdout
    after = data("archive", url=live.base_url)
    assert after["pending_files"] == 0 and not after["flush_in_progress"]
    assert status["pending_files"] == 1
    assert after["uploaded_files_total"] == status["uploaded_files_total"] + 1


def test_flush_wait_draws_progress_only_on_a_terminal(agent):
    import argparse
    import io

    from rich.console import Console

    from comminsight.cli.archive import flush_cmd
    from comminsight.cli.client import run

    live, _, _, _ = agent
    for index, terminal in ((8, True), (9, False)):
        write_segment(live.service.home, index, pid=4343)
        text = io.StringIO()
        console = Console(file=text, force_terminal=terminal, width=100)
        args = argparse.Namespace(
            url=live.base_url, format="table", json=False, token=TOKEN, wait=True, wait_s=60.0
        )
        assert run(flush_cmd, args, console) == 0, text.getvalue()
        assert "flushed:" in text.getvalue()
        assert ("uploading" in text.getvalue()) is terminal
    assert data("archive", url=live.base_url)["pending_files"] == 0


def test_config_and_the_agent_show_the_archive_url_alike(agent, tmp_path):
    """One redaction: what `comminsight config` prints is what the agent's API says."""
    live, _, _, _ = agent
    served = data("archive", url=live.base_url)["url"]
    out = cli(
        "config",
        "--format",
        "plain",
        env=clean_env(COMMINSIGHT_HOME=str(tmp_path), COMMINSIGHT_COMMON_ARCHIVE_URL=ARCHIVE_URL),
    )
    assert f"COMMINSIGHT_COMMON_ARCHIVE_URL\t'{served}'\t" in out.stdout


def test_metrics_and_openapi(agent):
    live, _, _, _ = agent
    metrics = cli("metrics", url=live.base_url)
    assert metrics.returncode == 0 and "comminsight_ops_total" in metrics.stdout
    only = cli("metrics", "--grep", "build_info", url=live.base_url).stdout.splitlines()
    assert only and all("build_info" in line for line in only)
    document = data("openapi", url=live.base_url)
    assert document["openapi"].startswith("3.1") and "/api/v1/ops/recent" in document["paths"]
    # every format honoured: a sample a line, a list of samples, the operations as a table
    samples = data("metrics", "--grep", "build_info", url=live.base_url)
    assert samples and all("build_info" in s["name"] for s in samples)
    assert all(isinstance(s["labels"], dict) and "value" in s for s in samples)
    plain = cli("metrics", "--format", "plain", url=live.base_url).stdout.splitlines()
    assert plain[0] == "name\tlabels\tvalue"
    assert any(line.startswith("comminsight_ops_total\t") for line in plain)
    operations = cli("openapi", "--format", "plain", url=live.base_url).stdout.splitlines()
    assert "GET\t/api/v1/ops/recent\tlist_recent_ops" in "\n".join(operations)


# every operation of the API, and the command that performs it
OPERATION_COMMANDS = {
    "get_health": ["health"],
    "get_node": ["processes"],
    "list_nodes": ["nodes"],
    "list_communicators": ["comms"],
    "get_communicator": ["comms", "--id", "0000000000000001"],
    "list_inflight_ops": ["ops", "inflight"],
    "list_recent_ops": ["ops", "recent"],
    "list_steps": ["steps"],
    "list_job_steps": ["job-steps"],
    "list_hangs": ["hangs", "list"],
    "get_hang": ["hangs", "show", "x"],
    "resolve_hang": ["hangs", "resolve", "x"],
    "list_incidents": ["incidents", "list"],
    "get_incident": ["incidents", "show", "x"],
    "resolve_incident": ["incidents", "resolve", "x"],
    "get_archive_status": ["archive", "status"],
    "flush_archive": ["archive", "flush"],
    "get_openapi_document": ["openapi"],
    "get_metrics": ["metrics"],
}


def test_every_api_operation_has_a_command():
    document = yaml.safe_load(
        (ROOT / "protocols/agent-master-api/v1/agent-master-api.openapi.yaml").read_text()
    )
    operations = {
        op["operationId"]
        for path in document["paths"].values()
        for op in path.values()
        if isinstance(op, dict) and "operationId" in op
    }
    assert operations == set(OPERATION_COMMANDS), "an API operation without a CLI command"
    from comminsight.cli import main

    for command in OPERATION_COMMANDS.values():
        with pytest.raises(SystemExit) as e:
            main([*command, "--help"])
        assert e.value.code == 0, command


# ---- errors --------------------------------------------------------------------------------


def test_an_unreachable_agent_is_an_error_with_a_hint():
    port = free_port()  # nothing listens there now
    out = cli("status", url=f"http://127.0.0.1:{port}", process=True)
    assert out.returncode == 1 and out.stdout == ""
    assert f"cannot reach the agent at http://127.0.0.1:{port}" in out.stderr
    assert "hint:" in out.stderr and "comminsight-agent" in out.stderr
    no_traceback(out.stderr)
    # without --url: the hint names the setting the address came from
    local = cli(
        "hangs",
        env=clean_env(
            COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{port}", COMMINSIGHT_HOME="/nonexistent"
        ),
    )
    assert local.returncode == 1
    assert f"from COMMINSIGHT_AGENT_LISTEN=127.0.0.1:{port}" in local.stderr
    no_traceback(local.stderr)


@pytest.mark.parametrize("url", ["127.0.0.1:19102", "http://[::1", "ftp://127.0.0.1:21"])
def test_a_malformed_url_is_an_error_without_a_traceback(url):
    out = cli("status", url=url)
    assert out.returncode == 1 and "comminsight:" in out.stderr
    no_traceback(out.stderr)


def test_a_bad_cli_option_exits_2(agent):
    live, _, _, _ = agent
    out = cli("ops", "recent", "--limit", "many", url=live.base_url, process=True)
    assert out.returncode == 2 and "argument --limit" in out.stderr
    out = cli("hangs", "--format", "yaml", url=live.base_url)
    assert out.returncode == 2 and "argument --format" in out.stderr
    # a value argparse accepts but the API refuses: the agent's error, named
    out = cli("ops", "recent", "--limit", "0", url=live.base_url)
    assert out.returncode == 1 and "invalid_parameter" in out.stderr and "limit" in out.stderr


def test_the_readme_lists_every_agent_command():
    readme = (ROOT / "README.md").read_text()
    for command in {c[0] for c in OPERATION_COMMANDS.values()}:
        assert re.search(rf"comminsight {re.escape(command)}\b", readme), command
