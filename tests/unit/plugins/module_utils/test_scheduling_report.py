# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the summarizing parts of plugins/module_utils/scheduling_report.py (scheduling_info)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import Capabilities
from ansible_collections.vmsched.kubevirt.plugins.module_utils import scheduling_report as si
from ansible_collections.vmsched.kubevirt.plugins.module_utils import plan


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
    spread = result["balance"].pop("spread")
    assert result["balance"] == {"vmi_count_cv": pytest.approx(1 / 3, abs=1e-4), "cpu_share_cv": 0.0,
                                 "nodes": ["a", "b"]}
    # vm_rebalance's figures (plan.spread) over the same nodes: one definition of spread
    assert spread["vms"] == {"cv": 0.3333, "max_min": 2, "per_node": {"a": 2, "b": 1}}
    assert spread["cpu"] == plan.spread({"a": 2.0, "b": 1.0}) and spread["cpu"]["max_min"] == 2
    assert spread["memory"] == plan.spread({"a": 2 * 2 ** 30, "b": rows["b"]["memory_requested"]})
    assert spread["vms"]["cv"] == result["balance"]["vmi_count_cv"]
    schedulers = {s["name"]: s for s in result["schedulers"]}
    assert schedulers["default-scheduler"] == {"name": "default-scheduler", "default": True, "pods": 2, "vmis": 2,
                                               "deployments": []}
    assert schedulers["vm-sched"]["deployments"] == ["sys/vm-sched"] and schedulers["vm-sched"]["vmis"] == 1
    assert schedulers[None]["deployments"] == ["sys/other"] and result["schedulers"][-1]["name"] is None
    assert result["vmis_on_default_scheduler"] == ["ns/v1", "ns/v3"]
    assert result["kubevirt"]["parallel_migrations_per_cluster"] == 5


