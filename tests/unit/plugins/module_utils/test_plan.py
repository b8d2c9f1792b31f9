# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/plan.py: drain and rebalance plans, spread, fingerprint."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, plan, target_pod

GI = 2 ** 30


def node(name, cpu="16", memory="64Gi", pods="110", labels=None, taints=None, unschedulable=False):
    all_labels = {"kubernetes.io/hostname": name, "kubevirt.io/schedulable": "true"}
    all_labels.update(labels or {})
    return {"metadata": {"name": name, "uid": "uid-" + name, "labels": all_labels},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}


def launcher(name, node_name, cpu="1", memory="4Gi", phase="Running"):
    container = {"name": "compute", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    metadata = {"name": "virt-launcher-" + name, "namespace": "vms", "labels": {"kubevirt.io": "virt-launcher"}}
    spec = {"nodeName": node_name, "containers": [container]}
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def vmi_object(name, node_name, selector=None, tolerations=None, namespace="vms"):
    spec = {"domain": {"cpu": {"model": "host-passthrough"}}, "nodeSelector": selector or {},
            "tolerations": tolerations or []}
    return {"metadata": {"namespace": namespace, "name": name, "uid": "uid-" + name}, "spec": spec,
            "status": {"phase": "Running", "nodeName": node_name}}


def vm(name, source, nodes, pods, cpu="1", memory="4Gi", selector=None, namespace="vms", value=1, **extra):
    """A plan's VM entry, its launcher pod appended to `pods`, built as the modules will build it."""
    pod = launcher(name, source, cpu, memory)
    pods.append(pod)
    source_node = next((n for n in nodes if node_fit.node_name(n) == source), None)
    entry = {"namespace": namespace, "name": name, "node": source,
             "constraints": target_pod.target_constraints(vmi_object(name, source, selector, namespace=namespace),
                                                          pod, source_node),
             "requests": node_fit.pod_requests(pod), "memory": int(node_fit.parse_quantity(memory)), "value": value,
             "not_migratable": None, "opted_out": False, "seconds_since_migration": None}
    entry.update(extra)
    return entry


def loads(vms):
    per_node = {}
    for entry in vms:
        per_node[entry["node"]] = per_node.get(entry["node"], 0) + entry["value"]
    return per_node


def after_moves(before, vms, moves):
    values = dict((plan.vm_key(v), v["value"]) for v in vms)
    result = dict(before)
    for move in moves:
        value = values[plan.vm_key(move)]
        result[move["source"]] -= value
        result[move["target"]] += value
    return result


def assert_no_vm_twice_and_no_swap(moves):
    keys = [plan.vm_key(m) for m in moves]
    assert len(keys) == len(set(keys)), keys
    pairs = set((m["source"], m["target"]) for m in moves)
    assert not [(s, t) for s, t in pairs if (t, s) in pairs], pairs


# --- Placement ----------------------------------------------------------------------------------------------------


def test_placement_counts_what_is_planned_and_can_ignore_it():
    nodes = [node("src"), node("dst", memory="8Gi")]
    pods = []
    entry = vm("a", "src", nodes, pods, memory="6Gi")
    placement = plan.Placement(nodes, pods)
    results = placement.fit(entry["constraints"], entry["requests"], "src")
    assert node_fit.candidates(results) == ["dst"]
    placement.place("vms/a", entry["requests"], "dst", "src")
    again = placement.fit(entry["constraints"], entry["requests"], "src")
    assert node_fit.candidates(again) == []
    assert "insufficient memory: needs 6Gi, 2Gi free of 8Gi allocatable" in again[0]["reasons"] + again[1]["reasons"]
    alone = placement.fit(entry["constraints"], entry["requests"], "src", counting_planned=False)
    assert node_fit.candidates(alone) == ["dst"]
    assert placement.free("dst", "memory") == 2 * GI
    assert placement.free("src", "memory") == 58 * GI     # the source keeps its requests by default
    with pytest.raises(ValueError):
        placement.place("vms/a", entry["requests"], "dst", "src")


def test_placement_releases_the_source_only_when_asked():
    nodes = [node("src"), node("dst")]
    pods = []
    entry = vm("a", "src", nodes, pods, memory="6Gi")
    placement = plan.Placement(nodes, pods, release_sources=True)
    placement.place("vms/a", entry["requests"], "dst", "src")
    assert placement.free("src", "memory") == 64 * GI
    assert placement.free("dst", "memory") == 58 * GI
    assert placement.planned_onto["dst"]["memory"] == 6 * GI
    assert placement.planned_away["src"]["memory"] == 6 * GI


# --- drain --------------------------------------------------------------------------------------------------------


def test_three_vms_that_each_fit_alone_but_not_together_place_one():
    nodes = [node("src"), node("dst", memory="8Gi")]
    pods = []
    vms = [vm(name, "src", nodes, pods, memory="6Gi") for name in ("c", "a", "b")]
    result = plan.drain_plan(vms, nodes, pods, "src")
    assert [(e["name"], e["target"], e["wave"]) for e in result["vmis"]] == [("a", "dst", 1)]
    assert [e["name"] for e in result["unplaceable"]] == ["b", "c"]
    for entry in result["unplaceable"]:
        assert "dst: insufficient memory: needs 6Gi, 2Gi free of 8Gi allocatable" in entry["reason"]
        assert "Alone it would fit on dst" in entry["reason"]
    assert result["not_migratable"] == []


def test_drain_places_biggest_first_where_most_memory_stays_free():
    nodes = [node("src"), node("big", memory="32Gi"), node("small", memory="16Gi")]
    pods = [launcher("other", "big", memory="4Gi")]          # big: 28Gi free, small: 16Gi
    vms = [vm("v2", "src", nodes, pods, memory="2Gi"), vm("v8", "src", nodes, pods, memory="8Gi"),
           vm("v6", "src", nodes, pods, memory="6Gi"), vm("v4", "src", nodes, pods, memory="4Gi")]
    result = plan.drain_plan(vms, nodes, pods, "src")
    # v8 -> big (28 -> 20), v6 -> big (20 -> 14 beats 16 -> 10), v4 -> small (16 -> 12 beats 14 -> 10),
    # v2 -> big (14 -> 12 beats 12 -> 10)
    assert dict((e["name"], e["target"]) for e in result["vmis"]) == {"v8": "big", "v6": "big", "v4": "small",
                                                                      "v2": "big"}
    assert [e["name"] for e in result["vmis"]] == ["v8", "v6", "v4", "v2"]
    assert result["unplaceable"] == [] and result["not_migratable"] == []


def test_drain_lists_not_migratable_and_honours_constraints_and_target_nodes():
    nodes = [node("src"), node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"}),
             node("n3", labels={"zone": "a"}, unschedulable=True)]
    pods = []
    vms = [vm("zoned", "src", nodes, pods, selector={"zone": "b"}),
           vm("stuck", "src", nodes, pods, not_migratable="not live-migratable: DisksNotLiveMigratable: PVC RWO"),
           vm("free", "src", nodes, pods)]
    result = plan.drain_plan(vms, nodes, pods, "src")
    assert dict((e["name"], e["target"]) for e in result["vmis"]) == {"zoned": "n2", "free": "n1"}
    assert result["not_migratable"] == [{"namespace": "vms", "name": "stuck",
                                         "reason": "not live-migratable: DisksNotLiveMigratable: PVC RWO"}]
    restricted = plan.drain_plan(vms, nodes, pods, "src", target_nodes=["n1", "n3"])
    assert [e["name"] for e in restricted["vmis"]] == ["free"]
    assert [e["name"] for e in restricted["unplaceable"]] == ["zoned"]
    reason = restricted["unplaceable"][0]["reason"]
    assert "n1: VMI nodeSelector zone=b: the node has zone=a" in reason
    assert "cordoned" in reason and "n2" not in reason and "Alone" not in reason


def test_waves_honour_both_caps_and_the_estimate_sums_the_longest_copy_of_each_wave():
    nodes = [node("src"), node("dst", memory="256Gi", cpu="64")]
    pods = []
    vms = [vm("m%d" % size, "src", nodes, pods, memory="%dGi" % size) for size in (1, 4, 2, 3, 5)]
    result = plan.drain_plan(vms, nodes, pods, "src", parallel_per_cluster=5, parallel_outbound_per_node=2,
                             bandwidth_per_migration=GI)
    assert [(e["name"], e["wave"]) for e in result["vmis"]] == [("m5", 1), ("m4", 1), ("m3", 2), ("m2", 2), ("m1", 3)]
    assert result["waves"] == 3
    assert result["estimated_seconds"] == 5 + 3 + 1
    per_cluster = plan.drain_plan(vms, nodes, pods, "src", parallel_per_cluster=1, parallel_outbound_per_node=2,
                                  bandwidth_per_migration=GI)
    assert result["vmis"][0]["memory"] == 5 * GI
    assert per_cluster["waves"] == 5 and per_cluster["estimated_seconds"] == 15
    assert [e["wave"] for e in per_cluster["vmis"]] == [1, 2, 3, 4, 5]
    defaults = plan.drain_plan(vms, nodes, pods, "src", bandwidth_per_migration=GI)
    assert defaults["waves"] == 3      # KubeVirt's defaults: 5 per cluster, 2 outbound per node


def test_vmis_from_several_nodes_take_their_own_node_as_source_and_the_waves_cap_each_node():
    nodes = [node("a"), node("b"), node("dst", memory="256Gi", cpu="64")]
    pods = []
    vms = [vm("a%d" % i, "a", nodes, pods, memory="%dGi" % (4 - i)) for i in range(3)] + \
        [vm("b0", "b", nodes, pods, memory="1Gi"), vm("home", "dst", nodes, pods)]
    result = plan.drain_plan(vms[:4], nodes, pods, None, parallel_per_cluster=2, parallel_outbound_per_node=1,
                             bandwidth_per_migration=GI)
    assert [(e["name"], e["source"], e["target"], e["wave"]) for e in result["vmis"]] == [
        ("a0", "a", "dst", 1), ("a1", "a", "dst", 2), ("a2", "a", "dst", 3), ("b0", "b", "dst", 1)]
    assert result["waves"] == 3 and result["estimated_seconds"] == 4 + 3 + 2
    assert "3 waves of at most 2 migrations, 1 from any one node" in result["estimate_basis"]
    # never onto its own node (dst has the most room)
    alone = plan.drain_plan(vms[4:], nodes, pods, None)
    assert [(e["source"], e["target"]) for e in alone["vmis"]] == [("dst", "b")]      # b has the most room
    assert "2 migrations (parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode both cap the " \
        "migrations leaving one node)" in alone["estimate_basis"]


def test_assign_waves_from_one_node_fills_one_wave_after_another():
    entries = [{"source": "n1"} for _index in range(7)]
    waves = plan.assign_waves(entries, parallel_per_cluster=5, parallel_outbound_per_node=3)
    assert [len(w) for w in waves] == [3, 3, 1]
    assert [e["wave"] for e in entries] == [index // plan.wave_size(5, 3) + 1 for index in range(7)]


def test_estimate_basis_names_where_the_bandwidth_comes_from():
    nodes = [node("src"), node("dst")]
    pods = []
    vms = [vm("a", "src", nodes, pods, memory="4Gi")]
    configured = plan.drain_plan(vms, nodes, pods, "src", bandwidth_per_migration=64 * 2 ** 20)
    assert configured["estimate_basis"].startswith("KubeVirt's bandwidthPerMigration (64Mi/s per migration)")
    assert "assum" not in configured["estimate_basis"]
    assert configured["estimated_seconds"] == 64.0
    for unset in (None, 0):
        assumed = plan.drain_plan(vms, nodes, pods, "src", bandwidth_per_migration=unset)
        assert assumed["estimate_basis"].startswith("an assumed 1Gi/s per migration (an assumption: ")
        assert "bandwidthPerMigration is unset or 0" in assumed["estimate_basis"]
        assert assumed["estimated_seconds"] == 4.0


def test_an_empty_drain():
    result = plan.drain_plan([], [node("src"), node("dst")], [], "src")
    assert result["vmis"] == [] and result["waves"] == 0 and result["estimated_seconds"] == 0


# --- spread -------------------------------------------------------------------------------------------------------


def test_spread():
    assert plan.spread({"a": 1, "b": 3}) == {"cv": 0.5, "max_min": 3, "per_node": {"a": 1, "b": 3}}
    assert plan.spread({"a": 1, "b": 2, "c": 4})["cv"] == 0.5345
    assert plan.spread({"a": 2, "b": 3})["max_min"] == 1.5
    assert plan.spread({"a": 20.0, "b": 2.99999999})["per_node"] == {"a": 20, "b": 3}


def test_spread_of_zeros_and_of_a_zero_minimum():
    assert plan.spread({"a": 0, "b": 0}) == {"cv": 0, "max_min": None, "per_node": {"a": 0, "b": 0}}
    assert plan.spread({"a": 0, "b": 4}) == {"cv": 1.0, "max_min": None, "per_node": {"a": 0, "b": 4}}
    assert plan.spread({}) == {"cv": 0, "max_min": None, "per_node": {}}


# --- rebalance ----------------------------------------------------------------------------------------------------


def skewed(counts, memory="4Gi"):
    nodes = [node(name) for name in sorted(counts)]
    pods, vms = [], []
    for name in sorted(counts):
        for index in range(counts[name]):
            vms.append(vm("%s-%02d" % (name, index), name, nodes, pods, memory=memory))
    return nodes, pods, vms


def test_rebalance_of_a_skewed_cluster_falls_below_the_threshold():
    nodes, pods, vms = skewed({"a": 8, "b": 4, "c": 0, "d": 0})
    before = loads(vms)
    result = plan.rebalance_plan(vms, nodes, pods, before, threshold=0.1, max_migrations=50)
    moves = result["plan"]
    assert result["spread"]["before"]["cv"] > 0.1 >= result["spread"]["after"]["cv"]
    assert result["stopped"] == plan.STOP_THRESHOLD
    assert result["spread"]["after"]["per_node"] == after_moves(dict(before, c=0, d=0), vms, moves)
    assert sorted(result["spread"]["after"]["per_node"].values()) == [3, 3, 3, 3]
    assert len(moves) == 6 and all(m["source"] in ("a", "b") and m["target"] in ("c", "d") for m in moves)
    assert all(m["memory"] == 4 * GI for m in moves)
    assert_no_vm_twice_and_no_swap(moves)
    # each move lowers the CV
    current, previous = dict(before, c=0, d=0), None
    for move in moves:
        current = after_moves(current, vms, [move])
        cv = plan.unrounded_cv(current.values())
        assert previous is None or cv < previous
        previous = cv


def test_rebalance_never_moves_against_a_planned_move():
    """Without the rule the greedy moves vm3 n1->n0, then vm1 n0->n1 (lower CV still): a swap of load."""
    nodes = [node("n0"), node("n1")]
    pods = []
    vms = [vm("vm0", "n1", nodes, pods, value=8), vm("vm1", "n0", nodes, pods, value=2),
           vm("vm2", "n1", nodes, pods, value=5), vm("vm3", "n1", nodes, pods, value=13),
           vm("vm4", "n0", nodes, pods, value=1)]
    result = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0, max_migrations=10)
    assert [(m["name"], m["source"], m["target"]) for m in result["plan"]] == [("vm3", "n1", "n0")]
    assert result["stopped"] == plan.STOP_NO_IMPROVEMENT
    assert result["spread"]["after"]["per_node"] == {"n0": 16, "n1": 13}


def test_rebalance_respects_cooldown_opt_out_migratability_and_max_migrations():
    nodes = [node("a"), node("b")]
    pods = []
    vms = [vm("opted", "a", nodes, pods, opted_out=True),
           vm("recent", "a", nodes, pods, seconds_since_migration=60),
           vm("stuck", "a", nodes, pods, not_migratable="not live-migratable: HostDevice"),
           vm("long-ago", "a", nodes, pods, seconds_since_migration=7200),
           vm("never", "a", nodes, pods),
           vm("spare", "a", nodes, pods)]
    result = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0, max_migrations=2, cooldown_seconds=600)
    assert [(m["name"], m["source"], m["target"]) for m in result["plan"]] == [("long-ago", "a", "b"),
                                                                               ("never", "a", "b")]
    assert result["stopped"] == plan.STOP_MAX_MIGRATIONS
    assert result["skipped"] == [
        {"namespace": "vms", "name": "opted", "reason": "opted out of rebalancing"},
        {"namespace": "vms", "name": "recent", "reason": "cooldown: migrated 60s ago, cooldown 600s"},
        {"namespace": "vms", "name": "stuck", "reason": "not live-migratable: HostDevice"}]
    unlimited = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0, max_migrations=10,
                                    cooldown_seconds=600)
    assert [m["name"] for m in unlimited["plan"]] == ["long-ago", "never", "spare"]
    assert unlimited["spread"]["after"]["per_node"] == {"a": 3, "b": 3}
    no_cooldown = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0, max_migrations=10)
    assert "recent" in [m["name"] for m in no_cooldown["plan"]]


