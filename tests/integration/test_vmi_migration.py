# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmsched.kubevirt.vmi_migration against the local control plane and its real KubeVirt.

The module runs as Ansible runs it: `ansible localhost -m vmsched.kubevirt.vmi_migration`
in a subprocess, with the collection found through ANSIBLE_COLLECTIONS_PATH (as the
Makefile sets it) and the cluster through KUBECONFIG. Each test has its own namespace.
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time

import pytest
from kubernetes import client
from virt_handler.versions import release  # tests/cluster, on sys.path (conftest.py): KubeVirt's words per release

from . import ansible_module
from .audit import AUDIT_LOG
from .vms import (  # noqa: F401  pylint: disable=unused-import
    GROUP,
    VERSION,
    VMIMS,
    VMIS,
    VMS,
    kv,
    kubevirt,
    rwo_claim,
    start_vm,
    vmim_manifest,
    wait_migration,
)

ROOT = ansible_module.ROOT
MODULE = "vmsched.kubevirt.vmi_migration"
USER_AGENT = "vmsched.kubevirt/vmi_migration"
MANAGED = {"app.kubernetes.io/managed-by": "vmsched.kubevirt"}
SLOW = {"sim.vmsched.kubevirt.io/migration-seconds": "30"}


def run_module(kubeconfig, args, check=False):
    return ansible_module.run_module(MODULE, kubeconfig, args, check=check, timeout=300)


def node_of(kv, ns, name):
    return kv.get(VMIS, ns, name)["status"]["nodeName"]


# --- the basic path ----------------------------------------------------------------------------------


def test_targeted_migration_lands_on_the_named_node_then_is_idempotent(kv, kubeconfig, namespace, wait):
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    source = vmi["status"]["nodeName"]
    target = ({"node02", "node04"} - {source}).pop()

    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target,
                                      "unschedulable_timeout": 30})
    assert rc == 0, res.get("msg")
    assert res["changed"] is True
    assert (res["source_node"], res["target_node"]) == (source, target)
    assert res["candidates"] == [target]
    assert res["strategy"] == "added_node_selector"
    assert res["migration"]["phase"] == "Succeeded"
    assert res["migration"]["source_node"] == source and res["migration"]["target_node"] == target
    assert [p["phase"] for p in res["migration"]["phase_timestamps"]][-1] == "Succeeded"
    assert res["duration_seconds"] is not None and res["duration_seconds"] >= 0
    assert node_of(kv, namespace, "vm") == target

    [vmim] = kv.list(VMIMS, namespace)
    assert vmim["metadata"]["labels"].items() >= MANAGED.items()
    assert vmim["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": target}
    assert vmim["metadata"]["annotations"]["kubevirt.io/migrationUnschedulablePodTimeoutSeconds"] == "30"
    rejected = {r["name"]: r["reasons"] for r in res["rejected"]}
    assert any("untolerated taint dedicated=gpu:NoSchedule" in r for r in rejected["node05"])
    assert any("cordoned" in r for r in rejected["node06"])

    # Again: already there, nothing to do, no new VMIM.
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target})
    assert rc == 0 and res["changed"] is False, res
    assert res["migration"] is None and res["target_node"] == target
    assert len(kv.list(VMIMS, namespace)) == 1


def test_selector_matching_no_node_fails_before_any_vmim(kv, kubeconfig, namespace, wait):
    start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace,
                                      "added_node_selector": {"topology.kubernetes.io/zone": "zone-c"}})
    # zone-c holds node05 (tainted, not tolerated) and node06 (cordoned, cpu=slow)
    assert rc != 0 and res["failed"]
    assert "no node can take" in res["msg"]
    assert "node05: " in res["msg"] and "untolerated taint dedicated=gpu:NoSchedule" in res["msg"]
    assert res["candidates"] == []
    assert kv.list(VMIMS, namespace) == []

    # A hostname that is not a node
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": "node99"})
    assert rc != 0 and "no node can take" in res["msg"], res
    assert kv.list(VMIMS, namespace) == []

    # target_node and a different hostname in added_node_selector
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": "node02",
                                      "added_node_selector": {"kubernetes.io/hostname": "node04"}})
    assert rc != 0 and "conflicts" in res["msg"], res