def test_nodes_carry_readiness_and_labels_and_the_kubevirt_cr_its_identity():
    ready, not_ready, unknown, silent = node("a"), node("b"), node("c"), node("d", schedulable=False)
    ready["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    unknown["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    cr = {"metadata": {"name": "kv", "namespace": "kubevirt"}, "status": {"phase": "Deployed"}}
    result = si.report("v1.36.3", Capabilities(), [ready, not_ready, unknown, silent], [], [], [], cr, [])
    assert [(r["name"], r["ready"]) for r in result["nodes"]] == [("a", True), ("b", False), ("c", None), ("d", None)]
    assert result["nodes"][0]["labels"] == {"kubevirt.io/schedulable": "true"} and result["nodes"][3]["labels"] == {}
    assert (result["kubevirt"]["namespace"], result["kubevirt"]["name"], result["kubevirt"]["phase"]) \
        == ("kubevirt", "kv", "Deployed")
    none = si.report("v1.36.3", Capabilities(), [], [], [], [], None, [])["kubevirt"]
    assert (none["namespace"], none["name"], none["phase"]) == (None, None, None)


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
        return {"metadata": meta, "spec": {"vmiName": vmi},
                "status": {"phase": phase, "migrationState": {"sourcePod": "p"}}}
    vmis = [{"metadata": {"name": "handed", "namespace": "ns"},
             "status": {"nodeName": "a", "migrationState": {"migrationUid": "1", "sourceNode": "a", "targetNode": "b"}}},
            {"metadata": {"name": "early", "namespace": "ns"},
             "status": {"nodeName": "c", "migrationState": {"migrationUid": "old", "sourceNode": "x", "targetNode": "c"}}}]
    pods = [{"metadata": {"labels": {"kubevirt.io/migrationJobUID": "2"}}, "spec": {"nodeName": "d"}}]
    got = si.summarize_migrations([vmim("m1", "handed", "1", "Running", deleting=True),
                                   vmim("m2", "early", "2", "Scheduling")], vmis, pods)
    assert [(m["name"], m["source_node"], m["target_node"], m["cancel_requested"]) for m in got] == [
        ("m1", "a", "b", True), ("m2", "c", "d", False)]


# --- ImageLocality ----------------------------------------------------------------------------------------------

MB = 1024 * 1024   # kube-scheduler's tests write sizes in MiB
LAUNCHER = "quay.io/kubevirt/virt-launcher:v1.9.0"
LAUNCHER_BYTES = 457875233


def status_node(name, images, cordoned=False, schedulable=True):
    """A node whose status.images is the given [(names, size)] list."""
    result = node(name, cordoned=cordoned, schedulable=schedulable)
    result["status"]["images"] = [{"names": list(names), "sizeBytes": size} for names, size in images]
    return result


# Cases of kube-scheduler's own TestImageLocalityPriority (pkg/scheduler/framework/plugins/imagelocality/
# image_locality_test.go, v1.36.3), with the scores it expects.
UPSTREAM_NODES = {
    "403002000": [(["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB),
                  (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB), (["gcr.io/2000:latest"], 2000 * MB)],
    "25010": [(["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)],
    "60040900": [(["gcr.io/600:latest"], 600 * MB), (["gcr.io/40:latest"], 40 * MB), (["gcr.io/900:latest"], 900 * MB)],
    "300600900": [(["gcr.io/300:latest"], 300 * MB), (["gcr.io/600:latest"], 600 * MB),
                  (["gcr.io/900:latest"], 900 * MB)],
    "400030": [(["gcr.io/4000:latest"], 4000 * MB), (["gcr.io/30:latest"], 30 * MB)],
    "203040": [(["gcr.io/20:latest"], 20 * MB), (["gcr.io/30:latest"], 30 * MB), (["gcr.io/40:latest"], 40 * MB)],
    "none": [],
}


def upstream_scores(containers, init, volumes, node_images, server_version):
    """The scores of a pod of these images on nodes shaped like upstream's test nodes (node1, node2, ...)."""
    nodes = [status_node("node%d" % (i + 1), UPSTREAM_NODES[key]) for i, key in enumerate(node_images)]
    pod = {"spec": {"containers": [{"image": i} for i in containers], "initContainers": [{"image": i} for i in init],
                    "volumes": [{"name": "v", "image": {"reference": r}} for r in volumes]}}
    refs, count = si.pod_images(pod, server_version)
    states = si.image_states(nodes)
    return [si.image_locality_score(refs, count, n["metadata"]["name"], states, len(nodes)) for n in nodes]


@pytest.mark.parametrize("containers, init, volumes, node_images, expected", [
    (["gcr.io/40", "gcr.io/250"], [], [], ["403002000", "25010"], [0, 5]),
    (["gcr.io/40", "gcr.io/300"], [], [], ["403002000", "25010"], [7, 0]),
    (["gcr.io/10", "gcr.io/4000"], [], [], ["400030", "25010"], [100, 0]),
    (["gcr.io/10", "gcr.io/4000"], [], [], ["400030", "25010", "none"], [66, 0, 0]),
    (["gcr.io/300", "gcr.io/600", "gcr.io/900"], [], [], ["60040900", "300600900", "none"], [32, 36, 0]),
    (["gcr.io/30", "gcr.io/40"], [], [], ["203040", "400030"], [1, 0]),
    (["gcr.io/30"], [], ["gcr.io/300"], ["300600900", "400030"], [12, 0]),   # an image volume counts
    (["gcr.io/30"], ["gcr.io/300"], [], ["403002000", "203040"], [6, 0]),    # an init container counts, and widens
])
def test_image_locality_score_agrees_with_kube_scheduler(containers, init, volumes, node_images, expected):
    assert upstream_scores(containers, init, volumes, node_images, "v1.36.3") == expected


def test_pod_images_normalize_like_the_scheduler():
    pod = {"spec": {"initContainers": [{"image": "reg:5000/a"}], "containers": [{"image": "b:v1"}, {"image": "c@sha256:x"}],
                    "volumes": [{"name": "v", "image": {"reference": "d"}}, {"name": "e", "emptyDir": {}}]}}
    assert si.pod_images(pod, "v1.36.3") == (["reg:5000/a:latest", "b:v1", "c@sha256:x", "d:latest"], 3)


# The upstream case "pod with ImageVolume" (pod gcr.io/30, image volume gcr.io/300) in each release's
# image_locality_test.go: 1.35.4 has no image volumes in ImageLocality, 1.36.3 expects 12, 1.37.2 expects 6
# (the volume widens the maximum). An unstamped server (v0.0.0) gets the newest rules.
@pytest.mark.parametrize("server_version, expected", [
    ("v1.34.4", [0, 0]), ("v1.35.4", [0, 0]), ("v1.36.3", [12, 0]), ("v1.37.2", [6, 0]), ("v1.37.2+k3s1", [6, 0]),
    ("v0.0.0", [6, 0]),
])
def test_image_volumes_count_as_the_servers_release_counts_them(server_version, expected):
    assert upstream_scores(["gcr.io/30"], [], ["gcr.io/300"], ["300600900", "400030"], server_version) == expected


def launcher_pod(name, created, node_name="a", init=True, disk=True):
    """A virt-launcher pod as KubeVirt v1.9.0 makes it for a VM with a containerDisk."""
    result = pod(name, node_name, launcher_image=LAUNCHER)
    result["metadata"]["creationTimestamp"] = created
    if init:
        result["spec"]["initContainers"] = [{"name": "guest-console-log", "image": LAUNCHER}]
    if disk:
        result["spec"]["initContainers"].append({"name": "volumeroot", "image": "quay.io/containerdisks/fedora:41"})
        result["spec"]["volumes"] = [{"name": "root", "image": {"reference": "quay.io/containerdisks/fedora:41"}},
                                     {"name": "launcher-volume", "image": {"reference": LAUNCHER}}]
    return result


def fifty(prefix, launcher=False):
    """50 images (a kubelet at its default cap), the launcher among them if asked."""
    images = [(["registry.example/%s-%02d:v1" % (prefix, k)], (600 + k) * 1000000) for k in range(50)]
    if launcher:
        images[-1] = (["quay.io/kubevirt/virt-launcher@sha256:abc", LAUNCHER], LAUNCHER_BYTES)
    return images


def exposure_nodes():
    """a, c list the launcher at the cap; b is at the cap without it; d reports 12 images, none the launcher;
    e lists it but is cordoned; f lists it but is not a KubeVirt node."""
    return [status_node("a", fifty("a", launcher=True)), status_node("b", fifty("b")),
            status_node("c", fifty("c", launcher=True)), status_node("d", fifty("d")[:12]),
            status_node("e", fifty("e", launcher=True), cordoned=True),
            status_node("f", fifty("f", launcher=True), schedulable=False)]


def test_exposure_lists_nodes_caps_and_the_score_difference():
    nodes = exposure_nodes()
    pods = [launcher_pod("virt-launcher-old", "2026-01-01T00:00:00Z", disk=False),
            launcher_pod("virt-launcher-new", "2026-01-02T00:00:00Z")]
    cr = {"status": {"observedKubeVirtRegistry": "quay.io/kubevirt", "observedKubeVirtVersion": "v1.9.0"}}
    result = si.report("v1.36.3", Capabilities(version="v1.9.0"), nodes, pods, [], [], cr, [])
    exposure = result["image_locality"]
    assert exposure["launcher_images"] == [LAUNCHER]
    assert exposure["reference_pod"] == "ns/virt-launcher-new"
    assert exposure["nodes_listing"] == ["a", "c"] and exposure["nodes_not_listing"] == ["b", "d"]
    assert exposure["nodes_at_image_cap"] == ["a", "b", "c"]
    # 4 of the 6 nodes list it: 3 launcher references (guest-console-log, compute, launcher-volume) x 457875233 x 4/6,
    # over 3 containers: 100 * (915750465 - 23 MiB) // (3000 MiB - 23 MiB) = 28.
    assert exposure["score_on_listing_nodes"] == 28 and exposure["score_on_other_nodes"] == 0
    assert exposure["score_difference"] == 28 and exposure["exposed"] is True
    advice = exposure["advice"]
    assert "28 more points" in advice and "kubevirt profile" in advice and "nodeStatusMaxImages" in advice
    assert "default cap of 50 images: b." in advice and "below the default cap" in advice and advice.endswith(": d.")
    rows = {r["name"]: r for r in result["nodes"]}
    assert [rows[n]["images_reported"] for n in "abcdef"] == [50, 50, 50, 12, 50, 50]
    assert [rows[n]["image_locality_score"] for n in "abcdef"] == [28, 0, 28, 0, 28, 28]


def test_exposure_counts_the_whole_pod_per_node():
    """The per-node score is the reference pod's whole score: its containerDisk image counts where it is listed."""
    nodes = exposure_nodes()
    nodes[1]["status"]["images"][0] = {"names": ["quay.io/containerdisks/fedora:41"], "sizeBytes": 3000000000}
    result = si.report("v1.36.3", Capabilities(), nodes, [launcher_pod("p", "2026-01-01T00:00:00Z")], [], [], None, [])
    rows = {r["name"]: r for r in result["nodes"]}
    # fedora:41 on b only: 2 references (init volumeroot, volume root) x 3e9 x 1/6 = 1e9 -> 100 * (1e9 - 23 MiB) //
    # (3000 MiB - 23 MiB) = 31; the launcher part of the summary does not change.
    assert rows["b"]["image_locality_score"] == 31 and rows["a"]["image_locality_score"] == 28
    assert result["image_locality"]["score_difference"] == 28


def test_no_exposure_when_every_vm_node_lists_the_launcher():
    nodes = [status_node("a", fifty("a", launcher=True)), status_node("b", fifty("b", launcher=True)),
             status_node("c", fifty("c"), cordoned=True)]
    result = si.report("v1.36.3", Capabilities(), nodes, [launcher_pod("p", "2026-01-01T00:00:00Z")], [], [], None, [])
    exposure = result["image_locality"]
    assert exposure["nodes_listing"] == ["a", "b"] and exposure["nodes_not_listing"] == []
    assert exposure["score_difference"] == 0 and exposure["exposed"] is False and exposure["advice"] is None
    assert exposure["score_on_other_nodes"] is None and exposure["score_on_listing_nodes"] > 0


def test_no_exposure_when_no_vm_node_lists_the_launcher():
    nodes = [status_node("a", fifty("a")), status_node("b", fifty("b"))]
    result = si.report("v1.36.3", Capabilities(), nodes, [launcher_pod("p", "2026-01-01T00:00:00Z")], [], [], None, [])
    exposure = result["image_locality"]
    assert exposure["nodes_listing"] == [] and exposure["nodes_not_listing"] == ["a", "b"]
    assert exposure["exposed"] is False and exposure["score_on_other_nodes"] == 0


def test_exposure_without_a_launcher_pod_assumes_the_smallest_one():
    """No VM runs: the launcher from the KubeVirt CR, in KubeVirt's smallest pod (compute + guest-console-log)."""
    cr = {"status": {"observedKubeVirtRegistry": "quay.io/kubevirt", "observedKubeVirtVersion": "v1.9.0"}}
    result = si.report("v1.36.3", Capabilities(), exposure_nodes(), [], [], [], cr, [])
    exposure = result["image_locality"]
    # 2 references x 457875233 x 4/6 over 2 containers: 100 * (610500310 - 23 MiB) // (2000 MiB - 23 MiB) = 28.
    assert exposure["reference_pod"] is None and exposure["score_difference"] == 28
    assert exposure["nodes_listing"] == ["a", "c"]


def test_exposure_unknown_without_a_launcher_image():
    result = si.report("v1.36.3", Capabilities(), exposure_nodes(), [], [], [], None, [])
    exposure = result["image_locality"]
    assert exposure["exposed"] is None and exposure["nodes_listing"] is None and exposure["advice"] is None
    assert exposure["nodes_at_image_cap"] == ["a", "b", "c"]
    assert all(r["image_locality_score"] is None for r in result["nodes"])


def test_eviction_at_risk_names_opted_in_vmis_an_eviction_would_restart_or_never_move():
    evict = {"descheduler.alpha.kubernetes.io/evict": "true"}

    def opted(name, strategy=None, migratable=True, on_pod=False):
        obj = vmi(name, "node01")
        obj["metadata"]["uid"] = "uid-" + name
        if strategy:
            obj["spec"]["evictionStrategy"] = strategy
        if not on_pod:
            obj["metadata"]["annotations"] = dict(evict)
        obj["status"]["conditions"] = [{"type": "LiveMigratable", "status": "True" if migratable else "False",
                                        "message": "cannot migrate VMI: PVC is not shared"}]
        return obj

    launcher = pod("virt-launcher-podonly", "node01", launcher_image="quay.io/kubevirt/virt-launcher:v1.9.0")
    labels = dict(launcher["metadata"]["labels"], **{"kubevirt.io/created-by": "uid-podonly"})
    launcher["metadata"].update(annotations=dict(evict), labels=labels)
    vmis = [opted("default"), opted("podonly", on_pod=True), opted("safe", "LiveMigrate"),
            opted("stuck", "LiveMigrate", migratable=False), opted("ifpossible", "LiveMigrateIfPossible", False),
            vmi("untouched", "node01")]
    risky = si.eviction_at_risk(vmis, [launcher], None)
    assert [(r["name"], r["outcome"], r["strategy"]) for r in risky] == [
        ("default", "restart", "None"), ("ifpossible", "restart", "LiveMigrateIfPossible"),
        ("podonly", "restart", "None"), ("stuck", "blocked", "LiveMigrate")]
    assert "KubeVirt's default" in risky[0]["reason"] and "PVC is not shared" in risky[1]["reason"]
    cr = {"spec": {"configuration": {"evictionStrategy": "LiveMigrate"}}}
    assert [r["name"] for r in si.eviction_at_risk(vmis, [launcher], cr)] == ["ifpossible", "stuck"]
    assert si.report("v1.36.3", Capabilities(), [], [launcher], vmis, [], cr, [])["eviction_at_risk"] \
        == si.eviction_at_risk(vmis, [launcher], cr)


def managed(kind, name, who, namespace="vmsched", instance=None, pod=None):
    meta = {"name": name, "labels": {"app.kubernetes.io/managed-by": who, "app.kubernetes.io/instance": instance or name}}
    if namespace:
        meta["namespace"] = namespace
    spec = {"template": {"spec": pod}} if kind == "Deployment" else {"jobTemplate": {"spec": {"template": {"spec": pod}}}}
    return {"kind": kind, "metadata": meta, "spec": spec}


def test_installed_reads_what_the_roles_left_in_the_cluster_by_their_labels():
    scheduler = managed("Deployment", "kubevirt-scheduler", si.SECONDARY_SCHEDULER_MANAGED_BY,
                        pod={"containers": [{"image": "registry.k8s.io/kube-scheduler:v1.37.2"}]})
    looping = managed("Deployment", "descheduler", si.DESCHEDULER_MANAGED_BY,
                      pod={"containers": [{"image": "d:v0.36.0", "args": ["--policy-config-file=/p", "--dry-run"]}]})
    nightly = managed("CronJob", "nightly", si.DESCHEDULER_MANAGED_BY, namespace="ops",
                      pod={"containers": [{"image": "d:v0.36.0", "args": ["--policy-config-file=/p"]}]})
    stranger = {"metadata": {"name": "other", "namespace": "x"}, "spec": {"template": {"spec": {"containers": [{}]}}}}
    policy = managed("MutatingAdmissionPolicy", "vmsched-vm-defaults", si.VM_DEFAULTS_MANAGED_BY, namespace=None)
    found = si.installed([scheduler, looping, stranger], [nightly], "v1beta1", [policy, stranger])
    assert found["schedulers"] == [{"namespace": "vmsched", "name": "kubevirt-scheduler", "kind": "Deployment",
                                    "instance": "kubevirt-scheduler",
                                    "image": "registry.k8s.io/kube-scheduler:v1.37.2"}]
    assert [(d["namespace"], d["kind"], d["dry_run"]) for d in found["deschedulers"]] == [
        ("ops", "CronJob", False), ("vmsched", "Deployment", True)]
    assert found["vm_defaults"] == [{"name": "vmsched-vm-defaults",
                                     "api_version": "admissionregistration.k8s.io/v1beta1"}]


def test_installed_says_null_for_what_could_not_be_read_and_empty_for_what_is_not_there():
    assert si.installed([], None, None, None) == {"schedulers": [], "deschedulers": None, "vm_defaults": None}
    assert si.installed(None, [], "v1", []) == {"schedulers": None, "deschedulers": None, "vm_defaults": []}
