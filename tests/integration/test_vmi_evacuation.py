# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmsched.kubevirt.vmi_evacuation against the local control plane and its real KubeVirt.

Every run is confined to the test's own namespace (other tests share the cluster and its nodes): the VMs are
pulled onto one node by a preferred node affinity, never by cordoning shared nodes.
"""
from __future__ import annotations

import datetime

import pytest
from kubernetes import client

from . import ansible_module
from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMIMS,
    VMIS,
    kv,
    kubevirt,
    running_vmi,
    rwo_claim,
    vm_manifest,
)
from .test_vmi_migration import audit_entries

MODULE = "vmsched.kubevirt.vmi_evacuation"
USER_AGENT = "vmsched.kubevirt/vmi_evacuation"
RUN_LABEL = "vmsched.kubevirt.io/evacuation-run"
SOURCE = "node01"
ZONE_B = {"topology.kubernetes.io/zone": "zone-b"}      # node03 and node04


def run_module(kubeconfig, args, check=False):
    return ansible_module.run_module(MODULE, kubeconfig, args, check=check)


def prefer(node):
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}


def start_vms_on(kv, ns, count, node, wait, annotations=None, memory="1Gi"):
    """`count` VMs that the scheduler puts on `node` (preferred affinity: migrations may leave it)."""
    for i in range(count):
        kv.create("virtualmachines", ns, vm_manifest(f"vm{i:02d}", spec_extra={"affinity": prefer(node)},
                                                     annotations=annotations, memory=memory))
    vmis = [running_vmi(kv, ns, f"vm{i:02d}", wait) for i in range(count)]
    where = {v["metadata"]["name"]: v["status"]["nodeName"] for v in vmis}
    assert set(where.values()) == {node}, f"the scheduler did not follow the preferred affinity: {where}"
    return vmis


def stamp(value):
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def max_overlap(vmims):
    """Most VMIMs alive at once, from creation to terminal phase (server timestamps, 1 s resolution).
    At equal timestamps an end counts before a start: the module creates the next VMIM only after it saw
    the previous one end, and truncating both times to the second keeps that order or makes them equal."""
    events = []
    for m in vmims:
        end = [p["phaseTransitionTimestamp"] for p in m["status"]["phaseTransitionTimestamps"]
               if p["phase"] in ("Succeeded", "Failed")]
        assert end, f"{m['metadata']['name']} did not end"
        events.append((stamp(m["metadata"]["creationTimestamp"]), 1))
        events.append((stamp(end[-1]), -1))
    events.sort(key=lambda e: (e[0], e[1]))
    peak = alive = 0
    for _when, delta in events:
        alive += delta
        peak = max(peak, alive)
    return peak


def test_evacuating_20_vmis_respects_the_cap_and_empties_the_node(kv, kubeconfig, namespace, wait):
    start_vms_on(kv, namespace, 20, SOURCE, wait)
    args = {"node": SOURCE, "namespace": namespace, "added_node_selector": ZONE_B, "max_parallel": 3}

    rc, res = run_module(kubeconfig, args)
    assert rc == 0, res.get("msg")
    assert res["changed"] is True and res["cordoned"] is False
    summary = res["summary"]
    assert (summary["selected"], summary["to_migrate"], summary["migrated"], summary["failed"]) == (20, 20, 20, 0)
    assert summary["max_parallel"] == 3 and summary["max_parallel_per_node"] == 2
    assert 1 <= summary["peak_in_flight"] <= 2      # one source node: parallelOutboundMigrationsPerNode wins
    assert all(v["status"] == "migrated" and v["target_node"] in ("node03", "node04") for v in res["vmis"]), res["vmis"]

    # The node is empty (of this namespace's VMIs), every VMI is in zone b.
    vmis = kv.list(VMIS, namespace)
    assert len(vmis) == 20
    assert {v["status"]["nodeName"] for v in vmis} <= {"node03", "node04"}

    # The cap, from the VMIMs' own timestamps.
    vmims = kv.list(VMIMS, namespace)
    assert len(vmims) == 20
    run = {m["metadata"]["labels"][RUN_LABEL] for m in vmims}
    assert len(run) == 1 and summary["run_label"] == f"{RUN_LABEL}={run.pop()}"
    assert all(m["spec"]["addedNodeSelector"] == ZONE_B and m["status"]["phase"] == "Succeeded" for m in vmims)
    assert max_overlap(vmims) <= 2      # <= max_parallel 3, and <= parallelOutboundMigrationsPerNode 2

    # Again: nothing left on the node, nothing to do.
    rc, res = run_module(kubeconfig, args)
    assert rc == 0 and res["changed"] is False, res
    assert res["summary"]["selected"] == 0 and res["vmis"] == []
    assert len(kv.list(VMIMS, namespace)) == 20


def test_label_selector_over_two_nodes_uses_the_cluster_cap(kv, kubeconfig, namespace, wait):
    """VMIs on two source nodes: the per-node cap (2) no longer binds, max_parallel=3 does."""
    start_vms_on(kv, namespace, 4, "node01", wait)
    for i in range(4, 8):
        kv.create("virtualmachines", namespace, vm_manifest(f"vm{i:02d}", spec_extra={"affinity": prefer("node03")},
                                                            labels={"move": "yes"}))
    for i in range(4):
        kv.patch(VMIS, namespace, f"vm{i:02d}", {"metadata": {"labels": {"move": "yes"}}})
    placed = {v["metadata"]["name"]: v["status"]["nodeName"]
              for v in (running_vmi(kv, namespace, f"vm{i:02d}", wait) for i in range(8))}
    assert sorted(placed.values()) == ["node01"] * 4 + ["node03"] * 4, placed

    args = {"namespace": namespace, "label_selector": "move=yes", "target_nodes": ["node02", "node04"],
            "max_parallel": 3}
    rc, res = run_module(kubeconfig, args)
    assert rc == 0, res.get("msg")
    assert res["summary"]["migrated"] == 8 and res["summary"]["peak_in_flight"] <= 3
    targets = [v["target_node"] for v in res["vmis"]]
    assert sorted(targets) == ["node02"] * 4 + ["node04"] * 4, targets   # spread evenly over target_nodes
    assert max_overlap(kv.list(VMIMS, namespace)) <= 3

    # They are where they should be: in place, nothing to do.
    rc, res = run_module(kubeconfig, args)
    assert rc == 0 and res["changed"] is False, res
    assert {v["status"] for v in res["vmis"]} == {"in_place"}


def test_check_mode_returns_the_plan_and_writes_nothing(kv, kubeconfig, namespace, wait):
    start_vms_on(kv, namespace, 3, SOURCE, wait)
    kv.create("virtualmachines", namespace, vm_manifest(
        "stuck", spec_extra={"affinity": prefer(SOURCE)}, pvc=rwo_claim(kv.core, namespace, "stuck-data", wait)))
    running_vmi(kv, namespace, "stuck", wait)
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)

    rc, res = run_module(kubeconfig, {"node": SOURCE, "namespace": namespace, "added_node_selector": ZONE_B,
                                      "cordon": True}, check=True)
    assert rc != 0, res                                  # "stuck" cannot move: the plan says so
    plan = {v["name"]: v for v in res["vmis"]}
    assert set(plan) == {"vm00", "vm01", "vm02", "stuck"}
    assert all(plan[f"vm0{i}"]["status"] == "planned" and plan[f"vm0{i}"]["candidates"] == ["node03", "node04"]
               for i in range(3)), plan
    assert plan["stuck"]["status"] == "failed" and "DisksNotLiveMigratable" in plan["stuck"]["failure_reason"]
    assert "1 of 4" in res["msg"] and "nothing was changed" in res["msg"]
    kv.delete("virtualmachines", namespace, "stuck")
    wait(lambda: kv.get(VMIS, namespace, "stuck") is None, "VMI stuck gone")

    rc, res = run_module(kubeconfig, {"node": SOURCE, "namespace": namespace, "added_node_selector": ZONE_B},
                         check=True)
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert [v["status"] for v in res["vmis"]] == ["planned"] * 3
    assert kv.list(VMIMS, namespace) == []

    def ours():
        found = [e for e in audit_entries(since, USER_AGENT)
                 if (e.get("objectRef") or {}).get("namespace") == namespace]
        return found if any(e["verb"] == "list" for e in found) else None
    wait(ours, "the module's requests in the audit log", timeout=20)
    writes = [(e["verb"], e["requestURI"]) for e in audit_entries(since, USER_AGENT)
              if e["verb"] not in ("get", "list", "watch")]
    assert writes == [], writes
    assert not kv.core.read_node(SOURCE).spec.unschedulable, "check mode must not cordon"


def test_stop_on_failure_stops_before_any_write(kv, kubeconfig, namespace, wait):
    start_vms_on(kv, namespace, 2, SOURCE, wait)
    kv.create("virtualmachines", namespace, vm_manifest(
        "stuck", spec_extra={"affinity": prefer(SOURCE)}, pvc=rwo_claim(kv.core, namespace, "stuck-data", wait)))
    running_vmi(kv, namespace, "stuck", wait)
    rc, res = run_module(kubeconfig, {"node": SOURCE, "namespace": namespace, "stop_on_failure": True})
    assert rc != 0 and res["changed"] is False
    assert sorted(v["status"] for v in res["vmis"]) == ["failed", "not_started", "not_started"]
    assert res["summary"]["not_started"] == 2
    assert kv.list(VMIMS, namespace) == []


def test_every_moved_vmi_reports_its_source_and_target(kv, kubeconfig, namespace, wait):
    """Defect 2: KubeVirt copies a migration's nodes to the VMIM only after it ended (and in flight never): the
    result takes them from the VMI, so each entry says where the VMI came from and went."""
    start_vms_on(kv, namespace, 3, SOURCE, wait)
    rc, res = run_module(kubeconfig, {"node": SOURCE, "namespace": namespace, "added_node_selector": ZONE_B})
    assert rc == 0, res.get("msg")
    for entry in res["vmis"]:
        now = kv.get(VMIS, namespace, entry["name"])["status"]["nodeName"]
        assert (entry["source_node"], entry["target_node"]) == (SOURCE, now), entry
        assert (entry["migration"]["source_node"], entry["migration"]["target_node"]) == (SOURCE, now), entry


def drain_pods(kv, ns, names):
    """Evict the VMIs' launcher pods as `kubectl drain` does: KubeVirt answers 429 and evacuates each VMI itself
    (VMIMs kubevirt-evacuation-*, annotated kubevirt.io/evacuationMigration with the node)."""
    for name in names:
        [pod] = kv.pods(ns, kv.get(VMIS, ns, name))
        with pytest.raises(client.ApiException) as info:
            kv.core.create_namespaced_pod_eviction(pod.metadata.name, ns, client.V1Eviction(
                metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=ns)))
        assert info.value.status == 429 and "Eviction triggered evacuation" in info.value.body, info.value.body


def test_kubevirts_own_evacuations_are_adopted_and_count_against_the_caps(kv, kubeconfig, namespace, wait):
    """Issue 26: an admin drained node01 by hand (KubeVirt evacuates the VMs itself) and runs the module to finish
    the job. The VMs KubeVirt is moving are followed to their end and reported, flagged adopted, not failed; the
    VM nobody moves yet gets this run's migration, only once KubeVirt's own leave room under
    parallelOutboundMigrationsPerNode (2)."""
    # Slow enough for KubeVirt's first migrations to be in flight still when the module starts on a loaded machine.
    slow = {"sim.vmsched.kubevirt.io/migration-seconds": "40"}
    start_vms_on(kv, namespace, 4, SOURCE, wait, annotations=slow)
    evicted = ["vm00", "vm01", "vm02"]
    drain_pods(kv, namespace, evicted)

    def kubevirts():
        return {m["spec"]["vmiName"]: m for m in kv.list(VMIMS, namespace)
                if m["metadata"]["name"].startswith("kubevirt-evacuation-")}
    # KubeVirt creates two VMIMs at once (its slots: parallelOutboundMigrationsPerNode), the third only when its
    # controller next finds a slot free (1.6.6 counts a Pending VMIM as free): the module may start before it.
    theirs = wait(lambda: (found := kubevirts()) and len(found) >= 2 and found, "KubeVirt's evacuation VMIMs")
    assert set(theirs) <= set(evicted), sorted(theirs)
    assert all(m["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == SOURCE for m in theirs.values())

    rc, res = run_module(kubeconfig, {"node": SOURCE, "namespace": namespace})
    assert rc == 0, res.get("msg")
    assert res["changed"] is True
    entries = {v["name"]: v for v in res["vmis"]}
    assert sorted(entries) == ["vm00", "vm01", "vm02", "vm03"]
    for name, entry in entries.items():
        now = kv.get(VMIS, namespace, name)["status"]["nodeName"]
        assert entry["status"] == "migrated", entry
        assert (entry["source_node"], entry["target_node"]) == (SOURCE, now) and now != SOURCE, entry
        assert entry["duration_seconds"] is not None and entry["duration_seconds"] > 0, entry
    # Every migration KubeVirt started is adopted, the one it had started before the run among them; vm03, which
    # nobody evacuates, gets this run's VMIM; so does an evicted VMI that KubeVirt had not reached yet when the run
    # created its VMIM (KubeVirt then refuses its own second one), else the run adopts KubeVirt's.
    vmims = kv.list(VMIMS, namespace)
    ours = {m["spec"]["vmiName"]: m for m in vmims if RUN_LABEL in (m["metadata"].get("labels") or {})}
    theirs = kubevirts()
    assert set(theirs) | set(ours) == set(entries) and not set(theirs) & set(ours), \
        [m["metadata"]["name"] for m in vmims]
    assert "vm03" in ours and set(ours) <= {"vm02", "vm03"}, sorted(ours)
    for name, entry in entries.items():
        assert entry["adopted"] is (name in theirs), entry
        if name in theirs:
            assert entry["migration"]["name"] == theirs[name]["metadata"]["name"], entry
            assert entry["migration"]["phase"] == "Succeeded", entry
    summary = res["summary"]
    assert (summary["selected"], summary["to_migrate"], summary["migrated"], summary["failed"],
            summary["adopted"]) == (4, 4, 4, 0, len(theirs)), summary

    # When the run created a VMIM, at most one other migration off node01 was still in flight
    # (parallelOutboundMigrationsPerNode 2, the run's own included).
    for mine in ours.values():
        created = stamp(mine["metadata"]["creationTimestamp"])
        alive = [m["metadata"]["name"] for m in vmims if m is not mine
                 and stamp(m["metadata"]["creationTimestamp"]) <= created
                 and all(stamp(p["phaseTransitionTimestamp"]) > created
                         for p in m["status"]["phaseTransitionTimestamps"] if p["phase"] in ("Succeeded", "Failed"))]
        assert len(alive) <= 1, f"{mine['metadata']['name']} created while {alive} were in flight"


# --- the drain plan (issue 28) ---------------------------------------------------------------------------------------

TARGETS = ["node03", "node04"]      # zone b; both take host-model VMs from node01 (Skylake)


def pod_requests(kv, pod):
    """What a pod (client model) requests, as the scheduler (and the drain plan) count it."""
    # Imported here, as test_vmi_migration does: other test modules import this one's helpers.
    from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
    return node_fit.pod_requests(kv.core.api_client.sanitize_for_serialization(pod))


def launcher_requests(kv, ns, vmi):
    [pod] = kv.pods(ns, vmi)
    return pod_requests(kv, pod)


def active_pods_on(kv, node):
    return [p for p in kv.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            if p.status.phase not in ("Succeeded", "Failed")]


def settle(kv, nodes, wait):
    """No pod of an earlier test's namespace still on `nodes` (terminating, or in a namespace being deleted whose
    pods the namespace controller has not reached yet): its room must not come back under a plan."""
    def leaving(node):
        gone = {n.metadata.name for n in kv.core.list_namespace().items if n.status.phase != "Active"}
        return [p.metadata.name for p in active_pods_on(kv, node)
                if p.metadata.deletion_timestamp or p.metadata.namespace in gone]
    for node in nodes:
        wait(lambda node=node: not leaving(node), f"no pod of a deleted namespace on {node}", timeout=120)


def leave_room(kv, ns, node, room, wait):
    """Bind a filler pod to `node` (as the scheduler would) so that `room` bytes of its memory stay free. Pods still
    terminating there (earlier tests' namespaces) are waited for first: their room must not come back later."""
    def on_node():
        return active_pods_on(kv, node)
    settle(kv, [node], wait)
    from ansible_collections.vmsched.kubevirt.plugins.module_utils.node_fit import parse_quantity
    used = sum(pod_requests(kv, p).get("memory", 0.0) for p in on_node())
    filler = parse_quantity(kv.core.read_node(node).status.allocatable["memory"]) - used - room
    assert filler > 0, f"{node} has less than {room:.0f} bytes of memory free; the premise fails"
    kv.core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"filler-{node}"),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(
            name="c", image="registry.example/filler:v1",
            resources=client.V1ResourceRequirements(requests={"memory": str(int(filler))}))])))