def test_not_migratable_is_a_clear_error(kv, kubeconfig, namespace, wait):
    vmi = start_vm(kv, namespace, "vm", wait, pvc=rwo_claim(kv.core, namespace, "data", wait))
    storage = "slow" if vmi["status"]["nodeName"] in ("node01", "node02", "node05", "node06") else "fast"
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "added_node_selector": {"storage": storage}})
    assert rc != 0
    assert "not live-migratable" in res["msg"] and "DisksNotLiveMigratable" in res["msg"]
    assert "ReadWriteMany" in res["msg"]  # KubeVirt's own message is quoted
    assert kv.list(VMIMS, namespace) == []

    rc, res = run_module(kubeconfig, {"name": "missing", "namespace": namespace, "target_node": "node01"})
    assert rc != 0 and "not found" in res["msg"]


def test_in_flight_migration_attach_or_clear_error(kv, kubeconfig, namespace, wait):
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "slow"}})
    # node01 and node03 are the schedulable cpu=slow nodes: the other one is the only target.
    source = vmi["status"]["nodeName"]
    target = "node03" if source == "node01" else "node01"
    # Someone else's migration to that node, slow enough to be in flight through two module runs (each can take
    # 15 s of a loaded machine's time: a module run imports the kubernetes client)
    kv.create(VMIMS, namespace, vmim_manifest("theirs", "vm", added_node_selector={"kubernetes.io/hostname": target},
                                              annotations={"sim.vmsched.kubevirt.io/migration-seconds": "60"}))
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "added_node_selector": {"storage": "fast"}})
    assert rc != 0 and "in flight" in res["msg"] and "theirs" in res["msg"], res

    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target})
    assert rc == 0, res.get("msg")
    assert res["attached"] is True and res["changed"] is True
    assert res["migration"]["name"] == "theirs" and res["migration"]["phase"] == "Succeeded"
    assert res["target_node"] == target == node_of(kv, namespace, "vm")
    assert len(kv.list(VMIMS, namespace)) == 1


def test_state_absent_cancels_the_migration_in_flight(kv, kubeconfig, namespace, wait):
    start_vm(kv, namespace, "vm", wait, annotations=SLOW, spec_extra={"nodeSelector": {"cpu": "slow"}})
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "state": "absent"})
    assert rc == 0 and res["changed"] is False
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "wait": False})
    assert rc == 0 and res["changed"] is True and res["migration"]["phase"] in (None, "Pending", "Scheduling"), res
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "state": "absent"})
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert kv.list(VMIMS, namespace) == []


def test_failed_migration_reports_the_reason(kv, kubeconfig, namespace, wait):
    start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "fast"}},
             annotations={"sim.vmsched.kubevirt.io/migration-fail": "LibvirtSaysNo"})
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace})
    assert rc != 0
    assert res["failure_reason"] and "LibvirtSaysNo" in res["failure_reason"], res
    assert "failed" in res["msg"] and res["migration"]["phase"] == "Failed"


def test_wait_timeout_with_cancel(kv, kubeconfig, namespace, wait):
    start_vm(kv, namespace, "vm", wait, annotations=SLOW, spec_extra={"nodeSelector": {"cpu": "fast"}})
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "wait_timeout": 2, "on_timeout": "cancel"})
    assert rc != 0 and "cancelled" in res["msg"], res
    wait(lambda: kv.list(VMIMS, namespace) == [], "the cancelled VMIM gone")


# --- check mode writes nothing ------------------------------------------------------------------------


