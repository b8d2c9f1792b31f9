# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for vm_rebalance's engine (plugins/module_utils/rebalance.py) against kubevirt_fakes.py: the plan in
check mode, applying it, a plan given back and its fingerprint, the checks just before each move, bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.vmsched.kubevirt.plugins.module_utils import module_runner as mr
from ansible_collections.vmsched.kubevirt.plugins.module_utils import rebalance as r
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import KubeVirtError
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMIS
from ansible_collections.vmsched.kubevirt.plugins.modules import vm_rebalance

from .kubevirt_fakes import FakeCluster, engine_for, kubevirt_cr, launcher, node, vmi

GI = 2 ** 30
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
HOSTNAME = "kubernetes.io/hostname"
AUTH = {"K8S_AUTH_HOST": "https://k8s", "K8S_AUTH_API_KEY": "t"}


def params(**overrides):
    base = dict((k, v.get("default")) for k, v in vm_rebalance.argument_spec().items())
    base.update(overrides)
    return base


def big_node(name, **kwargs):
    found = node(name, cpu="16", **kwargs)
    found["status"]["allocatable"]["memory"] = "64Gi"
    found["metadata"]["uid"] = "uid-" + name
    return found


def placed(counts, memory=None, namespace="ns"):
    """VMIs on nodes ({node: how many}), each with a launcher pod asking 1 cpu and `memory` (a list per node, or
    1Gi)."""
    vmis, pods = [], []
    for name in sorted(counts):
        for index in range(counts[name]):
            guest = vmi("%s-%02d" % (name, index), name, namespace=namespace)
            pod = launcher(guest)
            size = (memory or {}).get(name, ["1Gi"] * counts[name])[index]
            pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = size
            guest["spec"]["domain"] = {"memory": {"guest": size}}
            vmis.append(guest)
            pods.append(pod)
    return vmis, pods


def cluster(counts, nodes=("n1", "n2", "n3", "n4"), memory=None, **kwargs):
    vmis, pods = placed(counts, memory)
    kwargs.setdefault("cr", kubevirt_cr("v1.9.0"))
    return FakeCluster(nodes=[big_node(n) for n in nodes], vmis=vmis + list(kwargs.pop("extra_vmis", [])),
                       pods=pods + list(kwargs.pop("extra_pods", [])), **kwargs)


def engine(fake, check_mode=False, **overrides):
    instance = engine_for(r.Rebalance, fake, params(**overrides), check_mode)
    instance.now = lambda: NOW
    return instance


def ran(fake, check_mode=False, **overrides):
    instance = engine(fake, check_mode, **overrides)
    instance.run()
    return instance


def failing(fake, check_mode=False, **overrides):
    instance = engine(fake, check_mode, **overrides)
    with pytest.raises(KubeVirtError) as info:
        instance.run()
    return instance, str(info.value)


def creates(fake):
    return [w for w in fake.writes if w[0] == "create"]


def where(fake, namespace="ns"):
    return dict((v["metadata"]["name"], v["status"]["nodeName"]) for v in fake.items(VMIS, namespace))


# --- the plan, in check mode --------------------------------------------------------------------------------------


def test_check_mode_plans_the_moves_and_writes_nothing():
    fake = cluster({"n1": 6, "n2": 6})
    result = ran(fake, check_mode=True).result
    assert fake.writes == [] and result["changed"] is True
    plan = result["plan"]
    assert len(plan) == 6 and all(m["source"] in ("n1", "n2") and m["target"] in ("n3", "n4") for m in plan)
    assert all(m["memory"] == GI for m in plan)
    assert result["spread"]["before"] == {"cv": 1.0, "max_min": None, "per_node": {"n1": 6, "n2": 6, "n3": 0, "n4": 0}}
    assert result["spread"]["after"]["per_node"] == {"n1": 3, "n2": 3, "n3": 3, "n4": 3}
    assert result["spread"]["after"]["cv"] == 0 and result["stopped"] == "the spread is at or below the threshold"
    assert result["spread"]["measure"] == "running VMIs per node, in scope or not"
    assert len(result["fingerprint"]) == 64 and result["skipped_vms"] == []
    # two source nodes, 2 outbound per node and 5 per cluster: 4 in the first wave
    assert sorted(m["wave"] for m in plan) == [1, 1, 1, 1, 2, 2]
    assert [m["status"] for m in result["moves"]] == ["planned"] * 6
    assert result["summary"]["planned"] == 6 and result["summary"]["max_parallel"] == 5


