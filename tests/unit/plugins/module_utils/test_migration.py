# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/migration.py: the single migration (VmiMigrator) and vmi_migration's
engine (Migration), against the in-memory cluster of kubevirt_fakes.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import migration as m
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMS

from .kubevirt_fakes import (
    FakeCluster,
    evacuation_vmim,
    failed,
    kubevirt_cr,
    launcher,
    node,
    ran,
    vmi,
    vmim,
    wire,
)

NODES = [node("n1", {"zone": "a"}), node("n2", {"zone": "b"}), node("n3", {"zone": "b"}, cordoned=True),
         node("n4", {"zone": "c"}, taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])]


def params(**overrides):
    base = dict(name="web", namespace="ns", state="present", target_node=None, added_node_selector={},
                strategy="auto", wait=True, wait_timeout=600, on_timeout="fail", unschedulable_timeout=None)
    base.update(overrides)
    return base


def cluster(the_vmi=None, **kwargs):
    the_vmi = the_vmi or vmi("web", "n1")
    kwargs.setdefault("nodes", NODES)
    kwargs.setdefault("pods", [launcher(the_vmi)])
    kwargs.setdefault("cr", kubevirt_cr())
    kwargs.setdefault("vms", [{"metadata": {"name": the_vmi["metadata"]["name"], "namespace": "ns"},
                               "spec": {"template": {"spec": {}}}}])
    return FakeCluster(vmis=[the_vmi], **kwargs)


def run(fake, check_mode=False, **overrides):
    return ran(m.Migration, fake, params(**overrides), check_mode)


def failing(fake, check_mode=False, **overrides):
    return failed(m.Migration, fake, params(**overrides), check_mode)


