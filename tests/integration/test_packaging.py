"""Deployment and packaging: `make install` into a prefix (the Agent in its own venv, the training
environment given Inject alone) and `make uninstall`; the deployment files under deploy/, each
checked by its own tool (systemd-analyze verify, kubernetes-validate, hadolint); the manylinux
wheel; LICENSE and NOTICE. Every tool check also runs on a broken copy, to show it can fail.

make builds into a DIST/BUILD of this module's (seeded_builds: from copies of this checkout's
current outputs), never into the dist/ and build/ other tests load.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
import yaml
from seeded_builds import ENGINE, HEADERS, INJECT_WHEEL, PLUGIN, WHEEL, seed

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd/comminsight-agent.service"
CONTAINERFILE = DEPLOY / "container/Containerfile"
K8S = DEPLOY / "kubernetes"
SERVICEMONITOR_SCHEMA = ROOT / "tests/data/k8s/servicemonitor-v1.subset.schema.json"
# the development venv's console scripts (kubernetes-validate, hadolint, auditwheel)
VENV_BIN = Path(sys.executable).parent
# The Kubernetes releases the manifests are checked against: the oldest and the newest whose
# schemas kubernetes-validate carries.
K8S_VERSIONS = ("1.25.0", "1.37.0")
VERSION = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
API_PORT = 19102


def _make_env() -> dict[str, str]:
    """The environment for a nested `make`: none of an outer make's flags or jobserver, and
    nothing that would let the installed programs find this checkout's packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(k, None)
    return env


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _make(*targets: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    done = _run(["make", "--no-print-directory", "-C", str(cwd), *targets], env=_make_env())
    assert done.returncode == 0, f"make {' '.join(targets)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[str, ...]:
    """make's arguments that put its outputs in directories of this module's (the wheels built
    once for install and wheel-manylinux); the venv exists when these run, and a make here
    never rebuilds it under the running tests."""
    top = tmp_path_factory.mktemp("outputs")
    dist, build = top / "dist", top / "build"
    seed(dist, build, PLUGIN, HEADERS, ENGINE, WHEEL, INJECT_WHEEL)
    return (f"DIST={dist}", f"BUILD={build}", "-o", ".venv/.installed")


def _training_venv(where: Path) -> Path:
    """A venv with pip (and nothing else) for a training environment; its python.

    pip is a copy of the one this interpreter runs, byte code included (ensurepip would install
    the same pip from its bundled wheel and byte-compile it: some 10 s of CPU)."""
    import pip

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = where / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert site.is_dir(), site
    ours = Path(pip.__file__).parent
    shutil.copytree(ours, site / "pip")
    (info,) = ours.parent.glob(f"pip-{pip.__version__}.dist-info")
    shutil.copytree(info, site / info.name)
    return where / "bin" / "python"


def _pip_names(python: Path) -> set[str]:
    done = _run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"])
    assert done.returncode == 0, done.stderr
    return {d["name"].lower().replace("_", "-") for d in json.loads(done.stdout)}


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


# ---- make install / make uninstall --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_install_keeps_the_agent_out_of_the_training_environment(tmp_path, outputs):
    prefix = tmp_path / "opt" / "comminsight"
    # something of the site's under the prefix before install (a home, say): never ours
    foreign = prefix / "inspector_logs" / "rank0.jsonl"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("{}\n")
    tpy = _training_venv(tmp_path / "train-venv")
    before = _pip_names(tpy)
    assert "pip" in before

    _make(*outputs, f"INSTALL_PREFIX={prefix}", f"TRAINING_PYTHON={tpy}", "install")

    # the training environment: Inject and nothing else
    assert _pip_names(tpy) - before == {"comminsight-inject"}
    assert _run([str(tpy), "-c", "import comminsight_inject"]).returncode == 0
    for agent_module in ("comminsight", "aiohttp", "numpy", "grpc"):
        probe = _run([str(tpy), "-c", f"import {agent_module}"], cwd=tmp_path, env=_make_env())
        assert probe.returncode != 0, f"{agent_module} importable in the training environment"

    # the Agent: its own venv, reached through the wrappers, from anywhere
    for wrapper in ("comminsight-agent", "comminsight"):
        path = prefix / "bin" / wrapper
        assert path.stat().st_mode & 0o777 == 0o755, path  # the Profiler refuses writable ones
        done = _run([str(path), "--help"], cwd=tmp_path, env=_make_env())
        assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stdout + done.stderr
    done = _run([str(prefix / "bin/comminsight-agent"), "--version"], cwd=tmp_path, env=_make_env())
    assert done.returncode == 0 and VERSION in done.stdout, done.stdout + done.stderr
    vpy = prefix / "lib/comminsight/venv/bin/python"
    where = _run([str(vpy), "-c", "import comminsight; print(comminsight.__file__)"], cwd=tmp_path)
    assert where.stdout.strip().startswith(str(prefix / "lib/comminsight/venv")), where.stdout
    pins = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (ROOT / "requirements/runtime.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert pins <= _pip_names(vpy)
    # the engine's C core from the installed package, not from this checkout's build/
    engine = _run([str(vpy), "-c", LOAD_ENGINE], cwd=tmp_path, env=_make_env())
    assert engine.returncode == 0, engine.stderr
    assert engine.stdout.strip().startswith(str(prefix / "lib/comminsight/venv")), engine.stdout

    assert (prefix / "lib/libnccl-profiler-comminsight.so").is_file()
    assert list((prefix / "share/comminsight").glob("comminsight_inject-*-py3-none-any.whl"))
    unit = prefix / "lib/systemd/system/comminsight-agent.service"
    assert f"ExecStart={prefix}/bin/comminsight-agent" in unit.read_text()
    _systemd_verify(unit)  # the installed unit, whose ExecStart exists

    _make(f"INSTALL_PREFIX={prefix}", "uninstall")
    assert _tree(prefix) == {"inspector_logs", "inspector_logs/rank0.jsonl"}
    assert _pip_names(tpy) == before


def _prefix_install():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import prefix_install
    finally:
        sys.path.pop(0)
    return prefix_install


def test_uninstall_keeps_an_edited_config_and_stays_inside_the_prefix(tmp_path):
    pi = _prefix_install()
    prefix = tmp_path / "p"
    inst = pi.Installation(prefix)
    inst.put(b"A=1\n", Path("etc/comminsight.conf"), 0o644, keep_if_changed=True)
    inst.put(b"#!/bin/sh\n", Path("bin/comminsight"), 0o755)
    inst.write_manifest()
    (prefix / "etc/comminsight.conf").write_text("A=2\n")  # the operator's edit
    pi.uninstall_prefix(prefix)
    assert _tree(prefix) == {"etc", "etc/comminsight.conf"}

    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    inst = pi.Installation(prefix)
    inst.put(b"x", Path("bin/x"), 0o755)
    inst.files.append({"path": "../outside.txt", "sha256": "0"})  # a forged manifest
    inst.write_manifest()
    with pytest.raises(pi.InstallError, match="outside"):
        pi.uninstall_prefix(prefix)
    assert outside.read_text() == "not ours" and (prefix / "bin/x").exists()  # nothing removed
    assert pi.main(["uninstall", "--prefix", str(tmp_path / "none")]) == 1  # no manifest


# ---- systemd ------------------------------------------------------------------------------


def _systemd_verify(unit: Path) -> None:
    """systemd-analyze verify exits 0 on a misspelt or misplaced key and only prints it: every
    line it prints about our unit is a failure."""
    done = _run(["systemd-analyze", "verify", str(unit)], env={**os.environ, "SYSTEMD_PAGER": ""})
    ours = [ln for ln in (done.stdout + done.stderr).splitlines() if unit.name in ln]
    assert done.returncode == 0 and not ours, f"{unit}:\n{done.stdout}{done.stderr}"


def _rendered_unit(tmp_path: Path, text: str) -> Path:
    """The unit as `make install` writes it, for a prefix whose agent is a stub."""
    prefix = tmp_path / "prefix"
    agent = prefix / "bin/comminsight-agent"
    agent.parent.mkdir(parents=True)
    agent.write_text("#!/bin/sh\nexit 0\n")
    agent.chmod(0o755)
    unit = tmp_path / "units" / UNIT.name
    unit.parent.mkdir()
    unit.write_text(text.replace("/opt/comminsight", str(prefix)))
    return unit


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")
def test_systemd_unit_verifies_and_keeps_dev_shm_and_home_reachable(tmp_path):
    text = UNIT.read_text()
    _systemd_verify(_rendered_unit(tmp_path, text))
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] not in "#;"
    )
    assert settings["ProtectSystem"] == "strict" and settings["NoNewPrivileges"] == "yes"
    assert "/opt/comminsight" in settings["ReadWritePaths"].split()  # the default home
    assert settings.get("PrivateDevices", "no") == "no"  # a private /dev hides /dev/shm
    assert settings["EnvironmentFile"].lstrip("-").startswith("/opt/comminsight/etc/")

    broken = _rendered_unit(tmp_path / "broken", text.replace("ProtectSystem=", "ProtectSytem="))
    with pytest.raises(AssertionError, match="ProtectSytem"):
        _systemd_verify(broken)


