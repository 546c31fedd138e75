"""Step recovery over Dask workers against the same recovery in one process: byte-identical
step files, the same problems, warnings and job cut, for jobs of several layouts (a pipeline
across two nodes, RL, ZeRO-3, a process driving two GPUs, NVIDIA Inspector files, damaged
segments), through the API and through `comminsight steps --workers/--scheduler`; and a
round that finds nothing its worker kept (another worker took the GPU) makes it again, round 4
asking the client for the label runs it was not handed."""

from __future__ import annotations

import io
import json
import os
import socket
import uuid

import pytest
import zstandard
from cli_in_process import run_cli
from log_files import decompress_all
from nvidia_logs import as_nvidia
from profiler_builds import builds

from comminsight.semantic import distributed_steps as ds
from comminsight.semantic.cut_order import plan_cut
from comminsight.semantic.dask_cluster import dask_client
from comminsight.semantic.log_input import list_job
from comminsight.semantic.offline import recover_steps
from comminsight.semantic.templates import load_templates
from comminsight.sim import SimConfig, run_simulation

pytestmark = pytest.mark.slow

ENV = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
    # several sealed segments a process (the compact form's ~350 bytes an op)
    ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", "24576"),
)
JOBS = {
    "megatron-2-nodes": dict(workload="megatron", ranks=8, tp=2, pp=2, nodes=2),
    "rl": dict(workload="rl", ranks=4),
    "zero3": dict(workload="zero", ranks=4, zero_stage=3),
    "two-gpus-a-process": dict(
        workload="ddp", ranks=4, ranks_per_process=2, cuda_runtime="sim", grad_accum=2
    ),
}


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def simulate(home, log_format: str = "compact", **shape):
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        steps=5,
        time_scale=0.01,
        env=(*ENV, ("COMMINSIGHT_PROFILER_LOG_FORMAT", log_format)),
        **shape,
    )
    sim = run_simulation(config)
    assert not sim.errors, sim.errors
    return home / "inspector_logs"


def files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def assert_same_recovery(logs, tmp_path, client):
    one = recover_steps(logs, out_dir=tmp_path / "one")
    many = ds.recover_steps_distributed(logs, client, out_dir=tmp_path / "many")
    expected = {n: b for n, b in files(tmp_path / "one").items() if not n.startswith("engine.")}
    assert expected and files(tmp_path / "many") == expected
    assert many.problems == one.problems
    assert many.warnings == one.warnings
    assert (many.cut.confidence, many.cut.reasons, many.cut.steps, many.cut.pivots) == (
        one.cut.confidence,
        one.cut.reasons,
        one.cut.steps,
        one.cut.pivots,
    )
    assert [(g.stream, g.ops, g.method, len(g.summaries)) for g in many.gpus] == [
        (g.stream, g.ops, g.method, len(g.summaries)) for g in one.gpus
    ]
    return one


@pytest.mark.parametrize("job", sorted(JOBS))
def test_workers_write_the_step_files_one_process_writes(job, tmp_path, client):
    logs = simulate(tmp_path / "home", **JOBS[job])
    one = assert_same_recovery(logs, tmp_path, client)
    assert sum(len(g.summaries) for g in one.gpus) > 0


def test_damaged_segments_are_named_alike_and_the_rest_recovered_alike(tmp_path, client):
    logs = simulate(tmp_path / "home", workload="tp-pp-dp", ranks=8)
    decompress_all(logs)
    segments = sorted(logs.glob("*.jsonl"))
    segments[3].write_bytes(segments[3].read_bytes()[:-200])  # its seal cut off
    segments[-2].unlink()  # a missing segment
    with segments[7].open("ab") as f:
        f.write(b"not a line\n")
    one = assert_same_recovery(logs, tmp_path, client)
    assert len(one.problems) >= 2


def test_nvidia_inspector_files_are_read_alike(tmp_path, client):
    logs = simulate(tmp_path / "home", "inspector", workload="ddp", ranks=4)
    nvidia = tmp_path / "nvidia"
    as_nvidia(logs, nvidia, lines_per_dump=20)
    assert_same_recovery(nvidia, tmp_path, client)


