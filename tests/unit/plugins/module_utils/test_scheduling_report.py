# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the summarizing parts of plugins/module_utils/scheduling_report.py (scheduling_info)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import Capabilities
from ansible_collections.vmsched.kubevirt.plugins.module_utils import scheduling_report as si


def node(name, cpu="4", memory="8Gi", schedulable=True, cordoned=False, images=()):
    labels = {"kubevirt.io/schedulable": "true"} if schedulable else {}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": cordoned} if cordoned else {},
            "status": {"allocatable": {"cpu": cpu, "memory": memory}, "images": [{"names": list(images)}]}}


def pod(name, node_name, cpu="1", memory="1Gi", scheduler=None, launcher_image=None, phase="Running"):
    container = {"name": "compute" if launcher_image else "c", "image": launcher_image or "busybox",
                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    spec = {"nodeName": node_name, "containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    labels = {"kubevirt.io": "virt-launcher"} if launcher_image else {}
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": spec, "status": {"phase": phase}}


def vmi(name, node_name, scheduler=None, phase="Running"):
    spec = {"schedulerName": scheduler} if scheduler else {}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec,
            "status": {"phase": phase, "nodeName": node_name}}


def test_coefficient_of_variation():
    assert si.coefficient_of_variation([2, 2, 2]) == 0
    assert si.coefficient_of_variation([1, 3]) == 0.5
    assert si.coefficient_of_variation([]) is None
    assert si.coefficient_of_variation([0, 0]) is None


def test_report_counts_nodes_schedulers_and_balance():
    nodes = [node("a", images=["quay.io/kubevirt/virt-launcher:v1.6.6"]), node("b", cpu="2000m"),
             node("c", cordoned=True), node("d", schedulable=False)]
    pods = [pod("p1", "a", cpu="500m", launcher_image="quay.io/kubevirt/virt-launcher:v1.6.6"),
            pod("p2", "a", cpu="1500m"), pod("p3", "b", cpu="1", scheduler="vm-sched"),
            pod("done", "b", cpu="8", phase="Succeeded")]
    vmis = [vmi("v1", "a"), vmi("v2", "a", scheduler="vm-sched"), vmi("v3", "b"), vmi("old", "b", phase="Failed")]
    cr = {"status": {"observedKubeVirtRegistry": "quay.io/kubevirt", "observedKubeVirtVersion": "v1.6.6"}}
    deployments = [{"metadata": {"name": "vm-sched", "namespace": "sys", "labels": {
        "app.kubernetes.io/managed-by": "vmsched.kubevirt.secondary_scheduler", "app.kubernetes.io/instance": "vm-sched"}},
        "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}},
        {"metadata": {"name": "other", "namespace": "sys"},
         "spec": {"template": {"spec": {"containers": [{"image": "registry.k8s.io/kube-scheduler:v1.36.0"}]}}}}]
    result = si.report("v1.36.3", Capabilities(version="v1.6.6", added_node_selector=True), nodes, pods, vmis, [],
                       cr, deployments)
    rows = {r["name"]: r for r in result["nodes"]}
    assert rows["a"]["vmi_count"] == 2 and rows["a"]["cpu_requested"] == 2.0
    assert rows["a"]["memory_requested"] == 2 * 2 ** 30 and rows["a"]["memory_allocatable"] == 8 * 2 ** 30
    assert rows["b"]["cpu_allocatable"] == 2.0 and rows["b"]["cpu_requested"] == 1.0
    assert rows["a"]["lists_virt_launcher_image"] is True and rows["b"]["lists_virt_launcher_image"] is False
    assert rows["c"]["unschedulable"] is True
    # balance over a and b only: counts 2, 1; shares 0.5, 0.5
    assert result["balance"] == {"vmi_count_cv": pytest.approx(1 / 3, abs=1e-4), "cpu_share_cv": 0.0,
                                 "nodes": ["a", "b"]}
    schedulers = {s["name"]: s for s in result["schedulers"]}
    assert schedulers["default-scheduler"] == {"name": "default-scheduler", "default": True, "pods": 2, "vmis": 2,
                                               "deployments": []}
    assert schedulers["vm-sched"]["deployments"] == ["sys/vm-sched"] and schedulers["vm-sched"]["vmis"] == 1
    assert schedulers[None]["deployments"] == ["sys/other"] and result["schedulers"][-1]["name"] is None
    assert result["vmis_on_default_scheduler"] == ["ns/v1", "ns/v3"]
    assert result["kubevirt"]["parallel_migrations_per_cluster"] == 5


def test_unknown_launcher_image_is_null():
    result = si.report("v1.36.3", Capabilities(), [node("a")], [], [], [], None, [])
    assert result["nodes"][0]["lists_virt_launcher_image"] is None
    assert result["balance"]["vmi_count_cv"] is None


def test_migrations_in_flight_only():
    vmims = [{"metadata": {"name": "m1", "namespace": "ns", "creationTimestamp": "2026-01-02T00:00:00Z"},
              "spec": {"vmiName": "v1"}, "status": {"phase": "Running",
                                                    "migrationState": {"sourceNode": "a", "targetNode": "b"}}},
             {"metadata": {"name": "m0", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
              "spec": {"vmiName": "v2"}},
             {"metadata": {"name": "done", "namespace": "ns"}, "spec": {"vmiName": "v3"},
              "status": {"phase": "Succeeded"}}]
    assert si.summarize_migrations(vmims) == [
        {"namespace": "ns", "name": "m0", "vmi": "v2", "phase": None, "source_node": None, "target_node": None,
         "cancel_requested": False},
        {"namespace": "ns", "name": "m1", "vmi": "v1", "phase": "Running", "source_node": "a", "target_node": "b",
         "cancel_requested": False}]


def test_migrations_in_flight_take_their_nodes_from_the_vmi_and_the_target_pod():
    """As KubeVirt has it: an in-flight VMIM carries no nodes; the VMI does once handed off, the target pod before."""
    def vmim(name, vmi, uid, phase, deleting=False):
        meta = {"name": name, "namespace": "ns", "uid": uid, "creationTimestamp": "2026-01-0%sT00:00:00Z" % uid}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-05T00:00:00Z"
        return {"metadata": meta, "spec": {"vmiName": vmi}, "status": {"phase": phase,
                                                                      "migrationState": {"sourcePod": "p"}}}
    vmis = [{"metadata": {"name": "handed", "namespace": "ns"},
             "status": {"nodeName": "a", "migrationState": {"migrationUid": "1", "sourceNode": "a", "targetNode": "b"}}},
            {"metadata": {"name": "early", "namespace": "ns"},
             "status": {"nodeName": "c", "migrationState": {"migrationUid": "old", "sourceNode": "x", "targetNode": "c"}}}]
    pods = [{"metadata": {"labels": {"kubevirt.io/migrationJobUID": "2"}}, "spec": {"nodeName": "d"}}]
    got = si.summarize_migrations([vmim("m1", "handed", "1", "Running", deleting=True),
                                   vmim("m2", "early", "2", "Scheduling")], vmis, pods)
    assert [(m["name"], m["source_node"], m["target_node"], m["cancel_requested"]) for m in got] == [
        ("m1", "a", "b", True), ("m2", "c", "d", False)]