def test_rebalance_of_a_balanced_cluster_plans_nothing():
    nodes, pods, vms = skewed({"a": 3, "b": 3, "c": 3})
    result = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0.1, max_migrations=10)
    assert result["plan"] == [] and result["stopped"] == plan.STOP_THRESHOLD
    assert result["spread"]["before"] == result["spread"]["after"]
    # above the threshold but no single move evens it out further (1, 1, 2 -> 1, 2, 1)
    nodes, pods, vms = skewed({"a": 1, "b": 1, "c": 2})
    result = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0.1, max_migrations=10)
    assert result["plan"] == [] and result["stopped"] == plan.STOP_NO_IMPROVEMENT
    assert result["skipped"] == []


def test_rebalance_moves_only_where_a_vm_fits_and_says_why_not():
    nodes = [node("heavy", labels={"zone": "x"}), node("zx", labels={"zone": "x"}, memory="6Gi"),
             node("other", labels={"zone": "y"})]
    pods = []
    vms = [vm("pinned-%d" % i, "heavy", nodes, pods, selector={"zone": "x"}) for i in range(4)]
    result = plan.rebalance_plan(vms, nodes, pods, loads(vms), threshold=0, max_migrations=10)
    # zx has room for one 4Gi VM only; other has no zone=x
    assert [(m["name"], m["target"]) for m in result["plan"]] == [("pinned-0", "zx")]
    assert result["stopped"] == plan.STOP_NO_IMPROVEMENT
    assert [s["name"] for s in result["skipped"]] == ["pinned-1", "pinned-2", "pinned-3"]
    reason = result["skipped"][0]["reason"]
    assert reason.startswith("no fitting node among those that would lower the spread: ")
    assert "other: VMI nodeSelector zone=x: the node has zone=y" in reason
    assert "zx: insufficient memory" in reason


