# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vm_defaults role against the local control plane.

The policy runs in the real kube-apiserver; virt-controller turns VMs into VMIs and
virt-launcher pods carrying the template's schedulerName, and a real kube-scheduler
of the control plane's version, started here under a test-unique name, binds them.

Policies are cluster-scoped: every test names its policy after its namespace and
selects only namespaces carrying a label with its namespace's name, so parallel runs
(and other tests' VMs) are never touched.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from . import ansible_module
from .audit import Audit
from .local_scheduler import real_scheduler  # noqa: F401  pylint: disable=unused-import
from .playbook import run_playbook
from .vms import VMIS, VMS, kv, kubevirt, vm_manifest  # noqa: F401  pylint: disable=unused-import

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vm_defaults.yml"
SELECT = "vmsched.kubevirt.io/vm-defaults-test"
EVICT = "descheduler.alpha.kubernetes.io/evict"
GROUP = "admissionregistration.k8s.io"
API = f"{GROUP}/v1"
POLICY_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
POLICY_RESOURCES = ("mutatingadmissionpolicies", "mutatingadmissionpolicybindings")
MANAGED_BY = "vmsched.kubevirt.vm_defaults"
PREVIOUS = "vmsched.kubevirt.io/placement-previous"


@pytest.fixture
def names(namespace):
    """The test's policy name and scheduler name (both cluster-wide, so unique per test)."""
    return {"policy": "vmd-" + namespace, "scheduler": "kubevirt-scheduler-" + namespace[2:]}


@pytest.fixture
def selected(core, namespace):
    """The test namespace, labelled so that the test's policy (and only it) selects it."""
    core.patch_namespace(namespace, {"metadata": {"labels": {SELECT: namespace}}})
    return namespace


@pytest.fixture
def other_namespace(core):
    """A second namespace the test's policy does not select (for VMs that never start: no pods there)."""
    name = "t-" + uuid.uuid4().hex[:10]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def run(kubeconfig, namespace, names):
    """run(descheduler_evict=True, ...) runs the role with vm_defaults_<key> variables, selecting the test namespace."""

    def _run(check=False, diff=False, **variables):
        values = {"name": names["policy"], "scheduler_name": names["scheduler"],
                  "namespace_selector": {"matchLabels": {SELECT: namespace}}}
        values.update(variables)
        return run_playbook(PLAYBOOK, {f"vm_defaults_{k}": v for k, v in values.items()}, kubeconfig,
                            check=check, diff=diff)

    return _run


@pytest.fixture
def cleanup(dyn, names):
    """The cluster-scoped policy and binding go even when a test fails half-way: through the API, the binding first
    (a role run of state=absent costs about 8 CPU-seconds; test_idempotent_check_mode_diff_and_absent runs it)."""
    yield
    for kind in reversed(POLICY_KINDS):
        try:
            dyn.resources.get(api_version=API, kind=kind).delete(name=names["policy"])
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    assert policy_objects(dyn, names["policy"]) == {}


def policy_objects(dyn, name):
    """{kind: resourceVersion} of the policy and binding called name that exist."""
    found = {}
    for kind in POLICY_KINDS:
        try:
            found[kind] = dyn.resources.get(api_version=API, kind=kind).get(name=name).metadata.resourceVersion
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    return found


def policy_writes(audit, name):
    """Writes to the policy and binding called name since the audit's mark. An Audit made for
    namespace None sees writes to every cluster-scoped object; keep those to ours."""
    return [write for write in audit.writes() if write[1] in POLICY_RESOURCES and write[3] == name]


def failures(result):
    """The messages of the failed tasks and of their failed loop items."""
    messages = []
    for _name, task in result.results:
        if task.get("failed"):
            messages.append(task.get("msg", ""))
            messages += [item.get("msg", "") for item in task.get("results") or [] if item.get("failed")]
    return "\n".join(messages)


def template(vm):
    return vm["spec"]["template"]


def scheduler_of(vm):
    return template(vm)["spec"].get("schedulerName")


def evict_of(vm):
    return ((template(vm).get("metadata") or {}).get("annotations") or {}).get(EVICT)


def wait_enforced(kv, namespace, scheduler, wait):
    """Wait until new VMs in namespace get scheduler (None: are left alone). The API server starts
    (or stops) enforcing a policy when its informer sees the change, a moment after the write;
    a server-side dry-run create shows what admission does now, without writing."""
    def probe():
        vm = kv.custom.create_namespaced_custom_object("kubevirt.io", "v1", namespace, VMS,
                                                       vm_manifest("probe", run_strategy="Halted"), dry_run="All")
        return scheduler_of(vm) == scheduler
    wait(probe, f"new VMs in {namespace} getting schedulerName {scheduler!r}", timeout=30)


def launcher_pod(kv, namespace, name, wait):
    vmi = wait(lambda: kv.get(VMIS, namespace, name), f"VMI {namespace}/{name}", timeout=60)
    return wait(lambda: kv.pods(namespace, vmi) and kv.pods(namespace, vmi)[0], f"launcher pod of {namespace}/{name}",
                timeout=60)


def test_new_vms_get_the_scheduler_that_then_schedules_them(
        run, kv, core, dyn, api_client, kubeconfig, selected, other_namespace, names, wait, real_scheduler, cleanup):
    result = run(descheduler_evict=True)
    assert not result.failed, result.failure
    assert result.changed > 0
    assert set(policy_objects(dyn, names["policy"])) == set(POLICY_KINDS)
    wait_enforced(kv, selected, names["scheduler"], wait)

    scheduler = real_scheduler({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                "leaderElection": {"leaderElect": False},
                                "profiles": [{"schedulerName": names["scheduler"]}]}, kubeconfig)
    wait(scheduler.healthy, "the real kube-scheduler's /healthz", timeout=60)

    # No schedulerName, no annotation: both defaults.
    plain = kv.create(VMS, selected, vm_manifest("plain"))
    assert scheduler_of(plain) == names["scheduler"]
    assert evict_of(plain) == "true"
    # An empty schedulerName names no scheduler (the pod would get the default one): defaulted.
    blank = kv.create(VMS, selected, vm_manifest("blank", spec_extra={"schedulerName": ""}, run_strategy="Halted"))
    assert scheduler_of(blank) == names["scheduler"]
    # The owner's own choices, even an evict annotation of "false", stay.
    own = kv.create(VMS, selected, vm_manifest("own", spec_extra={"schedulerName": "default-scheduler"},
                                               annotations={EVICT: "false"}))
    assert scheduler_of(own) == "default-scheduler"
    assert evict_of(own) == "false"
    # A VM without an eviction strategy would restart when evicted (the local KubeVirt CR sets none: KubeVirt's
    # default, None): the scheduler, but no opt-in to eviction.
    legacy = kv.create(VMS, selected, vm_manifest("legacy", run_strategy="Halted", eviction_strategy=None))
    assert scheduler_of(legacy) == names["scheduler"]
    assert evict_of(legacy) is None
    # An unselected namespace is untouched.
    elsewhere = kv.create(VMS, other_namespace, vm_manifest("elsewhere", run_strategy="Halted"))
    assert scheduler_of(elsewhere) is None
    assert evict_of(elsewhere) is None

    # The virt-launcher pod of the defaulted VM is bound by that scheduler, and by no other.
    pod = launcher_pod(kv, selected, "plain", wait)
    assert pod.spec.scheduler_name == names["scheduler"]
    assert pod.metadata.annotations.get(EVICT) == "true"
    node = wait(lambda: core.read_namespaced_pod(pod.metadata.name, selected).spec.node_name,
                "the launcher pod bound to a node", timeout=60)
    assert node in {"node01", "node02", "node03", "node04"}  # node05 tainted, node06 cordoned
    scheduled = wait(lambda: [e for e in client.EventsV1Api(api_client).list_namespaced_event(
        selected, field_selector=f"regarding.name={pod.metadata.name}").items if e.reason == "Scheduled"],
        "the Scheduled event of the launcher pod", timeout=30)
    assert scheduled[0].reporting_controller == names["scheduler"], scheduled[0]
    assert launcher_pod(kv, selected, "own", wait).spec.scheduler_name == "default-scheduler"

    # UPDATE is covered too: an owner who removes schedulerName gets the default back.
    kv.patch(VMS, selected, "own", {"spec": {"template": {"spec": {"schedulerName": None}}}})  # merge patch: removes
    assert scheduler_of(kv.get(VMS, selected, "own")) == names["scheduler"]
    assert evict_of(kv.get(VMS, selected, "own")) == "false"


def test_a_restore_the_policy_sets_back_fails_keeping_the_record_then_takes_once_the_policy_is_gone(
        run, kv, dyn, kubeconfig, selected, names, wait, cleanup):
    # vm_placement gave the VM the policy's scheduler before the policy existed: its record says it had none.
    kv.create(VMS, selected, vm_manifest("opted", run_strategy="Halted"))
    placement = {"namespace": selected, "names": ["opted"]}
    rc, res = ansible_module.run_module("vmsched.kubevirt.vm_placement", kubeconfig,
                                        dict(placement, scheduler_name=names["scheduler"]))
    assert rc == 0 and res["changed"], res
    record = kv.get(VMS, selected, "opted")["metadata"]["annotations"][PREVIOUS]
    assert json.loads(record) == {"schedulerName": None}
    result = run()
    assert not result.failed, result.failure
    wait_enforced(kv, selected, names["scheduler"], wait)

    # The restore takes the scheduler out, and the policy (UPDATE is covered) puts it back: a failure that says so,
    # and the record stays for a later run.
    rc, res = ansible_module.run_module("vmsched.kubevirt.vm_placement", kubeconfig, dict(placement, state="absent"))
    assert rc != 0 and res.get("failed"), res
    assert f"{selected}/opted: the API server changed schedulerName back as it wrote it" in res["msg"], res["msg"]
    assert "its record of the values to restore is kept" in res["msg"], res["msg"]
    vm = kv.get(VMS, selected, "opted")
    assert scheduler_of(vm) == names["scheduler"] and vm["metadata"]["annotations"].get(PREVIOUS) == record, vm

    # As teardown.yml does: the policy deleted (the binding first), the VM restored right away, while the API server
    # may still enforce it for a moment.
    for kind in reversed(POLICY_KINDS):
        dyn.resources.get(api_version=API, kind=kind).delete(name=names["policy"])
    rc, res = ansible_module.run_module("vmsched.kubevirt.vm_placement", kubeconfig, dict(placement, state="absent"))
    assert rc == 0 and res["changed"], res
    vm = kv.get(VMS, selected, "opted")
    assert scheduler_of(vm) is None and PREVIOUS not in (vm["metadata"].get("annotations") or {}), vm


def test_idempotent_check_mode_diff_and_absent(run, kv, dyn, selected, names, wait, cleanup):
    policy = names["policy"]
    first = run()
    assert not first.failed, first.failure
    assert first.changed > 0
    wait_enforced(kv, selected, names["scheduler"], wait)
    objects = dyn.resources.get(api_version=API, kind="MutatingAdmissionPolicy").get(name=policy).to_dict()
    assert objects["metadata"]["labels"]["app.kubernetes.io/managed-by"] == MANAGED_BY
    assert [m["patchType"] for m in objects["spec"]["mutations"]] == ["ApplyConfiguration"]  # no evict mutation
    assert objects["spec"]["failurePolicy"] == "Fail"
    binding = dyn.resources.get(api_version=API, kind="MutatingAdmissionPolicyBinding").get(name=policy).to_dict()
    assert binding["spec"]["policyName"] == policy
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {SELECT: selected}}
    versions = policy_objects(dyn, policy)

    second = run()
    assert not second.failed, second.failure
    assert second.changed == 0, [name for name, result in second.results if result.get("changed")]
    assert policy_objects(dyn, policy) == versions

    # Check mode with real changes to make (the evict mutation, another scheduler): nothing is written.
    audit, cluster_audit = Audit(selected), Audit(None)
    check = run(check=True, diff=True, descheduler_evict=True, scheduler_name="other-scheduler")
    assert not check.failed, check.failure
    assert check.changed > 0
    diff = json.dumps(check.result("Apply the policy and its binding")["results"][0]["diff"])
    assert "other-scheduler" in diff and EVICT in diff, diff
    assert policy_writes(cluster_audit, policy) == []
    assert audit.writes() == []
    assert policy_objects(dyn, policy) == versions
    vm = kv.create(VMS, selected, vm_manifest("after-check", run_strategy="Halted"))
    assert scheduler_of(vm) == names["scheduler"] and evict_of(vm) is None  # the applied policy, unchanged

    # absent: a look-alike (same labels, another name) stays; VMs the policy defaulted keep their values.
    look_alike = f"{policy}-mine"
    dyn.resources.get(api_version=API, kind="MutatingAdmissionPolicy").create(body={
        "apiVersion": API, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": look_alike, "labels": objects["metadata"]["labels"]},
        "spec": {"reinvocationPolicy": "Never",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["kubevirt.io"], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["virtualmachines"]}]},
                 "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}}]}})
    try:
        check_absent = run(check=True, state="absent")
        assert not check_absent.failed and check_absent.changed > 0, check_absent.failure
        assert policy_objects(dyn, policy) == versions

        # virt-controller reports the stopped VM's status once; the VM must not change after that.
        wait(lambda: (kv.get(VMS, selected, "after-check").get("status") or {}).get("printableStatus") == "Stopped",
             "virt-controller's status of the stopped VM", timeout=30)
        vm = kv.get(VMS, selected, "after-check")
        audit = Audit(selected)
        gone = run(state="absent")
        assert not gone.failed, gone.failure
        assert policy_objects(dyn, policy) == {}
        assert set(policy_objects(dyn, look_alike)) == {"MutatingAdmissionPolicy"}
        assert audit.writes() == []  # no VM was written
        kept = kv.get(VMS, selected, "after-check")
        assert kept["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]
        assert scheduler_of(kept) == names["scheduler"]
        # The defaulting has stopped.
        wait_enforced(kv, selected, None, wait)
        fresh = kv.create(VMS, selected, vm_manifest("after-absent"))
        assert scheduler_of(fresh) is None
        again = run(state="absent")
        assert not again.failed and again.changed == 0, again.failure
    finally:
        dyn.resources.get(api_version=API, kind="MutatingAdmissionPolicy").delete(name=look_alike)


@pytest.mark.parametrize("variables, message", [
    ({"scheduler_name": ""}, "must both be DNS-1123 subdomains"),
    ({"scheduler_name": "Kubevirt_Scheduler"}, "must both be DNS-1123 subdomains"),
    ({"name": "vmd:bad"}, "must both be DNS-1123 subdomains"),
    ({"namespace_selector": {"matchLabels": "team=a"}}, "is not a label selector"),
    # The argument spec reads "team=a" as {"team": "a"}, and refuses the key.
    ({"namespace_selector": "team=a"}, "vm_defaults_namespace_selector.team. Supported parameters include"),
    ({"namespace_selector": {"matchLabel": {"team": "a"}}}, "matchLabel"),
    ({"namespace_selector": {"matchExpressions": [{"key": "team", "operator": "Equals", "values": ["a"]}]}},
     "Equals"),
    ({"namespace_selector": {"matchLabels": {"team": 1}}}, "is not a label selector"),
    ({"namespace_selector": {"matchExpressions": [{"key": "team", "operator": "In", "values": [True]}]}},
     "is not a label selector"),
    # Left to the API server's validation, in the server-side dry run before any write.
    ({"namespace_selector": {"matchExpressions": [{"key": "team", "operator": "In"}]}},
     "matchExpressions[0].values: Required value: must be specified when `operator` is"),
    ({"namespace_selector": {"matchLabels": {"team/a/b": "x"}}}, "team/a/b"),
])
def test_bad_input_fails_before_anything_is_written(run, dyn, selected, names, variables, message):
    audit, cluster_audit = Audit(selected), Audit(None)
    result = run(**variables)
    assert result.failed
    assert message in failures(result), failures(result)
    assert policy_objects(dyn, variables.get("name", names["policy"])) == {}
    assert policy_writes(cluster_audit, variables.get("name", names["policy"])) == []
    assert audit.writes() == []