def test_a_drain_that_fits_vm_by_vm_but_not_as_a_whole_is_refused_before_any_write(
        kv, kubeconfig, namespace, wait):
    """Three 8Gi VMs on node01; node03 and node04 are filled up to leave room for one and a quarter launcher pods
    each. Each VM fits either node alone (the preflight's candidates), but only two fit at once: the plan names the
    third, check mode and a real run refuse before any write, and with allow_partial and placement=planned the two
    move, each to the node the plan chose."""
    vmis = start_vms_on(kv, namespace, 3, SOURCE, wait, memory="8Gi")
    need = launcher_requests(kv, namespace, vmis[0])["memory"]
    for target in TARGETS:
        leave_room(kv, namespace, target, 1.25 * need, wait)
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    args = {"node": SOURCE, "namespace": namespace, "target_nodes": TARGETS, "cordon": True}

    try:
        rc, res = run_module(kubeconfig, args, check=True)
        assert rc != 0, res
        entries = {v["name"]: v for v in res["vmis"]}
        assert all(entries[n]["candidates"] == TARGETS for n in ("vm00", "vm01", "vm02")), entries
        plan = res["plan"]
        assert sorted(v["target"] for v in plan["vmis"]) == TARGETS, plan
        assert [u["name"] for u in plan["unplaceable"]] == ["vm02"], plan
        reason = plan["unplaceable"][0]["reason"]
        assert "insufficient memory" in reason and "Alone it would fit on node03, node04" in reason, reason
        assert plan["not_migratable"] == [] and plan["waves"] == 1, plan
        assert (entries["vm02"]["status"], entries["vm02"]["failure_reason"]) == ("failed", reason)
        assert entries["vm00"]["status"] == entries["vm01"]["status"] == "planned"
        assert "1 of 3" in res["msg"] and "nothing was changed" in res["msg"] and f"{namespace}/vm02" in res["msg"]
        assert "allow_partial=true moves the others" in res["msg"], res["msg"]

        # The real run refuses the same way, before the cordon.
        rc, res = run_module(kubeconfig, args)
        assert rc != 0 and res["changed"] is False and res["cordoned"] is False, res
        assert sorted(v["status"] for v in res["vmis"]) == ["failed", "not_started", "not_started"]
        assert [u["name"] for u in res["plan"]["unplaceable"]] == ["vm02"]
        assert kv.list(VMIMS, namespace) == []

        def ours():
            found = [e for e in audit_entries(since, USER_AGENT)
                     if (e.get("objectRef") or {}).get("namespace") == namespace]
            return found if sum(1 for e in found if e["verb"] == "list") >= 4 else None    # 2 a run
        wait(ours, "the module's requests in the audit log", timeout=20)
        writes = [(e["verb"], e["requestURI"]) for e in audit_entries(since, USER_AGENT)
                  if e["verb"] not in ("get", "list", "watch")]
        assert writes == [], writes
    finally:
        cordoned = kv.core.read_node(SOURCE).spec.unschedulable
        if cordoned:        # the nodes are shared: never leave node01 cordoned, even when the test fails
            kv.core.patch_node(SOURCE, {"spec": {"unschedulable": None}})
    assert not cordoned, "the refused runs cordoned node01"

    # allow_partial: the two the plan places move, each to its planned node; the third stays and is named.
    rc, res = run_module(kubeconfig, dict(args, cordon=False, placement="planned", allow_partial=True))
    assert rc != 0 and res["changed"] is True, res
    assert res["msg"].startswith("1 of 3 VMI(s) could not be moved: ") and f"{namespace}/vm02" in res["msg"]
    planned = {v["name"]: v["target"] for v in res["plan"]["vmis"]}
    assert sorted(planned) == ["vm00", "vm01"] and sorted(planned.values()) == TARGETS, res["plan"]
    entries = {v["name"]: v for v in res["vmis"]}
    for name, target in planned.items():
        entry = entries[name]
        assert entry["status"] == "migrated", entry
        assert entry["planned_target"] == entry["target_node"] == target, entry
        assert kv.get(VMIS, namespace, name)["status"]["nodeName"] == target
    assert entries["vm02"]["status"] == "failed" and entries["vm02"]["planned_target"] is None
    assert kv.get(VMIS, namespace, "vm02")["status"]["nodeName"] == SOURCE
    vmims = kv.list(VMIMS, namespace)
    assert sorted((m["spec"]["vmiName"], m["spec"]["addedNodeSelector"]["kubernetes.io/hostname"]) for m in vmims) \
        == sorted(planned.items())
    assert all(m["status"]["phase"] == "Succeeded" for m in vmims)