def audit_entries(since, user_agent=USER_AGENT):
    log = AUDIT_LOG
    entries = []
    with open(log, encoding="utf-8") as handle:
        for line in handle:
            if user_agent not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            stamp = datetime.datetime.fromisoformat(entry["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp >= since and entry.get("userAgent", "").startswith(user_agent):
                entries.append(entry)
    return entries


def test_check_mode_writes_nothing(kv, kubeconfig, namespace, wait):
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "slow"}})
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    other = "node03" if vmi["status"]["nodeName"] == "node01" else "node01"   # the other schedulable cpu=slow node
    storage = {"node01": "fast", "node03": "slow"}[other]
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "strategy": "vm_node_selector",
                                      "added_node_selector": {"storage": storage}}, check=True)
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["candidates"] == [other]
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": other}, check=True)
    assert rc == 0
    assert kv.list(VMIMS, namespace) == []

    def ours():
        found = [e for e in audit_entries(since) if (e.get("objectRef") or {}).get("namespace") == namespace]
        return found if any(e["verb"] == "get" for e in found) else None
    entries = wait(ours, "the module's requests in the audit log", timeout=20)
    # Other tests (and other people) run the module concurrently: this namespace, or cluster-scoped objects.
    writes = [(e["verb"], e["requestURI"]) for e in audit_entries(since)
              if e["verb"] not in ("get", "list", "watch")
              and (e.get("objectRef") or {}).get("namespace") in (namespace, None)]
    assert writes == [], writes
    assert {e["verb"] for e in entries} <= {"get", "list", "watch"}


# --- RBAC: only kubevirt.io:migrate -----------------------------------------------------------------


MIGRATE_RULES = [  # kubevirt/kubevirt pkg/virt-operator/resource/generate/rbac/cluster.go newMigrateClusterRole
    {"apiGroups": ["subresources.kubevirt.io"], "resources": ["virtualmachines/migrate"], "verbs": ["update"]},
    {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancemigrations"],
     "verbs": ["get", "delete", "create", "update", "patch", "list", "watch", "deletecollection"]},
]


def test_user_with_only_the_migrate_clusterrole_can_migrate(kv, api_client, kubeconfig, namespace, wait):
    rbac = client.RbacAuthorizationV1Api(api_client)
    try:
        rbac.read_cluster_role("kubevirt.io:migrate")
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        try:
            rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                      "metadata": {"name": "kubevirt.io:migrate", "labels": {"kubevirt.io": ""}},
                                      "rules": MIGRATE_RULES})
        except client.ApiException as exc2:
            if exc2.status != 409:
                raise
    user = f"migrator-{namespace}"
    rbac.create_namespaced_role_binding(namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "kvmigrate"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubevirt.io:migrate"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    target = ({"node02", "node04"} - {vmi["status"]["nodeName"]}).pop()

    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target,
                                      "impersonate_user": user})
    assert rc == 0, res.get("msg")
    assert res["changed"] is True and res["migration"]["phase"] == "Succeeded"
    text = " ".join(res.get("warnings") or [])
    assert "cannot read VirtualMachineInstance" in text and "skipped" in text
    assert res["kubevirt"]["added_node_selector"] is True
    # KubeVirt lets every authenticated user read its CR (ClusterRole kubevirt.io:default, bound to
    # system:authenticated by its install strategy), so the version comes from there.
    assert res["kubevirt"]["detected_from"] == "KubeVirt CR status.observedKubeVirtVersion"
    assert node_of(kv, namespace, "vm") == target


# --- KubeVirt 1.5: no addedNodeSelector -------------------------------------------------------------------


