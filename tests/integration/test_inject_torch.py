"""Inject with real PyTorch (the CPU build, gloo): the built wheel's .pth at a real interpreter
start, groups made by init_process_group, new_group, new_subgroups and a 2-D DeviceMesh in a
2-rank job, their names in metadata/, step markers (on by default) and the off switches."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from ports import free_port

# torch is imported by the jobs this module starts, never here: importing it costs each pytest
# process that collects the module seconds of CPU
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    pytest.mark.slow,  # three 2-rank torch jobs
]
TORCH_VERSION = importlib.metadata.version("torch") if importlib.util.find_spec("torch") else None

ROOT = Path(__file__).resolve().parents[2]

# One rank of a 2-rank job, started as a launcher starts each rank (torchrun: a process of its
# own per rank, RANK and WORLD_SIZE in its environment)
JOB = textwrap.dedent(
    """
    import os, json
    import torch, torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch.distributed.device_mesh import init_device_mesh

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    pair = dist.new_group([0, 1], group_desc="tp_pair")
    dist.new_group([0])  # no description: torch's "undefined"
    dist.new_subgroups(group_size=1, group_desc="solo")
    init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))
    t = torch.ones(2)
    dist.all_reduce(t, group=pair)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(t).sum().backward()
        opt.step()
    expected = {}
    for pg in c10d._world.pg_names:
        expected[f"{pg.group_desc}:{pg.group_name}"] = dist.get_process_group_ranks(pg)
    with open(f"expected.rank{rank}.json", "w") as f:
        json.dump(expected, f)
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def inject_env(tmp_path_factory) -> Path:
    """A fresh virtual environment whose site-packages holds the built wheel (unpacked, as
    pip installs a pure wheel) and a path line to the dev venv's packages (for torch), so that
    the interpreter's own start-up processes comminsight_inject.pth."""
    subprocess.run(["make", "-s", "build-inject"], cwd=ROOT, check=True, capture_output=True)
    from comminsight.inject import __version__

    wheel = ROOT / "dist" / f"comminsight_inject-{__version__}-py3-none-any.whl"
    env_dir = tmp_path_factory.mktemp("inject-venv")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    Path(site, "zz_dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def clean_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def test_pth_registers_the_hook_at_start_and_imports_no_torch(inject_env):
    code = (
        "import sys; from comminsight_inject import startup; "
        "print(any(isinstance(f, startup.TorchDistributedHook) for f in sys.meta_path), "
        "'torch' in sys.modules)"
    )
    out = subprocess.run(
        [inject_env, "-c", code], capture_output=True, text=True, env=clean_env(), check=True
    )
    assert out.stdout.split() == ["True", "False"]
    assert out.stderr == ""


def run_job(python: Path, tmp_path: Path, **env) -> tuple[dict, list[dict]]:
    home = tmp_path / "home"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [python, str(script)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(
                COMMINSIGHT_HOME=str(home),
                RANK=str(rank),
                WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                **env,
            ),
            cwd=tmp_path,
        )
        for rank in (0, 1)
    ]
    stderr = ""
    for proc in ranks:
        try:
            _, err = proc.communicate(timeout=240)
        finally:
            proc.kill()
        stderr += err
        assert proc.returncode == 0, err[-3000:]
    expected = {
        int(p.stem.split("rank")[1]): json.loads(p.read_text())
        for p in tmp_path.glob("expected.rank*.json")
    }
    lines = []
    for path in sorted((home / "metadata" / "inject").glob("*.jsonl")):
        lines += [json.loads(x) for x in path.read_text().splitlines()]
    return {"expected": expected, "stderr": stderr}, lines


def test_every_group_of_every_rank_gets_torchs_own_name(inject_env, tmp_path):
    result, lines = run_job(inject_env, tmp_path)  # step markers on by default
    assert "comminsight-inject" not in result["stderr"]
    groups = [x for x in lines if x["kind"] == "group"]
    for rank, expected in result["expected"].items():
        mine = {g["comm_name"]: g for g in groups if g["rank"] == rank}
        assert set(mine) == set(expected), rank  # one line per group the rank is in
        for name, ranks in expected.items():
            assert mine[name]["global_ranks"] == ranks
            assert mine[name]["naming"] == "no-nccl"  # gloo: computed, recorded, no NCCL comm
    names = {g["comm_name"] for g in groups}
    assert {"default_pg:0", "tp_pair:1", "undefined:2"} <= names
    # DeviceMesh (2, 1): "dp" spans the world (torch reuses the default group), "tp" is new
    assert any(n.startswith("solo:") for n in names)
    assert any(n.startswith("mesh_tp:") for n in names)
    apis = {g["api"] for g in groups}
    assert apis == {"new_process_group"}
    processes = [x for x in lines if x["kind"] == "process"]
    assert len(processes) == 2 and all(p["torch_version"] == TORCH_VERSION for p in processes)
    assert all(p["step_markers"] is True for p in processes)
    steps = [x for x in lines if x["kind"] == "step"]
    assert sorted((s["rank"], s["index"]) for s in steps) == [
        (r, i) for r in (0, 1) for i in range(3)
    ]
    for rank in (0, 1):
        times = [s["mono_ns"] for s in steps if s["rank"] == rank]
        assert times == sorted(times)


def test_step_markers_off_writes_no_step_and_says_so(inject_env, tmp_path):
    result, lines = run_job(inject_env, tmp_path, COMMINSIGHT_INJECT_STEP_MARKERS="0")
    assert "comminsight-inject" not in result["stderr"]
    assert [x for x in lines if x["kind"] == "step"] == []
    processes = [x for x in lines if x["kind"] == "process"]
    assert len(processes) == 2 and all(p["step_markers"] is False for p in processes)


def test_disabled_inject_leaves_no_trace(inject_env, tmp_path):
    result, lines = run_job(inject_env, tmp_path, COMMINSIGHT_INJECT_DISABLE="1")
    assert lines == [] and "comminsight-inject" not in result["stderr"]
    assert result["expected"][0]["tp_pair:1"] == [0, 1]  # the job itself ran as usual
