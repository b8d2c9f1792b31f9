# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration target pod by difference (issue 29): what the collection predicts next to what KubeVirt renders.

For each VM shape below (one parametrized test, the shapes as data): the VM is created and the real virt-controller
renders its launcher pod; then, for each migration round of the shape, VmiMigrator.preflight (the one preflight of
vmi_migration, vmi_evacuation and vm_rebalance) judges every node, a VirtualMachineInstanceMigration is created (with
the round's addedNodeSelector), and the target pod virt-controller renders is compared with the prediction
(target_pod.target_constraints through VmiMigrator.constraints_and_requests): its nodeSelector, affinity and
tolerations, and its requests (the collection takes them from the source launcher pod; the containers' requests and
limits must be the source pod's). The real kube-scheduler's decision is then compared with preflight's candidates:
the node it bound must be one of them, or, when it reports the pod Unschedulable, its FailedScheduling event must
say "0/N nodes are available" for every node and preflight must find no candidate.

What cannot be rendered without a real node, and what is proven instead:
- realtime, NUMA (guestMappingPassthrough) and hugepages, and a GPU: no node of the local control plane has the
  kubevirt.io/realtime label, hugepages or the GPU's device-plugin resource (KWOK nodes have no kernel and no
  device plugin), so the launcher pod stays Unschedulable and the VM never runs: there is no migration. What is
  proven is the launcher pod's rendering (the prediction without a source node: the pod any launcher of the VMI
  gets) and the node fit of that pod against the real scheduler's FailedScheduling count.
