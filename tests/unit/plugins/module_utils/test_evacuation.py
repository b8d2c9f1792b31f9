# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for vmi_evacuation's engine (plugins/module_utils/evacuation.py): selection, ordering, limits,
target_nodes spread, cordoning, preflight failures and the summary, against kubevirt_fakes.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.vmsched.kubevirt.plugins.module_utils import evacuation as e
from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import KubeVirtError
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMIMS
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import VmiMigrator

from .kubevirt_fakes import (
    FakeCluster,
    evacuated,
    evacuation_vmim,
    failed,
    kubevirt_cr,
    launcher,
    node,
    ran,
    vmi,
)

NODES = [node("n1", {"zone": "a"}), node("n2", {"zone": "b"}), node("n3", {"zone": "b"}), node("n4", {"zone": "c"})]


def params(**overrides):
    base = dict(node=None, namespace="ns", label_selector=None, added_node_selector=None, target_nodes=None,
                cordon=False, max_parallel=None, stop_on_failure=False, wait_timeout=600, unschedulable_timeout=None,
                placement="scheduler", allow_partial=False)
    base.update(overrides)
    return base


def cluster(vmis, **kwargs):
    kwargs.setdefault("nodes", NODES)
    kwargs.setdefault("pods", [launcher(v) for v in vmis])
    kwargs.setdefault("cr", kubevirt_cr())
    kwargs.setdefault("land_on", "n4")
    return FakeCluster(vmis=vmis, **kwargs)


def run(fake, check_mode=False, **overrides):
    return ran(e.Evacuation, fake, params(**overrides), check_mode)


def failing(fake, check_mode=False, **overrides):
    return failed(e.Evacuation, fake, params(**overrides), check_mode)


def on_n1(*names, **kwargs):
    return [vmi(name, "n1", **kwargs) for name in names]


def test_every_vmi_on_the_node_moves_in_name_order():
    vmis = on_n1("c", "a", "b") + [vmi("elsewhere", "n2"), vmi("done", "n1", phase="Succeeded")]
    fake = cluster(vmis)
    engine = run(fake, node="n1", added_node_selector={"zone": "b"})
    result = engine.result
    assert [v["name"] for v in result["vmis"]] == ["a", "b", "c"]
    assert all(v["status"] == "migrated" and v["target_node"] == "n4" for v in result["vmis"])
    assert all(v["candidates"] == ["n2", "n3"] and v["added_node_selector"] == {"zone": "b"} for v in result["vmis"])
    summary = result["summary"]
    assert (summary["selected"], summary["to_migrate"], summary["migrated"], summary["failed"]) == (3, 3, 3, 0)
    assert summary["migration_seconds_total"] == 21.0 and result["changed"] is True
    created = fake.vmims()
    assert len(created) == 3 and all(m["metadata"]["labels"][e.RUN_LABEL] == engine.run_id for m in created)


def test_the_caps_come_from_kubevirt_and_max_parallel_only_lowers_them():
    fake = cluster(on_n1("a", "b", "c", "d"), cr=kubevirt_cr(per_cluster=3, per_node=1))
    engine = run(fake, node="n1", max_parallel=10)
    summary = engine.result["summary"]
    assert (summary["max_parallel"], summary["max_parallel_per_node"]) == (3, 1)
    assert summary["peak_in_flight"] == 1                  # one source node: the per-node cap binds
    assert run(cluster(on_n1("a")), node="n1", max_parallel=2).result["summary"]["max_parallel"] == 2
    assert e.Evacuation.BOUNDS["max_parallel"] == {"min": 1}    # 0 and less: refused before any client exists


def test_target_nodes_are_spread_evenly_and_in_place_vmis_stay():
    vmis = on_n1("a", "b", "c", "d") + [vmi("home", "n3")]
    fake = cluster(vmis)
    engine = run(fake, namespace="ns", target_nodes=["n3", "n2"])
    entries = dict((v["name"], v) for v in engine.result["vmis"])
    assert entries["home"]["status"] == "in_place" and entries["home"]["target_node"] == "n3"
    moved = [entries[n]["added_node_selector"]["kubernetes.io/hostname"] for n in "abcd"]
    assert moved == ["n3", "n2", "n3", "n2"]
    assert engine.result["summary"]["to_migrate"] == 4
    _engine, msg = failing(fake, target_nodes=["n2"], added_node_selector={"kubernetes.io/hostname": "n3"})
    assert "exclude each other" in msg


