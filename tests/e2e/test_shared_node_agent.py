"""One node Agent, run by root, for the jobs of several users at once: each user's simulated job
goes through the real plugin into their own directory of the shared home, every op of every
job arrives, each user sees only their own job over the Agent's socket, root sees all, and
what one user plants in another's directory is refused and named.

Users are numbers no account has (the kernel needs none): the simulator runs each job's ranks
as that uid (sim --run-as), and `comminsight` runs as that uid through setpriv, keeping only
CAP_DAC_READ_SEARCH so that it can read this machine's Python under /root; what it is shown
is the Agent's decision, by the uid the kernel gives for its socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from agent_processes import agent_process
from ports import free_port
from waiting import wait_until

from comminsight_gen.abi import shm_v1

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (users are made by setuid) and setpriv",
)

ALICE, BOB = 41001, 41002
TOKEN = "node-token"
DEADLINE_S = 240.0  # a loaded machine is slow, not stuck


@pytest.fixture
def shared_root():
    """A directory every user can enter (pytest's own tmp directories are root's, 0700)."""
    root = Path(tempfile.mkdtemp(prefix="ci-shared-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def start_agent(home: Path, log: Path, **env) -> subprocess.Popen:
    """A real node Agent whose log goes to a file: a hostile user's input makes it log a lot,
    and a pipe nobody reads until the end would stop it when full."""
    listen = env.setdefault("COMMINSIGHT_AGENT_LISTEN", f"127.0.0.1:{free_port()}")
    with open(log, "w") as out:
        proc = agent_process(home, **env, stdout=out, stderr=subprocess.STDOUT)
    wait_until(lambda: (home / "agent.sock").exists() or proc.poll() is not None, DEADLINE_S)
    assert proc.poll() is None, log.read_text()
    proc.listen = listen
    return proc


def stop_agent(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def node_agent(shared_root):
    home = shared_root / "home"
    proc = start_agent(
        home,
        shared_root / "agent.log",
        COMMINSIGHT_AGENT_SHARED_HOME="1",
        COMMINSIGHT_AGENT_TOKEN=TOKEN,
    )
    try:
        yield home, proc.listen
    finally:
        stop_agent(proc)


def run_job(plugin: Path, home: Path, out: Path, uid: int, job: str, seed: int, **extra):
    """A simulated job of `uid` (two ranks), its ranks' environment naming the job (and, as
    srun sets them, its SLURM step and array index)."""
    out.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "comminsight.cli",
        "sim",
        "--plugin",
        str(plugin),
        "--home",
        str(home),
        "--out",
        str(out),
        "--ranks",
        "2",
        "--steps",
        str(extra.pop("steps", 6)),
        "--seed",
        str(seed),
        "--run-as",
        str(uid),
        "--json",
        "--env",
        f"COMMINSIGHT_JOB_ID={job}",
        "--env",
        "COMMINSIGHT_AGENT_AUTOSTART=0",
        *(f"--env={k}={v}" for k, v in extra.pop("env", {}).items()),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    return subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def issued_ops(out: Path) -> int:
    """The collectives and point-to-point ops the simulator's ranks issued (ground truth)."""
    ops = 0
    for truth in out.glob("rank-*.jsonl"):
        for line in truth.read_text().splitlines():
            ops += json.loads(line).get("kind") == "op"
    return ops