- hyperv passthrough: not live-migratable; the differential is preflight's refusal against KubeVirt's own
  (virt-api refuses the VMIM quoting the VMI's LiveMigratable condition).
- a PCI host device needs the HostDevices feature gate (Alpha) and permittedHostDevices: not covered here; the GPU
  (GA) stands for the device-plugin resource.

All VMs are created at once in one namespace (the module's), each shape's test works on its own VM. The shapes whose
rendering differs between KubeVirt releases (read at the tags v1.9.0, v1.6.6 and v1.5.3) carry the marker
kubevirt_differs; `make integration-kubevirt` runs those on 1.6.6 and 1.5.3 too.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Optional

import pytest
from kubernetes import client, dynamic

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, target_pod
from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import Cluster
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import VmiMigrator

from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMIMS,
    VMIS,
    VMS,
    KubeVirt,
    cond,
    kubevirt,
    phase,
    running_vmi,
    vm_manifest,
    vmim_manifest,
    wait_migration,
)

pytestmark = pytest.mark.differential

CREATED_BY = "kubevirt.io/created-by"
MIGRATION_JOB = "kubevirt.io/migrationJobUID"
# Added by the API server's DefaultTolerationSeconds admission plugin to every pod that lacks them, not by KubeVirt.
DEFAULT_TOLERATIONS = ({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": 300},
                       {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": 300})
UNSCHEDULABLE = re.compile(r"^0/(\d+) nodes are available")


@dataclass(frozen=True)
class Shape:
    """A VM shape: what its template adds to vms.vm_manifest's (domain fields merged into the domain, spec fields
    into the spec), and its migration rounds: each the addedNodeSelector of one VMIM (None: none). launcher_only:
    why it never runs here (only its launcher pod is compared). refused: KubeVirt's reason for refusing its
    migration."""
    domain: dict = field(default_factory=dict)
    spec: dict = field(default_factory=dict)
    rounds: tuple = (None,)
    launcher_only: Optional[str] = None
    refused: Optional[str] = None


def _affinity(key, values):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}}}


SHAPES = {
    # nodeselectorrenderer.go Render: v1.CPUManager, "cpumanager" up to 1.7, "kubevirt.io/cpumanager" from 1.8.
    # node02 and node04 have a static CPU manager (nodes.yaml): the VM moves between them.
    "dedicated-cpus": (Shape(domain={"cpu": {"cores": 1, "dedicatedCpuPlacement": True}}), True),
    # virt-api's default model. Two rounds: the second takes the CPU selectors from the source pod, which is the first
    # round's target pod (migration.go prepareNodeSelectorForHostCpuModel, migratedAtLeastOnce). 1.6+ adds the
    # source's CPU vendor (createTargetPod).
    "host-model": (Shape(rounds=(None, None)), True),
    "host-passthrough": (Shape(domain={"cpu": {"cores": 1, "model": "host-passthrough"}}), False),
    # A named model and a required feature: cpu-model and cpu-feature selectors on every launcher pod (1.6+: the
    # source's vendor on the target).
    "named-model": (Shape(domain={"cpu": {"cores": 1, "model": "Skylake-Server",
                                          "features": [{"name": "avx512f", "policy": "require"}]}}), True),
    # A forbidden feature: template.go setNodeAffinityForbiddenFeaturePolicy, a required DoesNotExist on the
    # feature's label. Cascade Lake nodes have tsx-ctrl, so only the Skylake nodes fit; the second round asks for a
    # fast (Cascade Lake) node, which KubeVirt never takes.
    "forbidden-feature": (Shape(domain={"cpu": {"cores": 1, "model": "Skylake-Server",
                                                "features": [{"name": "tsx-ctrl", "policy": "forbid"}]}},
                                rounds=(None, {"cpu": "fast"})), False),
    # Hyper-V reenlightenment needs the cluster's TSC frequency (topology/tsc.go): virt-controller puts the lowest in
    # status.topologyHints and the pod selects scheduling.node.kubevirt.io/tsc-frequency-<Hz>. Kept on the Skylake
    # nodes (their own frequency is the lowest), so that the frequency labels virt-controller's topology updater adds
    # to the Cascade Lake nodes (every 30 s) cannot change the answer between preflight and the scheduler.
    "hyperv-reenlightenment": (Shape(domain={"features": {"hyperv": {"relaxed": {}, "vapic": {},
                                                                     "frequencies": {},
                                                                     "reenlightenment": {"enabled": True}}}},
                                     spec={"nodeSelector": {"cpu": "slow"}}), False),
    "hyperv-passthrough": (Shape(domain={"features": {"hypervPassthrough": {"enabled": True}}},
                                 refused="HypervPassthroughNotLiveMigratable"), False),
    # The VM's own nodeSelector, affinity and tolerations, then an addedNodeSelector: cpu=fast, zone a or c, the
    # dedicated=gpu taint tolerated: node02 and node05; storage=fast keeps both, so the VM moves to the other. The
    # second round asks for storage=slow, which only node04 (zone b) has: no node.
    "own-placement": (Shape(spec={"nodeSelector": {"cpu": "fast"},
                                  "affinity": _affinity("topology.kubernetes.io/zone", ["zone-a", "zone-c"]),
                                  "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                                   "effect": "NoSchedule"}]},
                            rounds=({"storage": "fast"}, {"storage": "slow"})), False),
    # validateRealtime: realtime needs dedicated CPUs and NUMA guestMappingPassthrough, which needs hugepages.
    "realtime-numa-hugepages": (Shape(domain={"cpu": {"cores": 1, "dedicatedCpuPlacement": True, "realtime": {},
                                                      "numa": {"guestMappingPassthrough": {}}},
                                              "memory": {"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}}},
                                      launcher_only="no node has kubevirt.io/realtime nor hugepages-2Mi"), False),
    "gpu": (Shape(domain={"devices": {"gpus": [{"name": "gpu0", "deviceName": "nvidia.com/TU104GL_Tesla_T4"}]}},
                  launcher_only="no node offers nvidia.com/TU104GL_Tesla_T4"), False),
}


def _params():
    for name, (shape, differs) in SHAPES.items():
        yield pytest.param(name, shape, id=name, marks=[pytest.mark.kubevirt_differs] if differs else [])


def vm_name(shape_name):
    return "d-" + shape_name


def vm_body(name, shape):
    body = vm_manifest(name)
    spec = body["spec"]["template"]["spec"]
    devices = dict(spec["domain"]["devices"], **shape.domain.get("devices", {}))
    spec["domain"].update(shape.domain)
    spec["domain"]["devices"] = devices
    spec.update(shape.spec)
    return body


@pytest.fixture(scope="module")
def fleet(request, api_client, kubevirt, wait):
    """One namespace, and in it the VMs of every shape this session runs, created at once."""
    core = client.CoreV1Api(api_client)
    kv = KubeVirt(client.CustomObjectsApi(api_client), core)
    ns = "diff-" + uuid.uuid4().hex[:8]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    wait(lambda: core.read_namespaced_service_account("default", ns), f"default ServiceAccount in {ns}",
         exceptions=(client.ApiException,))
    selected = {item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    for name in selected:
        kv.create(VMS, ns, vm_body(vm_name(name), SHAPES[name][0]))
    yield kv, ns
    core.delete_namespace(ns)


def tolerations_of(pod):
    """The pod's tolerations without those the API server adds to every pod."""
    return [t for t in pod["spec"].get("tolerations") or [] if t not in DEFAULT_TOLERATIONS]


def resources_of(pod):
    return {c["name"]: c.get("resources") or {} for c in pod["spec"].get("containers") or []}


def scheduled(core, cluster, ns, pod_name):
    """(the node the scheduler bound the pod to, None) or (None, its FailedScheduling message), once either is
    known; None before."""
    pod = core.read_namespaced_pod(pod_name, ns)
    if pod.spec.node_name:
        return pod.spec.node_name, None
    if any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or []):
        failed = [e for e in cluster.events_for(ns, "Pod", pod_name) if e.get("reason") == "FailedScheduling"]
        if failed:
            return None, failed[-1]["message"]
    return None


def assert_scheduler_agrees(decision, candidates, nodes, what):
    """The scheduler's node among preflight's candidates; or, Unschedulable, every node refused and no candidate."""
    node, message = decision
    if node:
        assert node in candidates, f"{what}: kube-scheduler bound {node}; preflight's candidates: {candidates}"
        return
    match = UNSCHEDULABLE.match(message)
    assert match, f"{what}: an unexpected FailedScheduling message: {message}"
    assert int(match.group(1)) == len(nodes), message
    assert candidates == [], f"{what}: kube-scheduler: {message}; preflight's candidates: {candidates}"


def pods_of(core, vmi):
    """The VMI's launcher pods that have not ended, as the API's JSON."""
    pods = core.list_namespaced_pod(vmi["metadata"]["namespace"],
                                    label_selector=f"{CREATED_BY}={vmi['metadata']['uid']}").items
    return [p for p in (core.api_client.sanitize_for_serialization(p) for p in pods)
            if p["status"].get("phase") not in ("Succeeded", "Failed")]


@pytest.mark.parametrize("name, shape", list(_params()))
def test_target_pod_is_what_kubevirt_renders(fleet, api_client, kubevirt, wait, name, shape):
    kv, ns = fleet
    cluster = Cluster(dynamic.DynamicClient(api_client))
    vm = vm_name(name)
    if shape.launcher_only:
        launcher_only(cluster, kv, ns, vm, shape, wait)
        return
    vmi = running_vmi(kv, ns, vm, wait, timeout=120)
    if shape.refused:
        refused(cluster, kv, ns, vm, vmi, shape)
        return
    for number, added in enumerate(shape.rounds, 1):
        what = f"{name}, round {number} (addedNodeSelector {added})"
        vmi = running_vmi(kv, ns, vm, wait)
        one_round(cluster, kv, ns, vm, vmi, added, what, f"{vm}-{number}", wait)


def one_round(cluster, kv, ns, vm, vmi, added, what, migration, wait):
    warnings = []
    migrator = VmiMigrator(cluster, warnings.append)
    verdict = migrator.preflight(ns, vm, vmi, dict(added or {}), cluster.list_vmims(ns))
    assert verdict.results is not None and verdict.resources_checked, (what, verdict.message, warnings)
    predicted, requests = migrator.constraints_and_requests(vmi, dict(added or {}))
    [source] = [p for p in pods_of(kv.core, vmi) if p["spec"].get("nodeName") == vmi["status"]["nodeName"]]

    vmim = kv.create(VMIMS, ns, vmim_manifest(migration, vm, added))
    target = wait(lambda: [p for p in pods_of(kv.core, vmi)
                           if (p["metadata"].get("labels") or {}).get(MIGRATION_JOB) == vmim["metadata"]["uid"]],
                  f"{what}: the target pod")[0]

    # The rendering, field by field.
    assert target["spec"].get("nodeSelector") == predicted["nodeSelector"], what
    assert target["spec"].get("affinity") == predicted["affinity"], what
    assert tolerations_of(target) == predicted["tolerations"], what
    assert node_fit.pod_requests(target) == requests, what
    assert resources_of(target) == resources_of(source), what

    # The scheduler's decision against preflight's.
    decision = wait(lambda: scheduled(kv.core, cluster, ns, target["metadata"]["name"]),
                    f"{what}: the scheduler's decision")
    assert_scheduler_agrees(decision, verdict.candidates or [], verdict.results, what)
    if decision[0]:
        wait_migration(kv, ns, migration, wait, timeout=120)
        # The next round starts from the VMI on its new node, its source pod ended.
        wait(lambda: kv.get(VMIS, ns, vm)["status"].get("nodeName") == decision[0]
             and [p["metadata"]["name"] for p in pods_of(kv.core, vmi)] == [target["metadata"]["name"]],
             f"{what}: the VMI on {decision[0]}, its source pod ended")
    else:
        assert verdict.problem and verdict.no_fit, what
        kv.delete(VMIMS, ns, migration)
        wait(lambda: kv.get(VMIMS, ns, migration) is None, f"{what}: the VMIM gone")


def launcher_only(cluster, kv, ns, vm, shape, wait):
    """The launcher pod of a VM that cannot run here: rendered as predicted, and refused by every node, as the
    collection's node fit refuses it."""
    vmi = wait(lambda: kv.get(VMIS, ns, vm), f"VMI {ns}/{vm}")
    [pod] = wait(lambda: pods_of(kv.core, vmi), f"the launcher pod of {vm}")
    decision = wait(lambda: scheduled(kv.core, cluster, ns, pod["metadata"]["name"]),
                    f"{vm}: the scheduler's decision")
    migrator = VmiMigrator(cluster, [].append)
    caps = migrator.detect()
    predicted = target_pod.launcher_constraints(vmi, caps.node_selectors, caps.version)
    assert pod["spec"].get("nodeSelector") == predicted["nodeSelector"], vm
    assert pod["spec"].get("affinity") == predicted["affinity"], vm
    assert tolerations_of(pod) == predicted["tolerations"], vm
    migrator.read_nodes()
    results = migrator.placement().fit(predicted, node_fit.pod_requests(pod), None)
    assert_scheduler_agrees(decision, node_fit.candidates(results), results, f"{vm} ({shape.launcher_only})")


def refused(cluster, kv, ns, vm, vmi, shape):
    """Preflight refuses before any write, quoting the condition KubeVirt refuses the VMIM with."""
    migratable = cond(vmi, "LiveMigratable")
    assert (migratable["status"], migratable["reason"]) == ("False", shape.refused)
    verdict = VmiMigrator(cluster, [].append).preflight(ns, vm, vmi, {}, cluster.list_vmims(ns))
    assert verdict.problem == f"not live-migratable: {shape.refused}: {migratable['message']}"
    with pytest.raises(client.ApiException) as info:
        kv.create(VMIMS, ns, vmim_manifest(f"{vm}-refused", vm))
    assert f"Cannot migrate VMI, Reason: {shape.refused}, Message: {migratable['message']}" in info.value.body