# ---- Kubernetes ---------------------------------------------------------------------------


def _kubernetes_validate(*files: Path) -> list[subprocess.CompletedProcess]:
    return [
        _run(
            [str(VENV_BIN / "kubernetes-validate"), "--strict", "--kubernetes-version", version]
            + [str(f) for f in files]
        )
        for version in K8S_VERSIONS
    ]


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def test_kubernetes_core_manifests_validate(tmp_path):
    core = [K8S / n for n in ("namespace.yaml", "daemonset.yaml", "service.yaml")]
    for done in _kubernetes_validate(*core):
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count(" passed for resource ") == len(core), done.stdout

    broken = tmp_path / "daemonset.yaml"
    broken.write_text((K8S / "daemonset.yaml").read_text().replace("hostPID:", "hostPid:"))
    for done in _kubernetes_validate(broken):
        assert done.returncode != 0 and "hostPid" in done.stdout + done.stderr


def test_servicemonitor_matches_the_crd_schema():
    schema = json.loads(SERVICEMONITOR_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    (monitor,) = _docs("servicemonitor.yaml")
    jsonschema.validate(monitor, schema, cls=jsonschema.Draft202012Validator)
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "15s"  # misspelt: must not pass
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, schema, cls=jsonschema.Draft202012Validator)