@pytest.fixture
def kubevirt_15(kubevirt, kv):
    """The cluster must run KubeVirt 1.5 (`make integration-kubevirt`, a cluster of its own); the KubeVirt CR's
    vmRolloutStrategy is restored after the test."""
    if not kubevirt.startswith("v1.5."):
        pytest.fail(f"this test needs a cluster with KubeVirt 1.5 (this one runs {kubevirt}); run it with "
                    "`make integration-kubevirt`", pytrace=False)
    cr = kv.custom.get_namespaced_custom_object(GROUP, VERSION, "kubevirt", "kubevirts", "kubevirt")
    before = cr["spec"]["configuration"].get("vmRolloutStrategy")
    yield kubevirt
    kv.custom.patch_namespaced_custom_object(GROUP, VERSION, "kubevirt", "kubevirts", "kubevirt",
                                             {"spec": {"configuration": {"vmRolloutStrategy": before}}})


def set_rollout_strategy(kv, strategy, wait, namespace):
    kv.custom.patch_namespaced_custom_object(GROUP, VERSION, "kubevirt", "kubevirts", "kubevirt",
                                             {"spec": {"configuration": {"vmRolloutStrategy": strategy}}})
    # virt-controller reads its configuration from the CR through an informer: give it a moment, proven by a
    # VM whose nodeSelector KubeVirt copies to its running VMI.
    start_vm(kv, namespace, "probe", wait)
    kv.patch(VMS, namespace, "probe", {"spec": {"template": {"spec": {"nodeSelector": {"probe": "yes"}}}}})
    wait(lambda: (kv.get(VMIS, namespace, "probe")["spec"].get("nodeSelector") or {}).get("probe") == "yes",
         "virt-controller using vmRolloutStrategy LiveUpdate")


@pytest.mark.kubevirt15
def test_kubevirt_15_auto_fails_vm_node_selector_works_and_restores(kubevirt_15, kv, kubeconfig, namespace, wait):
    start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "slow"}})
    start_vm(kv, namespace, "bad", wait, spec_extra={"nodeSelector": {"cpu": "slow"}},
             annotations={"sim.vmsched.kubevirt.io/migration-fail": "TargetCrashed"})

    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": "node03"
                                      if node_of(kv, namespace, "vm") == "node01" else "node01"})
    assert rc != 0 and "v1.5.3" in res["msg"] and "1.6.0" in res["msg"] and "vm_node_selector" in res["msg"], res
    assert kv.list(VMIMS, namespace) == []

    # Defect 5: under 1.5's default rollout strategy, Stage, KubeVirt never copies the VM's nodeSelector to the
    # VMI: the fallback cannot work, and says so before any write (it never writes the VMI's spec).
    target = "node03" if node_of(kv, namespace, "vm") == "node01" else "node01"
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target,
                                      "strategy": "vm_node_selector"})
    assert rc != 0 and "vmRolloutStrategy" in res["msg"] and "Stage" in res["msg"], res
    assert "Nothing was changed" in res["msg"]
    assert kv.get(VMS, namespace, "vm")["spec"]["template"]["spec"]["nodeSelector"] == {"cpu": "slow"}
    time.sleep(2)   # the audit log is written asynchronously
    writes = [(e["verb"], e["requestURI"]) for e in audit_entries(since)
              if e["verb"] not in ("get", "list", "watch") and (e.get("objectRef") or {}).get("namespace") == namespace]
    assert writes == [], writes

    set_rollout_strategy(kv, "LiveUpdate", wait, namespace)
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target,
                                      "strategy": "vm_node_selector"})
    assert rc == 0, res.get("msg")
    assert res["changed"] is True and res["target_node"] == target == node_of(kv, namespace, "vm")
    assert res["vm_node_selector"]["restored"] is True and res["vm_node_selector"]["vmi_patched_directly"] is False
    vm = kv.get(VMS, namespace, "vm")
    assert vm["spec"]["template"]["spec"]["nodeSelector"] == {"cpu": "slow"}
    wait(lambda: kv.get(VMIS, namespace, "vm")["spec"]["nodeSelector"] == {"cpu": "slow"},
         "KubeVirt copying the restored nodeSelector back to the VMI")
    time.sleep(2)
    vmi_writes = [e["verb"] for e in audit_entries(since)
                  if (e.get("objectRef") or {}).get("resource") == "virtualmachineinstances"
                  and e["verb"] not in ("get", "list", "watch")]
    assert vmi_writes == [], "the module must never write a VMI"

    # A failing migration restores the VM spec too.
    target = "node03" if node_of(kv, namespace, "bad") == "node01" else "node01"
    rc, res = run_module(kubeconfig, {"name": "bad", "namespace": namespace, "target_node": target,
                                      "strategy": "vm_node_selector"})
    assert rc != 0 and "TargetCrashed" in (res["failure_reason"] or ""), res
    assert res["vm_node_selector"]["restored"] is True
    assert kv.get(VMS, namespace, "bad")["spec"]["template"]["spec"]["nodeSelector"] == {"cpu": "slow"}
    wait(lambda: kv.get(VMIS, namespace, "bad")["spec"]["nodeSelector"] == {"cpu": "slow"},
         "the VMI back to its own nodeSelector")


