# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local control plane's KubeVirt: real virt-controller and virt-api, the simulated virt-handler.

What these tests pin down is KubeVirt's behaviour as the collection meets it on a real
cluster: the launcher pod KubeVirt renders, its admission, migrations, aborts, evacuation.
Placement comes from the real kube-scheduler. The node agent's part (tests/cluster/virt_handler/)
is checked against what virt-handler writes. Every test works in its own namespace.
"""
from __future__ import annotations

import json
import time

import pytest
from kubernetes import client
from virt_handler import faults  # tests/cluster, on sys.path (conftest.py)
from virt_handler.versions import release

from .audit import AUDIT_LOG
from .vms import (  # noqa: F401  pylint: disable=unused-import
    FAST_NODES,
    MIGRATION_PHASES,
    SLOW_NODES,
    VMIMS,
    VMIS,
    VMS,
    cond,
    expect_refused,
    kubevirt,
    kv,
    phase,
    running_vmi,
    start_vm,
    vm_manifest,
    vmim_manifest,
    wait_migration,
)

SKYLAKE_REQUIRED = {"ss", "vmx", "pdcm", "hypervisor", "tsc_adjust", "clflushopt", "umip", "md-clear", "stibp",
                    "arch-capabilities", "ssbd", "xsaves", "ibpb", "amd-stibp", "amd-ssbd", "skip-l1dfl-vmentry",
                    "pschange-mc-no"}


# The nodes, as virt-handler leaves them ---------------------------------------------------------------

CPU_MANAGER_NODES = {"node02", "node04"}      # nodes.yaml: cpu_manager_policy static


def test_nodes_carry_what_virt_handler_puts_there(core, kubevirt):
    words = release(kubevirt)
    for node in core.list_node().items:
        labels, annotations = node.metadata.labels, node.metadata.annotations
        assert labels["kubevirt.io/schedulable"] == "true", node.metadata.name
        assert annotations["kubevirt.io/heartbeat"].endswith("Z")
        # heartbeat.go do(): a static CPU manager and the CR's CPUManager gate; every release's label names
        cpu_manager = "true" if node.metadata.name in CPU_MANAGER_NODES else "false"
        assert {k: labels[k] for k in words.cpumanager_labels} == dict.fromkeys(words.cpumanager_labels, cpu_manager)
        # KSM: no ksmConfiguration in the CR (1.5 heartbeat.go, 1.6+ ksm.go patchKSM)
        assert (labels["kubevirt.io/ksm-enabled"], annotations["kubevirt.io/ksm-handler-managed"]) == ("false", "false")
        assert {node.status.allocatable[f"devices.kubevirt.io/{d}"] for d in ("kvm", "tun", "vhost-net")} == {"1k"}
        assert labels["machine-type.node.kubevirt.io/q35"] == "true"
        assert labels["cpu-vendor.node.kubevirt.io/Intel"] == "true"
        host_models = [k.split("/", 1)[1] for k in labels if k.startswith("host-model-cpu.node.kubevirt.io/")]
        expected = "Skylake-Server-IBRS" if labels["cpu"] == "slow" else "Cascadelake-Server"
        assert host_models == [expected], node.metadata.name
        # Obsolete models (Conroe, qemu64, kvm64) are never offered (DefaultObsoleteCPUModels).
        assert not [k for k in labels if k.endswith(("/Conroe", "/qemu64", "/kvm64"))]
    skylake = core.read_node("node01").metadata.labels
    assert {k.split("/", 1)[1] for k in skylake if k.startswith("host-model-required-features.")} == SKYLAKE_REQUIRED
    # 1.6+: every model libvirt knows is a possible migration model, usable or not.
    assert skylake["cpu-model-migration.node.kubevirt.io/Cascadelake-Server"] == "true"
    assert "cpu-model.node.kubevirt.io/Cascadelake-Server" not in skylake
    assert "cpu-feature.node.kubevirt.io/tsx-ctrl" not in skylake


def test_virt_handler_runs_as_its_own_identity_per_node(kv, kubevirt, api_client, core, namespace, wait):
    """Each node's part runs as kubevirt/kubevirt-handler with a token bound to that node's virt-handler pod. From
    1.9 KubeVirt's node restriction (a beta gate, on by default) refuses node01's handler a VMI of another node."""
    start_vm(kv, namespace, "guarded", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    vmi = kv.get(VMIS, namespace, "guarded")
    writers = wait(lambda: {(e["user"]["username"], (e["user"].get("extra") or {}).get(
        "authentication.kubernetes.io/node-name", [None])[0]) for e in audit_events()
        if (e.get("objectRef") or {}).get("resource") == "virtualmachineinstances"
        and (e.get("objectRef") or {}).get("namespace") == namespace and e["verb"] == "update"
        and e["user"]["username"].endswith(":kubevirt-handler")},
        "virt-handler's VMI updates in the audit log", timeout=20)
    assert writers == {("system:serviceaccount:kubevirt:kubevirt-handler", vmi["status"]["nodeName"])}, writers
    if not kubevirt.startswith("v1.9."):
        return
    pod = [p for p in core.list_namespaced_pod("kubevirt", label_selector="kubevirt.io=virt-handler").items
           if p.spec.node_name == "node01"][0]
    token = core.create_namespaced_service_account_token("kubevirt-handler", "kubevirt", client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600, bound_object_ref=client.V1BoundObjectReference(
            kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid)))).status.token
    config = client.Configuration()
    config.host, config.ssl_ca_cert = api_client.configuration.host, api_client.configuration.ssl_ca_cert
    config.api_key = {"authorization": "Bearer " + token}
    handler = client.CustomObjectsApi(client.ApiClient(config))
    vmi["metadata"].setdefault("annotations", {})["probe"] = "x"
    with pytest.raises(client.ApiException) as info:
        handler.replace_namespaced_custom_object("kubevirt.io", "v1", namespace, VMIS, "guarded", vmi)
    assert "Node restriction, virt-handler is only allowed to modify VMIs it owns" in info.value.body


def test_obsolete_cpu_models_of_the_kubevirt_cr_and_the_labellers_skip_annotation(kv, core, namespace, wait):
    """The labeller runs again when the CR changes (SetConfigModifiedCallback) with the CR's obsoleteCPUModels: a
    Skylake host model made obsolete marks node01, whose launcher-pod affinity (obsolete-host-model DoesNotExist)
    then keeps a host-model VM off it. node03, annotated node-labeller.kubevirt.io/skip-node, is left as it was."""
    obsolete = "node-labeller.kubevirt.io/obsolete-host-model"
    skip = {"metadata": {"annotations": {"node-labeller.kubevirt.io/skip-node": "true"}}}
    core.patch_node("node03", skip)
    cr = kv.custom.list_namespaced_custom_object("kubevirt.io", "v1", "kubevirt", "kubevirts")["items"][0]

    def set_obsolete(models):
        kv.custom.patch_namespaced_custom_object("kubevirt.io", "v1", "kubevirt", "kubevirts", cr["metadata"]["name"],
                                                 {"spec": {"configuration": {"obsoleteCPUModels": models}}})
    try:
        set_obsolete({"Skylake-Server-IBRS": True})
        node01 = wait(lambda: (n := core.read_node("node01").metadata.labels).get(obsolete) == "true" and n,
                      "node01 labelled obsolete-host-model")
        assert node01["cpu-model.node.kubevirt.io/Conroe"] == "true"      # the CR's map replaces the defaults
        assert "cpu-model.node.kubevirt.io/Skylake-Server-IBRS" not in node01
        node03 = core.read_node("node03").metadata.labels
        assert obsolete not in node03 and "cpu-model.node.kubevirt.io/Conroe" not in node03
        vmi = start_vm(kv, namespace, "modern-only", wait, spec_extra={"nodeSelector": {"cpu": "slow"}})
        assert vmi["status"]["nodeName"] == "node03"
    finally:
        set_obsolete(None)
        core.patch_node("node03", {"metadata": {"annotations": {"node-labeller.kubevirt.io/skip-node": None}}})
    wait(lambda: obsolete not in core.read_node("node01").metadata.labels and "cpu-model.node.kubevirt.io/Conroe"
         not in core.read_node("node01").metadata.labels, "node01's labels back to the default obsolete models")


def test_dedicated_cpus_run_where_virt_handler_found_a_cpu_manager(kv, kubevirt, namespace, wait):
    """A VM with dedicated CPUs: its launcher pod selects the release's CPU manager label, which virt-handler puts
    on the nodes with a static CPU manager only."""
    domain = vm_manifest("pinned")["spec"]["template"]["spec"]["domain"]
    domain["cpu"] = {"cores": 1, "dedicatedCpuPlacement": True}
    vmi = start_vm(kv, namespace, "pinned", wait, spec_extra={"domain": domain})
    [pod] = kv.pods(namespace, vmi)
    assert pod.spec.node_selector[release(kubevirt).cpumanager_selector] == "true"
    assert vmi["status"]["nodeName"] in CPU_MANAGER_NODES


def test_hyperv_passthrough_is_not_live_migratable(kv, namespace, wait):
    """vm.go calculateLiveMigrationCondition and calculateLiveStorageMigrationCondition (1.5 to 1.9)."""
    domain = vm_manifest("hv")["spec"]["template"]["spec"]["domain"]
    domain["features"] = {"hypervPassthrough": {"enabled": True}}
    vmi = start_vm(kv, namespace, "hv", wait, spec_extra={"domain": domain})
    migratable = cond(vmi, "LiveMigratable")
    assert (migratable["status"], migratable["reason"], migratable["message"]) == \
        ("False", "HypervPassthroughNotLiveMigratable", "VMI uses hyperv passthrough")
    storage = cond(vmi, "StorageLiveMigratable")
    assert (storage["status"], storage["reason"], storage["message"]) == \
        ("False", "NotMigratable", "HypervPassthroughNotLiveMigratable: VMI uses hyperv passthrough")
    expect_refused(kv, namespace, vmim_manifest("nope", "hv"),
                   "Cannot migrate VMI, Reason: HypervPassthroughNotLiveMigratable, Message: VMI uses hyperv passthrough")


def audit_events():
    with open(AUDIT_LOG, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if '"virtualmachineinstances"' in line]


# VM -> VMI -> virt-launcher pod ----------------------------------------------------------------------

def test_vm_runs_on_a_node_the_real_scheduler_chose(kv, core, namespace, wait):
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    base = vm_manifest("web")["spec"]["template"]["spec"]
    base["domain"].update(cpu={"cores": 2}, resources={"requests": {"memory": "512Mi"}})
    base["domain"].pop("memory")
    vm = kv.create(VMS, namespace, vm_manifest(
        "web", spec_extra={"nodeSelector": {"cpu": "fast"}, "tolerations": tolerations,
                           "schedulerName": "default-scheduler", "evictionStrategy": "LiveMigrate",
                           "domain": base["domain"]},
        annotations={"descheduler.alpha.kubernetes.io/evict": "true"}, labels={"tier": "front"}))
    vmi = running_vmi(kv, namespace, "web", wait)
    node = vmi["status"]["nodeName"]
    assert node in FAST_NODES | {"node05"}, f"cpu=fast nodes are node02, node04 and (tolerated) node05, got {node}"
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == node
    owner = vmi["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
        ("VirtualMachine", "web", vm["metadata"]["uid"], True)
    assert vmi["metadata"]["labels"]["tier"] == "front"
    assert (cond(vmi, "LiveMigratable") or {}).get("status") == "True"
    assert vmi["spec"]["domain"]["cpu"]["model"] == "host-model"      # virt-api's default
    assert [p["phase"] for p in vmi["status"]["phaseTransitionTimestamps"]] == \
        ["Pending", "Scheduling", "Scheduled", "Running"]
    assert vmi["status"]["selinuxContext"] == "none" and vmi["status"]["machine"]["type"] == "pc-q35-rhel9.6.0"

    [pod] = kv.pods(namespace, vmi)
    assert pod.metadata.name.startswith("virt-launcher-web-") and len(pod.metadata.name) == len("virt-launcher-web-") + 5
    assert pod.spec.node_name == node and pod.status.phase == "Running"
    assert vmi["status"]["activePods"] == {pod.metadata.uid: node}
    assert vmi["status"]["interfaces"][0]["ipAddress"] == pod.status.pod_ip
    labels = pod.metadata.labels
    assert labels["kubevirt.io"] == "virt-launcher" and labels["kubevirt.io/created-by"] == vmi["metadata"]["uid"]
    assert labels["vm.kubevirt.io/name"] == "web" and labels["tier"] == "front"
    annotations = pod.metadata.annotations
    assert annotations["kubevirt.io/domain"] == "web"
    assert annotations["descheduler.alpha.kubernetes.io/evict"] == "true"
    [ref] = pod.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == \
        ("VirtualMachineInstance", "web", vmi["metadata"]["uid"], True, True)
    assert pod.spec.node_selector == {"cpu": "fast", "kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64",
                                      "machine-type.node.kubevirt.io/q35": "true"}
    [term] = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [(e.key, e.operator) for e in term.match_expressions] == \
        [("node-labeller.kubevirt.io/obsolete-host-model", "DoesNotExist")]
    assert [(t.key, t.value, t.effect) for t in pod.spec.tolerations if t.key == "dedicated"] == \
        [("dedicated", "gpu", "NoSchedule")]
    assert pod.spec.scheduler_name == "default-scheduler"
    assert [g.condition_type for g in pod.spec.readiness_gates] == ["kubevirt.io/virtual-machine-unpaused"]
    # The containerDisk is an image volume where KubeVirt's ImageVolume gate is on by default (Beta in 1.9,
    # Alpha in 1.6: pkg/virt-config/featuregate/active.go), a container of its own before.
    image_volumes = kv_version(kv) >= "v1.9"
    assert [c.name for c in pod.spec.containers] == (["compute"] if image_volumes else ["compute", "volumeroot"])
    compute = pod.spec.containers[0]
    assert compute.image == f"quay.io/kubevirt/virt-launcher:{kv_version(kv)}"
    # 512Mi + overhead 1Mi page tables + 220Mi + 2 x 8Mi per vCPU + 8Mi IOThread + 32Mi video; 2 vCPUs / 10
    assert compute.resources.requests == {"cpu": "200m", "memory": "789Mi", "ephemeral-storage": "50M",
                                          "devices.kubevirt.io/kvm": "1", "devices.kubevirt.io/tun": "1",
                                          "devices.kubevirt.io/vhost-net": "1"}
    assert "guest-console-log" in [c.name for c in pod.spec.init_containers]

    # The real scheduler bound it.
    events = wait(lambda: [e for e in core.list_namespaced_event(namespace).items
                           if e.reason == "Scheduled" and e.involved_object.name == pod.metadata.name],
                  "the scheduler's Scheduled event")
    assert events[0].reporting_component == "default-scheduler" or events[0].source.component == "default-scheduler"

    vm = wait(lambda: (v := kv.get(VMS, namespace, "web")) and (v.get("status") or {}).get("ready") and v,
              "VM status ready")
    assert vm["status"]["printableStatus"] == "Running" and vm["status"]["created"] is True


def kv_version(kv):
    cr = kv.custom.list_cluster_custom_object("kubevirt.io", "v1", "kubevirts")["items"][0]
    return cr["status"]["observedKubeVirtVersion"]


def test_running_false_and_halted_stop_the_vm(kv, namespace, wait):
    body = vm_manifest("legacy")
    del body["spec"]["runStrategy"]
    body["spec"]["running"] = True
    kv.create(VMS, namespace, body)
    vmi = running_vmi(kv, namespace, "legacy", wait)
    kv.patch(VMS, namespace, "legacy", {"spec": {"running": False}})
    wait(lambda: kv.get(VMIS, namespace, "legacy") is None, "VMI deleted after running: false")
    wait(lambda: not kv.pods(namespace, vmi, active=False), "launcher pod garbage collected")
    wait(lambda: (kv.get(VMS, namespace, "legacy").get("status") or {}).get("printableStatus") == "Stopped",
         "VM printableStatus Stopped")

    start_vm(kv, namespace, "modern", wait)
    kv.patch(VMS, namespace, "modern", {"spec": {"runStrategy": "Halted"}})
    wait(lambda: kv.get(VMIS, namespace, "modern") is None, "VMI deleted after runStrategy Halted")
    kv.patch(VMS, namespace, "modern", {"spec": {"runStrategy": "Always"}})
    running_vmi(kv, namespace, "modern", wait)


def test_deleted_launcher_pod_fails_the_vmi_and_the_vm_restarts_it(kv, core, namespace, wait):
    vmi = start_vm(kv, namespace, "crashy", wait)
    [pod] = kv.pods(namespace, vmi)
    core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    fresh = wait(lambda: (v := kv.get(VMIS, namespace, "crashy")) and v["metadata"]["uid"] != vmi["metadata"]["uid"]
                 and phase(v) == "Running" and v, "a new VMI after the launcher pod died")
    assert fresh["status"]["nodeName"]


def test_unschedulable_vm_reports_error_unschedulable(kv, namespace, wait):
    kv.create(VMS, namespace, vm_manifest("nowhere", spec_extra={"nodeSelector": {"cpu": "quantum"}}))
    vm = wait(lambda: (v := kv.get(VMS, namespace, "nowhere")) and
              (v.get("status") or {}).get("printableStatus") == "ErrorUnschedulable" and v,
              "VM printableStatus ErrorUnschedulable")
    vmi = kv.get(VMIS, namespace, "nowhere")
    assert phase(vmi) == "Scheduling"
    assert (cond(vmi, "PodScheduled") or {}).get("reason") == "Unschedulable"
    assert not vm["status"].get("ready")


def test_user_may_not_change_a_vmi_spec(kv, namespace, wait):
    start_vm(kv, namespace, "fixed", wait)
    with pytest.raises(client.ApiException) as info:
        kv.patch(VMIS, namespace, "fixed", {"spec": {"nodeSelector": {"cpu": "fast"}}})
    assert "update of VMI object is restricted" in info.value.body


# Migrations ----------------------------------------------------------------------------------------

def test_migration_to_added_node_selector_succeeds_and_vmi_wins_collisions(kv, namespace, wait):
    vmi = start_vm(kv, namespace, "mover", wait, spec_extra={"nodeSelector": {"cpu": "slow"}})
    source = vmi["status"]["nodeName"]
    assert source in SLOW_NODES
    [source_pod] = kv.pods(namespace, vmi)
    target = (SLOW_NODES - {source}).pop()
    # cpu: fast collides with the VMI's cpu: slow; KubeVirt keeps the VMI's value, so the target stays reachable.
    kv.create(VMIMS, namespace, vmim_manifest("move", "mover",
                                              {"kubernetes.io/hostname": target, "cpu": "fast"}))
    vmim = wait_migration(kv, namespace, "move", wait)

    assert [p["phase"] for p in vmim["status"]["phaseTransitionTimestamps"]] == MIGRATION_PHASES
    assert vmim["metadata"]["labels"]["kubevirt.io/vmi-name"] == "mover"
    vmim = wait(lambda: (m := kv.get(VMIMS, namespace, "move")) and
                "kubevirt.io/migrationJobFinalize" not in (m["metadata"].get("finalizers") or [])
                and (m["status"].get("migrationState") or {}).get("targetNode") and m,
                "the finished VMIM with its final migrationState and no finalizer")
    vmi = kv.get(VMIS, namespace, "mover")
    state = vmi["status"]["migrationState"]
    assert (state["sourceNode"], state["targetNode"], state["completed"]) == (source, target, True)
    assert state["migrationUid"] == vmim["metadata"]["uid"] and state["sourcePod"] == source_pod.metadata.name
    assert state["startTimestamp"] and state["endTimestamp"] and not state.get("failed")
    # The target's virt-handler listens on its own migration IP, its pod's (not the launcher's); a containerDisk is
    # copied, so beside libvirt's own (0) its proxies stand for the direct (49152) and the block (49153) ports.
    [handler] = [p for p in kv.core.list_namespaced_pod("kubevirt", label_selector="kubevirt.io=virt-handler").items
                 if p.spec.node_name == target]
    assert vmi["status"]["migrationMethod"] == "BlockMigration"
    assert state["targetNodeAddress"] == handler.status.pod_ip
    assert sorted(state["targetDirectMigrationNodePorts"].values()) == [0, 49152, 49153]
    assert vmim["status"]["migrationState"]["targetNode"] == target
    assert vmi["status"]["nodeName"] == target and vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == target
    # The target's virt-handler removes the target label in a write of its own after completed (T6 in
    # tests/cluster/virt_handler/migration.py, finalCleanup in KubeVirt): it may come after the VMIM's finalizer goes.
    wait(lambda: "kubevirt.io/migrationTargetNodeName" not in kv.get(VMIS, namespace, "mover")["metadata"]["labels"],
         "the target label removed")
    [target_pod] = wait(lambda: (ps := kv.pods(namespace, vmi)) and len(ps) == 1 and ps, "the source pod ended")
    assert target_pod.metadata.name == state["targetPod"] and target_pod.spec.node_name == target
    assert target_pod.metadata.labels["kubevirt.io/migrationJobUID"] == vmim["metadata"]["uid"]
    selector = target_pod.spec.node_selector
    assert {k: selector[k] for k in ("cpu", "kubernetes.io/hostname", "kubevirt.io/schedulable")} == \
        {"cpu": "slow", "kubernetes.io/hostname": target, "kubevirt.io/schedulable": "true"}
    # host-model: the source's model and required features, and its vendor, as target constraints
    assert selector["cpu-model-migration.node.kubevirt.io/Skylake-Server-IBRS"] == "true"
    assert {k.split("/", 1)[1] for k in selector if k.startswith("cpu-feature.")} == SKYLAKE_REQUIRED
    assert selector["cpu-vendor.node.kubevirt.io/Intel"] == "true"
    [term] = target_pod.spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert term.label_selector.match_labels == {"kubevirt.io/created-by": vmi["metadata"]["uid"]}
    assert term.topology_key == "kubernetes.io/hostname"
    # activePods lists every pod the VMI controls, the ended source pod too (lifecycle.go setActivePods).
    vmi = wait(lambda: (v := kv.get(VMIS, namespace, "mover")) and v["status"]["activePods"] ==
               {target_pod.metadata.uid: target, source_pod.metadata.uid: source} and v, "activePods")
    assert kv.core.read_namespaced_pod(source_pod.metadata.name, namespace).status.phase == "Succeeded"
    # The target's virt-handler reports the interfaces from its own pod, in a status update of its own.
    wait(lambda: kv.get(VMIS, namespace, "mover")["status"]["interfaces"][0].get("ipAddress") ==
         target_pod.status.pod_ip, "the target pod's IP on the VMI")
    vm = wait(lambda: (v := kv.get(VMS, namespace, "mover")) and v["status"]["printableStatus"] == "Running" and v,
              "VM back to Running after Migrating")
    assert vm["status"]["ready"]


def test_host_model_vm_cannot_move_to_an_older_cpu(kv, core, namespace, wait):
    """A VM started on Cascade Lake needs its model and features on the target: a Skylake node never fits."""
    prefer_node02 = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node02"]}]}]}}}
    vmi = start_vm(kv, namespace, "modern", wait, spec_extra={"affinity": prefer_node02})
    kv.create(VMIMS, namespace, vmim_manifest(
        "down", "modern", {"kubernetes.io/hostname": "node01"},
        annotations={"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "600"}))
    pod = wait(lambda: [p for p in kv.pods(namespace, vmi) if p.metadata.labels.get("kubevirt.io/migrationJobUID")
                        and p.status.conditions and any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                                                        for c in p.status.conditions)],
               "the target pod unschedulable")[0]
    assert pod.spec.node_selector["cpu-model-migration.node.kubevirt.io/Cascadelake-Server"] == "true"
    assert pod.spec.node_selector["cpu-feature.node.kubevirt.io/tsx-ctrl"] == "true"
    kv.delete(VMIMS, namespace, "down")
    wait(lambda: kv.get(VMIMS, namespace, "down") is None, "the cancelled VMIM gone")


def test_migration_to_impossible_selector_fails_after_unschedulable_timeout(kv, core, namespace, wait):
    vmi = start_vm(kv, namespace, "stuck", wait)
    source = vmi["status"]["nodeName"]
    started = time.monotonic()
    kv.create(VMIMS, namespace, vmim_manifest(
        "nowhere", "stuck", {"kubernetes.io/hostname": "no-such-node"},
        annotations={"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "3"}))
    wait(lambda: [p for p in kv.pods(namespace, vmi) if p.metadata.labels.get("kubevirt.io/migrationJobUID")],
         "a target pod")
    vmim = wait_migration(kv, namespace, "nowhere", wait, phases=("Failed", "Succeeded"), timeout=60)
    assert phase(vmim) == "Failed"
    assert time.monotonic() - started >= 2, "failed before the unschedulable timeout"
    assert [p["phase"] for p in vmim["status"]["phaseTransitionTimestamps"]] == ["Pending", "Scheduling", "Failed"]
    assert not (vmim["status"].get("migrationState") or {}).get("failureReason"), "KubeVirt reports this by events"
    wait(lambda: len(kv.pods(namespace, vmi)) == 1, "the target pod deleted")
    vmi = kv.get(VMIS, namespace, "stuck")
    assert phase(vmi) == "Running" and vmi["status"]["nodeName"] == source
    assert not vmi["status"].get("migrationState"), "never handed off, so the VMI keeps no migration state"
    reasons = {e.reason for e in core.list_namespaced_event(namespace).items
               if e.involved_object.name == "nowhere"}
    assert {"migrationTargetPodUnschedulable", "FailedMigration"} <= reasons


def test_migration_refused_for_missing_vmi(kv, namespace):
    exc = expect_refused(kv, namespace, vmim_manifest("ghost", "no-such-vmi"),
                         "migration-create-validator.kubevirt.io", f'the VMI \\"{namespace}/no-such-vmi\\" does not exist')
    assert exc.status == 400


def test_second_migration_refused_while_one_is_in_flight(kv, namespace, wait):
    start_vm(kv, namespace, "busy", wait, annotations={"sim.vmsched.kubevirt.io/migration-seconds": "30"})
    first = kv.create(VMIMS, namespace, vmim_manifest("first", "busy"))
    wait_migration(kv, namespace, "first", wait, phases=("Running",))
    expect_refused(kv, namespace, vmim_manifest("second", "busy"),
                   "in-flight migration detected", first["metadata"]["uid"])


def test_not_migratable_vmi_refused_with_its_reason(kv, kubevirt, namespace, wait):
    """KubeVirt's default binding on the pod network, bridge, cannot live-migrate (virt-handler decides)."""
    vmi = start_vm(kv, namespace, "pinned", wait, interface="bridge")
    migratable = cond(vmi, "LiveMigratable")
    assert (migratable["status"], migratable["reason"], migratable["message"]) == \
        ("False", "InterfaceNotLiveMigratable", release(kubevirt).interface_not_migratable)
    expect_refused(kv, namespace, vmim_manifest("nope", "pinned"),
                   "Cannot migrate VMI, Reason: InterfaceNotLiveMigratable, Message: cannot migrate VMI which "
                   "does not use masquerade")


