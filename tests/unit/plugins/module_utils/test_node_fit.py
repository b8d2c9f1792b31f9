# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/node_fit.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit as p


def node(name, labels=None, taints=None, unschedulable=False, allocatable=None):
    return {"metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **(labels or {}))},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": allocatable or {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def pod(node_name, cpu="100m", memory="1Gi", phase="Running", init=None, overhead=None):
    spec = {"nodeName": node_name, "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if init:
        spec["initContainers"] = [{"resources": {"requests": init}}]
    if overhead:
        spec["overhead"] = overhead
    return {"spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize("text, value", [
    ("100m", 0.1), ("2", 2.0), ("1.5", 1.5), ("2Gi", 2.0 * 2 ** 30), ("1G", 1e9), ("512Mi", 512.0 * 2 ** 20),
    ("1e3", 1000.0), ("1k", 1000.0), ("10Ki", 10240.0), (".5", 0.5), (3, 3.0), ("250u", 0.00025), ("7n", 7e-9),
])
def test_parse_quantity(text, value):
    assert p.parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["", "abc", "1X", "Gi", None, True, [], "1.2.3"])
def test_parse_quantity_rejects(bad):
    with pytest.raises(p.QuantityError):
        p.parse_quantity(bad)


def test_format_quantity():
    assert p.format_quantity("cpu", 0.25) == "250m"
    assert p.format_quantity("cpu", 2.0) == "2"
    assert p.format_quantity("memory", 2.0 * 2 ** 30) == "2Gi"
    assert p.format_quantity("memory", 300.0 * 2 ** 20) == "300Mi"
    assert p.format_quantity("pods", 3.0) == "3"


def test_node_selector():
    n = node("n1", {"cpu": "fast"})
    assert p.node_selector_reasons(n, {"cpu": "fast"}) == []
    assert p.node_selector_reasons(n, {"cpu": "slow"}) == ["nodeSelector cpu=slow: the node has cpu=fast"]
    assert p.node_selector_reasons(n, {"gpu": "yes"}) == ["nodeSelector gpu=yes: the node has no label gpu"]
    assert p.node_selector_reasons(n, None) == []


@pytest.mark.parametrize("req, labels, expected", [
    ({"key": "a", "operator": "In", "values": ["1", "2"]}, {"a": "2"}, True),
    ({"key": "a", "operator": "In", "values": ["1"]}, {"a": "2"}, False),
    ({"key": "a", "operator": "In", "values": ["1"]}, {}, False),
    ({"key": "a", "operator": "NotIn", "values": ["1"]}, {"a": "2"}, True),
    ({"key": "a", "operator": "NotIn", "values": ["1"]}, {}, True),
    ({"key": "a", "operator": "NotIn", "values": ["1"]}, {"a": "1"}, False),
    ({"key": "a", "operator": "Exists"}, {"a": ""}, True),
    ({"key": "a", "operator": "Exists"}, {}, False),
    ({"key": "a", "operator": "DoesNotExist"}, {}, True),
    ({"key": "a", "operator": "DoesNotExist"}, {"a": "x"}, False),
    ({"key": "a", "operator": "Gt", "values": ["5"]}, {"a": "6"}, True),
    ({"key": "a", "operator": "Gt", "values": ["5"]}, {"a": "5"}, False),
    ({"key": "a", "operator": "Lt", "values": ["5"]}, {"a": "4"}, True),
    ({"key": "a", "operator": "Lt", "values": ["5"]}, {"a": "x"}, False),
    ({"key": "a", "operator": "Lt", "values": ["5"]}, {}, False),
    ({"key": "a", "operator": "Gt", "values": ["1", "2"]}, {"a": "3"}, False),
    ({"key": "a", "operator": "Bogus", "values": ["1"]}, {"a": "1"}, False),
])
def test_requirement_matches(req, labels, expected):
    assert p.requirement_matches(labels, req) is expected


def affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def test_required_affinity_terms_are_ored_and_expressions_anded():
    n = node("n1", {"zone": "a", "cpu": "fast"})
    both = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                 {"key": "cpu", "operator": "In", "values": ["slow"]}]}
    assert p.required_affinity_reasons(n, affinity(both)) == [
        "required node affinity: cpu In [slow] (the node has cpu=fast)"]
    other = {"matchExpressions": [{"key": "cpu", "operator": "Exists"}]}
    assert p.required_affinity_reasons(n, affinity(both, other)) == []
    missing = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    reasons = p.required_affinity_reasons(n, affinity(both, missing))
    assert len(reasons) == 1 and "no term matches" in reasons[0] and "no label gpu" in reasons[0]