# --- watch resilience ---------------------------------------------------------------------------------------


def test_wait_survives_watch_disconnects(kv, api_client, namespace, wait):
    """Every watch stream is cut after its first event (as an API server restart would); the wait still ends
    with the right result. Injected at the client level: restarting the shared API server would disturb
    other users of the local control plane."""
    from urllib3.exceptions import ProtocolError
    from kubernetes import dynamic, watch

    from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import Cluster
    from ansible_collections.vmsched.kubevirt.plugins.module_utils.watch import ObjectWatcher

    start_vm(kv, namespace, "vm", wait, annotations={"sim.vmsched.kubevirt.io/migration-seconds": "2"})
    kv.create(VMIMS, namespace, vmim_manifest("m", "vm", added_node_selector={"storage": "slow"}))

    class Flaky(watch.Watch):
        streams = 0

        def stream(self, func, *args, **kwargs):
            Flaky.streams += 1
            for n, event in enumerate(super().stream(func, *args, **kwargs)):
                yield event
                if n == 0:
                    raise ProtocolError("Connection broken: injected")

    watcher = ObjectWatcher(Cluster(dynamic.DynamicClient(api_client), watch_factory=Flaky), namespace, "m")
    final = watcher.wait(120)
    assert final["status"]["phase"] == "Succeeded"
    assert watcher.reconnects >= 1 and Flaky.streams >= 2


def test_wait_survives_an_api_server_restart(kv, kubeconfig, namespace, wait):
    vmi = start_vm(kv, namespace, "vm", wait, annotations={"sim.vmsched.kubevirt.io/migration-seconds": "10"},
                   spec_extra={"nodeSelector": {"cpu": "slow"}})
    target = "node03" if vmi["status"]["nodeName"] == "node01" else "node01"
    cmd, env = ansible_module.module_command(MODULE, kubeconfig, {"name": "vm", "namespace": namespace,
                                                                  "target_node": target})
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        # The module is watching the VMIM when the API server goes away and comes back.
        wait(lambda: [m for m in kv.list(VMIMS, namespace) if (m.get("status") or {}).get("phase") == "Running"],
             "the module's migration Running")
        restart = subprocess.run([sys.executable, str(ROOT / "tests" / "cluster" / "cluster.py"), "restart-apiserver"],
                                 capture_output=True, text=True, check=False)
        assert restart.returncode == 0, restart.stderr
        stdout, stderr = proc.communicate(timeout=300)
    rc, res = ansible_module.module_result(proc.returncode, stdout, stderr)
    assert rc == 0, res.get("msg")
    assert res["migration"]["phase"] == "Succeeded" and res["target_node"] == target == node_of(kv, namespace, "vm")


# --- KubeVirt as it really is (issue 18's defects) ---------------------------------------------------------------


def prefer_node(node):
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}