def test_kubernetes_manifests_fit_together():
    (ds,) = _docs("daemonset.yaml")
    (svc,) = _docs("service.yaml")
    (monitor,) = _docs("servicemonitor.yaml")
    (ns,) = _docs("namespace.yaml")
    pod = ds["spec"]["template"]
    spec = pod["spec"]
    (agent,) = spec["containers"]
    namespaces = {d["metadata"]["namespace"] for d in (ds, svc, monitor)}
    assert namespaces == {ns["metadata"]["name"]}
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {"http": API_PORT}
    assert {p["name"] for p in svc["spec"]["ports"]} >= {monitor["spec"]["endpoints"][0]["port"]}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(API_PORT)
    assert (
        annotations["prometheus.io/path"] == monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    )
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert agent[probe]["httpGet"]["path"] == "/api/v1/health", probe
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["COMMINSIGHT_AGENT_LISTEN"].endswith(f":{API_PORT}")
    mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths[mounts[env["COMMINSIGHT_HOME"]]] == env["COMMINSIGHT_HOME"]
    # the regions are files in each user's directory of the shared home, in the Agent's pod
    # and the training pods alike: no /dev/shm is shared with anyone
    (trainer,) = _docs("examples/training-pod.yaml")
    (training,) = trainer["spec"]["containers"]
    training_env = {e["name"]: e.get("value") for e in training["env"]}
    assert env["COMMINSIGHT_PROFILER_SHM_DIR"] == training_env["COMMINSIGHT_PROFILER_SHM_DIR"] == ""
    assert training_env["COMMINSIGHT_HOME"] == env["COMMINSIGHT_HOME"]
    for pod_spec in (spec, trainer["spec"]):
        paths = {v["hostPath"]["path"] for v in pod_spec["volumes"] if "hostPath" in v}
        assert "/dev/shm" not in paths and not pod_spec.get("hostIPC")
    # uid 0 with exactly the four capabilities the shared node Agent uses: read every user's
    # directory, act as the user for writes there (setfsuid/setfsgid), signal a hung rank
    sc = agent["securityContext"]
    seccomp = sc.get("seccompProfile") or spec["securityContext"]["seccompProfile"]
    assert seccomp["type"] == "RuntimeDefault"
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sorted(sc["capabilities"]["add"]) == ["DAC_OVERRIDE", "KILL", "SETGID", "SETUID"]
    assert agent["resources"]["requests"] and agent["resources"]["limits"]


