"""A process's Kubernetes pod, namespace and container, read from its cgroup file and the
kubelet's log tree (workload_identity), on fake /proc and /var/log trees.

The cgroup lines are real ones, quoted where they were published (issues, tests and notes of
projects that parse them), for each cgroup version, driver, QoS class and runtime."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from comminsight.agent.state.workload_identity import (
    MAX_CGROUP_BYTES,
    PodIds,
    Workload,
    WorkloadLookup,
    container_of_log_link,
    pod_ids_of_cgroup,
    pod_of_log_dir,
    read_pod_ids,
)

# --- real cgroup files ------------------------------------------------------------------------

# cgroup v1, cgroupfs driver, besteffort, docker: the Datadog container-tagging RFC's example
# (quoted by dd-trace-java's ContainerInfoTest and Qard/container-info)
_DD_POD = "3d274242-8ee0-11e9-a8a6-1e68d864ef1a"
_DD_CTR = "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1"
V1_CGROUPFS_BESTEFFORT = "".join(
    f"{n}:{controllers}:/kubepods/besteffort/pod{_DD_POD}/{_DD_CTR}\n"
    for n, controllers in [
        (11, "perf_event"),
        (10, "pids"),
        (9, "memory"),
        (8, "cpu,cpuacct"),
        (7, "blkio"),
        (6, "cpuset"),
        (5, "devices"),
        (4, "freezer"),
        (3, "net_cls,net_prio"),
        (2, "hugetlb"),
        (1, "name=systemd"),
    ]
)

# cgroup v1 lines of each driver, QoS class and runtime, as published
REAL_LINES = [
    pytest.param(
        # cgroupfs, burstable (Mark Betz, "Understanding resource limits in kubernetes: memory")
        "6:memory:/kubepods/burstable/podfbc202d3-da21-11e8-ab5e-42010a80014b/"
        "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574",
        PodIds(
            "fbc202d3-da21-11e8-ab5e-42010a80014b",
            "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574",
        ),
        id="v1-cgroupfs-burstable",
    ),
    pytest.param(
        # cgroupfs, guaranteed: no QoS level (elastic apm-agent-nodejs container-info fixture)
        "10:cpuset:/kubepods/pod5eadac96-ab58-11ea-b82b-0242ac110009/"
        "7fe41c8a2d1da09420117894f11dd91f6c3a44dfeb7d125dc594bd53468861df",
        PodIds(
            "5eadac96-ab58-11ea-b82b-0242ac110009",
            "7fe41c8a2d1da09420117894f11dd91f6c3a44dfeb7d125dc594bd53468861df",
        ),
        id="v1-cgroupfs-guaranteed",
    ),
    pytest.param(
        # cgroupfs under a kubepods cgroup root (same fixture)
        "12:pids:/kubepods/kubepods/besteffort/pod0e886e9a-3879-45f9-b44d-86ef9df03224/"
        "244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4",
        PodIds(
            "0e886e9a-3879-45f9-b44d-86ef9df03224",
            "244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4",
        ),
        id="v1-cgroupfs-nested-kubepods",
    ),
    pytest.param(
        # systemd, guaranteed, docker (same fixture)
        "9:freezer:/kubepods.slice/kubepods-pod22949dce_fd8b_11ea_8ede_98f2b32c645c.slice/"
        "docker-b15a5bdedd2e7645c3be271364324321b908314e4c77857bbfd32a041148c07f.scope",
        PodIds(
            "22949dce-fd8b-11ea-8ede-98f2b32c645c",
            "b15a5bdedd2e7645c3be271364324321b908314e4c77857bbfd32a041148c07f",
        ),
        id="v1-systemd-guaranteed-docker",
    ),
    pytest.param(
        # systemd, burstable, CRI-O (same fixture)
        "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod90d81341_92de_11e7_8cf2_507b9d4141fa.slice/"
        "crio-2227daf62df6694645fee5df53c1f91271546a9560e8600a525690ae252b7f63.scope",
        PodIds(
            "90d81341-92de-11e7-8cf2-507b9d4141fa",
            "2227daf62df6694645fee5df53c1f91271546a9560e8600a525690ae252b7f63",
        ),
        id="v1-systemd-burstable-crio",
    ),
    pytest.param(
        # systemd, besteffort, docker (tkestack gpu-manager, Ubuntu 20.04)
        "4:devices:/kubepods.slice/kubepods-besteffort.slice/"
        "kubepods-besteffort-poddc380811_8168_4a9e_9b4a_56ded1b6fe9c.slice/"
        "docker-fa7f0ec4fbcbb70c69565a5b2d269926e04ec5601dff59235199d6e60198e95c.scope",
        PodIds(
            "dc380811-8168-4a9e-9b4a-56ded1b6fe9c",
            "fa7f0ec4fbcbb70c69565a5b2d269926e04ec5601dff59235199d6e60198e95c",
        ),
        id="v1-systemd-besteffort-docker",
    ),
    pytest.param(
        # cgroupfs, besteffort, docker (same source, CentOS)
        "4:devices:/kubepods/besteffort/pod762f2fe7-8a9d-450a-81e7-88094fc057d0/"
        "557a3158f637c3021ecba8450ee945570bdb66876922afafa5dd6e0b35131f71",
        PodIds(
            "762f2fe7-8a9d-450a-81e7-88094fc057d0",
            "557a3158f637c3021ecba8450ee945570bdb66876922afafa5dd6e0b35131f71",
        ),
        id="v1-cgroupfs-besteffort-docker",
    ),
    pytest.param(
        # containerd left on cgroupfs under a systemd kubelet: the slice:prefix:id form runc
        # takes literally (open-telemetry/opentelemetry-java#4507)
        "10:blkio:/system.slice/containerd.service/"
        "kubepods-besteffort-pod0125ec2f_b64a_4868_8f5b_94b56cbab864.slice:cri-containerd:"
        "ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459",
        PodIds(
            "0125ec2f-b64a-4868-8f5b-94b56cbab864",
            "ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459",
        ),
        id="v1-systemd-slice-literal-containerd",
    ),
]

# cgroup v2: one line, the paths as published (systemd-cgls trees, NRI's logs)
REAL_V2_PATHS = [
    pytest.param(
        # systemd, burstable, containerd (netdata/netdata#4868)
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod03f3f104_3215_44f2_9686_d4dd1f05a7ed.slice/"
        "cri-containerd-09d185410c4e25236cc24717f881589bb0978b24eafd101624e627a4dd8d3439.scope",
        PodIds(
            "03f3f104-3215-44f2-9686-d4dd1f05a7ed",
            "09d185410c4e25236cc24717f881589bb0978b24eafd101624e627a4dd8d3439",
        ),
        id="v2-systemd-burstable-containerd",
    ),
    pytest.param(
        # a static pod: its UID is the kubelet's md5, 32 hex digits (same tree)
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod187bff14cccb94f179e943eacce55bb3.slice/"
        "cri-containerd-c203a2647ef1ad78e990157c50331f3b6ef0b03336cf08535d6bf7faa5421415.scope",
        PodIds(
            "187bff14cccb94f179e943eacce55bb3",
            "c203a2647ef1ad78e990157c50331f3b6ef0b03336cf08535d6bf7faa5421415",
        ),
        id="v2-systemd-static-pod",
    ),
    pytest.param(
        # kind: a kubelet whose cgroup root is /kubelet (containerd/nri#227)
        "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        "kubelet-kubepods-besteffort-pod1e597579_417e_482f_bf65_5fe170c3aebd.slice/"
        "cri-containerd-a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e.scope",
        PodIds(
            "1e597579-417e-482f-bf65-5fe170c3aebd",
            "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e",
        ),
        id="v2-systemd-kind-besteffort-containerd",
    ),
    pytest.param(
        # CRI-O in a node that is itself a container (kubernetes/minikube#11280)
        "/docker/d6701ec289c56e4391acb11d07474b3139466857a305490575508a8b7a9fcf22/"
        "kubepods.slice/kubepods-besteffort.slice/"
        "kubepods-besteffort-podae7a96fb_2bdc_46b0_96e2_78e4af94847b.slice/"
        "crio-89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102.scope",
        PodIds(
            "ae7a96fb-2bdc-46b0-96e2-78e4af94847b",
            "89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102",
        ),
        id="v2-systemd-besteffort-crio-in-docker",
    ),
    pytest.param(
        # crun's leaf below CRI-O's scope (the container's processes live in it)
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-poda5c1f8d5_1919_434d_add7_4afaafdaef89.slice/"
        "crio-5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c.scope/container",
        PodIds(
            "a5c1f8d5-1919-434d-add7-4afaafdaef89",
            "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c",
        ),
        id="v2-systemd-crio-container-leaf",
    ),
    pytest.param(
        # the cgroupfs driver on cgroup v2 (k3s's default): the bare id
        "/kubepods/burstable/podfbc202d3-da21-11e8-ab5e-42010a80014b/"
        "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574",
        PodIds(
            "fbc202d3-da21-11e8-ab5e-42010a80014b",
            "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574",
        ),
        id="v2-cgroupfs-burstable",
    ),
    pytest.param(
        # CRI-O's cgroupfs form of a container
        "/kubepods/pod5eadac96-ab58-11ea-b82b-0242ac110009/"
        "crio-7fe41c8a2d1da09420117894f11dd91f6c3a44dfeb7d125dc594bd53468861df",
        PodIds(
            "5eadac96-ab58-11ea-b82b-0242ac110009",
            "7fe41c8a2d1da09420117894f11dd91f6c3a44dfeb7d125dc594bd53468861df",
        ),
        id="v2-cgroupfs-guaranteed-crio",
    ),
    pytest.param(
        # read from a cgroup namespace of its own: relative to the reader's root
        "/../../kubepods-besteffort.slice/"
        "kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice/"
        "docker-abddff03dfd7710c79a750ce3e730365cbb2c8247a974170c1062683bc3e9152.scope",
        PodIds(
            "9692aa0e-748e-11e8-8dfa-76d458035df6",
            "abddff03dfd7710c79a750ce3e730365cbb2c8247a974170c1062683bc3e9152",
        ),
        id="v2-private-cgroupns",
    ),
]


@pytest.mark.parametrize(("line", "ids"), REAL_LINES)
def test_a_v1_line_of_each_driver_qos_class_and_runtime_gives_the_pod_and_container(line, ids):
    assert pod_ids_of_cgroup(line + "\n") == ids


@pytest.mark.parametrize(("path", "ids"), REAL_V2_PATHS)
def test_a_v2_path_of_each_driver_qos_class_and_runtime_gives_the_pod_and_container(path, ids):
    assert pod_ids_of_cgroup(f"0::{path}\n") == ids


def test_a_v1_file_of_many_hierarchies_gives_the_one_pod_and_container():
    assert pod_ids_of_cgroup(V1_CGROUPFS_BESTEFFORT) == PodIds(_DD_POD, _DD_CTR)


def test_lines_outside_any_pod_do_not_hide_the_pod_of_the_others():
    # runc's issue #4620 (CRI-O, v1): hierarchies the container was not put in show "/"
    ctr = "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"
    pod = (
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-poda5c1f8d5_1919_434d_add7_4afaafdaef89.slice"
    )
    text = f"13:freezer:{pod}/crio-{ctr}.scope\n12:cpuset:{pod}/crio-{ctr}.scope\n11:files:/\n"
    assert pod_ids_of_cgroup(text) == PodIds("a5c1f8d5-1919-434d-add7-4afaafdaef89", ctr)


def test_crio_conmon_is_of_the_pod_but_in_no_container():
    ctr = "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"
    uid = "a5c1f8d5-1919-434d-add7-4afaafdaef89"
    slice_ = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    systemd = f"0::/kubepods.slice/kubepods-burstable.slice/{slice_}/crio-conmon-{ctr}.scope\n"
    cgroupfs = f"0::/kubepods/burstable/pod{uid}/crio-conmon-{ctr}\n"
    assert pod_ids_of_cgroup(systemd) == PodIds(uid)
    assert pod_ids_of_cgroup(cgroupfs) == PodIds(uid)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("0::/\n", id="v2-root"),
        pytest.param("0::/init.scope\n", id="systemd"),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", id="a-login"),
        pytest.param(  # docker outside Kubernetes (neuvector's cgroup_test.go, CentOS)
            "10:devices:/system.slice/"
            "docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n"
            "1:name=systemd:/system.slice/"
            "docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n",
            id="docker-without-kubernetes",
        ),
        pytest.param(  # the kubelet's QoS level itself, no pod under it
            "0::/kubepods.slice/kubepods-burstable.slice\n",
            id="qos-slice",
        ),
    ],
)
def test_a_process_in_no_pod_gives_none(text):
    assert pod_ids_of_cgroup(text) is None


def test_the_pods_own_cgroup_or_an_unknown_child_gives_the_pod_alone():
    uid = "fbc202d3-da21-11e8-ab5e-42010a80014b"
    assert pod_ids_of_cgroup(f"0::/kubepods/burstable/pod{uid}\n") == PodIds(uid)
    # a 63-digit id is no container id
    assert pod_ids_of_cgroup(f"0::/kubepods/burstable/pod{uid}/{'a' * 63}\n") == PodIds(uid)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/kubepods/burstable/podFBC202D3-DA21-11E8-AB5E-42010A80014B/", id="upper"),
        pytest.param("/kubepods/burstable/podfbc202d3-da21-11e8-ab5e-42010a8001/", id="short"),
        pytest.param("/kubepods/burstable/podfbc202d3_da21_11e8_ab5e_42010a80014b/", id="mixed"),
        pytest.param(
            "/kubepods.slice/kubepods-pod22949dce-fd8b-11ea-8ede-98f2b32c645c.slice/", id="dash"
        ),
        pytest.param("/kubepods/burstable/pod-is-not-a-uid/", id="word"),
    ],
)
def test_a_pod_segment_whose_uid_is_no_kubelet_uid_is_no_pod(path):
    ctr = "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574"
    assert pod_ids_of_cgroup(f"0::{path}{ctr}\n") is None


def test_lines_that_name_different_pods_or_containers_give_none():
    a = "/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/" + "a" * 64
    b = "/kubepods/besteffort/pod762f2fe7-8a9d-450a-81e7-88094fc057d0/" + "a" * 64
    c = "/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/" + "b" * 64
    assert pod_ids_of_cgroup(f"2:cpu:{a}\n1:memory:{b}\n") is None
    assert pod_ids_of_cgroup(f"2:cpu:{a}\n1:memory:{c}\n") is None
    assert pod_ids_of_cgroup(f"2:cpu:{a}\n1:memory:{a}\n") is not None


@pytest.mark.parametrize(
    "junk",
    [
        pytest.param(bytes(range(256)) * 64, id="binary"),
        pytest.param(b"\x00" * 4096, id="nuls"),
        pytest.param(b"kubepods pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a\n", id="no-fields"),
        pytest.param(b"x:y:/kubepods/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/\n", id="bad-id"),
        pytest.param(b"0::kubepods/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/\n", id="relative"),
        pytest.param("0::/kubepods/pod\u00e9\n".encode(), id="utf8"),
        pytest.param(b"\xff\xfe0::/kubepods\n", id="not-utf8"),
    ],
)
def test_junk_gives_none(tmp_path, junk):
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "cgroup").write_bytes(junk)
    assert read_pod_ids(tmp_path, 9) is None


def test_a_file_larger_than_any_cgroup_file_gives_none_even_with_a_pod_in_it(tmp_path):
    (tmp_path / "9").mkdir()
    good = V1_CGROUPFS_BESTEFFORT.encode()
    (tmp_path / "9" / "cgroup").write_bytes(good)
    assert read_pod_ids(tmp_path, 9) == PodIds(_DD_POD, _DD_CTR)
    (tmp_path / "9" / "cgroup").write_bytes(good + b"#" * (1024 * 1024))
    assert read_pod_ids(tmp_path, 9) is None
    (tmp_path / "9" / "cgroup").write_bytes(good.ljust(MAX_CGROUP_BYTES, b"\n"))
    assert read_pod_ids(tmp_path, 9) == PodIds(_DD_POD, _DD_CTR)  # the limit itself is read


def test_a_process_that_is_not_there_gives_none(tmp_path):
    assert read_pod_ids(tmp_path, 12345) is None


# --- the kubelet's log names --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "container_id", "workload"),
    [
        pytest.param(  # fluent-plugin-kubernetes_metadata_filter's test tag
            "fabric8-console-controller-98rqc_default_fabric8-console-container-"
            "49095a2894da899d3b327c5fde1e056a81376cc9a8f8b09a195f2a92bceed459.log",
            "49095a2894da899d3b327c5fde1e056a81376cc9a8f8b09a195f2a92bceed459",
            Workload("fabric8-console-controller-98rqc", "default", "fabric8-console-container"),
            id="deployment-pod",
        ),
        pytest.param(  # a static pod's (a kubeadm control plane, CKS notes)
            "kube-controller-manager-controlplane_kube-system_kube-controller-manager-"
            "d559f74bec79087e6e77a69ff8a9c42f46c4666b7310898f2132eea9b6e72dce.log",
            "d559f74bec79087e6e77a69ff8a9c42f46c4666b7310898f2132eea9b6e72dce",
            Workload(
                "kube-controller-manager-controlplane", "kube-system", "kube-controller-manager"
            ),
            id="static-pod",
        ),
        pytest.param(  # a pod name is a DNS subdomain: dots are allowed
            "trainer.v2-0_ml_pytorch-" + "c" * 64 + ".log",
            "c" * 64,
            Workload("trainer.v2-0", "ml", "pytorch"),
            id="dotted-pod",
        ),
    ],
)
def test_a_container_log_link_gives_its_id_and_names(name, container_id, workload):
    assert container_of_log_link(name) == (container_id, workload)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a_b_c_d-" + "c" * 64 + ".log", id="too-many-underscores"),
        pytest.param("pod_ns-" + "c" * 64 + ".log", id="too-few-underscores"),
        pytest.param("pod_ns_ctr-" + "c" * 63 + ".log", id="short-id"),
        pytest.param("pod_ns_ctr-" + "C" * 64 + ".log", id="upper-id"),
        pytest.param("pod_ns_ctr-" + "c" * 64, id="no-suffix"),
        pytest.param("pod_ns_" + "c" * 64 + ".log", id="no-container"),
        pytest.param("Pod_ns_ctr-" + "c" * 64 + ".log", id="upper-pod"),
        pytest.param("pod_n.s_ctr-" + "c" * 64 + ".log", id="dotted-namespace"),
        pytest.param("pod_ns_c.tr-" + "c" * 64 + ".log", id="dotted-container"),
        pytest.param("pod_" + "n" * 64 + "_ctr-" + "c" * 64 + ".log", id="long-namespace"),
        pytest.param(  # the kubelet cut a long name at 255 bytes: the id is lost
            ("p" * 200 + "_ns_ctr-" + "c" * 64)[:251] + ".log",
            id="truncated",
        ),
    ],
)
def test_a_name_that_is_not_a_kubelet_link_gives_none(name):
    assert container_of_log_link(name) is None


def test_a_pod_log_dir_gives_its_uid_and_names():
    # a static pod's (a kubeadm control plane, CKS notes), and a dashed UID
    assert pod_of_log_dir(
        "kube-system_kube-apiserver-controlplane_e0ee64f88fb19c12ee94f5b24507f060"
    ) == (
        "e0ee64f88fb19c12ee94f5b24507f060",
        Workload("kube-apiserver-controlplane", "kube-system"),
    )
    assert pod_of_log_dir("ml_trainer-0_3d274242-8ee0-11e9-a8a6-1e68d864ef1a") == (
        "3d274242-8ee0-11e9-a8a6-1e68d864ef1a",
        Workload("trainer-0", "ml"),
    )
    assert pod_of_log_dir("ml_trainer_0_3d274242-8ee0-11e9-a8a6-1e68d864ef1a") is None
    assert pod_of_log_dir("ml_trainer-0_3d274242_8ee0_11e9_a8a6_1e68d864ef1a") is None
    assert pod_of_log_dir("ml_trainer-0") is None


# --- the lookup, on fake trees --------------------------------------------------------------------

UID = "3d274242-8ee0-11e9-a8a6-1e68d864ef1a"
CTR = "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1"
V2_LINE = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CTR}.scope\n"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    """A fake /proc and /var/log: processes with a cgroup file, a PID namespace (a file whose
    inode stands for it, linked as ns/pid), NSpid and a start time; the kubelet's log tree."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.log = root / "log"
        self.namespaces = root / "namespaces"
        for d in (self.proc, self.log / "containers", self.log / "pods", self.namespaces):
            d.mkdir(parents=True)

    def namespace(self, name: str) -> int:
        path = self.namespaces / name
        path.touch()
        return os.stat(path).st_ino

    def process(
        self,
        pid: int,
        cgroup: str,
        *,
        namespace: str = "host",
        nspid: tuple[int, ...] = (),
        start_ticks: int = 500,
    ) -> None:
        d = self.proc / str(pid)
        (d / "ns").mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(cgroup)
        self.namespace(namespace)
        link = d / "ns" / "pid"
        link.unlink(missing_ok=True)
        link.symlink_to(self.namespaces / namespace)
        ids = "\t".join(str(p) for p in (nspid or (pid,)))
        (d / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nNSpid:\t{ids}\nNSpgid:\t{ids}\n")
        fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 30
        (d / "stat").write_text(f"{pid} (python (rank 0)) " + " ".join(fields) + "\n")

    def container_log(self, pod: str, namespace: str, container: str, cid: str, uid: str = UID):
        link = self.log / "containers" / f"{pod}_{namespace}_{container}-{cid}.log"
        link.symlink_to(f"/var/log/pods/{namespace}_{pod}_{uid}/{container}/0.log")

    def pod_log(self, pod: str, namespace: str, uid: str = UID, container: str = "trainer"):
        (self.log / "pods" / f"{namespace}_{pod}_{uid}" / container).mkdir(parents=True)

    def lookup(self, clock: Clock | None = None, **kwargs) -> WorkloadLookup:
        return WorkloadLookup(self.proc, self.log, clock=clock or Clock(), **kwargs)


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


def test_a_container_is_named_from_its_log_link(node):
    node.process(100, V2_LINE)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    node.pod_log("trainer-0", "ml")
    assert node.lookup().of_pid(100) == Workload("trainer-0", "ml", "pytorch")


def test_without_a_link_the_pod_is_named_from_its_log_dir_and_the_container_stays_empty(node):
    node.process(100, V2_LINE)
    node.pod_log("trainer-0", "ml")
    node.container_log("other-pod", "ml", "pytorch", "d" * 64)  # another container's
    assert node.lookup().of_pid(100) == Workload("trainer-0", "ml", "")


def test_a_process_in_no_pod_or_none_at_all_or_an_unknown_pod_is_not_named(node):
    node.process(100, "0::/system.slice/containerd.service\n")
    node.process(101, V2_LINE)  # its pod is not in the log tree
    node.pod_log("trainer-0", "ml", uid="762f2fe7-8a9d-450a-81e7-88094fc057d0")
    lookup = node.lookup()
    assert lookup.of_pid(100) == Workload()
    assert lookup.of_pid(101) == Workload()
    assert lookup.of_pid(4000) == Workload()
    assert lookup.of_pid(0) == Workload() and lookup.of_pid(-1) == Workload()


def test_without_the_log_tree_mounted_nothing_is_named(tmp_path):
    node = Node(tmp_path)
    node.process(100, V2_LINE)
    lookup = WorkloadLookup(node.proc, tmp_path / "not-mounted", clock=Clock())
    assert lookup.of_pid(100) == Workload()


def test_a_symlink_loop_in_the_containers_dir_is_listed_never_followed(node):
    node.process(100, V2_LINE)
    containers = node.log / "containers"
    a = containers / f"trainer-0_ml_pytorch-{CTR}.log"
    b = containers / ("loop_ml_b-" + "e" * 64 + ".log")
    a.symlink_to(b.name)
    b.symlink_to(a.name)
    (containers / "self.log").symlink_to("self.log")
    assert node.lookup().of_pid(100) == Workload("trainer-0", "ml", "pytorch")


def test_a_containers_dir_that_is_itself_a_loop_names_pods_from_their_dirs(node):
    node.process(100, V2_LINE)
    (node.log / "containers").rmdir()
    (node.log / "containers").symlink_to("containers")
    node.pod_log("trainer-0", "ml")
    assert node.lookup().of_pid(100) == Workload("trainer-0", "ml", "")


def test_a_link_with_too_many_underscores_is_ignored(node):
    node.process(100, V2_LINE)
    node.container_log("trainer_0", "ml", "pytorch", CTR)  # not a kubelet name
    assert node.lookup().of_pid(100) == Workload()
    node.pod_log("trainer-0", "ml")
    assert node.lookup().of_pid(100) == Workload("trainer-0", "ml", "")


def test_an_id_two_links_name_differently_is_named_by_neither(node):
    node.process(100, V2_LINE)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    node.container_log("trainer-1", "ml", "pytorch", CTR)
    assert node.lookup().of_pid(100) == Workload()


def test_a_link_and_a_pod_dir_that_disagree_name_nothing(node):
    node.process(100, V2_LINE)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    node.pod_log("evaluator-0", "ml")  # the same UID under another pod's name
    assert node.lookup().of_pid(100) == Workload()


def test_answers_are_cached_for_a_bounded_number_of_processes_least_recent_dropped(node):
    for pid in range(100, 104):
        node.process(pid, V2_LINE)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup(max_processes=3)
    named = Workload("trainer-0", "ml", "pytorch")
    assert [lookup.of_pid(pid) for pid in (100, 101, 102)] == [named] * 3
    for pid in (100, 101, 102):  # what a cached answer would not see
        (node.proc / str(pid) / "cgroup").write_text("0::/init.scope\n")
    assert lookup.of_pid(100) == named  # cached, and now the most recent
    assert lookup.of_pid(103) == named  # drops 101, the least recently asked
    assert lookup.cached() == 3
    assert lookup.of_pid(102) == named  # still cached
    assert lookup.of_pid(101) == Workload()  # read again
    assert lookup.cached() == 3


def test_a_miss_relists_the_log_tree_at_most_once_a_period(node):
    clock = Clock()
    node.process(100, V2_LINE)
    lookup = node.lookup(clock, relist_after_s=5.0)
    assert lookup.of_pid(100) == Workload()
    assert lookup.listings == 1
    node.container_log("trainer-0", "ml", "pytorch", CTR)  # the kubelet links it late
    clock.now += 4.9
    assert lookup.of_pid(100) == Workload()  # not listed again yet
    assert lookup.listings == 1
    clock.now += 0.1
    assert lookup.of_pid(100) == Workload("trainer-0", "ml", "pytorch")
    assert lookup.listings == 2
    clock.now += 100
    assert lookup.of_pid(100) == Workload("trainer-0", "ml", "pytorch")  # a final answer
    assert lookup.listings == 2


def test_a_partial_answer_is_completed_once_the_link_appears(node):
    clock = Clock()
    node.process(100, V2_LINE)
    node.pod_log("trainer-0", "ml")
    lookup = node.lookup(clock, relist_after_s=5.0)
    assert lookup.of_pid(100) == Workload("trainer-0", "ml", "")
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    assert lookup.of_pid(100) == Workload("trainer-0", "ml", "")
    clock.now += 5
    assert lookup.of_pid(100) == Workload("trainer-0", "ml", "pytorch")


def test_with_no_period_every_miss_relists(node):
    node.process(100, V2_LINE)
    lookup = node.lookup(relist_after_s=0.0)
    for _ in range(3):
        assert lookup.of_pid(100) == Workload()
    assert lookup.listings == 3


def test_hits_never_list(node):
    node.process(100, V2_LINE)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup(relist_after_s=0.0)
    for _ in range(3):
        assert lookup.of_pid(100) == Workload("trainer-0", "ml", "pytorch")
    node.process(101, V2_LINE)  # another process of the same container
    assert lookup.of_pid(101) == Workload("trainer-0", "ml", "pytorch")
    assert lookup.listings == 1


def test_a_pid_reused_by_a_process_that_started_later_is_not_the_producer(node):
    node.process(100, V2_LINE, start_ticks=700)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup()
    assert lookup.of_pid(100, start_ticks=500) == Workload()
    assert lookup.of_pid(100, start_ticks=700) == Workload("trainer-0", "ml", "pytorch")
    assert lookup.of_pid(100) == Workload("trainer-0", "ml", "pytorch")  # not known: trusted
    assert lookup.cached() == 3


def test_a_pid_of_another_namespace_is_found_by_its_inner_pid_not_its_number(node):
    other = "762f2fe7-8a9d-450a-81e7-88094fc057d0"
    # pid 7 here is another pod's process; the producer is pid 7 in its own namespace
    node.process(7, f"0::/kubepods/besteffort/pod{other}/" + "d" * 64 + "\n")
    node.process(4242, V2_LINE, namespace="trainer", nspid=(4242, 7))
    node.process(4243, V1_CGROUPFS_BESTEFFORT, namespace="trainer", nspid=(4243, 8))
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    node.container_log("web-0", "default", "nginx", "d" * 64, uid=other)
    lookup = node.lookup()
    trainer = node.namespace("trainer")
    assert lookup.of_pid(7, pid_namespace=trainer) == Workload("trainer-0", "ml", "pytorch")
    assert lookup.of_pid(7) == Workload("web-0", "default", "nginx")  # this node's pid 7
    assert lookup.scans == 1


def test_a_pid_of_another_namespace_checks_the_start_time_of_the_process_found(node):
    node.process(4242, V2_LINE, namespace="trainer", nspid=(4242, 7), start_ticks=900)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup()
    trainer = node.namespace("trainer")
    assert lookup.of_pid(7, 899, trainer) == Workload()
    assert lookup.of_pid(7, 900, trainer) == Workload("trainer-0", "ml", "pytorch")


def test_the_same_pid_in_the_recorded_namespace_needs_no_scan(node):
    node.process(100, V2_LINE, namespace="host-pid-pod")
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup()
    ns = node.namespace("host-pid-pod")
    assert lookup.of_pid(100, pid_namespace=ns) == Workload("trainer-0", "ml", "pytorch")
    assert lookup.scans == 0


def test_a_namespace_not_on_this_node_is_scanned_for_at_most_once_a_period(node):
    clock = Clock()
    node.process(100, V2_LINE)
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup(clock, relist_after_s=5.0)
    elsewhere = node.namespace("elsewhere")
    assert lookup.of_pid(7, pid_namespace=elsewhere) == Workload()
    assert lookup.of_pid(7, pid_namespace=elsewhere) == Workload()
    assert lookup.scans == 1
    node.process(4242, V2_LINE, namespace="elsewhere", nspid=(4242, 7))  # it starts
    clock.now += 5
    assert lookup.of_pid(7, pid_namespace=elsewhere) == Workload("trainer-0", "ml", "pytorch")
    assert lookup.scans == 2


def test_a_namespace_match_without_nspid_is_not_taken(node):
    node.process(4242, V2_LINE, namespace="trainer", nspid=(4242, 7))
    (node.proc / "4242" / "status").write_text("Name:\tpython\nPid:\t4242\n")  # kernel < 4.1
    node.container_log("trainer-0", "ml", "pytorch", CTR)
    lookup = node.lookup()
    assert lookup.of_pid(7, pid_namespace=node.namespace("trainer")) == Workload()