def test_a_node_whose_cpu_kubevirt_will_not_use_is_refused_naming_the_model(kv, kubeconfig, namespace, wait):
    """Defect 1: a host-model VM started on Cascade Lake can only move to nodes with that model and its features;
    virt-controller adds them to the target pod. A Skylake node is refused before any VMIM, naming the model."""
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"affinity": prefer_node("node02")})
    assert vmi["status"]["nodeName"] == "node02", "the preferred node02 was not chosen; the premise fails"
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": "node01",
                                      "unschedulable_timeout": 10})
    assert rc != 0 and "target node node01 cannot take" in res["msg"], res
    assert "host-model Cascadelake-Server" in res["msg"] and "tsx-ctrl" in res["msg"], res["msg"]
    assert kv.list(VMIMS, namespace) == []
    # The other Cascade Lake node is fine.
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace,
                                      "added_node_selector": {"storage": "slow"}}, check=True)
    assert rc == 0 and res["candidates"] == ["node04"], res
    rejected = {r["name"]: r["reasons"] for r in res["rejected"]}
    assert any("host-model Cascadelake-Server" in r for r in rejected["node03"]), rejected


def test_preflight_fits_the_launcher_pod_not_the_vm(kv, core, kubeconfig, namespace, wait):
    """Defect 7: the target pod requests what the launcher pod requests: the VM's memory plus KubeVirt's overhead,
    the guest-console-log sidecar beside it, the device plugins' resources. A node with room for less is refused."""
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"affinity": prefer_node("node03")})
    assert vmi["status"]["nodeName"] == "node03", "the preferred node03 was not chosen; the premise fails"
    [pod] = kv.pods(namespace, vmi)
    compute = [c for c in pod.spec.containers if c.name == "compute"][0]
    need = parse_quantity(compute.resources.requests["memory"])
    sidecar = [c for c in pod.spec.init_containers if c.name == "guest-console-log"][0]
    assert sidecar.restart_policy == "Always"
    # Leave node04 room for the compute container alone, not for it and the sidecar.
    node = core.read_node("node04")
    from ansible_collections.vmsched.kubevirt.plugins.module_utils.node_fit import pod_requests
    used = sum(pod_requests(core.api_client.sanitize_for_serialization(p)).get("memory", 0.0)
               for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node04").items
               if p.status.phase not in ("Succeeded", "Failed"))
    filler = parse_quantity(node.status.allocatable["memory"]) - used - need - 10 * 2 ** 20
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="filler"),
        spec=client.V1PodSpec(node_name="node04", containers=[client.V1Container(
            name="c", image="registry.example/filler:v1",
            resources=client.V1ResourceRequirements(requests={"memory": str(int(filler))}))])))
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": "node04",
                                      "unschedulable_timeout": 10})
    assert rc != 0 and "target node node04 cannot take" in res["msg"], res
    assert "node04 cannot take VirtualMachineInstance %s/vm now: insufficient memory" % namespace in res["msg"], \
        res["msg"]
    assert kv.list(VMIMS, namespace) == []


def parse_quantity(text):
    from ansible_collections.vmsched.kubevirt.plugins.module_utils.node_fit import parse_quantity as parse
    return parse(text)


def test_a_new_migration_right_after_a_cancel_waits_for_the_abort(kv, kubeconfig, namespace, wait):
    """Defect 3: deleting a Running VMIM makes KubeVirt abort it, which takes time; until it has ended virt-api
    refuses another migration. state=absent then present either waits for the abort or says what is aborting."""
    vmi = start_vm(kv, namespace, "vm", wait, annotations=dict(SLOW, **{"sim.vmsched.kubevirt.io/abort-seconds": "15"}),
                   spec_extra={"nodeSelector": {"cpu": "slow"}})
    target = "node03" if vmi["status"]["nodeName"] == "node01" else "node01"
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "wait": False})
    assert rc == 0 and res["changed"] is True, res
    first = res["migration"]["name"]
    wait_migration(kv, namespace, first, wait, phases=("Running",))
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "state": "absent", "wait": False})
    assert rc == 0 and res["changed"] is True, res
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target, "wait": False})
    assert rc != 0 and "is being cancelled" in res["msg"] and first in res["msg"], res
    assert "in-flight migration detected" not in res["msg"]
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": target})
    assert rc == 0, res.get("msg")
    assert res["migration"]["phase"] == "Succeeded" and res["target_node"] == target == node_of(kv, namespace, "vm")


