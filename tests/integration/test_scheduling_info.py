# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmsched.kubevirt.scheduling_info against the local control plane and its real KubeVirt.

The module reports cluster-wide while other tests create and delete VMs on the same
cluster. So the expected figures are computed here, independently (the kubernetes
client's own quantity parser, plain Python statistics), from direct API lists taken
right before AND right after the module runs; the comparison is made only when both
agree, i.e. nothing the report looks at changed in between (retried otherwise).
"""
from __future__ import annotations

import json
import re
import statistics

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from . import ansible_module
# real_scheduler is a fixture: imported so that pytest finds it for this module's tests.
from .local_scheduler import real_scheduler  # noqa: F401  pylint: disable=unused-import
from .vms import (  # noqa: F401  pylint: disable=unused-import
    GROUP,
    VERSION,
    VMIMS,
    VMIS,
    VMS,
    kv,
    running_vmi,
    kubevirt,
    start_vm,
    vm_manifest,
    vmim_manifest,
)

MODULE = "vmsched.kubevirt.scheduling_info"
from .audit import AUDIT_LOG  # noqa: E402  pylint: disable=wrong-import-position
USER_AGENT = "vmsched.kubevirt/scheduling_info"
SLOW = {"sim.vmsched.kubevirt.io/migration-seconds": "60"}


def run_module(kubeconfig, args=None):
    return ansible_module.run_module(MODULE, kubeconfig, args)


# --- the independent computation ------------------------------------------------------------------


def _requests(pod):
    """Effective requests of a pod (client models), as the scheduler counts them: containers summed; native
    sidecars (init containers with restartPolicy Always, like the launcher's guest-console-log) summed with them;
    other init containers as a max over their stages (each plus the sidecars started before it); overhead added."""
    total, sidecars, peak = {}, {}, {}
    for container in pod.spec.containers or []:
        for res, qty in ((container.resources and container.resources.requests) or {}).items():
            total[res] = total.get(res, 0) + parse_quantity(qty)
    for container in pod.spec.init_containers or []:
        stage = {res: parse_quantity(qty)
                 for res, qty in ((container.resources and container.resources.requests) or {}).items()}
        if container.restart_policy == "Always":
            for res, amount in stage.items():
                total[res] = total.get(res, 0) + amount
                sidecars[res] = sidecars.get(res, 0) + amount
            stage = dict(sidecars)
        else:
            stage = {res: stage.get(res, 0) + sidecars.get(res, 0) for res in set(stage) | set(sidecars)}
        for res, amount in stage.items():
            peak[res] = max(peak.get(res, 0), amount)
    for res, amount in peak.items():
        total[res] = max(total.get(res, 0), amount)
    for res, qty in (pod.spec.overhead or {}).items():
        total[res] = total.get(res, 0) + parse_quantity(qty)
    return total


def _cv(values):
    if not values or statistics.fmean(values) == 0:
        return None
    return statistics.pstdev(values) / statistics.fmean(values)


def expected_report(core, apps, custom):
    nodes = core.list_node().items
    pods = [p for p in core.list_pod_for_all_namespaces().items if p.status.phase not in ("Succeeded", "Failed")]
    vmis = [v for v in custom.list_cluster_custom_object(GROUP, VERSION, VMIS)["items"]
            if (v.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    vmims = custom.list_cluster_custom_object(GROUP, VERSION, VMIMS)["items"]
    deployments = apps.list_deployment_for_all_namespaces().items

    per_node = {}
    for node in nodes:
        alloc = node.status.allocatable or {}
        per_node[node.metadata.name] = {
            "name": node.metadata.name, "vmi_count": 0, "cpu_requested": 0, "memory_requested": 0,
            "cpu_allocatable": float(parse_quantity(alloc.get("cpu", "0"))),
            "memory_allocatable": int(parse_quantity(alloc.get("memory", "0"))),
            "taints": [(t.key, t.value, t.effect) for t in node.spec.taints or []],
            "unschedulable": bool(node.spec.unschedulable)}
    for pod in pods:
        if pod.spec.node_name in per_node:
            req = _requests(pod)
            per_node[pod.spec.node_name]["cpu_requested"] += req.get("cpu", 0)
            per_node[pod.spec.node_name]["memory_requested"] += req.get("memory", 0)
    for vmi in vmis:
        node = (vmi.get("status") or {}).get("nodeName")
        if node in per_node:
            per_node[node]["vmi_count"] += 1
    rows = []
    for name in sorted(per_node):
        row = per_node[name]
        row["cpu_requested"] = float(row["cpu_requested"])
        row["memory_requested"] = int(row["memory_requested"])
        rows.append(row)

    usable = [r for r, n in zip(rows, sorted(nodes, key=lambda n: n.metadata.name))
              if not r["unschedulable"] and (n.metadata.labels or {}).get("kubevirt.io/schedulable") == "true"]
    schedulers = {}
    for pod in pods:
        name = pod.spec.scheduler_name or "default-scheduler"
        schedulers.setdefault(name, {"pods": 0, "vmis": 0})["pods"] += 1
    for vmi in vmis:
        name = (vmi.get("spec") or {}).get("schedulerName") or "default-scheduler"
        schedulers.setdefault(name, {"pods": 0, "vmis": 0})["vmis"] += 1
    secondary = sorted(f"{d.metadata.namespace}/{d.metadata.name}" for d in deployments
                       if (d.metadata.labels or {}).get("app.kubernetes.io/managed-by")
                       == "vmsched.kubevirt.secondary_scheduler")
    in_flight = sorted(f"{m['metadata']['namespace']}/{m['metadata']['name']}" for m in vmims
                       if (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                       and not m["metadata"].get("deletionTimestamp"))
    return {
        "nodes": rows,
        "vmi_count_cv": _cv([r["vmi_count"] for r in usable]),
        "cpu_share_cv": _cv([r["cpu_requested"] / r["cpu_allocatable"] for r in usable if r["cpu_allocatable"]]),
        "balance_nodes": [r["name"] for r in usable],
        "schedulers": schedulers,
        "secondary": secondary,
        "on_default": sorted(f"{v['metadata']['namespace']}/{v['metadata']['name']}" for v in vmis
                             if ((v.get("spec") or {}).get("schedulerName") or "default-scheduler")
                             == "default-scheduler"),
        "in_flight": in_flight,
    }


def audit_since(offset):
    """Audit entries of the module written after `offset` bytes of the log."""
    entries = []
    with open(AUDIT_LOG, "rb") as handle:
        handle.seek(offset)
        for line in handle:
            if USER_AGENT.encode() not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("userAgent", "").startswith(USER_AGENT):
                entries.append(entry)
    return entries


@pytest.fixture
def apis(api_client):
    return client.CoreV1Api(api_client), client.AppsV1Api(api_client), client.CustomObjectsApi(api_client)


def test_figures_equal_an_independent_count(kv, apis, kubeconfig, namespace, wait):
    core, apps, custom = apis
    test_scheduler = f"sched-{namespace}"   # no such scheduler runs: its VMI stays unscheduled
    # VMs spread by the real scheduler, one pinned to a fast node, one on a scheduler that does not exist.
    for index in range(4):
        kv.create(VMS, namespace, vm_manifest(f"vm{index}"))
    kv.create(VMS, namespace, vm_manifest("pinned", spec_extra={"nodeSelector": {"cpu": "fast"}}))
    kv.create(VMS, namespace, vm_manifest("slow", annotations=SLOW))
    kv.create(VMS, namespace, vm_manifest("orphan", spec_extra={"schedulerName": test_scheduler}))
    for name in ["vm0", "vm1", "vm2", "vm3", "pinned", "slow"]:
        running_vmi(kv, namespace, name, wait)
    wait(lambda: kv.get(VMIS, namespace, "orphan"), "VMI orphan created")
    # A secondary scheduler Deployment as the secondary_scheduler role labels it (no replicas: no pods needed).
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": test_scheduler, "labels": {
            "app.kubernetes.io/managed-by": "vmsched.kubevirt.secondary_scheduler",
            "app.kubernetes.io/instance": test_scheduler}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": test_scheduler}},
                 "template": {"metadata": {"labels": {"app": test_scheduler}},
                              "spec": {"containers": [{"name": "s", "image": "example.invalid/scheduler:v1"}]}}}})
    # A migration that stays Running for a minute.
    kv.create(VMIMS, namespace, vmim_manifest("move-slow", "slow", annotations=SLOW))
    wait(lambda: (kv.get(VMIMS, namespace, "move-slow") or {}).get("status", {}).get("phase") == "Running",
         "VMIM move-slow Running")

    for _attempt in range(10):
        before = expected_report(core, apps, custom)
        offset = AUDIT_LOG.stat().st_size
        rc, res = run_module(kubeconfig)
        after = expected_report(core, apps, custom)
        if before == after:
            break
    else:
        pytest.fail("the cluster kept changing under the report in 10 attempts", pytrace=False)
    assert rc == 0 and res["changed"] is False, res.get("msg")
    expected = before

    assert [n["name"] for n in res["nodes"]] == [n["name"] for n in expected["nodes"]]
    for got, want in zip(res["nodes"], expected["nodes"]):
        assert got["vmi_count"] == want["vmi_count"], got["name"]
        assert got["cpu_requested"] == pytest.approx(want["cpu_requested"], abs=1e-3), got["name"]
        assert got["cpu_allocatable"] == pytest.approx(want["cpu_allocatable"], abs=1e-3), got["name"]
        assert got["memory_requested"] == want["memory_requested"], got["name"]
        assert got["memory_allocatable"] == want["memory_allocatable"], got["name"]
        assert [(t["key"], t.get("value"), t["effect"]) for t in got["taints"]] == want["taints"], got["name"]
        assert got["unschedulable"] is want["unschedulable"], got["name"]
    # Our VMs are counted on the nodes they run on.
    ours = {}
    for name in ["vm0", "vm1", "vm2", "vm3", "pinned", "slow"]:
        node = kv.get(VMIS, namespace, name)["status"]["nodeName"]
        ours[node] = ours.get(node, 0) + 1
    counts = {n["name"]: n["vmi_count"] for n in res["nodes"]}
    assert all(counts[node] >= count for node, count in ours.items())
    assert sum(n["vmi_count"] for n in res["nodes"]) >= 6

    assert res["balance"]["nodes"] == expected["balance_nodes"] and "node06" not in res["balance"]["nodes"]
    assert res["balance"]["vmi_count_cv"] == pytest.approx(expected["vmi_count_cv"], abs=1e-4)
    assert res["balance"]["cpu_share_cv"] == pytest.approx(expected["cpu_share_cv"], abs=1e-4)
    assert res["balance"]["vmi_count_cv"] is not None and res["balance"]["cpu_share_cv"] is not None

    schedulers = {s["name"]: s for s in res["schedulers"]}
    assert {name: {"pods": s["pods"], "vmis": s["vmis"]} for name, s in schedulers.items()
            if s["pods"] or s["vmis"]} == expected["schedulers"]
    assert schedulers[test_scheduler]["deployments"] == [f"{namespace}/{test_scheduler}"]
    assert schedulers[test_scheduler]["vmis"] >= 1 and schedulers[test_scheduler]["default"] is False
    assert schedulers["default-scheduler"]["default"] is True
    assert sorted(d for s in res["schedulers"] for d in s["deployments"]
                  if s["name"] is not None) == expected["secondary"]

    assert res["vmis_on_default_scheduler"] == expected["on_default"]
    assert f"{namespace}/vm0" in res["vmis_on_default_scheduler"]
    assert f"{namespace}/orphan" not in res["vmis_on_default_scheduler"]

    assert sorted(f"{m['namespace']}/{m['name']}" for m in res["migrations_in_flight"]) == expected["in_flight"]
    mine = [m for m in res["migrations_in_flight"] if m["namespace"] == namespace]
    assert len(mine) == 1 and mine[0]["vmi"] == "slow" and mine[0]["phase"] == "Running"
    # KubeVirt puts no nodes on an in-flight VMIM: they come from the VMI (issue 18, defect 2).
    state = kv.get(VMIS, namespace, "slow")["status"]["migrationState"]
    assert (mine[0]["source_node"], mine[0]["target_node"]) == (state["sourceNode"], state["targetNode"])
    assert mine[0]["source_node"] and mine[0]["target_node"] and mine[0]["cancel_requested"] is False

    assert res["kubevirt"]["version"] == kv.custom.list_cluster_custom_object(
        GROUP, VERSION, "kubevirts")["items"][0]["status"]["observedKubeVirtVersion"]
    assert res["kubevirt"]["supports_added_node_selector"] is True
    assert res["kubevirt"]["parallel_migrations_per_cluster"] == 5
    assert res["kubevirt"]["parallel_outbound_migrations_per_node"] == 2
    assert res["server_version"] == client.VersionApi(core.api_client).get_code().git_version
    # The cluster's node fixtures list the launcher image in status.images on some nodes only.
    launcher = "quay.io/kubevirt/virt-launcher:" + res["kubevirt"]["version"]
    for node in core.list_node().items:
        listed = any(launcher in (image.names or []) for image in node.status.images or [])
        assert {n["name"]: n for n in res["nodes"]}[node.metadata.name]["lists_virt_launcher_image"] is listed

    # One list call per kind, plus GET /version; nothing else, and no writes. CronJobs and MutatingAdmissionPolicies
    # (v1, served from Kubernetes 1.36) are what the roles may have installed.
    def requests():
        found = audit_since(offset)
        return found if len(found) >= 9 else None
    entries = wait(requests, "the module's requests in the audit log", timeout=20)
    calls = sorted((e["verb"], (e.get("objectRef") or {}).get("resource") or e["requestURI"]) for e in entries)
    assert calls == sorted([("list", "nodes"), ("list", "pods"), ("list", "virtualmachineinstances"),
                            ("list", "virtualmachineinstancemigrations"), ("list", "kubevirts"),
                            ("list", "deployments"), ("list", "cronjobs"), ("list", "mutatingadmissionpolicies"),
                            ("get", "/version")]), calls
    # An admin may list every kind: none is null (unreadable).
    assert sorted(res["installed"]) == ["deschedulers", "schedulers", "vm_defaults"], res["installed"]
    assert all(isinstance(found, list) for found in res["installed"].values()), res["installed"]


# kube-scheduler at -v=10 logs, for each pod it scores: "Plugin scored node for pod" pod="ns/name" plugin="X" node="n" score=N
SCORE_LINE = re.compile(r'"Plugin scored node for pod" pod="(?P<pod>[^"]+)" plugin="ImageLocality" node="(?P<node>[^"]+)" '
                        r'score=(?P<score>\d+)')


def logged_image_locality(log_text, pod):
    return {m["node"]: int(m["score"]) for m in SCORE_LINE.finditer(log_text) if m["pod"] == pod}


def test_image_locality_exposure_is_what_the_real_scheduler_computes(
        kv, core, kubeconfig, namespace, wait, real_scheduler):
    """The per-node ImageLocality scores scheduling_info predicts for a virt-launcher pod are those a real kube-scheduler
    of the cluster's version (default profile) logs for it; the listing and the cap come from the nodes' status."""
    name = f"il-{namespace}"
    scheduler = real_scheduler({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": name}]},
                               kubeconfig, verbosity=10)
    wait(scheduler.healthy, "the real kube-scheduler's /healthz", timeout=60)
    kv.create(VMS, namespace, vm_manifest("vm", spec_extra={"schedulerName": name}))
    vmi = running_vmi(kv, namespace, "vm", wait)
    pod = kv.pods(namespace, vmi)[0]
    key = f"{namespace}/{pod.metadata.name}"
    logged = wait(lambda: logged_image_locality(scheduler.log_path.read_text(), key), f"ImageLocality scores of {key}")

    rc, res = run_module(kubeconfig)
    assert rc == 0, res.get("msg")
    exposure = res["image_locality"]
    assert exposure["reference_pod"] == key   # the newest launcher pod: this test's
    rows = {row["name"]: row for row in res["nodes"]}
    assert {node: rows[node]["image_locality_score"] for node in logged} == logged

    # Independently from the nodes' status: which nodes that take VMs list the pod's launcher image, at which count.
    launcher = next(c.image for c in pod.spec.containers if c.name == "compute")
    vm_nodes = sorted(n.metadata.name for n in core.list_node().items
                      if not n.spec.unschedulable and (n.metadata.labels or {}).get("kubevirt.io/schedulable") == "true")
    listing = [n.metadata.name for n in core.list_node().items if n.metadata.name in vm_nodes
               and any(launcher in (image.names or []) for image in n.status.images or [])]
    assert exposure["nodes_listing"] == sorted(listing) == ["node01", "node03"]
    # node05 is tainted: VMs that tolerate the taint run there, so it counts, but this pod was not scored on it.
    assert exposure["nodes_not_listing"] == [n for n in vm_nodes if n not in listing] == ["node02", "node04", "node05"]
    assert sorted(logged) == ["node01", "node02", "node03", "node04"]
    assert exposure["nodes_at_image_cap"] == vm_nodes
    assert all(rows[n]["images_reported"] == len(core.read_node(n).status.images) == 50 for n in rows)
    # No node lists the VM's containerDisk: the scores are the launcher's alone, and the scheduler saw the difference.
    assert logged["node01"] == logged["node03"] == exposure["score_on_listing_nodes"] > 0
    assert logged["node02"] == logged["node04"] == exposure["score_on_other_nodes"] == 0
    assert exposure["score_difference"] == logged["node01"] and exposure["exposed"] is True
    assert "node02, node04, node05" in exposure["advice"] and "kubevirt profile" in exposure["advice"]
