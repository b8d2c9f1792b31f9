# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the simulated virt-handler's pure parts (tests/cluster/virt_handler/): each follows the
virt-handler code its docstrings name, and these pin that behaviour down release by release."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
from virt_handler import faults  # noqa: E402  pylint: disable=wrong-import-position
from virt_handler import migration as mig  # noqa: E402  pylint: disable=wrong-import-position
from virt_handler import node as nodes  # noqa: E402  pylint: disable=wrong-import-position
from virt_handler import vmi as vmis  # noqa: E402  pylint: disable=wrong-import-position
from virt_handler.versions import release  # noqa: E402  pylint: disable=wrong-import-position

V19, V16, V15 = release("v1.9.0"), release("v1.6.6"), release("v1.5.3")


def test_labeller_labels_follow_prepare_labels():
    skylake = nodes.CPUS["skylake"]
    labels = nodes.labeller_labels(skylake, V19)
    assert labels["host-model-cpu.node.kubevirt.io/Skylake-Server-IBRS"] == "true"
    assert labels["cpu-vendor.node.kubevirt.io/Intel"] == "true"
    assert labels["cpu-model.node.kubevirt.io/Haswell"] == "true"
    # obsolete models (DefaultObsoleteCPUModels) are offered neither as models nor as migration models
    assert not [k for k in labels if k.endswith(("/Conroe", "/qemu64", "/kvm64"))]
    # 1.6+: a model libvirt knows but cannot use still counts for migration (knownModels); 1.5: not
    assert labels["cpu-model-migration.node.kubevirt.io/Cascadelake-Server"] == "true"
    assert "cpu-model.node.kubevirt.io/Cascadelake-Server" not in labels
    assert "cpu-model-migration.node.kubevirt.io/Cascadelake-Server" not in nodes.labeller_labels(skylake, V15)
    assert labels["cpu-timer.node.kubevirt.io/tsc-frequency"] == "2100000000"
    assert "node-labeller.kubevirt.io/obsolete-host-model" not in labels
    assert nodes.labeller_labels(skylake, V19, obsolete=["Skylake-Server-IBRS"])[
        "node-labeller.kubevirt.io/obsolete-host-model"] == "true"


def test_labeller_replaces_only_its_own_labels_and_patches_only_a_change():
    current = {"cpu": "slow", "cpu-model.node.kubevirt.io/Gone": "true", "cpu-vendor.node.kubevirt.io/Old": "true"}
    wanted = {"cpu-model.node.kubevirt.io/Haswell": "true"}
    new = nodes.relabelled(current, wanted)
    # cpu-vendor is not among nodeLabellerLabels: never removed once set
    assert new == {"cpu": "slow", "cpu-vendor.node.kubevirt.io/Old": "true", "cpu-model.node.kubevirt.io/Haswell": "true"}
    patch = nodes.labeller_patch(current, wanted)
    assert patch[0] == {"op": "test", "path": "/metadata/labels", "value": current}
    assert nodes.labeller_patch(new, wanted) is None


def test_heartbeat_patch_by_release():
    assert set(nodes.heartbeat_patch(V19)["metadata"]["labels"]) == {
        "kubevirt.io/schedulable", "cpumanager", "kubevirt.io/cpumanager"}
    assert set(nodes.heartbeat_patch(V16)["metadata"]["labels"]) == {"kubevirt.io/schedulable", "cpumanager"}
    assert nodes.heartbeat_patch(V19, now=0)["metadata"]["annotations"] == {"kubevirt.io/heartbeat": "1970-01-01T00:00:00Z"}


def test_device_plugins_resources_appear_once():
    node = {"status": {"capacity": {"cpu": "16"}, "allocatable": {"cpu": "16"}}}
    patch = nodes.device_resources(node)
    assert patch["status"]["allocatable"]["devices.kubevirt.io/kvm"] == "1k"
    assert patch["status"]["capacity"]["cpu"] == "16"
    node["status"] = patch["status"]
    assert nodes.device_resources(node) is None