def test_a_round_whose_worker_kept_nothing_makes_it_again(tmp_path):
    """Rounds run here, in this process: once with what each round keeps, once under a run
    that kept nothing (every round makes what it needs from the logs), the same cut and the
    same step files."""
    logs = simulate(tmp_path / "home", workload="megatron", ranks=8, tp=2, pp=2)
    processes, _ = list_job(logs)
    kept, fresh = uuid.uuid4().hex, uuid.uuid4().hex
    refs, gpus = [], []
    for process in processes:
        described, _ = ds.describe_process(kept, process)
        first = len(refs)
        refs += [ds.GpuRef(first + k, process, k, g.stream) for k, g in enumerate(described)]
        gpus += described
    comms = ds.numbered_comms(gpus)
    templates = load_templates("")
    facts = [ds.gpu_facts(kept, ref, comms) for ref in refs]
    plan = plan_cut([f.instances for f in facts], [f.pivot for f in facts])
    try:
        for run in (kept, fresh):  # fresh: nothing kept, every round made from the logs
            cuts = [None] * len(refs)
            for step in plan:
                cuts[step.gpu] = ds.gpu_cut(
                    run, refs[step.gpu], comms, step, *[cuts[p] for p in step.providers]
                )
            if run == kept:
                first = cuts
            else:
                assert [c.runs.label.tolist() for c in cuts] == [
                    c.runs.label.tolist() for c in first
                ]
                assert [c.outcome for c in cuts] == [c.outcome for c in first]
        verdict = ds.job_verdict(plan, [c.outcome for c in first])
        steps = {s.gpu: s for s in plan}
        assert any(s.providers for s in plan)
        placed = {}
        for run in (kept, uuid.uuid4().hex):
            out = tmp_path / f"steps-{run}"
            for ref in refs:
                step = steps[ref.index]
                args = (run, ref, comms, verdict, str(out), templates, step, True)
                # as the client first asks: no label runs handed, the cut kept is placed
                answer = ds.gpu_steps(*args)
                if run != kept and step.providers:
                    assert answer is None  # nothing kept: it asks for its providers' runs
                    answer = ds.gpu_steps(*args, *[first[p] for p in step.providers])
                assert answer is not None
            placed[run] = files(out)
        assert len(set(map(repr, placed.values()))) == 1
    finally:
        for run in (kept, fresh):
            ds.forget_run(run)


def test_gpus_placed_where_their_cut_was_not_kept_are_cut_again_alike(tmp_path, monkeypatch):
    """Workers in this process that find no cut kept when placing Steps (as where another
    worker cut the GPU): the client hands those GPUs their providers' runs, and the step
    files are still one process's."""
    distributed = pytest.importorskip("distributed")
    load = ds._load
    asked = []

    def no_cut_kept(run, stream, stage):
        if stage == "cut":
            asked.append(stream)
            return None
        return load(run, stream, stage)

    monkeypatch.setattr(ds, "_load", no_cut_kept)
    logs = simulate(tmp_path / "home", workload="megatron", ranks=8, tp=2, pp=2)
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with cluster, distributed.Client(cluster) as client:
        assert_same_recovery(logs, tmp_path, client)
    assert len(asked) > len(set(asked))  # asked once without the runs, once with them


def _profiles(dask_worker) -> bool:
    return "profile" in dask_worker.periodic_callbacks


def test_the_workers_a_run_starts_keep_no_profile():
    """Dask's profiler keeps a call tree a second on each worker, which grows a worker with
    the job's length: the workers a run starts (and the bench's) go without it."""
    pytest.importorskip("distributed")
    with dask_client(2, None) as client:
        assert list(client.run(_profiles).values()) == [False, False]


def test_the_command_over_workers_answers_as_in_one_process(tmp_path, client):
    logs = simulate(tmp_path / "home", workload="megatron", ranks=8, tp=2, pp=2)
    answers = {}
    for how, options in {
        "alone": ["--workers", "0"],
        "workers": ["--workers", "2"],
        "scheduler": ["--scheduler", client.scheduler.address],
    }.items():
        said = {}
        for form in ("json", "plain"):
            out = tmp_path / f"{how}-{form}"
            done = run_cli(
                ["steps", str(logs), "--out", str(out), "--format", form, *options],
                {"COLUMNS": "200"},
            )
            assert done.returncode == 0, done.stderr
            said[form] = done.stdout.replace(str(out), "OUT")
        written = {n: b for n, b in files(out).items() if not n.startswith("engine.")}
        answers[how] = (json.loads(said["json"]), said["plain"], written)
    assert answers["workers"] == answers["alone"] == answers["scheduler"]
    assert answers["alone"][0]["total"] > 0 and "step summaries in OUT/" in answers["alone"][1]


