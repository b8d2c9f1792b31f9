# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt simulator (tests/cluster/simulator.py) against the live local control plane.

Placement comes from the real kube-scheduler; the simulator only plays KubeVirt's
controllers and virt-api's webhooks. Every test works in its own namespace.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kubernetes import client

GROUP, VERSION = "kubevirt.io", "v1"
VMS, VMIS, VMIMS = "virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"
SLOW_NODES = {"node01", "node03"}          # cpu: slow, schedulable (node06 is slow but cordoned)
FAST_NODES = {"node02", "node04"}          # cpu: fast, untainted (node05 is fast but tainted)
MIGRATION_PHASES = ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded"]


@pytest.fixture(scope="session")
def simulator(kubeconfig):
    """The simulator must be up: its ready file exists once caches synced and webhooks answer."""
    state = Path(kubeconfig).parent
    ready = state / "simulator" / "ready"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ready.exists():
            try:
                os.kill(int(ready.read_text().split()[0]), 0)
                return ready
            except (ValueError, ProcessLookupError, IndexError):
                pass
        time.sleep(0.2)
    pytest.fail(f"the KubeVirt simulator is not running ({ready} missing or stale); "
                f"see {state / 'simulator.log'} or start it: python tests/cluster/simulator.py "
                f"--kubeconfig {kubeconfig}", pytrace=False)


@pytest.fixture
def kv(api_client, simulator):
    return KubeVirt(client.CustomObjectsApi(api_client), client.CoreV1Api(api_client))


class KubeVirt:
    """Thin helpers over CustomObjectsApi for the KubeVirt kinds (dicts, like the API's JSON)."""

    def __init__(self, custom, core):
        self.custom = custom
        self.core = core

    def create(self, plural, ns, body):
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)

    def get(self, plural, ns, name):
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, plural, ns, name, body):
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, name, body)

    def delete(self, plural, ns, name):
        return self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, name)

    def list(self, plural, ns):
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]

    def pods(self, ns, vmi=None):
        pods = self.core.list_namespaced_pod(ns, label_selector="kubevirt.io=virt-launcher").items
        if vmi is not None:
            pods = [p for p in pods if p.metadata.labels.get("kubevirt.io/created-by") == vmi["metadata"]["uid"]]
        return pods


def vm_manifest(name, spec_extra=None, annotations=None, labels=None, run_strategy="Always"):
    spec = {"domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"}, "devices": {}}}
    spec.update(spec_extra or {})
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": run_strategy,
            "template": {"metadata": {"labels": dict({"app": name}, **(labels or {})),
                                      "annotations": dict(annotations or {})},
                         "spec": spec},
        },
    }


def vmim_manifest(name, vmi, added_node_selector=None, annotations=None):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": {"vmiName": vmi}}
    if added_node_selector:
        body["spec"]["addedNodeSelector"] = added_node_selector
    return body


def phase(obj):
    return ((obj or {}).get("status") or {}).get("phase")


def cond(obj, ctype):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def running_vmi(kv, ns, name, wait, timeout=60):
    return wait(lambda: (v := kv.get(VMIS, ns, name)) and phase(v) == "Running"
                and (cond(v, "Ready") or {}).get("status") == "True" and v,
                f"VMI {ns}/{name} Running and Ready", timeout=timeout)


def start_vm(kv, ns, name, wait, **kwargs):
    kv.create(VMS, ns, vm_manifest(name, **kwargs))
    return running_vmi(kv, ns, name, wait)


def wait_migration(kv, ns, name, wait, phases=("Succeeded",), timeout=60):
    return wait(lambda: (m := kv.get(VMIMS, ns, name)) and phase(m) in phases and m,
                f"VMIM {ns}/{name} in {phases}", timeout=timeout)


def expect_refused(kv, ns, body, *fragments):
    with pytest.raises(client.ApiException) as info:
        kv.create(VMIMS, ns, body)
    text = info.value.body if isinstance(info.value.body, str) else str(info.value.body)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in the refusal: {text}"
    return info.value


# VM -> VMI -> virt-launcher pod ----------------------------------------------------------------------