def vmi(interface="masquerade", annotations=None, volumes=None, volume_status=None, host_devices=None):
    spec = {"domain": {"cpu": {"model": "host-model"},
                       "devices": {"interfaces": [{"name": "default", interface: {}}],
                                   "disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "networks": [{"name": "default", "pod": {}}],
            "volumes": volumes or [{"name": "root", "containerDisk": {"image": "x"}}]}
    if host_devices:
        spec["domain"]["devices"]["hostDevices"] = host_devices
    return {"metadata": {"name": "v", "namespace": "ns", "uid": "u", "annotations": annotations or {}},
            "spec": spec, "status": {"phase": "Scheduled", "nodeName": "n1", "volumeStatus": volume_status or []}}


@pytest.mark.parametrize("rel, fragment", [
    (V19, "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network"),
    (V16, "cannot migrate VMI which does not use masquerade, bridge with kubevirt.io/allow-pod-bridge-network-live-"
          "migration VM annotation or a migratable plugin to connect to the pod network"),
])
def test_bridge_on_the_pod_network_is_not_live_migratable(rel, fragment):
    cond, _block = vmis.live_migration_condition(vmi("bridge"), rel, "Skylake-Server-IBRS")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "InterfaceNotLiveMigratable", fragment)
    allowed = vmi("bridge", annotations={"kubevirt.io/allow-pod-bridge-network-live-migration": ""})
    assert vmis.live_migration_condition(allowed, rel, "Skylake-Server-IBRS")[0]["status"] == "True"


def test_volumes_decide_block_migration_and_a_rwo_pvc_makes_it_unmigratable():
    cond, block = vmis.live_migration_condition(vmi(), V19, "Skylake-Server-IBRS")
    assert cond["status"] == "True" and block is True          # a containerDisk is copied: block migration
    pvc = [{"name": "root", "persistentVolumeClaim": {"claimName": "data"}}]
    unknown = vmis.live_migration_condition(vmi(volumes=pvc), V19, "m")[0]
    assert unknown["message"].startswith("cannot migrate VMI: Unable to determine if PVC data is shared")
    rwo = vmi(volumes=pvc, volume_status=[{"name": "root", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteOnce"]}}])
    cond = vmis.live_migration_condition(rwo, V19, "m")[0]
    assert cond["reason"] == "DisksNotLiveMigratable" and "PVC data is not shared" in cond["message"]
    rwx = vmi(volumes=pvc, volume_status=[{"name": "root", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteMany"]}}])
    migratable = {"type": "LiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": None}
    assert vmis.live_migration_condition(rwx, V19, "m") == (migratable, False)


def test_first_failing_check_wins_and_15_checks_volumes_first():
    both = vmi("bridge", volumes=[{"name": "root", "persistentVolumeClaim": {"claimName": "data"}}])
    assert vmis.live_migration_condition(both, V19, "m")[0]["reason"] == "InterfaceNotLiveMigratable"
    assert vmis.live_migration_condition(both, V15, "m")[0]["reason"] == "DisksNotLiveMigratable"
    devices = vmi(host_devices=[{"name": "gpu", "deviceName": "x"}])
    assert vmis.live_migration_condition(devices, V19, "m")[0]["message"] == \
        "VMI specifies non-migratable generic PCI host device"
    assert vmis.live_migration_condition(devices, V16, "m")[0]["message"] == "VMI uses a PCI host devices"
    storage = vmis.storage_live_migration_condition(vmi("bridge"), V19, "m")
    assert (storage["reason"], storage["message"].split(":")[0]) == ("NotMigratable", "InterfaceNotLiveMigratable")


def test_node_status_moves_scheduled_to_running_once():
    new = vmis.node_status(vmi(), V19, nodes.CPUS["skylake"], "10.0.0.5", now=0)
    st = new["status"]
    assert st["phase"] == "Running" and st["selinuxContext"] == "none" and st["migrationMethod"] == "BlockMigration"
    assert st["phaseTransitionTimestamps"] == [{"phase": "Running", "phaseTransitionTimestamp": "1970-01-01T00:00:00Z"}]
    assert st["interfaces"][0]["ipAddress"] == "10.0.0.5" and st["interfaces"][0]["mac"].startswith("52:54:00:")
    assert st["machine"] == {"type": "pc-q35-rhel9.6.0"}
    assert vmis.node_status(new, V19, nodes.CPUS["skylake"], "10.0.0.5", now=5) == new     # nothing more to write


def handed_off(**state):
    base = {"migrationUid": "m1", "sourceNode": "n1", "targetNode": "n2", "targetPod": "p2"}
    base.update(state)
    return {"metadata": {"labels": {"kubevirt.io/nodeName": "n1", "kubevirt.io/migrationTargetNodeName": "n2"}},
            "status": {"nodeName": "n1", "migrationState": base}}


def walk(rel, fail_reason=None):
    """The handler steps of one migration, applied one by one as the agent would."""
    vm, steps = handed_off(), []
    for _attempt in range(10):
        step = mig.next_step(vm, rel, transfer_done=True, fail_reason=fail_reason)
        if step is None:
            break
        steps.append(step)
        vm = mig.apply_step(vm, step[1], rel, target_ip="10.0.0.9", fail_reason=fail_reason, now=0)
    return steps, vm


def test_a_migration_that_succeeds_19_and_15():
    steps, vm = walk(V19)
    assert steps == [("target", "listen"), ("source", "start"), ("target", "domain-ready"), ("target", "complete"),
                     ("target", "cleanup")]
    assert vm["status"]["nodeName"] == "n2" and vm["metadata"]["labels"]["kubevirt.io/nodeName"] == "n2"
    assert "kubevirt.io/migrationTargetNodeName" not in vm["metadata"]["labels"]
    assert vm["status"]["migrationState"]["completed"] is True
    steps, vm = walk(V15)
    assert steps == [("target", "listen"), ("source", "start"), ("target", "domain-ready"), ("source", "hand-over")]
    assert vm["status"]["nodeName"] == "n2"
    assert vm["metadata"]["labels"]["kubevirt.io/migrationTargetNodeName"] == "n2"   # nothing removes it in 1.5


def test_a_migration_that_fails_and_one_that_is_aborted():
    steps, vm = walk(V19, fail_reason="boom")
    assert steps[-2:] == [("source", "fail"), ("target", "cleanup")]
    assert vm["status"]["migrationState"]["failureReason"] == "boom" and vm["status"]["nodeName"] == "n1"
    running = handed_off(targetNodeAddress="10.0.0.9", startTimestamp="t", abortRequested=True)
    assert mig.next_step(running, V19, False, None) == ("source", "aborted")
    assert mig.next_step(running, V16, False, None) == ("source", "aborting")
    aborted = mig.apply_step(running, "aborted", V19)["status"]["migrationState"]
    assert (aborted["abortStatus"], aborted["failed"], aborted["completed"], aborted["failureReason"]) == \
        ("Succeeded", True, True, "Live migration has been aborted")
    assert "completed" not in mig.apply_step(running, "aborted", V16)["status"]["migrationState"]


# --- node labeller: the KubeVirt CR's obsoleteCPUModels, the skip annotation ---------------------------------


def test_labeller_takes_obsolete_models_from_the_kubevirt_cr():
    """node_labeller.go prepareLabels: obsoleteCPUsx86 is GetObsoleteCPUModels(), the CR's own map. cpu_plugin.go
    filterCpuModels falls back to DefaultObsoleteCPUModels for the model lists only; the obsolete-host-model label
    needs the host model in the CR's map."""
    skylake = nodes.CPUS["skylake"]
    labels = nodes.labeller_labels(skylake, V19, nodes.obsolete_cpu_models({"obsoleteCPUModels": {
        "Skylake-Server-IBRS": True}}))
    assert labels["node-labeller.kubevirt.io/obsolete-host-model"] == "true"
    assert "cpu-model.node.kubevirt.io/Skylake-Server-IBRS" not in labels
    assert labels["cpu-model.node.kubevirt.io/Conroe"] == "true"      # a map of the CR's own replaces the defaults
    # None, or an empty map (omitempty drops it on its way into the cluster config, virt-config setConfigFromKubeVirt):
    # the defaults filter the models, and no host model is obsolete, not even one among the defaults.
    old = dict(skylake, host_model="qemu64")
    for config in ({}, {"obsoleteCPUModels": {}}):
        labels = nodes.labeller_labels(old, V19, nodes.obsolete_cpu_models(config))
        assert "node-labeller.kubevirt.io/obsolete-host-model" not in labels
        assert "cpu-model.node.kubevirt.io/Conroe" not in labels
    # 1.5 offers the host model for migration unless the CR's own map names it
    assert nodes.labeller_labels(old, V15, None)["cpu-model-migration.node.kubevirt.io/qemu64"] == "true"


def test_labeller_leaves_a_node_with_the_skip_annotation_alone():
    """node_labeller.go run: skipNodeLabelling (annotation node-labeller.kubevirt.io/skip-node, any value)."""
    node = {"metadata": {"name": "n1", "labels": {"cpu": "slow"},
                         "annotations": {"node-labeller.kubevirt.io/skip-node": ""}}}
    assert nodes.labeller_update(node, nodes.CPUS["skylake"], V19, {}) is None
    del node["metadata"]["annotations"]["node-labeller.kubevirt.io/skip-node"]
    patch = nodes.labeller_update(node, nodes.CPUS["skylake"], V19, {})
    assert patch[1]["value"]["host-model-cpu.node.kubevirt.io/Skylake-Server-IBRS"] == "true"


# --- heartbeat: the CPU manager, KSM ---------------------------------------------------------------------------


def test_heartbeat_reports_a_cpu_manager_where_the_gate_and_the_kubelets_policy_say_so():
    """heartbeat.go do(): CPUManagerEnabled() (an Alpha feature gate of the CR) and isCPUManagerEnabled (the
    kubelet's cpu_manager_state says policyName static)."""
    static = {"metadata": {"annotations": {nodes.CPU_MANAGER_ANNOTATION: "static"}}}
    gate = {"developerConfiguration": {"featureGates": ["CPUManager"]}}
    assert nodes.cpu_manager_enabled(static, gate) is True
    assert nodes.cpu_manager_enabled(static, {}) is False
    assert nodes.cpu_manager_enabled({"metadata": {}}, gate) is False
    assert nodes.heartbeat_patch(V19, cpu_manager=True)["metadata"]["labels"] == {
        "kubevirt.io/schedulable": "true", "cpumanager": "true", "kubevirt.io/cpumanager": "true"}
    assert nodes.heartbeat_patch(V16, cpu_manager=True)["metadata"]["labels"] == {
        "kubevirt.io/schedulable": "true", "cpumanager": "true"}
    assert nodes.heartbeat_patch(V16)["metadata"]["labels"]["cpumanager"] == "false"


def test_ksm_label_and_annotation_by_release():
    """1.5: heartbeat.go do() patches handleKSM's values with the heartbeat; 1.6+: ksm.go Handler.patchKSM, a merge
    patch of its own. Without ksmConfiguration in the CR both are false."""
    patch = nodes.heartbeat_patch(V15)
    assert patch["metadata"]["labels"]["kubevirt.io/ksm-enabled"] == "false"
    assert patch["metadata"]["annotations"]["kubevirt.io/ksm-handler-managed"] == "false"
    assert "kubevirt.io/ksm-enabled" not in nodes.heartbeat_patch(V19)["metadata"]["labels"]
    assert nodes.ksm_patch() == {"metadata": {"labels": {"kubevirt.io/ksm-enabled": "false"},
                                              "annotations": {"kubevirt.io/ksm-handler-managed": "false"}}}


# --- LiveMigratable and StorageLiveMigratable: every check, in each release's order ---------------------------


def shaped(**domain):
    """A migratable VMI (masquerade, containerDisk) with more in spec.domain; spec keys prefixed spec_."""
    new = vmi()
    for key, value in domain.items():
        if key.startswith("spec_"):
            new["spec"][key[5:]] = value
        else:
            new["spec"]["domain"][key] = value
    return new


HYPERV_PASSTHROUGH = {"features": {"hypervPassthrough": {"enabled": True}}}
REENLIGHTENMENT = {"features": {"hyperv": {"reenlightenment": {"enabled": True}}}}
RESERVATION = {"devices": {"interfaces": [{"name": "default", "masquerade": {}}],
                           "disks": [{"name": "root", "lun": {"reservation": True}}]}}
TSC_MESSAGE = ("HyperV Reenlightenment VMIs cannot migrate when TSC Frequency is not exposed on the cluster: guest "
               "timers might be inconsistent")


@pytest.mark.parametrize("rel, domain, reason, message", [
    (V19, HYPERV_PASSTHROUGH, "HypervPassthroughNotLiveMigratable", "VMI uses hyperv passthrough"),
    (V16, HYPERV_PASSTHROUGH, "HypervPassthroughNotLiveMigratable", "VMI uses hyperv passthrough"),
    (V15, HYPERV_PASSTHROUGH, "HypervPassthroughNotLiveMigratable", "VMI uses hyperv passthrough"),
    (V19, {"launchSecurity": {"tdx": {}}}, "TDXNotLiveMigratable", "VMI uses TDX"),
    (V19, {"launchSecurity": {"snp": {}}}, "SEVNotLiveMigratable", "VMI uses SEV"),
    (V19, REENLIGHTENMENT, "NoTSCFrequencyNotLiveMigratable", TSC_MESSAGE),
    (V15, REENLIGHTENMENT, "NoTSCFrequencyNotLiveMigratable", TSC_MESSAGE),
    (V19, {"launchSecurity": {}, "spec_architecture": "s390x"}, "SecureExecutionNotLiveMigratable",
     "VMI uses Secure Execution"),
    (V16, {"launchSecurity": {}, "spec_architecture": "s390x"}, "SecureExecutionNotLiveMigratable",
     "VMI uses Secure Execution"),
    (V16, RESERVATION, "PersistentReservationNotLiveMigratable", "VMI uses SCSI persitent reservation"),
    (V15, RESERVATION, "PersistentReservationNotLiveMigratable", "VMI uses SCSI persitent reservation"),
])
def test_every_check_of_virt_handler_makes_a_vmi_not_live_migratable(rel, domain, reason, message):
    cond, _block = vmis.live_migration_condition(shaped(**domain), rel, "Skylake-Server-IBRS")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", reason, message)


@pytest.mark.parametrize("rel, domain", [
    (V16, {"launchSecurity": {"snp": {}}}),            # IsSEVVMI: SEV only before 1.9
    (V15, {"launchSecurity": {}, "spec_architecture": "s390x"}),     # no Secure Execution check in 1.5
    (V19, RESERVATION),                                # 1.9: persistent reservation in StorageLiveMigratable only
    (V19, {"cpu": {"model": "host-model", "features": [{"name": "invtsc", "policy": "require"}]}}),  # boot only
])
def test_checks_a_release_does_not_make(rel, domain):
    assert vmis.live_migration_condition(shaped(**domain), rel, "Skylake-Server-IBRS")[0]["status"] == "True"


def test_tsc_frequency_in_the_topology_hints_makes_reenlightenment_migratable():
    hinted = shaped(**REENLIGHTENMENT)
    hinted["status"]["topologyHints"] = {"tscFrequency": 2100000000}
    assert vmis.live_migration_condition(hinted, V19, "m")[0]["status"] == "True"


def test_sriov_interfaces_and_hotplugged_volumes_stay_live_migratable():
    """No check of vm.go calculateLiveMigrationCondition looks at SR-IOV interfaces or hotplugged volumes (the reason
    HotplugNotLiveMigratable exists in the API and is used nowhere), and VerifyVMIMigratable looks at the pod network's
    interface only."""
    sriov = vmi()
    sriov["spec"]["domain"]["devices"]["interfaces"].append({"name": "vf", "sriov": {}})
    sriov["spec"]["networks"].append({"name": "vf", "multus": {"networkName": "sriov-net"}})
    hotplug = vmi(volumes=[{"name": "root", "containerDisk": {"image": "x"}},
                           {"name": "data", "persistentVolumeClaim": {"claimName": "data", "hotpluggable": True}}],
                  volume_status=[{"name": "data", "hotplugVolume": {"attachPodName": "hp"},
                                  "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteMany"]}}])
    for rel in (V19, V16, V15):
        assert vmis.live_migration_condition(sriov, rel, "m")[0]["status"] == "True"
        assert vmis.live_migration_condition(hotplug, rel, "m")[0]["status"] == "True"


def test_each_release_checks_in_its_own_order():
    both = shaped(launchSecurity={"tdx": {}}, features={"hypervPassthrough": {"enabled": True}})
    assert vmis.live_migration_condition(both, V19, "m")[0]["reason"] == "TDXNotLiveMigratable"
    secure_pr = shaped(launchSecurity={}, spec_architecture="s390x", **RESERVATION)
    assert vmis.live_migration_condition(secure_pr, V16, "m")[0]["reason"] == "SecureExecutionNotLiveMigratable"
    rwo = vmi(volumes=[{"name": "root", "persistentVolumeClaim": {"claimName": "data"}}],
              volume_status=[{"name": "root", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteOnce"]}}])
    rwo["spec"]["domain"]["features"] = {"hypervPassthrough": {"enabled": True}}
    assert vmis.live_migration_condition(rwo, V19, "m")[0]["reason"] == "HypervPassthroughNotLiveMigratable"
    assert vmis.live_migration_condition(rwo, V16, "m")[0]["reason"] == "HypervPassthroughNotLiveMigratable"
    assert vmis.live_migration_condition(rwo, V15, "m")[0]["reason"] == "DisksNotLiveMigratable"


def test_storage_live_migratable_joins_every_failing_check_but_the_disks():
    many = shaped(launchSecurity={"tdx": {}}, features={"hypervPassthrough": {"enabled": True}}, **RESERVATION)
    storage = vmis.storage_live_migration_condition(many, V19, "m")
    assert storage["message"] == ("TDXNotLiveMigratable: VMI uses TDX, PersistentReservationNotLiveMigratable: VMI "
                                  "uses SCSI persistent reservation, HypervPassthroughNotLiveMigratable: VMI uses "
                                  "hyperv passthrough")
    secure = shaped(launchSecurity={}, spec_architecture="s390x")
    assert vmis.storage_live_migration_condition(secure, V16, "m")["status"] == "True"   # no SE check in storage


def test_a_single_gpu_needs_the_vgpu_gate_and_a_mediated_device():
    """vm.go vmiContainsNonMigratablePCIHostDevices (1.9): the gate VGPULiveMigration, then isMdevGPU."""
    gpu = shaped(devices={"interfaces": [{"name": "default", "masquerade": {}}],
                          "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                          "gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_T4-1Q"}]})
    gate = {"developerConfiguration": {"featureGates": ["VGPULiveMigration"]}}
    assert vmis.live_migration_condition(gpu, V19, "m", gate)[0]["message"] == \
        "VMI specifies non-migratable GPU device"
    mdev = dict(gate, permittedHostDevices={"mediatedDevices": [{"resourceName": "nvidia.com/GRID_T4-1Q"}]})
    assert vmis.live_migration_condition(gpu, V19, "m", mdev)[0]["status"] == "True"
    assert vmis.live_migration_condition(gpu, V19, "m", {})[0]["message"] == \
        "VMI specifies a GPU but feature gate VGPULiveMigration is not enabled"


def test_a_binding_plugin_with_migration_is_live_migratable():
    """VerifyVMIMigratable: bindingPlugins are the CR's network.binding; one with migration set is migratable."""
    plugged = vmi("binding")
    plugged["spec"]["domain"]["devices"]["interfaces"][0]["binding"] = {"name": "managedtap"}
    config = {"network": {"binding": {"managedtap": {"domainAttachmentType": "managedTap", "migration": {}}}}}
    for rel in (V19, V16):
        assert vmis.live_migration_condition(plugged, rel, "m", config)[0]["status"] == "True"
        assert vmis.live_migration_condition(plugged, rel, "m", {})[0]["reason"] == "InterfaceNotLiveMigratable"


def test_storage_live_migratable_is_replaced_only_when_its_status_or_reason_changes():
    """updateLiveMigrationConditions: condManager.UpdateCondition replaces a condition whose Status or Reason
    differs (pkg/controller/conditions.go); a new message alone is not written."""
    live = {"type": "LiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": None}
    old = {"type": "StorageLiveMigratable", "status": "False", "reason": "NotMigratable", "message": "A",
           "lastProbeTime": None, "lastTransitionTime": None}
    assert vmis.with_migration_conditions([live, old], live, dict(old, message="B")) == [live, old]
    fixed = {"type": "StorageLiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": None}
    assert vmis.with_migration_conditions([live, old], live, fixed) == [live, fixed]


# --- interfaces: netstat.go UpdateStatus keeps what virt-controller reported from Multus ---------------------


def test_interfaces_keep_multus_status_and_pod_interface_names():
    two = vmi()
    two["spec"]["domain"]["devices"]["interfaces"].append({"name": "blue", "bridge": {}})
    two["spec"]["networks"].append({"name": "blue", "multus": {"networkName": "blue-net"}})
    two["status"]["interfaces"] = [
        {"name": "default", "podInterfaceName": "eth0"},
        {"name": "blue", "infoSource": "multus-status", "podInterfaceName": "pod16477688c0e"},
        {"name": "gone", "infoSource": "multus-status"}]
    entries = vmis.interfaces_status(two, "10.0.0.5")
    assert [(e["name"], e["infoSource"], e.get("podInterfaceName")) for e in entries] == [
        ("default", "domain", "eth0"), ("blue", "domain, multus-status", "pod16477688c0e")]
    assert entries[0]["ipAddress"] == "10.0.0.5" and "ipAddress" not in entries[1]
    # an interface Multus reported that is not in the domain (here: unplugged) stays, as Multus reported it
    two["spec"]["domain"]["devices"]["interfaces"][1]["state"] = "absent"
    assert vmis.interfaces_status(two, "10.0.0.5")[1] == {"name": "blue", "infoSource": "multus-status",
                                                          "podInterfaceName": "pod16477688c0e"}


# --- migrations: the target's address and ports, the words of each release ----------------------------------


def test_the_target_listens_on_its_handlers_migration_ip_with_a_block_migration_port():
    """migration-target.go updateStatus: TargetNodeAddress is c.migrationIpAddress (cmd/virt-handler: the handler
    pod's IP, --pod-ip-address $(MY_POD_IP)); migration-proxy GetMigrationPortsList: 49152, and 49153 for a block
    migration, beside libvirt's own (0)."""
    assert mig.migration_ip({"status": {"podIP": "10.244.3.7"}}) == "10.244.3.7"
    block = handed_off()
    block["status"]["migrationMethod"] = "BlockMigration"
    state = mig.apply_step(block, "listen", V19, target_ip="10.244.3.7")["status"]["migrationState"]
    assert state["targetNodeAddress"] == "10.244.3.7"
    assert sorted(state["targetDirectMigrationNodePorts"].values()) == [0, 49152, 49153]
    assert len(set(state["targetDirectMigrationNodePorts"])) == 3
    live = handed_off()
    live["status"]["migrationMethod"] = "LiveMigration"
    ports = mig.apply_step(live, "listen", V16, target_ip="10.244.3.7")["status"]["migrationState"][
        "targetDirectMigrationNodePorts"]
    assert sorted(ports.values()) == [0, 49152]


def test_abort_and_migration_failure_reasons_are_each_releases_own():
    """1.9: setMigrationResult turns libvirt's "canceled by client" into "Live migration has been aborted" and passes
    other errors through; 1.6: asyncMigrationAbort's "Live migration aborted " (trailing space), and migrateHelper
    sets libvirt's error before the monitor can; 1.5: the monitor's "Live migration failed %v" of the wrapped
    error (live-migration-source.go at each tag)."""
    running = handed_off(targetNodeAddress="10.0.0.9", startTimestamp="t", abortRequested=True)
    reasons = {}
    for rel in (V19, V16, V15):
        reasons[rel.version] = mig.apply_step(running, "aborted", rel)["status"]["migrationState"]["failureReason"]
    assert reasons["v1.9"] == "Live migration has been aborted"
    assert reasons["v1.6"] == "Live migration aborted "
    assert reasons["v1.5"].startswith("Live migration failed error encountered during MigrateToURI3 libvirt api call: ")
    assert mig.lost_target_reason(V19) == mig.lost_target_reason(V16) == faults.LOST_TARGET_ERROR
    assert mig.lost_target_reason(V15) == ("Live migration failed error encountered during MigrateToURI3 libvirt api "
                                           "call: " + faults.LOST_TARGET_ERROR)


def test_ownership_moves_without_writing_fields_upstream_omits():
    """ackMigrationCompletion sets LauncherContainerImageVersion and EvacuationNodeName to "": both are omitempty, so
    the VMI's JSON loses them."""
    vm = handed_off(targetNodeAddress="10.0.0.9", startTimestamp="t", targetNodeDomainReadyTimestamp="t")
    vm["status"].update(launcherContainerImageVersion="quay.io/kubevirt/virt-launcher:v1.9.0",
                        evacuationNodeName="n1")
    for rel, step in ((V19, "domain-ready"), (V15, "hand-over")):
        status = mig.apply_step(vm, step, rel)["status"]
        assert "launcherContainerImageVersion" not in status and "evacuationNodeName" not in status
        assert status["nodeName"] == "n2"


# --- shutdown: ACPI first, the kill after the grace period ---------------------------------------------------


def test_shutdown_waits_for_the_guest_up_to_the_grace_period():
    """vm.go helperVmShutdown and hasGracePeriodExpired: a graceful shutdown is signalled and the domain killed once
    terminationGracePeriodSeconds (30 when unset, converter.GracePeriodSeconds) have passed;
    calculateVmPhaseForStatusReason: Shutoff after a shutdown is Succeeded, a destroyed domain with ACPI Failed."""
    running = vmi()
    running["status"]["phase"] = "Running"
    assert vmis.shutdown_outcome(running, signalled=100, guest_seconds=5, now=102) == ("wait", 3)
    assert vmis.shutdown_outcome(running, signalled=100, guest_seconds=5, now=105) == ("off", 0)
    assert vmis.shut_down(running, "off")["status"]["phase"] == "Succeeded"
    assert vmis.shutdown_outcome(running, signalled=100, guest_seconds=None, now=129) == ("wait", 1)
    assert vmis.shutdown_outcome(running, signalled=100, guest_seconds=None, now=130) == ("killed", 0)
    assert vmis.shut_down(running, "killed")["status"]["phase"] == "Failed"
    # terminationGracePeriodSeconds 0: killed at once, and a destroyed domain without a grace period Succeeded
    zero = vmi()
    zero["spec"]["terminationGracePeriodSeconds"] = 0
    assert vmis.shutdown_outcome(zero, signalled=100, guest_seconds=5, now=100) == ("killed", 0)
    assert vmis.shut_down(zero, "killed")["status"]["phase"] == "Succeeded"


# --- the agent's timers: the heartbeat runs every minute, not on every change of the node ---------------------


def test_a_node_event_does_not_send_a_heartbeat_the_timer_does():
    """heartbeat.go heartBeat: wait.JitterUntil(h.do, heartBeatInterval, 1.2, ...), a minute and more between
    beats. A change of the Node (its own heartbeat's included) is the kubelet's business (device-plugin resources)
    and, when due, the labeller's; beating on it made every heartbeat start the next."""
    from virt_handler.agent import HEARTBEAT_SECONDS, Agent  # pylint: disable=import-outside-toplevel

    class Handler:
        def __init__(self):
            self.calls = []

        def sync(self, force_labels=False, heartbeat=True):
            self.calls.append((force_labels, heartbeat))

    agent = Agent(admin=None, version="v1.9.0", state_dir=None)
    agent.handlers["n1"] = handler = Handler()
    agent._dispatch(("node", "n1"))  # pylint: disable=protected-access
    assert handler.calls == [(False, False)] and not agent.queue.delayed
    agent._dispatch(("heartbeat", "n1"))  # pylint: disable=protected-access
    assert handler.calls[-1] == (False, True)
    [(due, _seq, key)] = agent.queue.delayed
    assert key == ("heartbeat", "n1") and due - time.monotonic() == pytest.approx(HEARTBEAT_SECONDS, abs=1)