def finished(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, stderr
    return json.loads(stdout)


def shell_as(uid: int, script: str) -> list[str]:
    """The command line that runs a shell script as `uid`, with no privilege of root's."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c", script]


def as_user(uid: int, *args: str, home: Path) -> subprocess.CompletedProcess:
    """`comminsight ARGS` run by `uid` (see the module's note on its one capability)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env |= {"COMMINSIGHT_HOME": str(home), "COLUMNS": "250", "HOME": "/tmp"}
    command = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        sys.executable,
        "-m",
        "comminsight.cli",
        *args,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def ops_by_job(listen: str) -> dict[str, float]:
    """comminsight_ops summed by job_id, from the Agent's /metrics over TCP."""
    text = httpx.get(f"http://{listen}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("comminsight_ops_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        job = labels.split('job_id="', 1)[1].split('"', 1)[0]
        totals[job] = totals.get(job, 0.0) + float(value)
    return totals


def test_two_users_jobs_arrive_whole_and_each_user_sees_only_their_own(
    plugin, shared_root, node_agent
):
    home, listen = node_agent
    jobs = {
        ALICE: ("job-alice", shared_root / "out-alice", 11),
        BOB: ("job-bob", shared_root / "out-bob", 12),
    }
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3", "SLURM_ARRAY_TASK_ID": "7"}
    running = [
        run_job(plugin, home, out, uid, job, seed, env=slurm if uid == ALICE else {})
        for uid, (job, out, seed) in jobs.items()
    ]
    summaries = [finished(p) for p in running]
    assert all(s["ok"] for s in summaries)

    issued = {job: issued_ops(out) for job, out, _ in jobs.values()}
    assert all(n > 0 for n in issued.values()), issued
    wait_until(lambda: ops_by_job(listen) == issued, DEADLINE_S, lambda: f"{ops_by_job(listen)}")

    # each user's directory is theirs; the Agent left nothing of its own there
    for uid in jobs:
        mine = home / "users" / str(uid)
        assert mine.stat().st_uid == uid and mine.stat().st_mode & 0o077 == 0
        assert all(p.stat().st_uid == uid for p in mine.rglob("*"))

    for uid, (job, _, _) in jobs.items():
        shown = as_user(uid, "processes", "--json", home=home)
        assert shown.returncode == 0, shown.stderr
        processes = json.loads(shown.stdout)["processes"]
        assert processes and {p["job_id"] for p in processes} == {job}
        assert all(f"/users/{uid}/" in p["shm_file"] for p in processes)
        comms = json.loads(as_user(uid, "comms", "--json", home=home).stdout)
        assert {c["comm_id"] for c in comms} == {i for p in processes for i in p["comm_ids"]}
        # the whole node's series are not one user's to read
        refused = as_user(uid, "metrics", home=home)
        assert refused.returncode == 1 and "/metrics" in refused.stderr

    # the SLURM step and array task of Alice's job label its series
    text = httpx.get(f"http://{listen}/metrics", timeout=10).text
    alice_series = [line for line in text.splitlines() if 'job_id="job-alice"' in line]
    assert alice_series and all('step_id="3"' in line for line in alice_series)
    assert all('array_index="7"' in line for line in alice_series)

    # over TCP in a shared home every read but /metrics and health needs the token: a local
    # user would otherwise read everyone's past the socket's per-user view
    assert httpx.get(f"http://{listen}/api/v1/node", timeout=10).status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    every = httpx.get(f"http://{listen}/api/v1/node", headers=bearer, timeout=10).json()
    every = every["processes"]
    assert {p["job_id"] for p in every} == {"job-alice", "job-bob"}
    root_view = subprocess.run(
        [sys.executable, "-m", "comminsight.cli", "processes", "--json"],
        env={**os.environ, "COMMINSIGHT_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert {p["job_id"] for p in json.loads(root_view.stdout)["processes"]} == {
        "job-alice",
        "job-bob",
    }


def test_a_region_one_user_plants_in_anothers_directory_is_refused_and_named(
    plugin, shared_root, node_agent
):
    home, listen = node_agent
    out = shared_root / "out-bob"
    finished(run_job(plugin, home, out, BOB, "job-bob", 21, steps=2))
    bob_shms = home / "users" / str(BOB) / "shms"
    # Bob left his shms/ open to everyone (a mistake); Alice puts a region of hers there
    os.chmod(bob_shms.parent, 0o711)
    os.chmod(bob_shms, 0o777)
    planted = bob_shms / "planted.shm"
    header = bytes(shm_v1.HEADER_DTYPE.itemsize)
    subprocess.run(shell_as(ALICE, f"head -c {len(header)} /dev/zero > {planted}"), check=True)
    assert planted.stat().st_uid == ALICE

    def refusal():
        reasons = httpx.get(f"http://{listen}/api/v1/health", timeout=10).json()["reasons"]
        return next((r for r in reasons if "planted.shm" in r), None)

    reason = wait_until(refusal, DEADLINE_S, "the planted region's refusal")
    assert f"uid {ALICE}" in reason and f"uid {BOB}" in reason
    # moved aside in Bob's own directory, as Bob (the Agent writes there as its user)
    quarantined = bob_shms / "quarantine" / "planted.shm"
    wait_until(quarantined.exists, DEADLINE_S, "the quarantine")
    assert (bob_shms / "quarantine").stat().st_uid == BOB


def test_an_entry_squatted_under_anothers_uid_is_refused_by_agent_and_profiler(
    plugin, shared_root, node_agent
):
    home, listen = node_agent
    # Alice makes users/<Bob's uid> before Bob ever ran: hers, so nothing in it is Bob's
    subprocess.run(shell_as(ALICE, f"mkdir -m 0700 {home / 'users' / str(BOB)}"), check=True)

    def named():
        reasons = httpx.get(f"http://{listen}/api/v1/health", timeout=10).json()["reasons"]
        return next((r for r in reasons if f"users/{BOB} refused" in r), None)

    reason = wait_until(named, DEADLINE_S, "the squatted entry named in health")
    assert f"owned by uid {ALICE}" in reason
    # Bob's Profiler will not write into it either: his job still runs, privately
    out = shared_root / "out-bob"
    summary = finished(run_job(plugin, home, out, BOB, "job-bob", 31, steps=2))
    assert summary["ok"]
    logs = "".join(p.read_text() for p in out.glob("rank-*.log"))
    assert f"users/{BOB}" in logs and "owned by uid" in logs
    assert not any((home / "users" / str(BOB)).iterdir())


def test_one_users_flood_neither_blocks_nor_loses_anothers_job(plugin, shared_root, node_agent):
    home, listen = node_agent
    alice = home / "users" / str(ALICE)
    # Alice's directory, full of junk regions and garbage in her FIFO, as a hostile user can
    flood = (
        f"mkdir -p {alice}/shms {alice}/fifos && "
        f"for i in $(seq 1 300); do head -c 64 /dev/urandom > {alice}/shms/junk-$i.shm; done && "
        f"mkfifo -m 0600 {alice}/fifos/hang-events.fifo"
    )
    subprocess.run(shell_as(ALICE, flood), check=True)
    writer = subprocess.Popen(
        shell_as(ALICE, f"exec head -c 50000000 /dev/urandom > {alice}/fifos/hang-events.fifo")
    )
    try:
        out = shared_root / "out-bob"
        summary = finished(run_job(plugin, home, out, BOB, "job-bob", 41))
        assert summary["ok"]
        issued = issued_ops(out)
        wait_until(
            lambda: ops_by_job(listen).get("job-bob") == issued,
            DEADLINE_S,
            lambda: f"Bob's ops at the Agent: {ops_by_job(listen)}, issued {issued}",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            writer.kill()
        writer.wait()
    health = httpx.get(f"http://{listen}/api/v1/health", timeout=10).json()
    assert any("junk-" in r for r in health["reasons"])


def test_the_socket_is_open_to_users_in_a_shared_home_and_private_otherwise(tmp_path, node_agent):
    home, _ = node_agent
    assert (home / "agent.sock").stat().st_mode & 0o777 == 0o666
    assert (home / "users").stat().st_mode & 0o7777 == 0o1733
    own = tmp_path / "own"
    proc = start_agent(own, tmp_path / "agent.log")
    try:
        assert (own / "agent.sock").stat().st_mode & 0o777 == 0o600
        assert not (own / "users").exists()
    finally:
        stop_agent(proc)


def test_a_port_a_user_took_first_leaves_the_agent_serving_on_its_socket(shared_root):
    home = shared_root / "home"
    squatter = socket.create_server(("127.0.0.1", 0))  # whoever bound the Agent's port first
    port = squatter.getsockname()[1]
    try:
        proc = start_agent(
            home,
            shared_root / "agent.log",
            COMMINSIGHT_AGENT_SHARED_HOME="1",
            COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{port}",
        )
        try:
            health = subprocess.run(
                [sys.executable, "-m", "comminsight.cli", "health", "--json"],
                env={**os.environ, "COMMINSIGHT_HOME": str(home)},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert health.returncode == 0, health.stderr
            reasons = json.loads(health.stdout)["reasons"]
            assert any("TCP listener is off" in r and str(port) in r for r in reasons)
        finally:
            stop_agent(proc)
    finally:
        squatter.close()
