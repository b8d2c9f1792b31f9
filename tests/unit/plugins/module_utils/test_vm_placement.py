# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the planning parts of plugins/module_utils/vm_placement.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import vm_placement as vp
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMS

from .kubevirt_fakes import FakeCluster, apply, kubevirt_cr, vmi as make_vmi


def params(**overrides):
    base = dict(namespace="ns", all_namespaces=False, label_selectors=[], names=None, state="present",
                scheduler_name=None, descheduler_evict=None, node_selector=None, node_selector_mode="merge",
                tolerations=None, affinity=None, concurrency=4, conflict_retries=2, field_manager="fm")
    base.update(overrides)
    return base


def vm(spec=None, annotations=None, template_annotations=None):
    return {"metadata": {"name": "vm", "namespace": "ns", "resourceVersion": "7", "annotations": annotations or {}},
            "spec": {"template": {"metadata": {"annotations": template_annotations or {}},
                                  "spec": dict({"domain": {"devices": {}}}, **(spec or {}))}}}


def converge(obj, p):
    patch, changes = vp.plan(obj, p)
    if patch is None:
        return obj, changes
    new = apply(copy.deepcopy(obj), patch)
    new["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    return new, changes


def test_present_then_idempotent_then_absent_restores():
    start = vm(spec={"schedulerName": "old", "nodeSelector": {"cpu": "slow", "keep": "me"},
                     "tolerations": [{"key": "x", "operator": "Exists"}]})
    p = params(scheduler_name="new", descheduler_evict=True, node_selector={"cpu": "fast", "zone": "a"},
               tolerations=[{"key": "d", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
               affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
               eviction_strategy="LiveMigrate")
    placed, changes = converge(start, p)
    assert set(changes) == set(vp.FIELDS)
    spec = placed["spec"]["template"]["spec"]
    assert spec["schedulerName"] == "new" and spec["nodeSelector"] == {"cpu": "fast", "keep": "me", "zone": "a"}
    assert spec["tolerations"][0] == {"key": "x", "operator": "Exists"} and len(spec["tolerations"]) == 2
    assert placed["spec"]["template"]["metadata"]["annotations"][vp.EVICT_ANNOTATION] == "true"
    record = json.loads(placed["metadata"]["annotations"][vp.PREVIOUS_ANNOTATION])
    assert record["schedulerName"] == "old" and record["nodeSelector"] == {"cpu": "slow", "zone": None}
    assert vp.plan(placed, p) == (None, {})
    restored, changes = converge(placed, params(state="absent"))
    assert restored["spec"] == start["spec"]
    assert vp.PREVIOUS_ANNOTATION not in restored["metadata"]["annotations"]
    assert vp.plan(restored, params(state="absent")) == (None, {})


def test_replace_mode_and_null_keys():
    start = vm(spec={"nodeSelector": {"a": "1", "b": "2"}})
    placed = converge(start, params(node_selector={"c": "3"}, node_selector_mode="replace"))[0]
    assert placed["spec"]["template"]["spec"]["nodeSelector"] == {"c": "3"}
    placed = converge(start, params(node_selector={"a": None}))[0]
    assert placed["spec"]["template"]["spec"]["nodeSelector"] == {"b": "2"}
    assert converge(placed, params(state="absent"))[0]["spec"] == start["spec"]


def test_affinity_replaces_the_whole_value():
    start = vm(spec={"affinity": {"podAntiAffinity": {"x": 1}, "nodeAffinity": {"old": 1}}})
    placed = converge(start, params(affinity={"nodeAffinity": {"new": 2}}))[0]
    assert placed["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {"new": 2}}
    assert converge(placed, params(state="absent"))[0]["spec"] == start["spec"]


def test_the_patch_carries_the_resource_version_and_nothing_unrelated():
    patch = vp.plan(vm(), params(scheduler_name="s"))[0]
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["spec"] == {"template": {"spec": {"schedulerName": "s"}}}


@pytest.mark.parametrize("overrides, fragment", [
    (dict(namespace=None), "exactly one of namespace"),
    (dict(scheduler_name="s", node_selector={"bad key!": "x"}), "node_selector key 'bad key!'"),
    (dict(scheduler_name="s", node_selector={"k": 5}), "node_selector k=5"),
    (dict(tolerations=[{"operator": "Equal"}]), "operator Equal needs a key"),
    (dict(tolerations=[{"key": "a", "effect": "Sometimes"}]), "effect must be"),
    (dict(affinity={"nodeAffinity": []}), "affinity.nodeAffinity must be a mapping"),
    (dict(scheduler_name="s", concurrency=0), "concurrency must be at least 1"),
])
def test_validate(overrides, fragment):
    errors = vp.validate(params(**overrides))
    assert any(fragment in e for e in errors), errors


def test_takes_effect():
    running = {"status": {"phase": "Running"}}
    assert vp.takes_effect({"schedulerName": {}}, None, ["nodeSelector"]) == "next_start"
    assert vp.takes_effect({"schedulerName": {}}, running, ["nodeSelector"]) == "restart"
    assert vp.takes_effect({"nodeSelector": {}}, running, ["nodeSelector"]) == "live_migration"
    assert vp.takes_effect({"nodeSelector": {}}, running, []) == "restart"


def test_the_result_keeps_ansibles_own_keys_free():
    # Ansible reads a result's `failed` as the task's outcome (and ORs it over loop items: a list there broke
    # ansible-core 2.16's loops); the VMs whose patch failed are `failures`.
    engine = vp.Placement(None, params(scheduler_name="s"))
    ok, broken = vm(), dict(vm(), metadata=dict(vm()["metadata"], name="broken"))
    result = engine.report([ok, broken], [(ok, {"schedulerName": {"before": None, "after": "s"}}, None),
                                          (broken, {}, "conflict after 2 retries")], {}, [], [])
    assert "failed" not in result and result["changed"] is True
    assert result["failures"] == [{"namespace": "ns", "name": "broken", "msg": "conflict after 2 retries"}]
    assert result["counts"]["failed"] == 1


# --- eviction: opted in only where an eviction is a live migration --------------------------------------------


def named(name, strategy=None, evict=None):
    obj = vm(spec={"evictionStrategy": strategy} if strategy else None,
             template_annotations={vp.EVICT_ANNOTATION: evict} if evict else None)
    obj["metadata"]["name"] = name
    return obj


def running(name, strategy="None", migratable=True):
    """A running VMI as virt-api writes it: with the strategy it started with (the cluster's when the VM sets
    none; KubeVirt's default is None). strategy=None: a VMI without one (older objects, unit shapes)."""
    obj = make_vmi(name, "node01", migratable=migratable)
    if strategy:
        obj["spec"]["evictionStrategy"] = strategy
    return obj


def cr_with(strategy=None, version="v1.9.0"):
    cr = kubevirt_cr(version=version)
    if strategy:
        cr["spec"]["configuration"]["evictionStrategy"] = strategy
    return cr


def placed(fake, check_mode=False, **overrides):
    engine = vp.Placement(fake, params(descheduler_evict=True, **overrides), check_mode=check_mode)
    engine.run()
    return engine


CLUSTER_DEFAULT = ("None", "KubeVirt's default (the KubeVirt CR sets none)")


@pytest.mark.parametrize("vm_strategy, vmi_strategy, cluster, migratable, evict_live, outcome", [
    (None, None, CLUSTER_DEFAULT, True, True, "restart"),                       # KubeVirt's default: None
    (None, None, ("LiveMigrate", "cr"), True, True, "migrate"),                 # the cluster's setting
    ("LiveMigrate", None, CLUSTER_DEFAULT, True, True, "restart"),              # the running VMI still has None
    ("LiveMigrate", None, CLUSTER_DEFAULT, True, False, "migrate"),             # 1.5: the annotation waits for a start
    (None, "LiveMigrate", CLUSTER_DEFAULT, True, True, "migrate"),
    (None, "LiveMigrate", CLUSTER_DEFAULT, False, True, "blocked"),            # never moves
    (None, "LiveMigrateIfPossible", CLUSTER_DEFAULT, False, True, "restart"),  # not migratable: evicted for real
    (None, "LiveMigrateIfPossible", CLUSTER_DEFAULT, True, True, "migrate"),
    (None, "External", CLUSTER_DEFAULT, True, True, "external"),
    (None, "None", ("LiveMigrate", "cr"), True, True, "restart"),               # the VMI's own wins
])
def test_eviction_verdict_follows_kubevirts_admitter(vm_strategy, vmi_strategy, cluster, migratable, evict_live,
                                                     outcome):
    the_vmi = running("vm", vmi_strategy, migratable=True if migratable else "DisksNotLiveMigratable")
    verdict = vp.eviction_verdict(named("vm", vm_strategy), the_vmi, cluster, evict_live)
    assert verdict["outcome"] == outcome, verdict
    assert ("reason" in verdict) == (outcome in ("restart", "blocked"))


def test_a_stopped_vm_is_judged_by_its_template():
    assert vp.eviction_verdict(named("vm"), None, CLUSTER_DEFAULT, True)["outcome"] == "restart"
    assert vp.eviction_verdict(named("vm", "LiveMigrate"), None, CLUSTER_DEFAULT, True)["outcome"] == "migrate"


def test_refuse_is_the_default_and_writes_nothing():
    fake = FakeCluster(vms=[named("safe", "LiveMigrate"), named("risky")],
                       vmis=[running("safe", "LiveMigrate"), running("risky")], cr=cr_with())
    engine = vp.Placement(fake, params(descheduler_evict=True))
    with pytest.raises(vp.PlacementError) as info:
        engine.run()
    message = str(info.value)
    assert "ns/risky" in message and "evictionStrategy None (the running VMI's, fixed when it started)" in message
    assert "ns/safe" not in message and "unsafe_eviction=set_live_migrate" in message
    assert fake.writes == []


def test_the_clusters_live_migrate_protects_vmis_started_after_it_not_before():
    # A VMI started once the KubeVirt CR said LiveMigrate carries it; one started before keeps None.
    fake = FakeCluster(vms=[named("a"), named("b")], vmis=[running("a", "LiveMigrate"), running("b", "None")],
                       cr=cr_with("LiveMigrate"))
    engine = placed(fake, unsafe_eviction="skip")
    assert fake.writes == [("patch", "virtualmachines", "a")]
    verdicts = dict((v["name"], v) for v in engine.result["eviction"])
    assert verdicts["a"]["outcome"] == "migrate" and verdicts["a"]["opted_in"]
    assert verdicts["b"]["outcome"] == "restart" and "until it restarts" in verdicts["b"]["reason"]
    # A stopped VM without a strategy of its own starts with the cluster's.
    stopped = FakeCluster(vms=[named("c")], cr=cr_with("LiveMigrate"))
    assert placed(stopped).result["eviction"][0]["outcome"] == "migrate"


def test_skip_opts_in_only_the_safe_and_keeps_other_settings():
    fake = FakeCluster(vms=[named("safe", "LiveMigrate"), named("risky")],
                       vmis=[running("safe", "LiveMigrate"), running("risky")], cr=cr_with())
    engine = placed(fake, unsafe_eviction="skip", scheduler_name="s")
    risky = fake.get_vm("ns", "risky")["spec"]["template"]
    assert vp.EVICT_ANNOTATION not in risky["metadata"]["annotations"] and risky["spec"]["schedulerName"] == "s"
    safe = fake.get_vm("ns", "safe")["spec"]["template"]
    assert safe["metadata"]["annotations"][vp.EVICT_ANNOTATION] == "true"
    verdicts = dict((v["name"], v) for v in engine.result["eviction"])
    assert verdicts["risky"]["opted_in"] is False and verdicts["safe"]["opted_in"] is True


def test_set_live_migrate_on_a_running_vm_waits_for_its_restart_then_restores():
    fake = FakeCluster(vms=[named("a")], vmis=[running("a")], cr=cr_with())
    engine = placed(fake, unsafe_eviction="set_live_migrate")
    template = fake.get_vm("ns", "a")["spec"]["template"]
    # The running VMI keeps evictionStrategy None until it restarts: the annotation must not reach it yet.
    assert template["spec"]["evictionStrategy"] == "LiveMigrate"
    assert vp.EVICT_ANNOTATION not in template["metadata"]["annotations"]
    assert engine.result["restart_required"] == ["ns/a"] and engine.result["eviction"][0]["deferred"] is True
    again = placed(fake, unsafe_eviction="set_live_migrate")
    assert again.result["changed"] is False
    # After the restart the VMI runs with LiveMigrate: the next run opts it in.
    fake.put("virtualmachineinstances", running("a", "LiveMigrate"))
    placed(fake, unsafe_eviction="set_live_migrate")
    assert fake.get_vm("ns", "a")["spec"]["template"]["metadata"]["annotations"][vp.EVICT_ANNOTATION] == "true"
    vp.Placement(fake, params(state="absent")).run()
    template = fake.get_vm("ns", "a")["spec"]["template"]
    assert "evictionStrategy" not in template["spec"] and vp.EVICT_ANNOTATION not in template["metadata"]["annotations"]


def test_set_live_migrate_on_a_stopped_vm_sets_both():
    fake = FakeCluster(vms=[named("a")], cr=cr_with())
    placed(fake, unsafe_eviction="set_live_migrate")
    template = fake.get_vm("ns", "a")["spec"]["template"]
    assert template["spec"]["evictionStrategy"] == "LiveMigrate"
    assert template["metadata"]["annotations"][vp.EVICT_ANNOTATION] == "true"


def test_a_vm_that_cannot_migrate_is_never_opted_in_but_allow_says_so():
    vms, vmis = [named("a", "LiveMigrate")], [running("a", "LiveMigrate", migratable="DisksNotLiveMigratable")]
    fake = FakeCluster(vms=vms, vmis=vmis, cr=cr_with())
    with pytest.raises(vp.PlacementError, match="not live-migratable"):
        placed(fake)
    placed(fake, unsafe_eviction="set_live_migrate")
    assert fake.writes == []
    engine = placed(FakeCluster(vms=vms, vmis=vmis, cr=cr_with()), unsafe_eviction="allow")
    assert any("unsafe_eviction=allow" in w for w in engine.warnings)


def test_an_unreadable_kubevirt_cr_counts_as_kubevirts_default():
    fake = FakeCluster(vms=[named("a")], cr=cr_with("LiveMigrate"), forbidden=["kubevirt_cr"])
    with pytest.raises(vp.PlacementError, match="KubeVirt's default"):
        placed(fake)


def test_vms_already_opted_in_and_opt_outs_are_not_checked():
    fake = FakeCluster(vms=[named("a", evict="true")], vmis=[running("a")], cr=cr_with())
    assert placed(fake).result["changed"] is False
    engine = vp.Placement(fake, params(descheduler_evict=False))
    engine.run()
    assert engine.result["eviction"] == [] and engine.result["changed"] is True


# --- a write the API server's admission changes back ----------------------------------------------------------


class PolicyCluster(FakeCluster):
    """An API server with a mutating admission policy that gives a VM without a schedulerName the scheduler `pol`,
    on its next `enforced` writes (None: always): as one just deleted, which the API server stops enforcing when its
    own watch sees the deletion."""

    def __init__(self, enforced=None, **kwargs):
        super(PolicyCluster, self).__init__(**kwargs)
        self.enforced = enforced
        self.sleeps = []

    def patch_vm(self, namespace, name, patch, field_manager=None):
        written = super(PolicyCluster, self).patch_vm(namespace, name, patch, field_manager)
        if self.enforced is None or self.enforced > 0:
            if self.enforced:
                self.enforced -= 1
            if not written["spec"]["template"]["spec"].get("schedulerName"):
                written["spec"]["template"]["spec"]["schedulerName"] = "pol"
                written = copy.deepcopy(self.put(VMS, written))
        return written


def opted_in_then(fake):
    """Opt the VM in to `pol` (the policy's scheduler) without the policy, then let the policy enforce."""
    enforced, fake.enforced = fake.enforced, 0
    vp.Placement(fake, params(scheduler_name="pol")).run()
    fake.enforced = enforced
    return fake.get_vm("ns", "a")["metadata"]["annotations"][vp.PREVIOUS_ANNOTATION]


def restore(fake, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(vp.time, "monotonic", lambda: clock[0])

    def sleep(seconds):
        fake.sleeps.append(seconds)
        clock[0] += seconds

    engine = vp.Placement(fake, params(state="absent"))
    monkeypatch.setattr(engine, "sleep", sleep)
    engine.run()
    return engine


def test_a_restore_the_admission_changes_back_for_a_moment_is_written_again(monkeypatch):
    fake = PolicyCluster(enforced=2, vms=[named("a")], cr=cr_with())
    opted_in_then(fake)
    engine = restore(fake, monkeypatch)
    restored = fake.get_vm("ns", "a")
    assert "schedulerName" not in restored["spec"]["template"]["spec"]
    assert vp.PREVIOUS_ANNOTATION not in restored["metadata"]["annotations"]
    assert fake.sleeps == [1.0, 1.0] and engine.result["changed"] is True
    assert engine.result["vms"][0]["changes"] == {"schedulerName": {"before": "pol", "after": None}}


def test_a_restore_the_admission_keeps_changing_back_fails_and_keeps_the_record(monkeypatch):
    fake = PolicyCluster(enforced=None, vms=[named("a")], cr=cr_with())
    record = opted_in_then(fake)
    with pytest.raises(vp.PlacementError) as info:
        restore(fake, monkeypatch)
    message = str(info.value)
    assert "ns/a: the API server changed schedulerName back as it wrote it (schedulerName=\"pol\")" in message
    assert "VM defaults policy" in message and "its record of the values to restore is kept" in message
    kept = fake.get_vm("ns", "a")
    assert kept["metadata"]["annotations"][vp.PREVIOUS_ANNOTATION] == record
    assert sum(fake.sleeps) >= vp.ADMISSION_SETTLE_SECONDS
    # Once the policy is gone, the next run restores from the kept record.
    fake.enforced = 0
    restore(fake, monkeypatch)
    assert "schedulerName" not in fake.get_vm("ns", "a")["spec"]["template"]["spec"]
