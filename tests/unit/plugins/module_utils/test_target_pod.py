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


def vmi(model="host-model", node_selector=None, machine="pc-q35-rhel9.6.0", affinity=None, features=None, **cpu_fields):
    cpu = dict({"model": model}, **cpu_fields)
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
    # setNodeAffinityForbiddenFeaturePolicy: a forbidden feature is a required DoesNotExist, not a selector
    [term] = named["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "cpu-feature.node.kubevirt.io/vmx", "operator": "DoesNotExist"}]}
    passthrough = t.target_constraints(vmi(model="host-passthrough"), None, node("src", SKYLAKE),
                                       kubevirt_version="v1.5.3")
    assert not [k for k in passthrough["nodeSelector"] if k.startswith("cpu-")]
    assert "nodeAffinity" not in passthrough["affinity"]


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


def terms_of(affinity):
    return affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_the_cpu_manager_label_is_the_releases():
    """nodeselectorrenderer.go Render selects v1.CPUManager: "cpumanager" up to 1.7, "kubevirt.io/cpumanager" from 1.8
    (found by test_target_pod_differential on 1.6.6: the prediction named 1.9's label)."""
    pinned = vmi(dedicatedCpuPlacement=True)
    for version, label, other in (("v1.9.0", "kubevirt.io/cpumanager", "cpumanager"),
                                  ("v1.6.6", "cpumanager", "kubevirt.io/cpumanager"),
                                  ("v1.5.3", "cpumanager", "kubevirt.io/cpumanager"),
                                  (None, "kubevirt.io/cpumanager", "cpumanager"),
                                  ("unreadable", "kubevirt.io/cpumanager", "cpumanager")):
        selector = t.target_constraints(pinned, None, node("src", SKYLAKE), kubevirt_version=version)["nodeSelector"]
        assert (selector.get(label), other in selector) == ("true", False), version
    assert not [k for k in t.vmi_node_selector(vmi()) if "cpumanager" in k]


def test_the_source_nodes_vendor_from_1_6():
    assert t.target_constraints(vmi(), None, node("src", SKYLAKE), kubevirt_version="v1.6.6")["cpu"]["vendor"] == "Intel"
    c = t.target_constraints(vmi(), None, node("src", SKYLAKE), kubevirt_version="v1.5.3")
    assert c["cpu"]["vendor"] is None and not [k for k in c["nodeSelector"] if k.startswith(t.CPU_VENDOR_PREFIX)]


def test_forbidden_features_follow_the_host_model_rule_in_every_term():
    """template.go setNodeAffinityForPod: host-model's rule first, then one per forbidden feature, in order (found by
    test_target_pod_differential: the forbidden feature was left out, so preflight offered nodes that have it)."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    features = [{"name": "tsx-ctrl", "policy": "forbid"}, {"name": "avx2"}, {"name": "vmx", "policy": "forbid"}]
    c = t.target_constraints(vmi(features=features, affinity=affinity), None, node("src", SKYLAKE))
    for term in terms_of(c["affinity"]):
        assert [e["key"] for e in term["matchExpressions"][1:]] == [
            t.OBSOLETE_HOST_MODEL_LABEL, "cpu-feature.node.kubevirt.io/tsx-ctrl", "cpu-feature.node.kubevirt.io/vmx"]
    assert c["nodeSelector"]["cpu-feature.node.kubevirt.io/avx2"] == "true"
    new = dict(CASCADELAKE, **{"cpu-model-migration.node.kubevirt.io/Skylake-Server-IBRS": "true"})
    [reason] = node_fit.evaluate_node(node("new", new), t.target_constraints(
        vmi(features=features[:1]), None, node("src", SKYLAKE)), {}, "src")
    assert "cpu-feature.node.kubevirt.io/tsx-ctrl DoesNotExist" in reason


def test_the_tsc_frequency_virt_controller_hinted():
    """topology/tsc.go IsManualTSCFrequencyRequired (found by test_target_pod_differential: a Hyper-V reenlightenment
    VM's pods select scheduling.node.kubevirt.io/tsc-frequency-<Hz>)."""
    def with_hint(obj, hz):
        obj["status"]["topologyHints"] = {"tscFrequency": hz}
        return obj
    reenlightened = vmi()
    reenlightened["spec"]["domain"]["features"] = {"hyperv": {"reenlightenment": {"enabled": True}}}
    assert t.vmi_node_selector(with_hint(reenlightened, 2100000000))[
        "scheduling.node.kubevirt.io/tsc-frequency-2100000000"] == "true"
    assert t.tsc_frequency_label(with_hint(vmi(features=[{"name": "invtsc", "policy": "force"}]), 5)) == \
        "scheduling.node.kubevirt.io/tsc-frequency-5"
    assert t.tsc_frequency_label(with_hint(vmi(), 2100000000)) is None           # needs no TSC frequency
    assert t.tsc_frequency_label(with_hint(vmi(features=[{"name": "invtsc", "policy": "optional"}]), 5)) is None
    assert t.tsc_frequency_label(with_hint(reenlightened, 0)) is None              # no hint (no node has one)
    reenlightened["spec"]["domain"]["features"]["hyperv"]["reenlightenment"]["enabled"] = False
    assert t.tsc_frequency_label(with_hint(reenlightened, 2100000000)) is None


def test_realtime():
    """nodeselectorrenderer.go Render: v1.RealtimeLabel when spec.domain.cpu.realtime is set, even empty (found by
    test_target_pod_differential)."""
    assert t.vmi_node_selector(vmi(realtime={}, dedicatedCpuPlacement=True))["kubevirt.io/realtime"] == "true"
    assert "kubevirt.io/realtime" not in t.vmi_node_selector(vmi())


def test_the_launcher_pod_and_the_migrations_anti_affinity():
    """launcher_constraints is what any launcher pod of the VMI gets; the target pod adds createMigrationPodAntiAffinity
    Rule after the VMI's own pod anti-affinity."""
    own = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    obj = vmi(model="Haswell", affinity=own)
    assert t.launcher_constraints(obj)["affinity"] == own
    anti = t.target_constraints(obj, None, node("src", SKYLAKE))["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"] == own["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"] + [
        {"labelSelector": {"matchLabels": {"kubevirt.io/created-by": "u1"}}, "topologyKey": "kubernetes.io/hostname"}]
    assert len(own["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]) == 1, "not modified"
    assert t.launcher_constraints(vmi(model="Haswell"))["affinity"] is None