def test_deleting_a_running_migration_aborts_it(kv, kubevirt, namespace, wait):
    vmi = start_vm(kv, namespace, "abortee", wait, annotations={"sim.vmsched.kubevirt.io/migration-seconds": "60"})
    source = vmi["status"]["nodeName"]
    vmim = kv.create(VMIMS, namespace, vmim_manifest("doomed", "abortee"))
    assert "kubevirt.io/migrationJobFinalize" in vmim["metadata"]["finalizers"]
    wait_migration(kv, namespace, "doomed", wait, phases=("Running",))
    target_pod = kv.get(VMIS, namespace, "abortee")["status"]["migrationState"]["targetPod"]
    kv.delete(VMIMS, namespace, "doomed")
    wait(lambda: kv.get(VMIMS, namespace, "doomed") is None, "the VMIM gone once its finalizer is removed")
    vmi = kv.get(VMIS, namespace, "abortee")
    state = vmi["status"]["migrationState"]
    assert state["abortRequested"] is True and state["migrationUid"] == vmim["metadata"]["uid"]
    assert (state["abortStatus"], state["failed"], state["failureReason"]) == \
        ("Succeeded", True, release(kubevirt).abort_reason)
    assert phase(vmi) == "Running" and vmi["status"]["nodeName"] == source
    wait(lambda: "kubevirt.io/migrationTargetNodeName" not in kv.get(VMIS, namespace, "abortee")["metadata"]["labels"],
         "the target label removed")
    wait(lambda: target_pod not in {p.metadata.name for p in kv.pods(namespace, vmi)}, "the target pod ended")