def test_planned_placement_lands_every_vm_where_the_plan_put_it(kv, kubeconfig, namespace, wait):
    settle(kv, TARGETS, wait)       # the drain test's filler pods leave with its namespace
    start_vms_on(kv, namespace, 4, SOURCE, wait)
    args = {"node": SOURCE, "namespace": namespace, "added_node_selector": ZONE_B, "placement": "planned"}

    rc, res = run_module(kubeconfig, args, check=True)
    assert rc == 0 and res["changed"] is True, res.get("msg")
    forecast = {v["name"]: v["target"] for v in res["plan"]["vmis"]}
    assert sorted(forecast) == ["vm00", "vm01", "vm02", "vm03"] and set(forecast.values()) <= set(TARGETS), res
    assert res["plan"]["unplaceable"] == [] and res["plan"]["not_migratable"] == []
    assert res["plan"]["waves"] == 2 and res["plan"]["estimated_seconds"] > 0     # 2 at once from one node
    assert all(v["planned_target"] == forecast[v["name"]] and v["target_node"] is None for v in res["vmis"])
    assert kv.list(VMIMS, namespace) == []

    rc, res = run_module(kubeconfig, args)
    assert rc == 0, res.get("msg")
    planned = {v["name"]: v["target"] for v in res["plan"]["vmis"]}
    assert sorted(planned) == ["vm00", "vm01", "vm02", "vm03"], res["plan"]
    for entry in res["vmis"]:
        now = kv.get(VMIS, namespace, entry["name"])["status"]["nodeName"]
        assert entry["status"] == "migrated", entry
        assert entry["planned_target"] == entry["target_node"] == now == planned[entry["name"]], entry
        assert entry["added_node_selector"] == dict(ZONE_B, **{"kubernetes.io/hostname": now}), entry
    vmims = kv.list(VMIMS, namespace)
    assert sorted((m["spec"]["vmiName"], m["spec"]["addedNodeSelector"]["kubernetes.io/hostname"]) for m in vmims) \
        == sorted(planned.items())
    assert max_overlap(vmims) <= 2
