# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the planning parts of plugins/module_utils/vm_placement.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import vm_placement as vp

from .kubevirt_fakes import apply


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
               affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}})
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