def test_failed_migration_reports_the_failure_on_the_vmi(kv, namespace, wait):
    vmi = start_vm(kv, namespace, "flaky", wait)
    kv.create(VMIMS, namespace, vmim_manifest("broken", "flaky",
                                              annotations={"sim.vmsched.kubevirt.io/migration-fail": "NetworkTimeout"}))
    wait_migration(kv, namespace, "broken", wait, phases=("Failed",))
    vmim = wait(lambda: (m := kv.get(VMIMS, namespace, "broken")) and (m["status"].get("migrationState") or {})
                .get("failed") and m, "the final migrationState copied to the VMIM")
    state = vmim["status"]["migrationState"]
    assert (state["failed"], state["failureReason"]) == (True, "NetworkTimeout")
    vmi_after = kv.get(VMIS, namespace, "flaky")
    assert vmi_after["status"]["nodeName"] == vmi["status"]["nodeName"]
    wait(lambda: len(kv.pods(namespace, vmi)) == 1, "the target pod ended")


def test_target_that_never_gets_ready_stalls_the_migration(kv, namespace, wait):
    start_vm(kv, namespace, "stalled", wait)
    kv.create(VMIMS, namespace, vmim_manifest("waiting", "stalled",
                                              annotations={"sim.vmsched.kubevirt.io/target-never-ready": "true"}))
    wait_migration(kv, namespace, "waiting", wait, phases=("PreparingTarget",))
    time.sleep(3)
    assert phase(kv.get(VMIMS, namespace, "waiting")) == "PreparingTarget"
    state = kv.get(VMIS, namespace, "stalled")["status"]["migrationState"]
    assert state["targetNode"] and not state.get("targetNodeAddress")
    kv.delete(VMIMS, namespace, "waiting")