def test_rebalance_skips_vms_on_nodes_out_of_scope():
    nodes = [node("a"), node("b")]
    pods = []
    vms = [vm("a1", "a", nodes, pods), vm("a2", "a", nodes, pods), vm("far", "elsewhere", nodes, pods)]
    result = plan.rebalance_plan(vms, nodes, pods, {"a": 2}, threshold=0, max_migrations=10)
    assert [m["name"] for m in result["plan"]] == ["a1"]
    far = {"namespace": "vms", "name": "far", "reason": "runs on elsewhere, not a node in scope"}
    assert result["skipped"] == [far]


def test_rebalance_of_two_thousand_vms_on_a_hundred_nodes():
    """20 nodes with 40 VMs, 80 with 15; memory as the objective; some VMs bound to a zone half the nodes have."""
    nodes = [node("node%03d" % i, cpu="64", memory="256Gi", pods="250", labels={"zone": "z%d" % (i % 2)})
             for i in range(100)]
    pods, vms = [], []
    for i, current in enumerate(nodes):
        for _index in range(40 if i < 20 else 15):
            number = len(vms)
            size = (2, 4, 8)[number % 3]
            selector = {"zone": "z%d" % (i % 2)} if number % 5 == 0 else None
            vms.append(vm("vm%04d" % number, node_fit.node_name(current), nodes, pods, memory="%dGi" % size,
                          selector=selector, namespace="ns%d" % (number % 7), value=size * GI))
    assert len(vms) == 2000
    before = loads(vms)
    result = plan.rebalance_plan(vms, nodes, pods, before, threshold=0.05, max_migrations=1000)
    moves = result["plan"]
    assert moves and result["stopped"] == plan.STOP_THRESHOLD
    assert result["spread"]["before"]["cv"] > 0.4 and result["spread"]["after"]["cv"] <= 0.05
    assert result["spread"]["after"]["per_node"] == dict((k, plan.spread({k: v})["per_node"][k])
                                                         for k, v in after_moves(before, vms, moves).items())
    assert_no_vm_twice_and_no_swap(moves)
    by_key = dict((plan.vm_key(v), v) for v in vms)
    labels = dict((node_fit.node_name(n), n["metadata"]["labels"]) for n in nodes)
    for move in moves:
        wanted = by_key[plan.vm_key(move)]["constraints"]["nodeSelector"]
        assert node_fit.matches_selector(labels[move["target"]], wanted), move
    # the final usage fits every node's allocatable
    used = node_fit.node_usage(pods)
    for move in moves:
        used[move["target"]]["memory"] += by_key[plan.vm_key(move)]["requests"]["memory"]
    assert max(u["memory"] for u in used.values()) <= 256 * GI