def test_logs_at_a_url_laid_out_as_the_archive_keeps_them_are_read_where_they_lie(tmp_path, client):
    """The segments under an fsspec URL, each node's in `<node>/inspector_logs/` as the
    archive keeps them (some compressed as a stream, as the archive does, some as the
    Profiler does, some not at all), with other files beside them: the same Steps as from
    one local directory."""
    logs = simulate(tmp_path / "home", workload="megatron", ranks=8, tp=2, pp=2)
    decompress_all(logs)
    archive = tmp_path / "archive"
    for i, path in enumerate(sorted(logs.glob("*.jsonl"))):
        node = archive / f"node-{int(path.name.split('-')[2]) % 2}" / "inspector_logs"
        node.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        if i % 3 == 0:  # as the archive compresses: a stream, no size in the frame
            out = io.BytesIO()
            zstandard.ZstdCompressor(level=3).copy_stream(io.BytesIO(data), out)
            (node / f"{path.name}.zst").write_bytes(out.getvalue())
        elif i % 3 == 1:  # as the Profiler compresses
            (node / f"{path.name}.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
        else:
            (node / path.name).write_bytes(data)
    # the archive keeps the live engine's step files beside: named like segments, not read
    steps = archive / "node-0" / "semantics" / "step"
    steps.mkdir(parents=True)
    (steps / "live-node-0-4242-1796000000000000000.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(b'{"step_index":0}\n')
    )
    one = recover_steps(logs, out_dir=tmp_path / "one")
    url = f"file://{archive}"
    many = ds.recover_steps_distributed(url, client, out_dir=tmp_path / "many")
    expected = {n: b for n, b in files(tmp_path / "one").items() if not n.startswith("engine.")}
    assert files(tmp_path / "many") == expected and many.problems == one.problems == []
    done = run_cli(["steps", url, "--out", str(tmp_path / "cli"), "--workers", "2"], {})
    assert done.returncode == 0, done.stderr
    assert {n: b for n, b in files(tmp_path / "cli").items()} == expected


def test_logs_at_a_url_need_workers_and_a_place_for_the_summaries(tmp_path):
    url = f"file://{tmp_path}"
    done = run_cli(["steps", url, "--workers", "2"], {})
    assert done.returncode == 1 and "--out" in done.stderr
    done = run_cli(["steps", url, "--out", str(tmp_path / "o"), "--workers", "0"], {})
    assert done.returncode == 2 and "read by workers" in done.stderr


def test_a_stream_whose_name_is_not_utf8_is_read_alike(tmp_path, client):
    """A file name is bytes: a host with a byte that is not UTF-8 gives a stream name with
    surrogates, which the workers keep their files by all the same."""
    # a job whose cut gives reasons from its ops' order alone, not their timing (Steps repeat
    # on one of its communicators), which go into the summaries (they name GPUs by rank)
    logs = simulate(tmp_path / "home", workload="rl", ranks=4)
    odd = os.fsdecode(b"n\xffde")
    for path in logs.iterdir():
        path.rename(path.with_name(path.name.replace("-vm-", f"-{odd}-", 1)))
    one = assert_same_recovery(logs, tmp_path, client)
    assert one.cut.reasons
    for reason in one.cut.reasons:
        assert "\udcff" not in reason
        reason.encode("utf-8")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:9"], "not both"),
        (["--workers", "2", "--checkpoint-every-ops", "10"], "keeps no checkpoint"),
    ],
    ids=["workers-and-scheduler", "checkpoints-over-workers"],
)
def test_options_that_cannot_go_together_are_refused(options, said, tmp_path):
    done = run_cli(["steps", str(tmp_path), "--out", str(tmp_path / "o"), *options], {})
    assert done.returncode == 2 and said in done.stderr


def test_a_scheduler_file_that_says_nothing_is_named(tmp_path):
    bad = tmp_path / "scheduler.json"
    bad.write_text("not json")
    done = run_cli(
        ["steps", str(tmp_path), "--out", str(tmp_path / "o"), "--scheduler", str(bad)], {}
    )
    assert done.returncode == 1 and f"cannot use the Dask scheduler {bad}" in done.stderr


def test_a_negative_number_of_workers_is_refused(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    done = run_cli(["steps", str(logs), "--workers", "-1"], {})
    assert done.returncode == 2 and "--workers -1" in done.stderr


def test_worker_options_do_not_apply_to_the_agent():
    done = run_cli(["steps", "--workers", "2"], {})
    assert done.returncode == 2 and "--workers" in done.stderr


def test_logs_in_an_s3_bucket_are_read_where_they_lie(tmp_path):
    """`comminsight steps s3://bucket/job --workers 2` against an S3 endpoint (moto's server on
    this machine, reached through s3fs as any bucket is): the archive's layout, compressed
    and plain segments, gives the step files one process writes from a local directory."""
    import boto3  # dev dependencies, as moto
    from moto.server import ThreadedMotoServer

    logs = simulate(tmp_path / "home", workload="tp-pp-dp", ranks=4)
    one = recover_steps(logs, out_dir=tmp_path / "one")
    expected = {n: b for n, b in files(tmp_path / "one").items() if not n.startswith("engine.")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        }
        s3 = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        s3.create_bucket(Bucket="runs")
        for path in sorted(p for p in logs.iterdir() if p.is_file()):
            node = f"node-{int(path.name.split('-')[2]) % 2}"
            s3.put_object(
                Bucket="runs",
                Key=f"job-7/{node}/inspector_logs/{path.name}",
                Body=path.read_bytes(),
            )
        done = run_cli(
            ["steps", "s3://runs/job-7", "--out", str(tmp_path / "s3"), "--workers", "2"], env
        )
        assert done.returncode == 0, done.stderr
        assert files(tmp_path / "s3") == expected and one.problems == []
    finally:
        server.stop()