def test_target_node_lost_mid_migration_fails_it(kv, kubevirt, namespace, wait):
    vmi = start_vm(kv, namespace, "orphan", wait, annotations={"sim.vmsched.kubevirt.io/migration-seconds": "30"})
    kv.create(VMIMS, namespace, vmim_manifest("lost", "orphan",
                                              annotations={"sim.vmsched.kubevirt.io/lose-target-node": "true"}))
    wait_migration(kv, namespace, "lost", wait, phases=("Failed",))
    after = wait(lambda: (v := kv.get(VMIS, namespace, "orphan")) and v["status"]["migrationState"].get("failed") and v,
                 "the failure marked on the VMI")
    assert after["status"]["nodeName"] == vmi["status"]["nodeName"] and phase(after) == "Running"
    # 1.9's virt-controller marks a started migration failed once the VMIM is (migration.go, MigrationFailed);
    # 1.6's only one that never started, so the source's libvirt failure is what reaches the VMI, in 1.6's words.
    reason = after["status"]["migrationState"].get("failureReason") or ""
    if kubevirt.startswith("v1.9."):
        assert reason == "Target pod is down"
    else:
        assert reason == release(kubevirt).migration_error_reason.format(error=faults.LOST_TARGET_ERROR), reason


def test_outbound_migrations_per_node_are_limited(kv, namespace, wait):
    # Three VMs on node01 (required: node01 or node03; preferred: node01), each migration lasting 4s.
    affinity = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node01", "node03"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node01"]}]}}]}}
    names = ["lim-a", "lim-b", "lim-c"]
    for name in names:
        vmi = start_vm(kv, namespace, name, wait, spec_extra={"affinity": affinity},
                       annotations={"sim.vmsched.kubevirt.io/migration-seconds": "4"})
        assert vmi["status"]["nodeName"] == "node01", "the preferred node01 was not chosen; the premise fails"
    for name in names:
        kv.create(VMIMS, namespace, vmim_manifest(f"{name}-mig", name))
    active_phases = {"Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running"}
    most = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        migrations = [kv.get(VMIMS, namespace, f"{n}-mig") for n in names]
        most = max(most, sum(1 for m in migrations if phase(m) in active_phases))
        if all(phase(m) == "Succeeded" for m in migrations):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"migrations did not all succeed: {[phase(kv.get(VMIMS, namespace, f'{n}-mig')) for n in names]}")
    # Exactly 2 when this test runs alone; other tests' migrations from node01 count against the same limit.
    assert 1 <= most <= 2, f"parallelOutboundMigrationsPerNode is 2, saw {most} active at once"
    for name in names:
        assert kv.get(VMIS, namespace, name)["status"]["nodeName"] == "node03"


