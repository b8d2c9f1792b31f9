# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/target_pod.py: the migration target pod KubeVirt will create."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils import target_pod as t

SKYLAKE = {"host-model-cpu.node.kubevirt.io/Skylake-Server-IBRS": "true",
           "host-model-required-features.node.kubevirt.io/ssbd": "true",
           "host-model-required-features.node.kubevirt.io/umip": "true",
           "cpu-vendor.node.kubevirt.io/Intel": "true",
           "cpu-model-migration.node.kubevirt.io/Skylake-Server-IBRS": "true",
           "cpu-model-migration.node.kubevirt.io/Cascadelake-Server": "true",
           "cpu-feature.node.kubevirt.io/ssbd": "true", "cpu-feature.node.kubevirt.io/umip": "true",
           "machine-type.node.kubevirt.io/pc-q35-rhel9.6.0": "true", "kubevirt.io/schedulable": "true",
           "kubernetes.io/arch": "amd64"}
CASCADELAKE = dict(SKYLAKE, **{"host-model-cpu.node.kubevirt.io/Cascadelake-Server": "true",
                               "host-model-required-features.node.kubevirt.io/tsx-ctrl": "true",
                               "cpu-feature.node.kubevirt.io/tsx-ctrl": "true"})
del CASCADELAKE["host-model-cpu.node.kubevirt.io/Skylake-Server-IBRS"]


def node(name, labels):
    return {"metadata": {"name": name, "labels": dict(labels, **{"kubernetes.io/hostname": name})},
            "spec": {}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}


def vmi(model="host-model", node_selector=None, machine="pc-q35-rhel9.6.0", affinity=None, features=None):
    cpu = {"model": model}
    if features:
        cpu["features"] = features
    return {"metadata": {"name": "vm", "namespace": "ns", "uid": "u1"},
            "spec": {"architecture": "amd64", "nodeSelector": node_selector or {}, "affinity": affinity,
                     "domain": {"cpu": cpu, "machine": {"type": "q35"}}},
            "status": {"nodeName": "src", "machine": {"type": machine}}}


def test_host_model_takes_the_source_nodes_model_features_and_vendor():
    c = t.target_constraints(vmi(), None, node("src", SKYLAKE), added_selector={"zone": "b"})
    sel = c["nodeSelector"]
    assert sel["cpu-model-migration.node.kubevirt.io/Skylake-Server-IBRS"] == "true"
    assert {k for k in sel if k.startswith("cpu-feature.")} == {"cpu-feature.node.kubevirt.io/ssbd",
                                                                "cpu-feature.node.kubevirt.io/umip"}
    assert sel["cpu-vendor.node.kubevirt.io/Intel"] == "true"
    assert sel["machine-type.node.kubevirt.io/pc-q35-rhel9.6.0"] == "true"   # status.machine wins over spec
    assert (sel["kubevirt.io/schedulable"], sel["kubernetes.io/arch"], sel["zone"]) == ("true", "amd64", "b")
    [term] = c["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": t.OBSOLETE_HOST_MODEL_LABEL, "operator": "DoesNotExist"}]
    assert c["cpu"] == {"host_model": True, "model": "Skylake-Server-IBRS", "features": ["ssbd", "umip"],
                        "vendor": "Intel", "source": "src"}


def test_after_a_first_migration_the_source_pods_cpu_selectors_are_kept():
    source_pod = {"spec": {"nodeSelector": {"cpu-model-migration.node.kubevirt.io/Skylake-Server-IBRS": "true",
                                            "cpu-feature.node.kubevirt.io/ssbd": "true"}}}
    c = t.target_constraints(vmi(), source_pod, node("src", CASCADELAKE))   # now on a Cascade Lake node
    assert "cpu-model-migration.node.kubevirt.io/Cascadelake-Server" not in c["nodeSelector"]
    assert c["cpu"]["model"] == "Skylake-Server-IBRS" and c["cpu"]["features"] == ["ssbd"]


def test_vmi_values_win_over_the_added_selector_and_user_affinity_gets_the_rule_in_every_term():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    c = t.target_constraints(vmi(node_selector={"cpu": "slow"}, affinity=affinity), None, node("src", SKYLAKE),
                             added_selector={"cpu": "fast"})
    assert c["nodeSelector"]["cpu"] == "slow"
    terms = c["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(term["matchExpressions"][-1]["key"] == t.OBSOLETE_HOST_MODEL_LABEL for term in terms)
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][-1]["key"] == "zone", "the VMI's own affinity is not modified"


def test_named_model_and_passthrough():
    named = t.target_constraints(vmi(model="Haswell", features=[{"name": "avx2"}, {"name": "vmx", "policy": "forbid"}]),
                                 None, node("src", SKYLAKE))
    assert named["nodeSelector"]["cpu-model.node.kubevirt.io/Haswell"] == "true"
    assert named["nodeSelector"]["cpu-feature.node.kubevirt.io/avx2"] == "true"
    assert "cpu-feature.node.kubevirt.io/vmx" not in named["nodeSelector"]
    assert not [k for k in named["nodeSelector"] if k.startswith("cpu-model-migration.")]
    assert named["affinity"] is None
    passthrough = t.target_constraints(vmi(model="host-passthrough"), None, node("src", SKYLAKE), vendor_rule=False)
    assert not [k for k in passthrough["nodeSelector"] if k.startswith("cpu-")]


def test_a_node_that_cannot_run_the_cpu_is_refused_naming_the_model():
    c = t.target_constraints(vmi(), None, node("src", CASCADELAKE))
    assert node_fit.evaluate_node(node("old", SKYLAKE), c, {}, "src") == [
        "CPU: the VM runs with host-model Cascadelake-Server (the CPU of its node src), which this node cannot run: "
        "it lacks the feature tsx-ctrl"]
    assert node_fit.evaluate_node(node("new", CASCADELAKE), c, {}, "src") == []
    no_model = dict(SKYLAKE)
    del no_model["cpu-model-migration.node.kubevirt.io/Cascadelake-Server"]
    [reason] = node_fit.evaluate_node(node("older", no_model), c, {}, "src")
    assert "lacks cpu-model-migration.node.kubevirt.io/Cascadelake-Server=true; the feature tsx-ctrl" in reason