def in_flight_vmim(selector, annotate=True, name="theirs"):
    obj = {"metadata": {"name": name, "namespace": "ns", "uid": "uid-" + name,
                        "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {}},
           "spec": {"vmiName": "web", "addedNodeSelector": selector}, "status": {"phase": "Running"}}
    if annotate:
        obj["metadata"]["annotations"][m.SELECTOR_ANNOTATION] = json.dumps(selector)
    return obj


# --- the VMIM and its result (moved from the watch's tests) -------------------------------------------------


def test_manifest_summary_duration_and_failure_reason():
    body = m.vmim_manifest("web", {"kubernetes.io/hostname": "n2"}, unschedulable_timeout=30)
    assert body["metadata"]["generateName"] == "web-migration-"
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vmsched.kubevirt"}
    assert body["metadata"]["annotations"] == {"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "30"}
    assert body["spec"] == {"vmiName": "web", "addedNodeSelector": {"kubernetes.io/hostname": "n2"}}
    assert "addedNodeSelector" not in m.vmim_manifest("web")["spec"]
    final = vmim(5, "Failed")
    assert m.duration_seconds(final) == 12.0
    assert m.duration_seconds(vmim(5, "Running")) is None
    final["status"]["migrationState"] = {"failureReason": "boom", "sourceNode": "n1"}
    assert m.failure_reason(final) == "boom"
    assert m.summarize(final)["source_node"] == "n1"

    class Reader:
        def events_for(self, *args):
            return [{"type": "Normal", "reason": "SuccessfulCreate", "message": "x"},
                    {"type": "Warning", "reason": "migrationTargetPodUnschedulable", "message": "no fit"}]
    assert m.failure_reason(vmim(5, "Failed"), Reader()) == "migrationTargetPodUnschedulable: no fit"


def test_selector_of_prefers_the_annotation_then_the_spec():
    assert m.selector_of(in_flight_vmim({"zone": "b"})) == {"zone": "b"}
    assert m.selector_of(in_flight_vmim({"zone": "b"}, annotate=False)) == {"zone": "b"}
    unannotated_spec = in_flight_vmim({}, annotate=False)
    unannotated_spec["metadata"]["annotations"][m.SELECTOR_ANNOTATION] = json.dumps({"cpu": "fast"})
    assert m.selector_of(unannotated_spec) == {"cpu": "fast"}          # vm_node_selector: the spec is empty
    broken = in_flight_vmim({"zone": "b"}, annotate=False)
    broken["metadata"]["annotations"][m.SELECTOR_ANNOTATION] = "{not json"
    assert m.selector_of(broken) == {"zone": "b"}


# --- preflight: what KubeVirt would refuse, before any write ---------------------------------------------------


@pytest.mark.parametrize("the_vmi, fragment", [
    (vmi("web", "n1", phase="Scheduling"), "VirtualMachineInstance ns/web is Scheduling, not Running"),
    (vmi("web", "n1", migratable="DisksNotLiveMigratable"),
     "VirtualMachineInstance ns/web is not live-migratable: DisksNotLiveMigratable: cannot migrate VMI"),
    (vmi("web", "n1", migratable=None), "has no LiveMigratable condition, which virt-handler sets once it runs"),
    (vmi("web", "n1", node_selector={"zone": "a"}),
     "the VMI's own nodeSelector sets zone=a; KubeVirt keeps the VMI's value on a key collision, so the "
     "requested zone=b would be ignored"),
])
def test_preflight_refusals_write_nothing(the_vmi, fragment):
    fake = cluster(the_vmi)
    _engine, msg = failing(fake, added_node_selector={"zone": "b"})
    assert fragment in msg
    assert fake.writes == []


def test_the_reasons_read_the_same_in_both_modules():
    assert m.not_running(vmi("web", "n1")) is None and m.not_live_migratable(vmi("web", "n1")) is None
    assert m.not_running(vmi("web", "n1", phase=None)) == \
        "without a phase, not Running: only a running VMI can migrate"
    assert m.selector_conflict(vmi("web", "n1", node_selector={"zone": "a"}), {"zone": "a"}) is None


def test_the_one_preflight_checks_in_kubevirts_order_and_words_each_problem_once():
    """VmiMigrator.preflight, which vmi_migration, vmi_evacuation and vm_rebalance all call: the first problem ends
    it, as a reason for a list of VMIs (problem) and as a sentence naming the VMI (message)."""
    def checked(the_vmi=None, selector=None, vmims=(), **options):
        fake = cluster(the_vmi)
        migrator = m.VmiMigrator(fake, lambda msg: None)
        the_vmi = the_vmi or vmi("web", "n1")
        return migrator.preflight("ns", "web", the_vmi, selector or {}, list(vmims), **options)

    stopped = checked(vmi("web", "n1", phase="Scheduling", migratable="DisksNotLiveMigratable"))
    assert stopped.problem == "Scheduling, not Running: only a running VMI can migrate"
    assert stopped.message == "VirtualMachineInstance ns/web is " + stopped.problem and stopped.results is None
    conflict = checked(selector={"zone": "b"}, vmims=[in_flight_vmim({"zone": "c"})])
    assert conflict.problem == conflict.message and conflict.problem.endswith(m.CONFLICT_ADVICE)
    followed = checked(selector={"zone": "b"}, vmims=[in_flight_vmim({"zone": "b"})])
    assert followed.problem is None and followed.in_flight.verdict == m.ATTACH and followed.results is None
    not_followed = checked(selector={"zone": "b"}, vmims=[in_flight_vmim({"zone": "b"})], follow=False)
    assert not_followed.problem == ("another migration of ns/web is in flight: VMIM theirs (phase Running, "
                                    "selector {'zone': 'b'}), created by someone else")
    in_place = checked(vmi("web", "n1", migratable="DisksNotLiveMigratable"), in_place=lambda the_vmi: True)
    assert in_place.in_place and in_place.problem is None and in_place.results is None
    assert checked(nodes=False).candidates is None
    fits = checked(selector={"zone": "b"})
    assert fits.problem is None and fits.candidates == ["n2"] and fits.resources_checked
    only = checked(hosts=["n3", "n4"], avoid="n1")
    assert only.no_fit and only.candidates == [] and only.problem.startswith(
        "no node can take it where this job wants it (off node n1, on one of n3, n4). Nearest nodes: n3: ")
    assert only.message.startswith("no node can take VirtualMachineInstance ns/web where this job wants it")
    target = checked(selector={"kubernetes.io/hostname": "n4"})
    assert target.problem == "target node n4 cannot take it now: untolerated taint gpu=yes:NoSchedule"
    assert target.message == "target node n4 cannot take VirtualMachineInstance ns/web now: untolerated taint " \
        "gpu=yes:NoSchedule"


def test_no_candidate_names_the_nearest_nodes_and_why():
    fake = cluster()
    engine, msg = failing(fake, added_node_selector={"zone": "c"})
    assert "no node can take VirtualMachineInstance ns/web" in msg
    assert "n4: untolerated taint gpu=yes:NoSchedule" in msg
    assert engine.result["candidates"] == []
    rejected = dict((r["name"], r["reasons"]) for r in engine.result["rejected"])
    assert rejected["n1"][0] == "the source node (the VMI runs there)"
    assert any("cordoned" in r for r in rejected["n3"])
    assert fake.writes == []


def test_check_mode_plans_and_writes_nothing():
    fake = cluster()
    engine = run(fake, check_mode=True, added_node_selector={"zone": "b"})
    assert engine.result["changed"] is True and engine.result["candidates"] == ["n2"]
    assert engine.result["node_checks"] == "done" and engine.result["strategy"] == "added_node_selector"
    assert engine.result["migration"] is None and fake.writes == []


def test_free_resources_are_checked_on_the_launcher_pod():
    small = [node("n1"), node("n2", cpu="500m")]
    engine, msg = failing(cluster(nodes=small), target_node="n2")
    assert "insufficient cpu: needs 1, 500m free of 500m allocatable" in msg
    assert engine.result["node_checks"] == "done"


def test_unreadable_nodes_skip_the_node_checks_with_a_warning():
    fake = cluster(forbidden={"nodes"})
    engine = run(fake, target_node="n2")
    assert engine.result["node_checks"].startswith("skipped: cannot list nodes (403 Forbidden")
    assert any("cannot list nodes" in w and "node checks are skipped" in w for w in engine.warnings)
    assert engine.result["target_node"] == "n2"


def test_unreadable_pods_skip_the_resource_check_only():
    engine = run(cluster(forbidden={"active_pods"}), target_node="n2")
    assert engine.result["node_checks"] == "done without the resource check"
    assert any("cannot list pods" in w for w in engine.warnings)
    assert engine.result["candidates"] == ["n2"]


def test_an_unreadable_vmi_skips_the_vmi_checks_and_still_migrates():
    fake = cluster(forbidden={"get_" + m.VMIS})
    engine = run(fake, target_node="n2")
    assert any("cannot read VirtualMachineInstance ns/web" in w and "skipped" in w for w in engine.warnings)
    assert engine.result["node_checks"] == "skipped: the VMI cannot be read"
    assert engine.result["changed"] is True and engine.result["source_node"] == "n1"   # from migrationState
    assert engine.result["target_node"] == "n2"


def test_a_missing_vmi_is_an_error():
    fake = cluster()
    _engine, msg = failing(fake, name="nope")
    assert "VirtualMachineInstance ns/nope not found" in msg


def test_a_missing_namespace_is_named():
    _engine, msg = failing(cluster(namespaces={"ns"}), namespace="gone")
    assert msg == "namespace 'gone' does not exist"
    # A user who may not read namespaces hears about the VMI.
    _engine, msg = failing(cluster(namespaces={"ns"}, forbidden={"namespace"}), namespace="gone")
    assert msg == "VirtualMachineInstance gone/web not found (is the VM running?)"


def test_an_unknown_target_node_is_named_before_any_write():
    fake = cluster()
    _engine, msg = failing(fake, target_node="n9")
    assert msg == "no node can take VirtualMachineInstance ns/web: target node 'n9' does not exist"
    assert fake.writes == []
    # Not checked when the user may not read nodes; the migration goes on.
    assert run(cluster(forbidden={"node", "nodes"}), target_node="n2").result["target_node"] == "n2"
    # state=absent ignores target_node.
    assert run(cluster(), state="absent", target_node="n9").result["changed"] is False


@pytest.mark.parametrize("overrides, message", [
    (dict(name=""), "name is empty; it needs a value"),
    (dict(namespace="", name=""), "name is empty; it needs a value; namespace is empty; it needs a value"),
    (dict(target_node="n2", added_node_selector={"kubernetes.io/hostname": "n3"}),
     "target_node=n2 conflicts with kubernetes.io/hostname=n3 in added_node_selector"),
])
def test_bad_options_are_refused_by_check_params(overrides, message):
    with pytest.raises(m.KubeVirtError) as info:
        m.Migration.check_params(params(**overrides))
    assert str(info.value) == message


def test_check_params_accepts_what_a_run_accepts():
    m.Migration.check_params(params(target_node="n2", added_node_selector={"zone": "b"}))
    m.Migration.check_params(params(state="absent", target_node="n2",
                                    added_node_selector={"kubernetes.io/hostname": "n3"}))


# --- idempotency and attaching ---------------------------------------------------------------------------------


def test_already_on_a_matching_node_changes_nothing():
    fake = cluster()
    engine = run(fake, added_node_selector={"zone": "a"})
    assert engine.result["changed"] is False and engine.result["target_node"] == "n1"
    assert engine.result["node_checks"] == "not needed: the VMI already runs on a matching node"
    assert fake.writes == []


def test_already_there_by_hostname_even_when_nodes_are_unreadable():
    fake = cluster(forbidden={"node"})
    engine = run(fake, target_node="n1")
    assert engine.result["changed"] is False and engine.warnings == []
    engine = run(fake, added_node_selector={"zone": "b"}, check_mode=True)
    assert any("cannot tell whether the VMI is already on a matching node" in w for w in engine.warnings)
    assert engine.result["changed"] is True and engine.result["candidates"] == ["n2"]


def test_attaches_to_a_migration_in_flight_with_the_same_selector():
    fake = cluster(vmims=[in_flight_vmim({"kubernetes.io/hostname": "n2"})])
    engine = run(fake, target_node="n2")
    assert engine.result["attached"] is True and engine.result["changed"] is True
    assert engine.result["migration"]["name"] == "theirs" and engine.result["migration"]["phase"] == "Succeeded"
    assert engine.result["target_node"] == "n2"
    assert [w for w in fake.writes if w[0] == "create"] == []


def test_attach_in_check_mode_writes_nothing():
    fake = cluster(vmims=[in_flight_vmim({"kubernetes.io/hostname": "n2"})])
    engine = run(fake, check_mode=True, target_node="n2")
    assert engine.result["attached"] is True and engine.result["changed"] is True
    assert engine.result["migration"]["phase"] == "Running" and fake.writes == []


def test_a_migration_in_flight_for_another_selector_is_named():
    fake = cluster(vmims=[in_flight_vmim({"zone": "c"})])
    _engine, msg = failing(fake, added_node_selector={"zone": "b"})
    assert "another migration of ns/web is in flight: VMIM theirs (phase Running, selector {'zone': 'c'})" in msg
    assert fake.writes == []
    assert "it goes elsewhere than this job wants (selector {'zone': 'b'})" in msg


# --- migrations in flight: one judgement for both modules (issue 26) ----------------------------------------------


@pytest.mark.parametrize("theirs, selector, hosts, avoid, verdict", [
    ({}, {"zone": "b"}, None, None, m.ADOPT),                               # KubeVirt's evacuation: goes anywhere
    ({"zone": "b"}, {"zone": "b"}, None, None, m.ATTACH),
    ({"zone": "c"}, {"zone": "b"}, None, None, m.CONFLICT),
    ({"zone": "b", "cpu": "fast"}, {"zone": "b"}, None, None, m.CONFLICT),
    ({"kubernetes.io/hostname": "n3"}, {}, None, "n1", m.ATTACH),           # off the evacuated node: wanted
    ({"kubernetes.io/hostname": "n1"}, {}, None, "n1", m.CONFLICT),
    ({"kubernetes.io/hostname": "n3", "zone": "b"}, {"zone": "b"}, ["n2", "n3"], "n1", m.ATTACH),
    ({"kubernetes.io/hostname": "n4"}, {}, ["n2", "n3"], "n1", m.CONFLICT),
    ({"kubernetes.io/hostname": "n3"}, {"kubernetes.io/hostname": "n2"}, None, None, m.CONFLICT),
])
def test_judge_in_flight(theirs, selector, hosts, avoid, verdict):
    found = m.judge_in_flight([in_flight_vmim(theirs, annotate=False)], "ns", "web", selector, hosts, avoid)
    assert found.verdict == verdict and found.name == "theirs"
    assert found.follows is (verdict in (m.ADOPT, m.ATTACH))
    assert (found.message is not None) is (verdict == m.CONFLICT)


def test_judge_in_flight_ignores_ended_and_other_vmis_and_names_a_cancel():
    ended = in_flight_vmim({}, name="old")
    ended["status"]["phase"] = "Succeeded"
    other = in_flight_vmim({})
    other["spec"]["vmiName"] = "db"
    assert m.judge_in_flight([ended, other], "ns", "web", {}) is None
    cancelled = evacuation_vmim("web")
    cancelled["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    found = m.judge_in_flight([cancelled], "ns", "web", {})
    assert found.verdict == m.CANCELLING and not found.follows
    assert found.message == ("migration kubevirt-evacuation-web of ns/web is being cancelled (phase Running), and "
                             "KubeVirt refuses another migration of the VMI until it has ended")


def test_kubevirts_evacuation_is_adopted_and_its_landing_checked():
    fake = cluster(vmims=[evacuation_vmim("web")], land_on="n2")
    engine = run(fake, added_node_selector={"zone": "b"})
    result = engine.result
    assert (result["attached"], result["adopted"], result["changed"]) == (True, True, True)
    assert result["migration"]["name"] == "kubevirt-evacuation-web" and result["migration"]["phase"] == "Succeeded"
    assert result["adopted_migration"] == result["migration"]
    assert (result["source_node"], result["target_node"], result["duration_seconds"]) == ("n1", "n2", 7.0)
    assert engine.warnings == [] and [w for w in fake.writes if w[0] == "create"] == []


def test_an_adopted_migration_that_lands_elsewhere_is_followed_by_the_modules_own():
    fake = cluster(vmims=[evacuation_vmim("web")], land_on="n1b", nodes=NODES + [node("n1b", {"zone": "a"})])
    engine = run(fake, target_node="n2")
    result = engine.result
    [warning] = engine.warnings
    assert warning == ("VirtualMachineInstance ns/web: the migration this module followed, VMIM "
                       "kubevirt-evacuation-web (KubeVirt's evacuation of node n1), ended on n1b, which does not "
                       "match selector {'kubernetes.io/hostname': 'n2'}; migrating it again from there")
    assert (result["attached"], result["adopted"]) == (True, True)
    assert result["adopted_migration"]["name"] == "kubevirt-evacuation-web"
    assert result["adopted_migration"]["target_node"] == "n1b"
    assert result["migration"]["name"].startswith("web-migration-") and result["migration"]["source_node"] == "n1b"
    assert (result["source_node"], result["target_node"]) == ("n1", "n2")
    assert result["candidates"] == ["n2"]       # judged again from n1b, where the VMI ran then
    assert [w[0] for w in fake.writes] == ["create"]


def test_an_adopted_migration_that_fails_reports_kubevirts_reason():
    fake = cluster(vmims=[evacuation_vmim("web")], fail={"web": "TargetPodCrashed"})
    engine, msg = failing(fake, target_node="n2")
    assert msg == ("migration ns/kubevirt-evacuation-web (followed, KubeVirt's evacuation of node n1) of web failed: "
                   "TargetPodCrashed")
    assert engine.result["failure_reason"] == "TargetPodCrashed" and engine.result["adopted"] is True
    assert fake.writes == []


def test_adopting_in_check_mode_writes_nothing():
    fake = cluster(vmims=[evacuation_vmim("web")])
    engine = run(fake, check_mode=True, target_node="n2")
    result = engine.result
    assert (result["attached"], result["adopted"], result["changed"]) == (True, True, True)
    assert result["migration"]["name"] == "kubevirt-evacuation-web" and result["migration"]["phase"] == "Running"
    assert fake.writes == []


def test_one_wait_timeout_for_the_adopted_migration_and_the_modules_own():
    fake = cluster(vmims=[evacuation_vmim("web")], stuck={"web"})
    engine, msg = failing(fake, target_node="n2", wait_timeout=30)
    assert msg == ("migration ns/kubevirt-evacuation-web (followed, KubeVirt's evacuation of node n1) did not finish "
                   "within 30s (last phase Running); it is still running")
    assert fake.writes == []


# --- capabilities and the strategies -------------------------------------------------------------------------


def test_old_kubevirt_fails_before_any_write_naming_the_version():
    fake = cluster(cr=kubevirt_cr("v1.5.3"))
    engine, msg = failing(fake, target_node="n2")
    assert "v1.5.3" in msg and "1.6.0" in msg and "strategy=vm_node_selector" in msg
    assert engine.result["kubevirt"]["added_node_selector"] is False and fake.writes == []


def test_unknown_support_fails_with_auto_and_warns_otherwise():
    fake = cluster(forbidden={"kubevirt_cr"})
    _engine, msg = failing(fake, target_node="n2")
    assert "strategy=auto cannot tell" in msg and "cannot read the KubeVirt CR" in msg
    engine = run(fake, target_node="n2", strategy="added_node_selector")
    assert any("support for spec.addedNodeSelector is unknown" in w for w in engine.warnings)
    assert engine.result["kubevirt"]["parallel_migrations_per_cluster"] == 5


def test_a_dropped_added_node_selector_deletes_the_vmim_at_once():
    fake = cluster(forbidden={"kubevirt_cr"}, prune_added_node_selector=True, openapi=True)
    engine, msg = failing(fake, target_node="n2")
    assert "the API server dropped spec.addedNodeSelector" in msg and "the VMIM was deleted" in msg
    name = engine.result["migration"]["name"]
    assert fake.writes == [("create", m.VMIMS, name), ("delete", m.VMIMS, name)]
    assert fake.vmims() == []


def test_vm_node_selector_goes_through_the_vm_and_restores_it():
    fake = cluster(cr=kubevirt_cr("v1.5.3", rollout="LiveUpdate"))
    fake.objects[(VMS, "ns", "web")]["spec"]["template"]["spec"]["nodeSelector"] = {"keep": "me"}
    engine = run(fake, target_node="n2", strategy="vm_node_selector")
    assert engine.result["target_node"] == "n2" and engine.result["strategy"] == "vm_node_selector"
    assert engine.result["vm_node_selector"] == {"original": {"keep": "me"}, "restored": True,
                                                 "vmi_patched_directly": False}
    assert fake.objects[(VMS, "ns", "web")]["spec"]["template"]["spec"]["nodeSelector"] == {"keep": "me"}
    [created] = fake.vmims()
    assert "addedNodeSelector" not in created["spec"]
    assert m.selector_of(created) == {"kubernetes.io/hostname": "n2"}


@pytest.mark.parametrize("cr, condition, expected", [
    (kubevirt_cr("v1.5.3"), None, "this cluster's is Stage (the default of KubeVirt v1.5.3)"),
    (kubevirt_cr("v1.6.6", rollout="Stage"), None, "this cluster's is Stage (spec.configuration.vmRolloutStrategy)"),
    (kubevirt_cr("v1.5.3", rollout="LiveUpdate"),
     {"type": "RestartRequired", "status": "True", "message": "a non-live-updatable field was changed"},
     "has KubeVirt's RestartRequired condition (a non-live-updatable field was changed)"),
])
def test_vm_node_selector_refuses_before_any_write_when_kubevirt_would_not_carry_it(cr, condition, expected):
    fake = cluster(cr=cr)
    if condition:
        fake.objects[(VMS, "ns", "web")]["status"] = {"conditions": [condition]}
    before = copy.deepcopy(fake.objects[(VMS, "ns", "web")])
    _engine, message = failing(fake, target_node="n2", strategy="vm_node_selector")
    assert expected in message and "Nothing was changed" in message
    assert fake.objects[(VMS, "ns", "web")] == before and fake.vmims() == []


# --- creating, waiting, the result ---------------------------------------------------------------------------------


def test_a_migration_end_to_end_and_its_result():
    fake = cluster()
    engine = run(fake, target_node="n2", unschedulable_timeout=30)
    result = engine.result
    assert (result["changed"], result["source_node"], result["target_node"]) == (True, "n1", "n2")
    assert result["migration"]["phase"] == "Succeeded" and result["duration_seconds"] == 7.0
    assert result["migration"]["source_node"] == "n1" and result["migration"]["target_node"] == "n2"
    [created] = fake.vmims()
    assert created["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "n2"}
    assert created["metadata"]["annotations"] == {
        "kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "30",
        m.SELECTOR_ANNOTATION: json.dumps({"kubernetes.io/hostname": "n2"})}
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vmsched.kubevirt"}


def test_without_wait_the_module_returns_once_the_vmim_exists():
    fake = cluster()
    engine = run(fake, added_node_selector={"zone": "b"}, wait=False)
    assert engine.result["changed"] is True and engine.result["migration"]["phase"] is None
    assert engine.result["target_node"] is None


def test_ended_fills_the_gaps_of_a_late_migration_state_from_the_vmi():
    fake = cluster()
    migrator = wire(m.VmiMigrator(fake, [].append), fake)
    created = migrator.create("ns", "web", {"kubernetes.io/hostname": "n2"})
    ended = fake.end(fake.objects[(m.VMIMS, "ns", created["metadata"]["name"])])
    del ended["status"]["migrationState"]                         # not copied to the VMIM yet
    out = migrator.ended(ended)
    assert out["target_node"] == "n2" and out["phase"] == "Succeeded" and out["failure_reason"] is None
    assert (out["migration"]["source_node"], out["migration"]["target_node"]) == ("n1", "n2")
    assert migrator.ended(ended, vmi_readable=False)["migration"]["source_node"] is None


@pytest.mark.parametrize("reason, expected", [("LibvirtSaysNo", "LibvirtSaysNo"),
                                              (None, "FailedMigration: target pod unschedulable")])
def test_a_failed_migration_reports_the_reason(reason, expected):
    fake = cluster(fail={"web": reason})
    engine, msg = failing(fake, target_node="n2")
    assert engine.result["failure_reason"] == expected and expected in msg
    assert "migration ns/web-migration-" in msg and "of web failed" in msg
    assert engine.result["migration"]["phase"] == "Failed" and engine.result["duration_seconds"] == 7.0


@pytest.mark.parametrize("on_timeout, left, fragment", [("cancel", 0, "it was cancelled"),
                                                        ("fail", 1, "it is still running")])
def test_wait_timeout_cancels_or_leaves_the_migration(on_timeout, left, fragment):
    fake = cluster(stuck={"web"})
    engine, msg = failing(fake, target_node="n2", wait_timeout=30, on_timeout=on_timeout)
    assert "did not finish within 30s" in msg and fragment in msg
    assert len(fake.vmims()) == left and engine.result["changed"] is True


# --- state=absent ------------------------------------------------------------------------------------------------------


def test_absent_cancels_every_migration_in_flight():
    fake = cluster(vmims=[in_flight_vmim({"zone": "b"}), in_flight_vmim({"zone": "c"}, name="older")])
    engine = run(fake, state="absent", wait=False)
    assert engine.result["changed"] is True
    assert sorted(w for w in fake.writes) == [("delete", m.VMIMS, "older"), ("delete", m.VMIMS, "theirs")]
    assert run(fake, state="absent").result["changed"] is False


def test_absent_in_check_mode_writes_nothing():
    fake = cluster(vmims=[in_flight_vmim({"zone": "b"})])
    engine = run(fake, state="absent", check_mode=True)
    assert engine.result["changed"] is True and engine.result["migration"]["name"] == "theirs"
    assert fake.writes == []