# Evacuation ----------------------------------------------------------------------------------------

def test_eviction_of_live_migrate_vm_triggers_evacuation(kv, core, namespace, wait):
    vmi = start_vm(kv, namespace, "evictee", wait, spec_extra={"nodeSelector": {"cpu": "slow"},
                                                               "evictionStrategy": "LiveMigrate"},
                   annotations={"sim.vmsched.kubevirt.io/migration-seconds": "3"})
    source = vmi["status"]["nodeName"]
    [pod] = kv.pods(namespace, vmi)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace))
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod_eviction(pod.metadata.name, namespace, eviction)
    assert info.value.status == 429
    assert f'Eviction triggered evacuation of VMI \\"{namespace}/evictee\\"' in info.value.body
    marked = kv.get(VMIS, namespace, "evictee")
    assert marked["status"]["evacuationNodeName"] == source or marked["status"]["nodeName"] != source
    # The descheduler's contract: the source pod says an eviction is in progress while it lasts.
    wait(lambda: "descheduler.alpha.kubernetes.io/eviction-in-progress" in
         (core.read_namespaced_pod(pod.metadata.name, namespace).metadata.annotations or {}),
         "eviction-in-progress on the source pod", exceptions=(client.ApiException,))
    with pytest.raises(client.ApiException) as again:
        core.create_namespaced_pod_eviction(pod.metadata.name, namespace, eviction)
    assert again.value.status == 429
    evacuations = wait(lambda: [m for m in kv.list(VMIMS, namespace)
                                if m["metadata"]["name"].startswith("kubevirt-evacuation-")],
                       "an evacuation VMIM")
    assert evacuations[0]["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == source
    wait_migration(kv, namespace, evacuations[0]["metadata"]["name"], wait)
    moved = wait(lambda: (v := kv.get(VMIS, namespace, "evictee")) and v["status"]["nodeName"] != source
                 and not v["status"].get("evacuationNodeName") and v, "VMI moved and no longer marked")
    assert moved["status"]["nodeName"] in SLOW_NODES - {source}


def test_eviction_without_eviction_strategy_is_allowed(kv, core, namespace, wait):
    vmi = start_vm(kv, namespace, "plain", wait, eviction_strategy=None)
    [pod] = kv.pods(namespace, vmi)
    core.create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)))
    wait(lambda: (v := kv.get(VMIS, namespace, "plain")) is None or v["metadata"]["uid"] != vmi["metadata"]["uid"]
         or phase(v) == "Failed", "the VMI failed after its pod was evicted")
