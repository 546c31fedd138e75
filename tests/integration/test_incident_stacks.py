"""The culprit's Python stack reaches its incident: when an incident opens (or its root
changes) the Agent asks the culprit's process through Inject and attaches what it answered;
a culprit on a node the Agent cannot ask gets an entry saying so, and no process is signalled
for it."""

from __future__ import annotations

import asyncio
import socket

import msgspec
from hang_snapshots import reports_of, store_at, tp_then_dp
from stack_processes import ScriptProcess, stacks_line, train_script
from waiting import wait_until

from comminsight.agent.hangs.incident_stacks import IncidentStacks
from comminsight.agent.hangs.incidents import group_reports
from comminsight.agent.hangs.stack_capture import StackCapture
from comminsight_gen.models.hang_report_v1 import IncidentStackStatus

HOST = socket.gethostname()


def opened_incident(store, pid: int, node_name: str):
    """An incident of the tp-then-dp scene whose root's culprit is process `pid`."""
    (incident,) = store.update(group_reports(reports_of(*tp_then_dp())), {}, 1, 1)
    culprit = msgspec.structs.replace(
        incident.root.culprits[0], pid=pid, host=HOST, node_name=node_name
    )
    root = msgspec.structs.replace(incident.root, culprits=[culprit])
    return msgspec.structs.replace(incident, root=root)


def run_on_root(stacks: IncidentStacks, incident) -> None:
    async def go():
        stacks.on_root(incident)
        await asyncio.gather(*stacks.tasks)

    asyncio.run(go())


def test_the_culprits_stack_is_attached_to_its_incident(tmp_path):
    home = tmp_path / "home"
    with ScriptProcess(tmp_path, train_script(), COMMINSIGHT_HOME=str(home)) as p:
        p.wait_ready()
        wait_until(lambda: stacks_line(home, p.pid), 60, "the stacks line")
        store = store_at(home)
        capture = StackCapture(home, timeout_s=30.0)
        stacks = IncidentStacks(
            store, lambda c: capture.request(c.host, c.pid, c.global_rank) if c.pid else None
        )
        incident = opened_incident(store, p.pid, "node-a")
        run_on_root(stacks, incident)
    attached = store.incidents[incident.incident_id].stacks
    assert stacks.attached == 1 and attached
    main = attached[0]
    assert main.status is IncidentStackStatus.captured and main.pid == p.pid
    assert any(f.function == "train_step" for f in main.frames), main.frames


def test_a_culprit_this_agent_cannot_ask_gets_a_reason_and_no_signal(tmp_path):
    store = store_at(tmp_path)
    asked = []
    stacks = IncidentStacks(store, lambda c: asked.append(c) or None)
    incident = opened_incident(store, 4242, "node-b")
    run_on_root(stacks, incident)
    (entry,) = store.incidents[incident.incident_id].stacks
    assert entry.status is IncidentStackStatus.unavailable
    assert "node-b cannot be asked from here" in entry.unavailable_reason
    assert len(asked) == 1  # asked once, answered None: nothing was sent


def test_outside_an_event_loop_nothing_is_fetched(tmp_path):
    store = store_at(tmp_path)
    stacks = IncidentStacks(store, lambda c: (_ for _ in ()).throw(AssertionError("asked")))
    (incident,) = store.update(group_reports(reports_of(*tp_then_dp())), {}, 1, 1)
    stacks.on_root(incident)  # the store's own announcement came first; neither fetches
    assert not stacks.tasks and store.incidents[incident.incident_id].stacks == []


def test_two_pods_processes_of_one_pid_each_keep_their_stack_entry(tmp_path):
    """Culprits in two pods of node-a share pid 4242: each has its entry (its host tells
    them apart), and a later entry for one replaces that one only."""
    from comminsight.agent.hangs.stack_capture import unavailable
    from comminsight.agent.hangs.stack_incident import incident_stacks

    store = store_at(tmp_path)
    incident = opened_incident(store, 4242, "node-a")
    store.incidents[incident.incident_id] = incident

    def entries(host: str, reason: str):
        return incident_stacks(unavailable(host, 4242, 1, reason), "node-a", 1)

    store.attach_stacks(incident.incident_id, entries("pod-a", "first"), 1)
    store.attach_stacks(incident.incident_id, entries("pod-b", "first"), 2)
    store.attach_stacks(incident.incident_id, entries("pod-a", "again"), 3)
    held = {(s.host, s.unavailable_reason) for s in store.incidents[incident.incident_id].stacks}
    assert held == {("pod-a", "again"), ("pod-b", "first")}