# ---- the container image ------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined."""
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest))
            pending = ""
    return out


def _hadolint(path: Path) -> subprocess.CompletedProcess:
    return _run([str(VENV_BIN / "hadolint"), "--no-color", str(path)])


def test_containerfile_passes_hadolint(tmp_path):
    done = _hadolint(CONTAINERFILE)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "Containerfile"
    broken.write_text(CONTAINERFILE.read_text() + "RUN cd /tmp && ls\n")  # DL3003: use WORKDIR
    done = _hadolint(broken)
    assert done.returncode != 0 and "DL3003" in done.stdout + done.stderr


def test_containerfile_runs_the_agent_unprivileged_with_a_health_check():
    steps = _instructions(CONTAINERFILE.read_text())
    froms = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    assert len(froms) >= 2, "multi-stage: tools stay in the build stage"
    final = steps[froms[-1] :]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    build_stage = " ".join(args for word, args in steps[: froms[-1]] if word == "RUN")
    # the project's own `make install`: the Agent's venv from requirements/runtime.txt's pins
    assert re.search(r"\bmake\b.*\binstall\b", build_stage), build_stage
    assert "INSTALL_PREFIX=/opt/comminsight" in build_stage
    (health,) = [args for word, args in final if word == "HEALTHCHECK"]
    assert f"127.0.0.1:{API_PORT}/api/v1/health" in health
    exposed = " ".join(args for word, args in final if word == "EXPOSE").split()
    assert str(API_PORT) in exposed
    env = " ".join(args for word, args in final if word == "ENV")
    assert f"COMMINSIGHT_AGENT_LISTEN=0.0.0.0:{API_PORT}" in env
    (entry,) = [args for word, args in final if word == "ENTRYPOINT"]
    assert json.loads(entry) == ["/opt/comminsight/bin/comminsight-agent"]


# ---- the engine's C core and the wheels ---------------------------------------------------

LOAD_ENGINE = "import comminsight.semantic.native as n; n.lib(); print(n.LIBRARY)"


def test_a_checkout_builds_the_engine_core_under_build_and_loads_it_from_there():
    _make("build-engine")
    done = _run([sys.executable, "-c", LOAD_ENGINE], cwd=ROOT, env=_make_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ROOT / "build" / "engine" / "libciengine.so")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wheel_manylinux_is_tagged_and_carries_the_engine(outputs):
    _make(*outputs, "wheel-manylinux")
    dist = Path(outputs[0].removeprefix("DIST="))
    wheels = sorted(dist.glob(f"comminsight-{VERSION}-py3-none-manylinux*.whl"))
    assert len(wheels) == 1, wheels
    machine = platform.machine()
    platforms = wheels[0].name.removesuffix(".whl").split("-")[-1].split(".")
    assert any(re.fullmatch(rf"manylinux_2_\d+_{machine}", p) for p in platforms), wheels
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
        meta = whl.read(f"comminsight-{VERSION}.dist-info/WHEEL").decode()
    assert "comminsight/semantic/native/libciengine.so" in names
    tags = [ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Tag: ")]
    assert tags and all(re.fullmatch(rf"py3-none-manylinux\w*_{machine}", t) for t in tags), tags


# ---- LICENSE and NOTICE -------------------------------------------------------------------


def test_license_is_apache_2_and_notice_names_every_runtime_dependency():
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    notice = (ROOT / "NOTICE").read_text()
    missing = []
    for line in (ROOT / "requirements/runtime.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            if not re.search(rf"^\s+{re.escape(name)} {re.escape(version)}\s", notice, re.M):
                missing.append(line)
    assert not missing, f"NOTICE lacks (name version license) for: {missing}"
