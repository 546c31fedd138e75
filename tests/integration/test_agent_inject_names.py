"""The Agent reports a communicator name's source as Inject where Inject's metadata says it set
that name (the Profiler sees it arrive as NCCL's commName), from files Inject itself writes;
bad lines are named and skipped without losing the rest."""

from __future__ import annotations

import glob
import logging

import httpx
from agent_home import hold_agent_lock
from inject_named_comms import run_named_comms
from live_agent import LiveAgent

from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.state.node_state import read_node_rows
from comminsight.inject.metadata import MetadataFile
from comminsight.shm_reader import ShmRegion, record_text
from comminsight_gen.abi.shm_v1 import NameSource
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

HOST = "gpu-node-3.cluster.example"  # dots: host and pid come from the lines, not the name


def group(meta: MetadataFile, comm_name: str, naming: str) -> None:
    desc, _, name = comm_name.partition(":")
    meta.write(
        "group",
        api="new_process_group",
        group_name=name,
        group_desc=desc,
        comm_name=comm_name,
        naming=naming,
        reason="",
        rank=0,
        group_rank=0,
        group_size=2,
        global_ranks=[0, 1],
    )


def test_names_inject_set_are_told_apart_from_names_it_kept(tmp_path):
    meta = MetadataFile(tmp_path, {"rank": 0}, pid=4242, host=HOST)
    group(meta, "mesh_tp:5", "nccl-config")
    group(meta, "default_pg:0", "torch-option")
    group(meta, "users-own-name", "user-named")
    meta.write("step", rank=0, optimizer="AdamW", index=0)
    names = InjectNames(tmp_path)
    names.refresh()
    assert names.named_by_inject(HOST, 4242, "mesh_tp:5")
    assert names.named_by_inject(HOST, 4242, "default_pg:0")
    assert not names.named_by_inject(HOST, 4242, "users-own-name")
    assert not names.named_by_inject(HOST, 4243, "mesh_tp:5")  # another process
    nccl, inject, none = NameSource.NCCL, NameSource.INJECT, NameSource.NONE
    assert names.name_source(nccl, HOST, 4242, "mesh_tp:5") == inject
    assert names.name_source(nccl, HOST, 4242, "users-own-name") == nccl
    assert names.name_source(none, HOST, 4242, "") == none
    assert names.errors == {}


def test_lines_are_read_as_they_are_appended_and_half_lines_wait(tmp_path):
    meta = MetadataFile(tmp_path, pid=7, host=HOST)
    names = InjectNames(tmp_path)
    names.refresh()  # only the process line so far
    assert not names.named_by_inject(HOST, 7, "mesh_dp:9")
    group(meta, "mesh_dp:9", "nccl-config")
    names.refresh()
    assert names.named_by_inject(HOST, 7, "mesh_dp:9")
    line = meta.path.read_bytes().splitlines()[-1].replace(b"mesh_dp:9", b"mesh_pp:4")
    with open(meta.path, "ab") as f:
        f.write(line[:40])  # a writer caught mid-line
    names.refresh()
    assert not names.named_by_inject(HOST, 7, "mesh_pp:4")
    with open(meta.path, "ab") as f:
        f.write(line[40:] + b"\n")
    names.refresh()
    assert names.named_by_inject(HOST, 7, "mesh_pp:4") and names.errors == {}
    meta.path.unlink()  # the job's files cleaned up: forgotten
    names.refresh()
    assert not names.named_by_inject(HOST, 7, "mesh_dp:9")


def test_bad_lines_are_named_and_the_rest_still_counts(tmp_path, caplog):
    meta = MetadataFile(tmp_path, pid=11, host=HOST)
    group(meta, "tp:1", "nccl-config")
    with open(meta.path, "ab") as f:
        f.write(b"{not json\n")
        f.write(b'{"schema":"comminsight.inject-metadata.v9","kind":"group"}\n')
        f.write(b"\xff\xfe\n")
    group(meta, "dp:2", "nccl-config")
    names = InjectNames(tmp_path)
    with caplog.at_level(logging.WARNING, logger="comminsight.agent.receivers.inject_names"):
        names.refresh()
    assert names.named_by_inject(HOST, 11, "tp:1") and names.named_by_inject(HOST, 11, "dp:2")
    file = meta.path.name
    assert list(names.errors) == [file] and names.errors[file].startswith("line 3:")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and file in warnings[0] and "line 3" in warnings[0]


def test_no_inject_directory_is_nothing_to_read(tmp_path):
    names = InjectNames(tmp_path / "nowhere")
    names.refresh()
    assert names.errors == {} and not names.named_by_inject(HOST, 1, "x")


def test_the_agent_api_and_the_master_rows_say_inject_for_the_names_inject_set(tmp_path):
    """The real plugin records Inject's name as NCCL's commName; with Inject's metadata for
    that process beside it, the node's API and the rows a slave sends its master say Inject,
    while the user's own name stays NCCL and the unnamed communicator none."""
    home = tmp_path / "home"
    lock = hold_agent_lock(home)  # the plugin leaves its SHM to an Agent
    run_named_comms(home)
    [shm] = glob.glob(str(home / "shms" / "*.shm"))
    region = ShmRegion(shm)
    pid, host = int(region.header["pid"]), record_text(region.header["hostname"])
    region.close()
    meta = MetadataFile(home, pid=pid, host=host)
    group(meta, "mesh_tp:5", "nccl-config")
    group(meta, "default_pg:0", "user-named")  # Inject kept the user's name
    with LiveAgent(home, polling=False) as live:
        items = httpx.get(f"{live.base_url}/api/v1/communicators", timeout=10).json()["items"]
        producers = live.service.producers.producers.values()
        rows = read_node_rows(producers, 0, 10**12, live.service.inject_names)
    lock.close()
    sources = {c["comm_id"][-4:]: (c.get("name"), c["name_source"]) for c in items}
    assert sources == {
        "1111": ("mesh_tp:5", "inject"),
        "2222": ("users-own-name", "nccl"),
        "3333": (None, "none"),
    }
    by_comm = {m.comm_id: m.name_source for m in rows.members.values()}
    assert by_comm == {
        0x1111: pb.NAME_SOURCE_INJECT,
        0x2222: pb.NAME_SOURCE_NCCL,
        0x3333: pb.NAME_SOURCE_NONE,
    }


def test_without_inject_metadata_the_plugin_s_source_stands(tmp_path):
    home = tmp_path / "home"
    lock = hold_agent_lock(home)
    run_named_comms(home)
    with LiveAgent(home, polling=False) as live:
        items = httpx.get(f"{live.base_url}/api/v1/communicators", timeout=10).json()["items"]
    lock.close()
    assert {c["comm_id"][-4:]: c["name_source"] for c in items} == {
        "1111": "nccl",
        "2222": "nccl",
        "3333": "none",
    }