def test_preflight_failures_are_reported_per_vmi_and_the_others_move():
    vmis = on_n1("ok") + on_n1("stuck", migratable="DisksNotLiveMigratable") + on_n1("pinned", node_selector={
        "zone": "a"})
    fake = cluster(vmis)
    engine, msg = failing(fake, node="n1", added_node_selector={"zone": "b"}, allow_partial=True)
    entries = dict((v["name"], v) for v in engine.result["vmis"])
    assert entries["ok"]["status"] == "migrated"
    assert entries["stuck"]["failure_reason"].startswith("not live-migratable: DisksNotLiveMigratable")
    assert "KubeVirt keeps the VMI's value" in entries["pinned"]["failure_reason"]
    assert msg.startswith("2 of 3 VMI(s) could not be moved: ns/pinned: ")
    assert engine.result["summary"]["failed"] == 2 and engine.result["summary"]["migrated"] == 1


def test_a_migration_in_flight_without_a_selector_is_adopted_not_failed():
    """Issue 26: it used to fail the preflight ("another migration is in flight"); now the run follows it."""
    vmims = [{"metadata": {"name": "theirs", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
              "spec": {"vmiName": "a"}, "status": {"phase": "Scheduling"}}]
    fake = cluster(on_n1("a"), vmims=vmims)
    engine = run(fake, node="n1")
    [entry] = engine.result["vmis"]
    assert (entry["status"], entry["adopted"], entry["failure_reason"]) == ("migrated", True, None)
    assert entry["migration"]["name"] == "theirs" and entry["migration"]["phase"] == "Succeeded"
    assert [w for w in fake.writes if w[0] == "create"] == []


# --- KubeVirt's own migrations: adopted (issue 26) -----------------------------------------------------------------


def entries_of(engine):
    return dict((v["name"], v) for v in engine.result["vmis"])


def test_kubevirts_evacuation_is_adopted_and_followed_to_a_wanted_node():
    fake = cluster([evacuated(v) for v in on_n1("a")] + on_n1("b"), vmims=[evacuation_vmim("a")])
    engine = run(fake, node="n1")
    entries = entries_of(engine)
    a, b = entries["a"], entries["b"]
    assert (a["status"], a["adopted"], a["source_node"], a["target_node"]) == ("migrated", True, "n1", "n4")
    assert a["migration"]["name"] == "kubevirt-evacuation-a" and a["migration"]["phase"] == "Succeeded"
    assert (a["migration"]["source_node"], a["migration"]["target_node"]) == ("n1", "n4")
    assert a["duration_seconds"] == 7.0 and a["added_node_selector"] == {}
    assert (b["status"], b["adopted"]) == ("migrated", False)
    summary = engine.result["summary"]
    assert (summary["migrated"], summary["failed"], summary["adopted"]) == (2, 0, 1)
    assert summary["migration_seconds_total"] == 14.0
    assert engine.result["changed"] is True and engine.warnings == []
    assert [m["spec"]["vmiName"] for m in fake.vmims() if e.RUN_LABEL in m["metadata"].get("labels", {})] == ["b"]


@pytest.mark.parametrize("overrides, land_on, wanted", [
    (dict(node="n1", added_node_selector={"zone": "b"}), "n4", "off node n1, selector {'zone': 'b'}"),
    (dict(namespace="ns", target_nodes=["n2", "n3"]), "n4", "on one of n2, n3"),
])
def test_an_adopted_migration_that_lands_elsewhere_is_a_warning(overrides, land_on, wanted):
    fake = cluster(on_n1("a"), vmims=[evacuation_vmim("a")], land_on=land_on)
    engine = run(fake, **overrides)
    [entry] = engine.result["vmis"]
    assert (entry["status"], entry["adopted"], entry["target_node"]) == ("migrated", True, land_on)
    [warning] = engine.warnings
    assert warning.startswith("VirtualMachineInstance ns/a: the migration this run adopted, VMIM kubevirt-evacuation-a "
                              "(KubeVirt's evacuation of node n1), ended on %s, which is not what this run wants (%s)"
                              % (land_on, wanted)), warning
    assert [w for w in fake.writes if w[0] == "create"] == []


def test_an_adopted_migration_landing_where_wanted_is_no_warning():
    fake = cluster(on_n1("a"), vmims=[evacuation_vmim("a")], land_on="n3")
    engine = run(fake, node="n1", added_node_selector={"zone": "b"})
    assert engine.result["vmis"][0]["target_node"] == "n3" and engine.warnings == []


def test_an_adopted_migration_that_fails_counts_as_failed_with_kubevirts_reason():
    fake = cluster(on_n1("a", "b"), vmims=[evacuation_vmim("a")], fail={"a": "TargetPodCrashed"})
    engine, msg = failing(fake, node="n1")
    a = entries_of(engine)["a"]
    assert (a["status"], a["adopted"], a["failure_reason"]) == ("failed", True, "TargetPodCrashed")
    assert a["migration"]["name"] == "kubevirt-evacuation-a" and a["duration_seconds"] == 7.0
    assert msg == "1 of 2 VMI(s) could not be moved: ns/a: TargetPodCrashed"
    assert entries_of(engine)["b"]["status"] == "migrated"


def test_an_adopted_migration_still_running_at_wait_timeout_is_left_running():
    fake = cluster(on_n1("a"), vmims=[evacuation_vmim("a")], stuck={"a"})
    engine, _msg = failing(fake, node="n1", wait_timeout=100)
    reason = engine.result["vmis"][0]["failure_reason"]
    assert reason == "did not finish within 100s; not this run's migration (KubeVirt's evacuation of node n1), so " \
                     "it was left running"
    assert [m["metadata"]["name"] for m in fake.vmims()] == ["kubevirt-evacuation-a"] and fake.writes == []


def own_selector_vmim(vmi_name, selector, name):
    obj = evacuation_vmim(vmi_name, name=name)
    obj["metadata"]["annotations"] = {}
    obj["spec"]["addedNodeSelector"] = selector
    return obj


def test_a_migration_with_a_selector_of_its_own_is_adopted_only_when_it_goes_where_wanted():
    vmims = [own_selector_vmim("same", {"zone": "b"}, "m-same"),
             own_selector_vmim("other", {"zone": "c"}, "m-other"),
             own_selector_vmim("host", {"zone": "b", "kubernetes.io/hostname": "n3"}, "m-host")]
    fake = cluster(on_n1("same", "other", "host"), vmims=vmims)
    engine, msg = failing(fake, node="n1", added_node_selector={"zone": "b"}, allow_partial=True)
    entries = entries_of(engine)
    assert (entries["same"]["status"], entries["same"]["adopted"]) == ("migrated", True)
    assert (entries["host"]["status"], entries["host"]["target_node"]) == ("migrated", "n3")
    other = entries["other"]
    assert (other["status"], other["adopted"]) == ("failed", False)
    assert other["failure_reason"] == (
        "another migration of ns/other is in flight: VMIM m-other (phase Running, selector {'zone': 'c'}), created "
        "by someone else; it goes elsewhere than this job wants (off node n1, selector {'zone': 'b'}); wait for it, "
        "cancel it with vmsched.kubevirt.vmi_migration and state=absent, or ask for its selector to attach to it")
    assert msg.startswith("1 of 3 VMI(s) could not be moved: ns/other: another migration")
    assert [w for w in fake.writes if w[0] == "create"] == []
    # With target_nodes, a hostname among them is where the run wants it; another is not.
    fake = cluster(on_n1("host"), vmims=[own_selector_vmim("host", {"kubernetes.io/hostname": "n4"}, "m-host")])
    engine, _msg = failing(fake, node="n1", target_nodes=["n2", "n3"])
    assert "it goes elsewhere than this job wants (off node n1, on one of n2, n3)" in \
        engine.result["vmis"][0]["failure_reason"]


def test_a_migration_being_cancelled_still_fails_the_preflight():
    vmims = [evacuation_vmim("a")]
    vmims[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    engine, _msg = failing(cluster(on_n1("a"), vmims=vmims), node="n1")
    assert engine.result["vmis"][0]["failure_reason"] == \
        "migration kubevirt-evacuation-a of ns/a is being cancelled (phase Running), and KubeVirt refuses another " \
        "migration of the VMI until it has ended"


def test_adopted_migrations_take_room_under_the_limits():
    """Two of KubeVirt's evacuations in flight from n1 with parallelOutboundMigrationsPerNode 2: the run's own
    migrations from n1 start only as they end, never more than 2 at once."""
    vmis = [evacuated(v) for v in on_n1("a", "b")] + on_n1("c", "d")
    fake = cluster(vmis, vmims=[evacuation_vmim("a"), evacuation_vmim("b")], cr=kubevirt_cr(per_node=2))
    engine = run(fake, node="n1")
    assert [v["adopted"] for v in engine.result["vmis"]] == [True, True, False, False]
    assert engine.result["summary"]["migrated"] == 4 and engine.result["summary"]["peak_in_flight"] == 2
    assert fake.in_flight_at_create == [2, 2]      # each created as one of the adopted ended
    # max_parallel too: one adopted in flight elsewhere, max_parallel=1: the run's own waits for it.
    fake = cluster([vmi("x", "n2")] + on_n1("c"), vmims=[evacuation_vmim("x", node="n2")])
    engine = run(fake, namespace="ns", label_selector=None, target_nodes=["n3"], max_parallel=1)
    assert fake.in_flight_at_create == [1] and engine.result["summary"]["peak_in_flight"] == 1


def test_kubevirts_evacuation_starting_after_the_preflight_is_adopted():
    """A VMI whose pod was evicted (virt-api marked it) before KubeVirt created its VMIM: the run's create is
    refused (another migration in flight), and the run adopts KubeVirt's instead."""
    fake = cluster([evacuated(v) for v in on_n1("a")])
    create = fake.create_vmim

    def kubevirt_first(namespace, body):
        if not fake.vmims():
            fake.put(VMIMS, evacuation_vmim("a"))
        return create(namespace, body)
    fake.create_vmim = kubevirt_first
    engine = run(fake, node="n1")
    [entry] = engine.result["vmis"]
    assert (entry["status"], entry["adopted"], entry["migration"]["name"]) == \
        ("migrated", True, "kubevirt-evacuation-a")
    assert [m["metadata"]["name"] for m in fake.vmims()] == ["kubevirt-evacuation-a"]


def test_check_mode_shows_the_adopted_vmis_and_writes_nothing():
    fake = cluster(on_n1("a", "b"), vmims=[evacuation_vmim("a")])
    engine = run(fake, check_mode=True, node="n1", cordon=True)
    entries = entries_of(engine)
    assert (entries["a"]["status"], entries["a"]["adopted"]) == ("adopted", True)
    assert entries["a"]["migration"]["name"] == "kubevirt-evacuation-a"
    assert (entries["b"]["status"], entries["b"]["adopted"]) == ("planned", False)
    assert engine.result["changed"] is True and engine.result["summary"]["adopted"] == 1
    assert fake.writes == []
    only_adopted = cluster(on_n1("a"), vmims=[evacuation_vmim("a")])
    engine = run(only_adopted, check_mode=True, node="n1")
    assert engine.result["changed"] is True and only_adopted.writes == []     # as vmi_migration's attaching


def test_stop_on_failure_stops_before_any_write():
    fake = cluster(on_n1("a", "b") + on_n1("stuck", migratable="DisksNotLiveMigratable"))
    engine, msg = failing(fake, node="n1", cordon=True, stop_on_failure=True)
    assert sorted(v["status"] for v in engine.result["vmis"]) == ["failed", "not_started", "not_started"]
    assert engine.result["summary"]["not_started"] == 2 and "(nothing was changed)" in msg
    assert fake.writes == []


def test_check_mode_returns_the_plan_and_writes_nothing():
    fake = cluster(on_n1("a", "b"))
    engine = run(fake, check_mode=True, node="n1", cordon=True, added_node_selector={"zone": "b"})
    assert engine.result["changed"] is True and engine.result["cordoned"] is False
    assert [v["status"] for v in engine.result["vmis"]] == ["planned", "planned"]
    assert fake.writes == []


def test_cordon_once_and_fail_clearly_without_the_node():
    fake = cluster(on_n1("a"))
    engine = run(fake, node="n1", cordon=True)
    assert engine.result["cordoned"] is True and ("patch", "nodes", "n1") in fake.writes
    again = run(fake, node="n1", cordon=True)
    assert again.result["cordoned"] is False and again.result["changed"] is False
    assert failing(fake, node="n9", cordon=True)[1] == "node 'n9' does not exist"
    assert failing(fake, node="n9")[1] == "node 'n9' does not exist"
    forbidden = cluster(on_n1("a"), forbidden={"node"})
    _engine, msg = failing(forbidden, node="n1", cordon=True)
    assert "cordon=true needs to read and patch node n1: 403 Forbidden" in msg
    assert run(forbidden, node="n1").result["summary"]["migrated"] == 1     # without cordon: not needed


def test_unreadable_nodes_skip_the_node_checks():
    fake = cluster(on_n1("a"), forbidden={"nodes"})
    engine = run(fake, node="n1", target_nodes=["n2"])
    assert engine.result["node_checks"].startswith("skipped: cannot list nodes")
    assert engine.result["vmis"][0]["added_node_selector"] == {"kubernetes.io/hostname": "n2"}
    assert engine.result["vmis"][0]["target_node"] == "n2"


def test_old_kubevirt_with_a_selector_fails_before_any_write():
    fake = cluster(on_n1("a"), cr=kubevirt_cr("v1.5.3"))
    _engine, msg = failing(fake, node="n1", added_node_selector={"zone": "b"})
    assert "added_node_selector/target_nodes needs" in msg and "KubeVirt v1.5.3" in msg and "1.6.0" in msg
    assert fake.writes == []


def test_failed_and_timed_out_migrations_are_failures():
    fake = cluster(on_n1("bad", "slow", "good"), fail={"bad": "LibvirtSaysNo"}, stuck={"slow"})
    engine, msg = failing(fake, node="n1", wait_timeout=100)
    entries = dict((v["name"], v) for v in engine.result["vmis"])
    assert entries["bad"]["failure_reason"] == "LibvirtSaysNo" and entries["bad"]["duration_seconds"] == 7.0
    assert "did not finish within 100s" in entries["slow"]["failure_reason"]
    assert entries["good"]["status"] == "migrated"
    assert "2 of 3 VMI(s) could not be moved" in msg
    assert [m["spec"]["vmiName"] for m in fake.vmims()] == ["bad", "good"]     # the slow one was cancelled


def test_a_dropped_added_node_selector_is_not_created():
    fake = cluster(on_n1("a"), forbidden={"kubevirt_cr"}, openapi=True, prune_added_node_selector=True)
    engine, _msg = failing(fake, node="n1", added_node_selector={"zone": "b"})
    entry = engine.result["vmis"][0]
    assert "the API server dropped spec.addedNodeSelector" in entry["failure_reason"]
    assert engine.result["changed"] is True and fake.vmims() == []
    assert [w[0] for w in fake.writes if w[1] == VMIMS] == ["create", "delete"]


# --- names and options checked before anything is written ---------------------------------------------------------


def test_unknown_nodes_are_named_before_any_write():
    fake = cluster(on_n1("a"))
    _engine, msg = failing(fake, node="n1", cordon=True, target_nodes=["n2", "n9"])
    assert msg == "target node 'n9' (target_nodes) does not exist"
    assert fake.writes == []
    _engine, msg = failing(fake, node="n8", target_nodes=["n9"])
    assert msg == "node 'n8' does not exist; target node 'n9' (target_nodes) does not exist"
    # A user who may not read nodes: not checked here (the node checks warn, KubeVirt still refuses).
    engine = run(cluster(on_n1("a"), forbidden={"node"}), node="n1", target_nodes=["n2"])
    assert engine.result["summary"]["migrated"] == 1


def test_a_namespace_that_does_not_exist_is_named_not_an_empty_run():
    fake = cluster(on_n1("a"), namespaces={"ns"})
    _engine, msg = failing(fake, namespace="gone", label_selector="app=web", target_nodes=["n2"])
    assert msg == "namespace 'gone' does not exist"
    # Existing but empty, or not readable: nothing to do.
    assert run(cluster([], namespaces={"ns"}), namespace="ns", target_nodes=["n2"]).result["summary"]["selected"] == 0
    forbidden = cluster([], namespaces={"ns"}, forbidden={"namespace"})
    assert run(forbidden, namespace="gone", target_nodes=["n2"]).result["changed"] is False


def test_an_invalid_label_selector_is_named():
    fake = cluster(on_n1("a"))

    def refuse(namespace=None, label_selector=None):
        raise _bad_request("unable to parse requirement: found '!'")
    fake.list_vmis = refuse
    _engine, msg = failing(fake, node="n1", label_selector="app!!web")
    assert msg == "label_selector 'app!!web' is not a label selector: unable to parse requirement: found '!'"
    assert fake.writes == []


def _bad_request(message):
    exc = ApiException(status=400, reason="Bad Request")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


@pytest.mark.parametrize("overrides, message", [
    (dict(target_nodes=["n2", " "]), "target_nodes has an empty name"),
    (dict(target_nodes=["n2"], added_node_selector={"kubernetes.io/hostname": "n3"}),
     "target_nodes and kubernetes.io/hostname in added_node_selector exclude each other"),
])
def test_contradicting_options_are_refused_by_check_params(overrides, message):
    with pytest.raises(KubeVirtError) as info:
        e.Evacuation.check_params(params(node="n1", **overrides))
    assert str(info.value) == message
    e.Evacuation.check_params(params(node="n1", target_nodes=["n2"]))


# --- the drain plan (issue 28) ---------------------------------------------------------------------------------------

GI = 2 ** 30


def sized(vmi_obj, memory=None, cpu="1", guest=None):
    """The VMI's launcher pod asking for `memory` and `cpu`; `guest` sets the VMI's spec.domain.memory.guest."""
    pod = launcher(vmi_obj, cpu=cpu)
    if memory:
        pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
    if guest:
        vmi_obj["spec"]["domain"] = {"memory": {"guest": guest}}
    return pod


def with_bandwidth(cr, bandwidth):
    cr["spec"]["configuration"]["migrations"]["bandwidthPerMigration"] = bandwidth
    return cr


def test_check_mode_returns_the_drain_plan_and_writes_nothing():
    vmis = on_n1("a", "b", "c")
    pods = [sized(v, guest="512Mi") for v in vmis]
    fake = cluster(vmis, pods=pods, cr=with_bandwidth(kubevirt_cr(), "64Mi"))
    engine = run(fake, check_mode=True, node="n1", cordon=True)
    drain = engine.result["plan"]
    assert [(v["name"], v["source"], v["target"], v["wave"], v["memory"]) for v in drain["vmis"]] == [
        ("a", "n1", "n2", 1, GI // 2), ("b", "n1", "n3", 1, GI // 2), ("c", "n1", "n4", 2, GI // 2)]
    assert drain["unplaceable"] == [] and drain["not_migratable"] == []
    assert drain["waves"] == 2 and drain["estimated_seconds"] == 16.0      # 512Mi at 64Mi/s, twice
    assert drain["estimate_basis"].startswith("KubeVirt's bandwidthPerMigration (64Mi/s per migration); 2 waves of "
                                              "at most 2 migrations")
    assert [v["status"] for v in engine.result["vmis"]] == ["planned"] * 3
    assert all(v["planned_target"] is None for v in engine.result["vmis"])    # placement=scheduler
    assert engine.result["changed"] is True and engine.result["cordoned"] is False
    assert fake.writes == []


def test_check_mode_names_what_cannot_migrate_and_fails_as_the_real_run_would():
    fake = cluster(on_n1("a") + on_n1("stuck", migratable="DisksNotLiveMigratable"))
    engine, msg = failing(fake, check_mode=True, node="n1", cordon=True)
    [stuck] = engine.result["plan"]["not_migratable"]
    assert stuck["name"] == "stuck" and stuck["reason"].startswith("not live-migratable: DisksNotLiveMigratable")
    assert [v["name"] for v in engine.result["plan"]["vmis"]] == ["a"]
    assert msg.startswith("1 of 2 VMI(s) could not be moved (nothing was changed): ns/stuck: not live-migratable")
    assert "allow_partial=true moves the others" in msg
    assert entries_of(engine)["a"]["status"] == "planned" and engine.result["changed"] is False
    assert fake.writes == []


def three_that_fit_alone_but_not_together(**kwargs):
    """n2 and n3 have 4 cpus each, every VMI's launcher asks for 3: each fits alone, only two fit at once."""
    vmis = on_n1("a", "b", "c")
    nodes = [node("n1", cpu="16"), node("n2"), node("n3")]
    return cluster(vmis, nodes=nodes, pods=[sized(v, cpu="3") for v in vmis], **kwargs)


def test_vmis_that_fit_alone_but_not_together_are_refused_before_any_write():
    fake = three_that_fit_alone_but_not_together()
    engine, msg = failing(fake, node="n1", cordon=True)
    assert fake.writes == []                           # no cordon, no VMIM
    assert engine.result["cordoned"] is False and engine.result["changed"] is False
    entries = entries_of(engine)
    assert [entries[n]["candidates"] for n in "abc"] == [["n2", "n3"]] * 3       # the preflight: each fits alone
    assert (entries["a"]["status"], entries["b"]["status"], entries["c"]["status"]) == \
        ("not_started", "not_started", "failed")
    drain = engine.result["plan"]
    assert [(v["name"], v["target"]) for v in drain["vmis"]] == [("a", "n2"), ("b", "n3")]
    [left] = drain["unplaceable"]
    assert left["name"] == "c" and entries["c"]["failure_reason"] == left["reason"]
    assert "n2: insufficient cpu: needs 3, 1 free of 4 allocatable" in left["reason"]
    assert "Alone it would fit on n2, n3" in left["reason"]
    assert msg.startswith("1 of 3 VMI(s) could not be moved (nothing was changed): ns/c: no node can take it with "
                          "the VMIs planned before it counted")
    assert msg.endswith("With allow_partial=false nothing is written (no cordon, no migration) while the drain plan "
                        "leaves VMIs behind; allow_partial=true moves the others")
    assert engine.result["summary"]["not_started"] == 2 and engine.result["summary"]["failed"] == 1


def test_allow_partial_moves_what_the_plan_places_and_reports_the_rest():
    fake = three_that_fit_alone_but_not_together(land_on=None)
    engine, msg = failing(fake, node="n1", cordon=True, allow_partial=True, placement="planned")
    assert ("patch", "nodes", "n1") in fake.writes
    assert sorted(m["spec"]["vmiName"] for m in fake.vmims()) == ["a", "b"]
    entries = entries_of(engine)
    assert [(entries[n]["status"], entries[n]["planned_target"], entries[n]["target_node"]) for n in "abc"] == [
        ("migrated", "n2", "n2"), ("migrated", "n3", "n3"), ("failed", None, None)]
    assert msg.startswith("1 of 3 VMI(s) could not be moved: ns/c: no node can take it with the VMIs planned")
    assert "allow_partial" not in msg


def test_planned_placement_names_the_planned_host_in_each_vmim_in_the_plans_order():
    vmis = on_n1("small", "big", "mid")
    pods = [sized(v, memory=m) for v, m in zip(vmis, ("1Gi", "4Gi", "2Gi"))]
    fake = cluster(vmis, pods=pods, land_on=None)
    engine = run(fake, node="n1", added_node_selector={"zone": "b"}, placement="planned")
    # big -> n2 (tie by name); mid -> n3 (6Gi left beats 2Gi); small -> n3 (5Gi left beats 3Gi)
    planned = dict((v["name"], v["target"]) for v in engine.result["plan"]["vmis"])
    assert planned == {"big": "n2", "mid": "n3", "small": "n3"}
    created = fake.vmims()
    assert sorted((m["spec"]["vmiName"], m["spec"]["addedNodeSelector"]["kubernetes.io/hostname"]) for m in created) \
        == [("big", "n2"), ("mid", "n3"), ("small", "n3")]
    assert all(m["spec"]["addedNodeSelector"]["zone"] == "b" for m in created)
    order = [w[2] for w in fake.writes if w[:2] == ("create", VMIMS)]
    assert [name.split("-migration-")[0] for name in order] == ["big", "mid", "small"]    # largest first
    for entry in engine.result["vmis"]:
        assert entry["status"] == "migrated"
        assert entry["planned_target"] == entry["target_node"] == planned[entry["name"]]
        assert entry["added_node_selector"] == {"zone": "b", "kubernetes.io/hostname": planned[entry["name"]]}
    # placement=scheduler: the same run leaves the host to the scheduler (no target_nodes) and names no plan target
    fake = cluster([vmi(v["metadata"]["name"], "n1") for v in vmis], pods=pods, land_on="n3")
    engine = run(fake, node="n1", added_node_selector={"zone": "b"})
    assert all(m["spec"]["addedNodeSelector"] == {"zone": "b"} for m in fake.vmims())
    assert all(v["planned_target"] is None and v["target_node"] == "n3" for v in engine.result["vmis"])


def test_target_nodes_in_scheduler_mode_are_still_spread_by_count():
    fake = cluster(on_n1("a", "b", "c", "d"))
    engine = run(fake, node="n1", target_nodes=["n3", "n2"])
    moved = [v["added_node_selector"]["kubernetes.io/hostname"] for v in engine.result["vmis"]]
    assert moved == ["n3", "n2", "n3", "n2"]
    assert set(v["target"] for v in engine.result["plan"]["vmis"]) == {"n2", "n3"}


def test_without_a_node_the_plan_takes_each_vmis_own_node_as_its_source():
    vmis = on_n1("a", "b") + [vmi("c", "n4"), vmi("home", "n2")]
    fake = cluster(vmis, cr=kubevirt_cr(per_cluster=3, per_node=1))
    engine = run(fake, check_mode=True, namespace="ns", target_nodes=["n2", "n3"])
    drain = engine.result["plan"]
    assert sorted((v["name"], v["source"], v["wave"]) for v in drain["vmis"]) == [
        ("a", "n1", 1), ("b", "n1", 2), ("c", "n4", 1)]                # one from each node at once
    assert drain["waves"] == 2 and "3 migrations, 1 from any one node" in drain["estimate_basis"]
    assert entries_of(engine)["home"]["status"] == "in_place"


def test_unreadable_nodes_leave_no_plan_and_partial_runs_as_before():
    fake = cluster(on_n1("a") + on_n1("stuck", migratable="DisksNotLiveMigratable"), forbidden={"nodes"})
    engine, msg = failing(fake, node="n1")
    assert engine.result["plan"] is None
    assert any(w.startswith("no drain plan (plan is null): the nodes cannot be listed") for w in engine.warnings)
    assert entries_of(engine)["a"]["status"] == "migrated"
    assert msg.startswith("1 of 2 VMI(s) could not be moved: ns/stuck") and "allow_partial" not in msg
    fake = cluster(on_n1("a"), forbidden={"nodes"})
    _engine, msg = failing(fake, node="n1", placement="planned", cordon=True)
    assert msg.startswith("placement=planned needs the drain plan, which needs to list nodes (node checks skipped: "
                          "cannot list nodes (403")
    assert fake.writes == []


def test_no_vmi_to_move_is_an_empty_plan():
    engine = run(cluster([]), node="n1")
    drain = engine.result["plan"]
    assert (drain["vmis"], drain["unplaceable"], drain["not_migratable"], drain["waves"],
            drain["estimated_seconds"]) == ([], [], [], 0, 0)


def test_the_memory_a_migration_copies():
    guest = vmi("a", "n1")
    guest["spec"]["domain"] = {"memory": {"guest": "2Gi"}, "resources": {"requests": {"memory": "3Gi"}}}
    assert e.memory_to_copy(guest, {"memory": 5.0 * GI}) == 2 * GI
    guest["status"]["memory"] = {"guestCurrent": "4Gi", "guestAtBoot": "2Gi"}       # after a memory hotplug
    assert e.memory_to_copy(guest) == 4 * GI
    requested = vmi("b", "n1")
    requested["spec"]["domain"] = {"resources": {"requests": {"memory": "3Gi"}}}
    assert e.memory_to_copy(requested, {"memory": 5.0 * GI}) == 3 * GI
    assert e.memory_to_copy(vmi("c", "n1"), {"memory": 5.0 * GI}) == 5 * GI     # the launcher's request
    assert e.memory_to_copy(vmi("d", "n1")) == 0


def test_the_fit_of_one_vmi_is_the_node_fit_of_its_target_pod():
    """VmiMigrator.fit goes through plan.Placement with nothing planned: the verdicts node_fit.evaluate_nodes gives
    the same target pod against the bound pods, for every node, in the same order."""
    nodes = [node("n1", {"zone": "a"}), node("n2", {"zone": "b"}, cpu="2"), node("n3", {"zone": "b"}, cordoned=True),
             node("n4", {"zone": "c"}, taints=[{"key": "gpu", "effect": "NoSchedule"}]), node("n5", {"zone": "b"})]
    subject = vmi("a", "n1")
    others = [vmi("x", "n2"), vmi("y", "n5")]
    for pods in ([launcher(subject, cpu="2")] + [launcher(o) for o in others], None):
        fake = FakeCluster(nodes=nodes, vmis=[subject] + others, pods=pods or [], cr=kubevirt_cr(),
                           forbidden=() if pods else {"active_pods"})
        migrator = VmiMigrator(fake, lambda msg: None)
        migrator.detect()
        assert migrator.read_nodes()
        for selector in ({}, {"zone": "b"}):
            constraints, requests = migrator.constraints_and_requests(subject, selector)
            expected = node_fit.evaluate_nodes(nodes, constraints, selector, "n1", requests,
                                               migrator.pods if requests is not None else None)
            assert migrator.fit(subject, selector) == (expected, requests is not None)
        results, checked = migrator.fit(subject, {"zone": "b"})
        assert node_fit.candidates(results) == (["n5"] if pods else ["n2", "n5"]) and checked is bool(pods)