def test_state_absent_with_wait_reports_the_abort(kv, kubevirt, kubeconfig, namespace, wait):
    start_vm(kv, namespace, "vm", wait, annotations=SLOW, spec_extra={"nodeSelector": {"cpu": "fast"}})
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "wait": False})
    assert rc == 0, res
    wait_migration(kv, namespace, res["migration"]["name"], wait, phases=("Running",))
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "state": "absent"})
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["migration"]["phase"] == "Failed" and res["failure_reason"] == release(kubevirt).abort_reason, res
    assert kv.list(VMIMS, namespace) == []


def test_quoted_live_migratable_reasons_are_kubevirts_own(kv, kubeconfig, namespace, wait):
    """Defect 6: the module quotes the condition virt-handler set, reason and message, word for word."""
    vmi = start_vm(kv, namespace, "vm", wait, interface="bridge")
    condition = [c for c in vmi["status"]["conditions"] if c["type"] == "LiveMigratable"][0]
    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "added_node_selector": {"zone": "x"}})
    assert rc != 0
    assert res["msg"] == (f"VirtualMachineInstance {namespace}/vm is not live-migratable: "
                          f"{condition['reason']}: {condition['message']}")
    assert condition["reason"] == "InterfaceNotLiveMigratable"
    assert kv.list(VMIMS, namespace) == []


# --- KubeVirt's own migrations (issue 26) -----------------------------------------------------------------------


def test_kubevirts_evacuation_is_adopted_and_the_job_finished_from_where_it_landed(kv, kubeconfig, namespace, wait):
    """The VM's launcher pod was evicted (a drain, the descheduler): KubeVirt migrates it itself, to node03 (the
    other schedulable cpu=slow node). Asked for node01, the module follows KubeVirt's migration to its end instead of
    failing, warns that it landed elsewhere, and migrates the VM on from there."""
    # Each migration slow enough for KubeVirt's to be in flight still when the module starts on a loaded machine.
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "slow"}},
                   annotations={"sim.vmsched.kubevirt.io/migration-seconds": "20"})
    source = vmi["status"]["nodeName"]
    elsewhere = "node03" if source == "node01" else "node01"
    [pod] = kv.pods(namespace, vmi)
    with pytest.raises(client.ApiException) as info:
        kv.core.create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)))
    assert info.value.status == 429, info.value.body
    [theirs] = wait(lambda: [m for m in kv.list(VMIMS, namespace) if m["metadata"]["name"].startswith(
        "kubevirt-evacuation-")], "KubeVirt's evacuation VMIM")

    rc, res = run_module(kubeconfig, {"name": "vm", "namespace": namespace, "target_node": source})
    assert rc == 0, res.get("msg")
    assert (res["attached"], res["adopted"], res["changed"]) == (True, True, True)
    assert res["adopted_migration"]["name"] == theirs["metadata"]["name"]
    assert res["adopted_migration"]["phase"] == "Succeeded" and res["adopted_migration"]["target_node"] == elsewhere
    assert any(theirs["metadata"]["name"] in w and f"ended on {elsewhere}" in w and "migrating it again" in w
               for w in res.get("warnings") or []), res.get("warnings")
    assert res["migration"]["name"] != theirs["metadata"]["name"] and res["migration"]["phase"] == "Succeeded"
    assert (res["migration"]["source_node"], res["migration"]["target_node"]) == (elsewhere, source)
    assert (res["source_node"], res["target_node"]) == (source, source) and node_of(kv, namespace, "vm") == source