def test_vm_runs_on_a_node_the_real_scheduler_chose(kv, core, namespace, wait):
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    vm = kv.create(VMS, namespace, vm_manifest(
        "web", spec_extra={"nodeSelector": {"cpu": "fast"}, "tolerations": tolerations,
                           "schedulerName": "default-scheduler", "evictionStrategy": "LiveMigrate",
                           "domain": {"cpu": {"cores": 2}, "memory": {"guest": "2Gi"}, "devices": {}}},
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
    assert [p["phase"] for p in vmi["status"]["phaseTransitionTimestamps"]] == \
        ["Pending", "Scheduling", "Scheduled", "Running"]

    [pod] = kv.pods(namespace, vmi)
    assert pod.metadata.name.startswith("virt-launcher-web-") and len(pod.metadata.name) == len("virt-launcher-web-") + 5
    assert pod.spec.node_name == node and pod.status.phase == "Running"
    assert vmi["status"]["activePods"] == {pod.metadata.uid: node}
    labels = pod.metadata.labels
    assert labels["kubevirt.io"] == "virt-launcher" and labels["kubevirt.io/created-by"] == vmi["metadata"]["uid"]
    assert labels["vm.kubevirt.io/name"] == "web" and labels["tier"] == "front"
    annotations = pod.metadata.annotations
    assert annotations["kubevirt.io/domain"] == "web"
    assert annotations["descheduler.alpha.kubernetes.io/evict"] == "true"
    assert "descheduler.alpha.kubernetes.io/request-evict-only" in annotations
    [ref] = pod.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == \
        ("VirtualMachineInstance", "web", vmi["metadata"]["uid"], True, True)
    assert pod.spec.node_selector == {"cpu": "fast", "kubevirt.io/schedulable": "true"}
    assert [(t.key, t.value, t.effect) for t in pod.spec.tolerations if t.key == "dedicated"] == \
        [("dedicated", "gpu", "NoSchedule")]
    assert pod.spec.scheduler_name == "default-scheduler"
    [compute] = pod.spec.containers
    assert compute.name == "compute" and compute.image.startswith("quay.io/kubevirt/virt-launcher:v1.")
    # 2Gi guest + overhead (4Mi page tables, 138Mi, 2 x 8Mi per vCPU, 8Mi IOThread, 16Mi video); 2 vCPUs / 10
    assert compute.resources.requests == {"cpu": "200m", "memory": "2230Mi"}
    # Local storage in the descheduler's eyes, as real launcher pods are.
    assert {v.name for v in pod.spec.volumes if v.empty_dir is not None} >= {"private", "libvirt-runtime",
                                                                             "container-disks", "hotplug-disks"}

    # The real scheduler bound it (the simulator never sets nodeName itself).
    events = wait(lambda: [e for e in core.list_namespaced_event(namespace).items
                           if e.reason == "Scheduled" and e.involved_object.name == pod.metadata.name],
                  "the scheduler's Scheduled event")
    assert events[0].reporting_component == "default-scheduler" or events[0].source.component == "default-scheduler"

    vm = wait(lambda: (v := kv.get(VMS, namespace, "web")) and (v.get("status") or {}).get("ready") and v,
              "VM status ready")
    assert vm["status"]["printableStatus"] == "Running" and vm["status"]["created"] is True


def test_running_false_and_halted_stop_the_vm(kv, namespace, wait):
    body = vm_manifest("legacy")
    del body["spec"]["runStrategy"]
    body["spec"]["running"] = True
    kv.create(VMS, namespace, body)
    vmi = running_vmi(kv, namespace, "legacy", wait)
    kv.patch(VMS, namespace, "legacy", {"spec": {"running": False}})
    wait(lambda: kv.get(VMIS, namespace, "legacy") is None, "VMI deleted after running: false")
    wait(lambda: not kv.pods(namespace, vmi), "launcher pod garbage collected")
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
    # The VM controller deletes the Failed VMI (runStrategy Always) and starts a new one.
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
    assert not vm["status"].get("ready")  # omitempty: false is absent


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
                "kubevirt.io/migrationJobFinalize" not in (m["metadata"].get("finalizers") or []) and m,
                "the finalizer removed from the finished VMIM")
    vmi = kv.get(VMIS, namespace, "mover")
    state = vmi["status"]["migrationState"]
    assert (state["sourceNode"], state["targetNode"], state["completed"]) == (source, target, True)
    assert state["migrationUid"] == vmim["metadata"]["uid"] and state["sourcePod"] == source_pod.metadata.name
    assert state["startTimestamp"] and state["endTimestamp"] and not state.get("failed")
    assert vmim["status"]["migrationState"]["targetNode"] == target
    assert vmi["status"]["nodeName"] == target and vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == target
    assert "kubevirt.io/migrationTargetNodeName" not in vmi["metadata"]["labels"]
    pods = wait(lambda: (ps := kv.pods(namespace, vmi)) and len(ps) == 1 and ps, "the source pod gone")
    target_pod = pods[0]
    assert target_pod.metadata.name == state["targetPod"] and target_pod.spec.node_name == target
    assert vmi["status"]["activePods"] == {target_pod.metadata.uid: target}
    assert target_pod.metadata.labels["kubevirt.io/migrationJobUID"] == vmim["metadata"]["uid"]
    assert target_pod.spec.node_selector == {"cpu": "slow", "kubernetes.io/hostname": target,
                                             "kubevirt.io/schedulable": "true"}
    [term] = target_pod.spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert term.label_selector.match_labels == {"kubevirt.io/created-by": vmi["metadata"]["uid"]}
    assert term.topology_key == "kubernetes.io/hostname"
    vm = wait(lambda: (v := kv.get(VMS, namespace, "mover")) and v["status"]["printableStatus"] == "Running" and v,
              "VM back to Running after Migrating")
    assert vm["status"]["ready"]


def test_migration_to_impossible_selector_fails_after_unschedulable_timeout(kv, core, namespace, wait):
    vmi = start_vm(kv, namespace, "stuck", wait)
    source = vmi["status"]["nodeName"]
    started = time.monotonic()
    kv.create(VMIMS, namespace, vmim_manifest(
        "nowhere", "stuck", {"kubernetes.io/hostname": "no-such-node"},
        annotations={"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "3"}))
    wait(lambda: [p for p in kv.pods(namespace, vmi) if p.metadata.labels.get("kubevirt.io/migrationJobUID")],
         "a target pod")
    vmim = wait_migration(kv, namespace, "nowhere", wait, phases=("Failed", "Succeeded"), timeout=30)
    assert phase(vmim) == "Failed"
    # KubeVirt counts whole seconds since the pod's creationTimestamp (itself truncated to seconds).
    assert time.monotonic() - started >= 2, "failed before the unschedulable timeout"
    assert [p["phase"] for p in vmim["status"]["phaseTransitionTimestamps"]] == ["Pending", "Scheduling", "Failed"]
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


def test_not_migratable_vmi_refused_with_its_reason(kv, namespace, wait):
    vmi = start_vm(kv, namespace, "pinned", wait,
                   annotations={"sim.vmsched.kubevirt.io/not-migratable": "DisksNotLiveMigratable"})
    migratable = cond(vmi, "LiveMigratable")
    assert (migratable["status"], migratable["reason"]) == ("False", "DisksNotLiveMigratable")
    expect_refused(kv, namespace, vmim_manifest("nope", "pinned"),
                   "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC")


def test_deleting_an_in_flight_migration_aborts_it(kv, namespace, wait):
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
    assert (state["abortStatus"], state["failed"], state["completed"]) == ("Succeeded", True, True)
    assert state["migrationUid"] == vmim["metadata"]["uid"]
    assert phase(vmi) == "Running" and vmi["status"]["nodeName"] == source
    assert "kubevirt.io/migrationTargetNodeName" not in vmi["metadata"]["labels"]
    wait(lambda: target_pod not in {p.metadata.name for p in kv.pods(namespace, vmi)}, "the target pod deleted")


def test_failed_migration_reports_the_failure_on_the_vmi(kv, namespace, wait):
    vmi = start_vm(kv, namespace, "flaky", wait)
    kv.create(VMIMS, namespace, vmim_manifest("broken", "flaky",
                                              annotations={"sim.vmsched.kubevirt.io/migration-fail": "NetworkTimeout"}))
    vmim = wait_migration(kv, namespace, "broken", wait, phases=("Failed",))
    state = vmim["status"]["migrationState"]
    assert (state["failed"], state["failureReason"]) == (True, "NetworkTimeout")
    vmi_after = kv.get(VMIS, namespace, "flaky")
    assert vmi_after["status"]["nodeName"] == vmi["status"]["nodeName"]
    wait(lambda: len(kv.pods(namespace, vmi)) == 1, "the target pod deleted")


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
    deadline = time.monotonic() + 60
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
    vmi = start_vm(kv, namespace, "plain", wait)
    [pod] = kv.pods(namespace, vmi)
    core.create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)))
    wait(lambda: (v := kv.get(VMIS, namespace, "plain")) is None or v["metadata"]["uid"] != vmi["metadata"]["uid"]
         or phase(v) == "Failed", "the VMI failed after its pod was evicted")
