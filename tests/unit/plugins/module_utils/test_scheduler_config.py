# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/scheduler_config.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import scheduler_config as sc

K136 = "v1.36.3"


def test_kubevirt_preset_disables_image_locality():
    out = sc.render_config(K136)
    assert out["api_version"] == "kubescheduler.config.k8s.io/v1"
    assert out["config"]["profiles"] == [{"schedulerName": "kubevirt-scheduler",
                                          "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}}}]
    assert out["config"]["leaderElection"] == {"leaderElect": False}
    assert out["needs_metrics"] is False
    assert len(out["hash"]) == 10


def test_leader_election_uses_a_lease_named_after_the_scheduler():
    out = sc.render_config(K136, scheduler_name="vms", leader_elect=True, lease_namespace="ops")
    assert out["config"]["leaderElection"] == {"leaderElect": True, "resourceLock": "leases",
                                               "resourceName": "vms", "resourceNamespace": "ops"}


def test_older_servers_get_their_api_version():
    assert sc.render_config("v1.24.17")["api_version"] == "kubescheduler.config.k8s.io/v1beta3"
    assert sc.render_config("v1.22.3")["api_version"] == "kubescheduler.config.k8s.io/v1beta2"


def test_hash_follows_content_only():
    a = sc.render_config(K136)["hash"]
    assert a == sc.render_config("v1.36.0")["hash"]
    assert a != sc.render_config(K136, scheduler_name="other")["hash"]


def test_load_aware_needs_scheduler_plugins():
    with pytest.raises(sc.SchedulerConfigError, match="only the scheduler-plugins image has"):
        sc.render_config(K136, preset="load_aware")


@pytest.mark.parametrize("plugin", sorted(sc.LOAD_AWARE_PLUGINS))
def test_load_aware_preset(plugin):
    out = sc.render_config("v1.35.2", preset="load_aware", flavor="scheduler-plugins", load_aware_plugin=plugin,
                           load_aware_args={"extra": 1})
    profile = out["config"]["profiles"][0]
    assert profile["plugins"]["score"]["enabled"] == [{"name": plugin}]
    assert {"name": "ImageLocality"} in profile["plugins"]["score"]["disabled"]
    args = profile["pluginConfig"][0]["args"]
    assert args["metricProvider"] == {"type": "KubernetesMetricsServer"} and args["extra"] == 1
    assert out["needs_metrics"] is True


def test_prometheus_needs_an_address_and_no_metrics_api():
    with pytest.raises(sc.SchedulerConfigError, match="needs an address"):
        sc.load_aware_profile("x", metric_provider={"type": "Prometheus"})
    out = sc.render_config(K136, preset="load_aware", flavor="scheduler-plugins",
                           metric_provider={"type": "Prometheus", "address": "http://p:9090", "token": ""})
    assert out["config"]["profiles"][0]["pluginConfig"][0]["args"]["metricProvider"] == {
        "type": "Prometheus", "address": "http://p:9090"}
    assert out["needs_metrics"] is False


def test_plugin_config_replaces_the_preset_entry():
    out = sc.render_config(K136, preset="load_aware", flavor="scheduler-plugins",
                           plugin_config=[{"name": "TargetLoadPacking", "args": {"targetUtilization": 70}},
                                          {"name": "NodeResourcesFit", "args": {}}])
    entries = out["config"]["profiles"][0]["pluginConfig"]
    assert [e["name"] for e in entries] == ["TargetLoadPacking", "NodeResourcesFit"]
    assert entries[0]["args"] == {"targetUtilization": 70}


def test_plugin_config_needs_a_preset():
    with pytest.raises(sc.SchedulerConfigError, match="preset is 'none'"):
        sc.render_config(K136, preset="none", plugin_config=[{"name": "NodeResourcesFit"}],
                         profiles=[{"schedulerName": "a"}])


def test_inputs_are_not_mutated():
    profiles = [{"schedulerName": "extra", "plugins": {"score": {"disabled": [{"name": "*"}]}}}]
    kept = copy.deepcopy(profiles)
    sc.render_config(K136, profiles=profiles)
    assert profiles == kept


@pytest.mark.parametrize("profiles, message", [
    ([{"schedulerName": "x", "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}],
     "unknown plugin 'NoSuchPlugin' in plugins.score.enabled"),
    ([{"schedulerName": "x", "plugins": {"scoring": {}}}], "unknown extension point 'scoring'"),
    ([{"schedulerName": "x", "plugins": {"score": {"on": []}}}], "unknown key 'on'"),
    ([{"schedulerName": "kubevirt-scheduler"}], "used by more than one profile"),
    ([{"plugins": {}}], "has no schedulerName"),
    ([{"schedulerName": "x", "pluginConfig": [{"name": "Bogus", "args": {}}]}], "unknown plugin 'Bogus' in pluginConfig"),
    ([{"schedulerName": "x", "pluginConfig": [{"name": "NodeAffinity", "args": []}]}], "args must be a mapping"),
    ([{"schedulerName": "x", "plugins": {"score": {"enabled": [{"name": "TargetLoadPacking"}]}}}],
     "unknown plugin 'TargetLoadPacking'"),
    ([{"schedulerName": "x", "plugins": {"score": {"enabled": "ImageLocality"}}}], "must be a list"),
    ([{"schedulerName": "x", "weight": 1}], "unknown keys: weight"),
])
def test_bad_profiles_are_rejected(profiles, message):
    with pytest.raises(sc.SchedulerConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        sc.render_config(K136, profiles=profiles)


def test_every_problem_is_reported_at_once():
    with pytest.raises(sc.SchedulerConfigError) as err:
        sc.render_config(K136, api_version="kubescheduler.config.k8s.io/v1beta3",
                         profiles=[{"schedulerName": "x", "plugins": {"score": {"enabled": [{"name": "A1"}]}}}])
    assert "v1beta3" in str(err.value) and "'A1'" in str(err.value)


def test_wrong_api_version_for_the_server():
    with pytest.raises(sc.SchedulerConfigError, match="not accepted by kube-scheduler 1.36"):
        sc.render_config(K136, api_version="kubescheduler.config.k8s.io/v1beta3")
    assert sc.render_config("v1.26.1", api_version="kubescheduler.config.k8s.io/v1beta3")


def test_plugins_follow_the_version():
    assert "SchedulingGates" not in sc.known_plugins("v1.25.0")
    assert "SchedulingGates" in sc.known_plugins("v1.26.0")
    assert "SelectorSpread" in sc.known_plugins("v1.26.0")
    assert "SelectorSpread" not in sc.known_plugins(K136)
    assert "placementScore" in sc.known_extension_points(K136)
    assert "preEnqueue" not in sc.known_extension_points("v1.25.0")
    with pytest.raises(sc.SchedulerConfigError, match="unknown plugin 'PodGroupPodsCount'"):
        sc.render_config("v1.35.0", profiles=[{"schedulerName": "x",
                                               "plugins": {"multiPoint": {"enabled": [{"name": "PodGroupPodsCount"}]}}}])


def test_flavor_and_extra_plugins():
    assert "Coscheduling" in sc.known_plugins(K136, "scheduler-plugins")
    assert "ImageLocality" in sc.known_plugins(K136, "scheduler-plugins")
    assert "MyPlugin" in sc.known_plugins(K136, extra_plugins=["MyPlugin"])
    with pytest.raises(sc.SchedulerConfigError, match="unknown scheduler flavor"):
        sc.known_plugins(K136, "volcano")
    assert sc.render_config(K136, extra_plugins=["MyPlugin"], profiles=[
        {"schedulerName": "x", "plugins": {"score": {"enabled": [{"name": "MyPlugin"}]}}}])


def test_disable_all_wildcard_is_fine():
    assert sc.render_config(K136, profiles=[{"schedulerName": "x", "plugins": {"score": {"disabled": [{"name": "*"}]}}}])


def test_queue_sort_must_match():
    with pytest.raises(sc.SchedulerConfigError, match="same queueSort"):
        sc.render_config(K136, profiles=[
            {"schedulerName": "a", "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}}},
            {"schedulerName": "b", "plugins": {"queueSort": {"enabled": [{"name": "QOSSort"}]}}}],
            flavor="scheduler-plugins")


def test_validate_config_shape_errors():
    with pytest.raises(sc.SchedulerConfigError, match="must be a mapping"):
        sc.validate_config([], K136)
    with pytest.raises(sc.SchedulerConfigError, match="profiles must be a non-empty list"):
        sc.validate_config({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}, K136)
    with pytest.raises(sc.SchedulerConfigError, match="kind must be"):
        sc.validate_config({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "Policy",
                            "profiles": [{"schedulerName": "a"}]}, K136)


def test_unknown_preset():
    with pytest.raises(sc.SchedulerConfigError, match="unknown preset"):
        sc.render_config(K136, preset="fast")
    with pytest.raises(sc.SchedulerConfigError, match="unknown load-aware plugin"):
        sc.load_aware_profile("x", plugin="Peaks")
    with pytest.raises(sc.SchedulerConfigError, match="unknown metric provider"):
        sc.load_aware_profile("x", metric_provider={"type": "Graphite"})