def test_a_balanced_cluster_is_no_change():
    fake = cluster({"n1": 3, "n2": 3, "n3": 3, "n4": 3})
    for check_mode in (True, False):
        result = ran(fake, check_mode=check_mode).result
        assert result["changed"] is False and result["plan"] == [] and result["moves"] == []
        assert result["spread"]["before"] == result["spread"]["after"]
    assert fake.writes == []


def test_the_load_counts_vms_out_of_scope_but_only_vms_in_scope_move():
    others, other_pods = placed({"n3": 4}, namespace="other")
    fake = cluster({"n1": 4}, extra_vmis=others, extra_pods=other_pods)
    result = ran(fake, check_mode=True, namespaces=["ns"]).result
    assert result["spread"]["before"]["per_node"] == {"n1": 4, "n2": 0, "n3": 4, "n4": 0}
    assert [(m["name"], m["target"]) for m in result["plan"]] == [("n1-00", "n2"), ("n1-01", "n4")]
    # n3's VMs are out of scope: they stay, and n1 cannot go lower than 2 without raising another node
    assert result["spread"]["after"]["per_node"] == {"n1": 2, "n2": 1, "n3": 4, "n4": 1}
    assert result["stopped"] == "no further move lowers the spread" and result["skipped_vms"] == []


def test_default_scope_leaves_out_cordoned_tainted_and_non_kubevirt_nodes():
    nodes = [big_node("n1"), big_node("n2"), big_node("cordoned", cordoned=True),
             big_node("gpu", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
             big_node("plain")]
    del nodes[-1]["metadata"]["labels"]["kubevirt.io/schedulable"]
    vmis, pods = placed({"n1": 4})
    fake = FakeCluster(nodes=nodes, vmis=vmis, pods=pods, cr=kubevirt_cr("v1.9.0"))
    result = ran(fake, check_mode=True).result
    assert sorted(result["spread"]["before"]["per_node"]) == ["n1", "n2"]
    assert set(m["target"] for m in result["plan"]) == {"n2"}
    named = ran(fake, check_mode=True, nodes=["n1", "gpu"]).result
    assert sorted(named["spread"]["before"]["per_node"]) == ["gpu", "n1"] and named["plan"] == []
    assert named["skipped_vms"][0]["reason"].startswith(
        "no fitting node among those that would lower the spread: gpu: untolerated taint dedicated=gpu:NoSchedule")


def test_memory_objective_weighs_each_vm_by_its_launchers_request():
    fake = cluster({"n1": 4, "n2": 1}, nodes=("n1", "n2"), memory={"n1": ["8Gi", "4Gi", "2Gi", "2Gi"],
                                                                   "n2": ["2Gi"]})
    result = ran(fake, check_mode=True, objective="memory").result
    assert result["spread"]["before"]["per_node"] == {"n1": 16 * GI, "n2": 2 * GI}
    # 8Gi lowers the sum of squares most (8 x (14 - 8) against 4 x (14 - 4)); then no move lowers it further
    assert [(m["name"], m["target"], m["memory"]) for m in result["plan"]] == [("n1-00", "n2", 8 * GI)]
    assert result["spread"]["after"]["per_node"] == {"n1": 8 * GI, "n2": 10 * GI}
    assert result["stopped"] == "no further move lowers the spread"
    assert result["spread"]["measure"].startswith("memory requested per node in bytes")


def test_vms_that_may_not_move_are_skipped_with_the_reason():
    vmis, pods = placed({"n1": 6})
    vmis[0]["metadata"]["annotations"] = {r.OPT_OUT_ANNOTATION: "false"}
    vmis[1]["status"]["conditions"] = [{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
                                        "message": "PVC is not shared"}]
    vmis[2]["status"]["migrationState"] = {"endTimestamp": "2026-06-01T11:50:00Z", "completed": True}
    vmis[3]["status"]["migrationState"] = {"endTimestamp": "2026-06-01T10:00:00Z", "completed": True}
    vm_opted = {"metadata": {"name": "n1-04", "namespace": "ns", "annotations": {r.OPT_OUT_ANNOTATION: "False"}},
                "spec": {}}
    in_flight = {"metadata": {"name": "theirs", "namespace": "ns", "creationTimestamp": "2026-06-01T11:59:00Z"},
                 "spec": {"vmiName": "n1-05"}, "status": {"phase": "Scheduling"}}
    fake = FakeCluster(nodes=[big_node("n1"), big_node("n2")], vmis=vmis, pods=pods, vms=[vm_opted],
                       vmims=[in_flight], cr=kubevirt_cr("v1.9.0"))
    result = ran(fake, check_mode=True).result
    assert [m["name"] for m in result["plan"]] == ["n1-03"]       # migrated 2 h ago: past the cooldown
    reasons = dict((s["name"], s["reason"]) for s in result["skipped_vms"])
    assert reasons == {
        "n1-00": "opted out of rebalancing",
        "n1-01": "not live-migratable: DisksNotLiveMigratable: PVC is not shared",
        "n1-02": "cooldown: migrated 600s ago, cooldown 3600s",
        "n1-04": "opted out of rebalancing",
        "n1-05": "another migration of ns/n1-05 is in flight: VMIM theirs (phase Scheduling), created by someone else"}
    assert "n1-02" in [m["name"] for m in ran(fake, check_mode=True, cooldown=0).result["plan"]]


def test_max_migrations_caps_the_plan():
    result = ran(cluster({"n1": 8}), check_mode=True, max_migrations=2).result
    assert len(result["plan"]) == 2 and result["stopped"] == "max_migrations reached"


# --- applying ---------------------------------------------------------------------------------------------------


def test_apply_sends_each_vm_to_its_planned_node_and_measures_the_spread_after():
    fake = cluster({"n1": 6, "n2": 6})
    instance = ran(fake)
    result = instance.result
    assert result["changed"] is True
    planned = dict((m["name"], m["target"]) for m in result["plan"])
    now = where(fake)
    assert all(now[name] == target for name, target in planned.items())
    vmims = fake.vmims()
    assert sorted((m["spec"]["vmiName"], m["spec"]["addedNodeSelector"][HOSTNAME]) for m in vmims) == \
        sorted(planned.items())
    assert all(m["metadata"]["labels"][r.RUN_LABEL] == instance.run_id for m in vmims)
    assert all(m["status"] == "migrated" and m["target_node"] == m["target"] and m["migration"]
               for m in result["moves"])
    assert result["spread"]["after"]["per_node"] == {"n1": 3, "n2": 3, "n3": 3, "n4": 3}
    summary = result["summary"]
    assert (summary["planned"], summary["migrated"], summary["failed"], summary["skipped"]) == (6, 6, 0, 0)
    assert 1 <= summary["peak_in_flight"] <= 4
    # Again: balanced now, nothing to do.
    again = ran(fake).result
    assert again["changed"] is False and again["plan"] == [] and len(fake.vmims()) == 6


def test_a_failed_migration_fails_the_run_after_the_others():
    fake = cluster({"n1": 4}, nodes=("n1", "n2"), fail={"n1-00": "TargetPodCrashed"})
    instance, msg = failing(fake)
    moves = dict((m["name"], m) for m in instance.result["moves"])
    assert moves["n1-00"]["status"] == "failed" and moves["n1-00"]["reason"] == "TargetPodCrashed"
    assert moves["n1-01"]["status"] == "migrated"
    assert msg == "1 of 2 move(s) failed: ns/n1-00: TargetPodCrashed"
    assert instance.result["spread"]["after"]["per_node"] == {"n1": 3, "n2": 1}


def test_old_kubevirt_fails_before_any_write_and_check_mode_warns():
    fake = cluster({"n1": 4}, nodes=("n1", "n2"), cr=kubevirt_cr("v1.5.3"))
    _instance, msg = failing(fake)
    assert msg.startswith("vm_rebalance needs VirtualMachineInstanceMigration.spec.addedNodeSelector")
    assert fake.writes == []
    instance = ran(fake, check_mode=True)
    assert instance.result["plan"] and any(w.startswith("Applying this plan needs") for w in instance.warnings)


def hook_first_create(fake, change):
    """Call change() once, right after the first VMIM is created: what the cluster does while the run goes on."""
    create = fake.create_vmim

    def creating(namespace, body):
        created = create(namespace, body)
        if len(fake.vmims()) == 1:
            change(created)
        return created
    fake.create_vmim = creating


def test_each_move_is_checked_again_just_before_it_starts():
    fake = cluster({"n1": 6}, nodes=("n1", "n2", "n3"))
    plan = ran(fake, check_mode=True).result["plan"]
    assert len(plan) == 4
    first, second, third = plan[0], plan[1], plan[2]

    def meanwhile(_created):
        # An admin opts the second VM out, and the third one's target fills up.
        fake.objects[(VMIS, "ns", second["name"])]["metadata"]["annotations"] = {r.OPT_OUT_ANNOTATION: "false"}
        hog = launcher(vmi("hog", third["target"], namespace="other"))
        hog["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "63.5Gi"}
        fake.pods.append(hog)
    hook_first_create(fake, meanwhile)
    result = ran(fake, max_parallel=1).result
    moves = dict((m["name"], m) for m in result["moves"])
    assert moves[first["name"]]["status"] == "migrated"
    assert moves[second["name"]]["status"] == "skipped"
    assert moves[second["name"]]["reason"] == 'opted out of rebalancing (vmsched.kubevirt.io/rebalance: "false")'
    assert moves[third["name"]]["status"] == "skipped"
    assert moves[third["name"]]["reason"].startswith("target node %s cannot take it now: insufficient memory"
                                                     % third["target"])
    assert result["summary"]["skipped"] == 2 and result["changed"] is True
    skipped = dict((s["name"], s["reason"]) for s in result["skipped_vms"])
    assert skipped[second["name"]] == moves[second["name"]]["reason"]
    assert sorted(m["spec"]["vmiName"] for m in fake.vmims()) == sorted([first["name"], plan[3]["name"]])


def test_the_migrations_of_this_run_in_flight_count_on_their_target():
    """Two moves to n2, both started at once. n2 shrinks to room for one launcher after the first VMIM is created:
    the second's check counts the first (in flight, its target pod not bound yet) and skips the move."""
    fake = cluster({"n1": 4}, nodes=("n1", "n2"))

    def shrink(_created):
        fake.live_node("n2")["status"]["allocatable"]["memory"] = "1536Mi"
    hook_first_create(fake, shrink)
    result = ran(fake).result
    assert [(m["target"], m["status"]) for m in result["moves"]] == [("n2", "migrated"), ("n2", "skipped")]
    assert result["moves"][1]["reason"] == ("target node n2 cannot take it now: insufficient memory: needs 1Gi, 512Mi "
                                            "free of 1.5Gi allocatable")
    assert result["summary"]["peak_in_flight"] == 1 and len(fake.vmims()) == 1


# --- a plan given back ----------------------------------------------------------------------------------------------


def test_a_plan_given_back_is_applied_exactly():
    fake = cluster({"n1": 6, "n2": 6})
    proposal = ran(fake, check_mode=True).result
    applied = ran(fake, plan=copy.deepcopy(proposal), threshold=0.9, max_migrations=1).result
    assert [(m["name"], m["target"]) for m in applied["plan"]] == [(m["name"], m["target"]) for m in proposal["plan"]]
    assert applied["stopped"] is None and applied["changed"] is True
    now = where(fake)
    assert all(now[m["name"]] == m["target"] for m in proposal["plan"])
    assert applied["spread"]["after"] == proposal["spread"]["after"]


def test_a_stale_plan_is_refused_before_any_write():
    fake = cluster({"n1": 6, "n2": 6})
    proposal = ran(fake, check_mode=True).result
    fake.objects[(VMIS, "ns", "n1-00")]["status"]["nodeName"] = "n4"        # moved meanwhile
    for check_mode in (True, False):
        _instance, msg = failing(fake, check_mode=check_mode, plan=proposal)
        assert msg.startswith("the plan was made on another state of the cluster (its fingerprint %s, now "
                              % proposal["fingerprint"][:12])
        assert "Make a new plan." in msg
    assert fake.writes == []


def test_a_plan_from_another_cluster_is_refused_before_any_write():
    proposal = ran(cluster({"n1": 6}), check_mode=True).result
    other = cluster({"n1": 6})
    for name in ("n1", "n2", "n3", "n4"):
        other.live_node(name)["metadata"]["uid"] = "other-" + name
    _instance, msg = failing(other, plan=proposal)
    assert msg.startswith("the plan was made on another state of the cluster") and other.writes == []
    # ...and from another scope
    fake = cluster({"n1": 6})
    proposal = ran(fake, check_mode=True, nodes=["n1", "n2"]).result
    _instance, msg = failing(fake, plan=proposal, nodes=["n1", "n3"])
    assert msg.startswith("the plan was made on another state of the cluster") and fake.writes == []


def test_a_plan_given_back_skips_moves_that_no_longer_hold_before_any_write():
    fake = cluster({"n1": 6, "n2": 6})
    proposal = ran(fake, check_mode=True).result
    first = proposal["plan"][0]
    fake.objects[(VMIS, "ns", first["name"])]["metadata"]["annotations"] = {r.OPT_OUT_ANNOTATION: "false"}
    result = ran(fake, check_mode=True, plan=proposal).result
    moves = dict((m["name"], m) for m in result["moves"])
    assert moves[first["name"]]["status"] == "skipped" and moves[first["name"]]["reason"] == "opted out of rebalancing"
    assert "wave" not in [m for m in result["plan"] if m["name"] == first["name"]][0]
    assert all(m["wave"] >= 1 for m in result["plan"] if m["name"] != first["name"])
    assert result["summary"]["skipped"] == 1 and fake.writes == []


def test_a_hand_edited_plan_is_checked_against_the_scope():
    fake = cluster({"n1": 6})
    proposal = ran(fake, check_mode=True, nodes=["n1", "n2"]).result
    edited = copy.deepcopy(proposal)
    edited["plan"][0]["target"] = "n9"
    _instance, msg = failing(fake, plan=edited, nodes=["n1", "n2"])
    assert msg == "the plan does not match this scope: it moves ns/%s to n9, not a node in scope; nothing was " \
                  "changed" % edited["plan"][0]["name"]


# --- usage ----------------------------------------------------------------------------------------------------------


def vector(values, label="node"):
    return [{"metric": {label: name, "job": "x"}, "value": [1717243200.0, str(value)]} for name, value in values]


@pytest.mark.parametrize("usage", [
    {"n1": 3.0, "n2": 0.5},
    vector([("n1", 3), ("n2", 0.5)]),
    vector([("n1:9100", 3), ("n2:9100", 0.5)], label="instance"),
    {"status": "success", "data": {"resultType": "vector", "result": vector([("n1", 3), ("n2", 0.5)])}},
])
def test_usage_as_a_mapping_or_a_prometheus_vector(usage):
    fake = cluster({"n1": 3, "n2": 1}, nodes=("n1", "n2"))
    result = ran(fake, check_mode=True, objective="usage", usage=usage).result
    assert result["spread"]["before"]["per_node"] == {"n1": 3, "n2": 0.5}
    # each VM weighs its node's usage times its share of the cpu requested there: 1 of 3 on n1
    assert len(result["plan"]) == 1 and result["plan"][0]["source"] == "n1"
    assert result["spread"]["after"]["per_node"] == {"n1": 2, "n2": 1.5}


def test_usage_must_name_every_node_in_scope():
    fake = cluster({"n1": 3}, nodes=("n1", "n2"))
    _instance, msg = failing(fake, objective="usage", usage={"n1": 1, "n7": 2})
    assert msg.startswith("usage has no value for node n2 in scope") and fake.writes == []


def test_usage_from_metrics_k8s_io_or_a_clear_error():
    metrics = [{"metadata": {"name": "n1"}, "usage": {"cpu": "3", "memory": "1Gi"}},
               {"metadata": {"name": "n2"}, "usage": {"cpu": "500m", "memory": "1Gi"}}]
    fake = cluster({"n1": 3, "n2": 1}, nodes=("n1", "n2"), metrics=metrics)
    result = ran(fake, check_mode=True, objective="usage").result
    assert result["spread"]["before"]["per_node"] == {"n1": 3, "n2": 0.5}
    assert result["spread"]["measure"] == "cpu used per node in cores, from metrics.k8s.io"
    _instance, msg = failing(cluster({"n1": 3}, nodes=("n1", "n2")), objective="usage")
    assert "metrics.k8s.io, which this cluster does not serve" in msg


# --- bad input ------------------------------------------------------------------------------------------------------


def checked(**overrides):
    with pytest.raises(KubeVirtError) as info:
        mr.check_input(params(**overrides), r.Rebalance, AUTH)
    return str(info.value)


@pytest.mark.parametrize("usage, message", [
    ([{"metric": {"node": "n1"}, "values": [[1, "2"], [2, "3"]]}], "usage[0] is not a sample of a Prometheus vector"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "usage is a Prometheus matrix result"),
    ({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}, "usage is a Prometheus scalar"),
    (vector([("n1", 1), ("n1", 2)]), "usage has more than one series for node n1: aggregate by node"),
    ([{"metric": {"job": "x"}, "value": [1, "2"]}], "usage[0] has neither a node nor an instance label"),
    (vector([("n1", "NaN")]), "usage[0] (node n1) is NaN; usage is a finite number"),
    ({"n1": -1}, "usage[n1] is -1; usage is a finite number, 0 or more"),
    ({"n1": "busy"}, "usage[n1] is 'busy', not a number"),
    ({"n1": True}, "usage[n1] is True, not a number"),
    ("n1=3", "usage is a mapping of node name to number or a Prometheus vector result"),
    ([], "usage is an empty Prometheus result"),
])
def test_a_wrong_shaped_usage_is_refused_before_any_client(usage, message):
    assert message in checked(objective="usage", usage=usage)


def test_usage_without_objective_usage_is_refused():
    assert checked(usage={"n1": 1}) == "usage is given, but objective is vms: set objective=usage, or leave usage out"


def test_a_negative_threshold_and_other_bounds_are_refused_before_any_client():
    assert checked(threshold=-0.5) == "threshold is -0.5; the least allowed is 0"
    assert checked(max_migrations=0, cooldown=-1) == ("cooldown is -1; the least allowed is 0; max_migrations is 0; "
                                                      "the least allowed is 1")
    mr.check_input(params(threshold=0.0), r.Rebalance, AUTH)


def test_an_unknown_objective_is_refused_by_the_argument_spec():
    spec = dict((k, v) for k, v in vm_rebalance.argument_spec().items())
    result = ArgumentSpecValidator(spec).validate({"objective": "happiness"})
    assert "value of objective must be one of: vms, memory, cpu, usage, got: happiness" in \
        " ".join(result.error_messages)


@pytest.mark.parametrize("plan, message", [
    ({"plan": []}, "plan has no fingerprint (64 hex digits)"),
    ({"fingerprint": "a" * 64}, "plan has no list of moves (plan.plan)"),
    ({"fingerprint": "a" * 64, "plan": [{"namespace": "ns", "name": "x"}]}, "plan.plan[0] is not a move"),
    ({"fingerprint": "a" * 64, "plan": [{"namespace": "ns", "name": "x", "source": "a", "target": "b"},
                                        {"namespace": "ns", "name": "x", "source": "a", "target": "c"}]},
     "plan.plan moves ns/x twice"),
    ({"fingerprint": "a" * 64, "plan": [{"namespace": "ns", "name": "x", "source": "a", "target": "b"},
                                        {"namespace": "ns", "name": "y", "source": "b", "target": "a"}]},
     "plan.plan moves VMs from a to b and from b to a"),
    ({"fingerprint": "a" * 64, "plan": [{"namespace": "ns", "name": "x", "source": "a", "target": "a"}]},
     "plan.plan[0] moves ns/x from a to the same node"),
])
def test_a_malformed_plan_is_refused_before_any_client(plan, message):
    assert message in checked(plan=plan)


def test_unknown_namespaces_and_nodes_are_named_before_any_write():
    fake = cluster({"n1": 2}, namespaces={"ns"})
    _instance, msg = failing(fake, namespaces=["ns", "gone"], nodes=["n1", "n9"])
    assert msg == "namespace 'gone' (namespaces) does not exist; node 'n9' (nodes) does not exist"
    assert fake.writes == []


def test_without_nodes_or_pods_there_is_no_plan():
    _instance, msg = failing(cluster({"n1": 2}, forbidden={"nodes"}), check_mode=True)
    assert msg.startswith("vm_rebalance needs to list nodes (skipped: cannot list nodes (403")
    _instance, msg = failing(cluster({"n1": 2}, forbidden={"active_pods"}), check_mode=True)
    assert msg.startswith("vm_rebalance needs to list pods in all namespaces")


def test_the_evacuations_plan_input_is_the_shared_one():
    fake = cluster({"n1": 1})
    instance = engine(fake)
    instance.m.detect()
    instance.read_cluster()
    item = r.plan_input(instance.m, fake.get_vmi("ns", "n1-00"), {})
    assert (item["node"], item["memory"], item["requests"]["memory"]) == ("n1", GI, GI)
    assert item["constraints"]["nodeSelector"]["kubevirt.io/schedulable"] == "true"