def test_required_affinity_match_fields_and_edge_cases():
    n = node("n1")
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    not_name = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
    assert p.required_affinity_reasons(n, affinity(by_name)) == []
    assert p.required_affinity_reasons(n, affinity(not_name)) == [
        "required node affinity: field metadata.name NotIn [n1]"]
    assert p.required_affinity_reasons(n, affinity({})) == [
        "required node affinity: an empty nodeSelectorTerm matches no node"]
    assert p.required_affinity_reasons(n, affinity()) == [
        "required node affinity has no nodeSelectorTerms and matches no node"]
    assert p.required_affinity_reasons(n, None) == []
    assert p.required_affinity_reasons(n, {"podAntiAffinity": {}}) == []
    preferred_only = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}
    assert p.required_affinity_reasons(n, preferred_only) == []


GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize("toleration, tolerated", [
    ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
    ({"key": "dedicated", "value": "gpu"}, True),                       # operator defaults to Equal, any effect
    ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
    ({"key": "dedicated", "operator": "Exists"}, True),
    ({"operator": "Exists"}, True),                                    # tolerates everything
    ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
    ({"value": "gpu"}, False),                                          # Equal without a key tolerates nothing
])
def test_toleration_tolerates(toleration, tolerated):
    assert p.toleration_tolerates(toleration, GPU) is tolerated


def test_taints_prefer_no_schedule_ignored_and_cordon():
    n = node("n1", taints=[GPU, {"key": "soft", "effect": "PreferNoSchedule"},
                           {"key": "evict", "value": "x", "effect": "NoExecute"}])
    assert p.taint_reasons(n, []) == ["untolerated taint dedicated=gpu:NoSchedule", "untolerated taint evict=x:NoExecute"]
    assert p.taint_reasons(n, [{"operator": "Exists"}]) == []
    cordoned = node("n2", unschedulable=True, taints=[{"key": p.CORDON_TAINT, "effect": "NoSchedule"}])
    assert p.cordon_reasons(cordoned) == ["cordoned (spec.unschedulable)"]
    assert p.taint_reasons(cordoned, []) == []   # reported once, as cordoned
    assert p.cordon_reasons(cordoned, [{"key": p.CORDON_TAINT, "operator": "Exists"}]) == []
    assert p.cordon_reasons(node("n3")) == []


def test_pod_requests_init_containers_and_overhead():
    req = p.pod_requests(pod("n1", cpu="200m", memory="1Gi", init={"cpu": "1", "memory": "100Mi"},
                             overhead={"memory": "10Mi"}))
    assert req["cpu"] == pytest.approx(1.0)                         # max(sum containers, init)
    assert req["memory"] == pytest.approx(2 ** 30 + 10 * 2 ** 20)
    assert req["pods"] == 1.0


def test_node_usage_skips_terminal_and_unbound_pods():
    pods = [pod("n1"), pod("n1", phase="Succeeded"), pod("n1", phase="Failed"), pod(None), pod("n2", cpu="1")]
    usage = p.node_usage(pods)
    assert usage["n1"]["cpu"] == pytest.approx(0.1) and usage["n1"]["pods"] == 1.0
    assert usage["n2"]["cpu"] == pytest.approx(1.0)