# --- fingerprint --------------------------------------------------------------------------------------------------


def test_fingerprint_is_stable_and_changes_with_what_a_plan_depends_on():
    nodes = [node("a", labels={"zone": "x"}), node("b")]
    vmis = [vmi_object("v1", "a"), vmi_object("v2", "b")]
    reference = plan.fingerprint(vmis, nodes)
    assert len(reference) == 64
    assert plan.fingerprint(list(reversed(vmis)), list(reversed(nodes))) == reference
    assert plan.fingerprint(copy.deepcopy(vmis), copy.deepcopy(nodes)) == reference

    moved = copy.deepcopy(vmis)
    moved[0]["status"]["nodeName"] = "b"
    assert plan.fingerprint(moved, nodes) != reference

    cordoned = copy.deepcopy(nodes)
    cordoned[1]["spec"]["unschedulable"] = True
    assert plan.fingerprint(vmis, cordoned) != reference

    restarted = copy.deepcopy(vmis)
    restarted[1]["metadata"]["uid"] = "uid-v2-again"
    assert plan.fingerprint(restarted, nodes) != reference

    relabelled = copy.deepcopy(nodes)
    relabelled[0]["metadata"]["labels"]["zone"] = "y"
    assert plan.fingerprint(vmis, relabelled) != reference

    tainted = copy.deepcopy(nodes)
    tainted[0]["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    assert plan.fingerprint(vmis, tainted) != reference

    unrelated = copy.deepcopy(vmis)
    unrelated[0]["metadata"]["annotations"] = {"note": "x"}
    unrelated[0]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert plan.fingerprint(unrelated, nodes) == reference