def test_resource_reasons():
    n = node("n1", allocatable={"cpu": "1", "memory": "2Gi", "pods": "2"})
    used = {"cpu": 0.8, "memory": 1.0 * 2 ** 30, "pods": 1.0}
    assert p.resource_reasons(n, {"cpu": 0.1, "memory": 2.0 ** 20, "pods": 1.0}, used) == []
    reasons = p.resource_reasons(n, {"cpu": 0.5, "memory": 2.0 * 2 ** 30, "pods": 1.0}, used)
    assert reasons == ["insufficient cpu: needs 500m, 200m free of 1 allocatable",
                       "insufficient memory: needs 2Gi, 1Gi free of 2Gi allocatable"]
    assert p.resource_reasons(n, {"devices.kubevirt.io/kvm": 1.0}, {}) == [
        "no devices.kubevirt.io/kvm allocatable (needs 1)"]


def test_selector_conflicts():
    assert p.selector_conflicts({"cpu": "fast"}, {"cpu": "slow", "zone": "a"}) == {"cpu": ("fast", "slow")}
    assert p.selector_conflicts({"cpu": "fast"}, {"cpu": "fast"}) == {}
    assert p.selector_conflicts(None, {"a": "b"}) == {}


def test_evaluate_nodes_orders_candidates_then_nearest_and_explains():
    small = {"cpu": "1", "memory": "1Gi"}
    nodes = [node("n1", {"cpu": "slow"}), node("n2", {"cpu": "fast"}), node("n3", {"cpu": "fast"}, taints=[GPU]),
             node("n4", {"cpu": "fast"}, unschedulable=True), node("n5", {"cpu": "fast"}, allocatable=small)]
    scheduling = {"nodeSelector": {"cpu": "fast"}, "tolerations": []}
    requests = p.pod_requests(pod("n2", cpu="500m", memory="2Gi"))
    results = p.evaluate_nodes(nodes, scheduling, {}, "n2", requests, [pod("n2", cpu="500m", memory="2Gi")])
    assert p.candidates(results) == []
    by_name = {r["name"]: r["reasons"] for r in results}
    assert by_name["n2"] == ["the source node (the VMI runs there)"]
    assert by_name["n3"] == ["untolerated taint dedicated=gpu:NoSchedule"]
    assert by_name["n4"] == ["cordoned (spec.unschedulable)"]
    assert by_name["n5"] == ["insufficient memory: needs 2Gi, 1Gi free of 1Gi allocatable"]
    assert by_name["n1"] == ["VMI nodeSelector cpu=fast: the node has cpu=slow"]
    text = p.explain_rejections(results, limit=2)
    assert text.startswith("n1: VMI nodeSelector") and "(3 more nodes rejected)" in text

    results = p.evaluate_nodes(nodes, dict(scheduling, tolerations=[{"operator": "Exists"}]),
                               {"kubernetes.io/hostname": "n3"}, "n2", None, None)
    assert p.candidates(results) == ["n3"]
    assert p.explain_rejections([r for r in results if r["fits"]]) == ""


def test_matches_selector():
    assert p.matches_selector({"a": "1", "b": "2"}, {"a": "1"})
    assert not p.matches_selector({"a": "1"}, {"a": "2"})
    assert p.matches_selector(None, {})


def test_pod_requests_count_native_sidecars_beside_the_containers():
    """KubeVirt's launcher pod: compute plus the guest-console-log sidecar (an init container, restartPolicy
    Always) run together; an ordinary init container only needs its stage's peak."""
    launcher = {"spec": {
        "containers": [{"name": "compute", "resources": {"requests": {"cpu": "100m", "memory": "781Mi"}}}],
        "initContainers": [
            {"name": "guest-console-log", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "5m", "memory": "35M"}}},
            {"name": "setup", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}}]}}
    req = p.pod_requests(launcher)
    assert req["memory"] == pytest.approx(781 * 2 ** 20 + 35e6)          # sidecar added, not max'ed
    assert req["cpu"] == pytest.approx(1.005)                          # setup's stage: 1 + the sidecar before it
