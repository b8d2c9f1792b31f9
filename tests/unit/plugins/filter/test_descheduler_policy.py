# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/descheduler_policy.py and its filters."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.filter.descheduler_policy import FilterModule
from ansible_collections.vmsched.kubevirt.plugins.module_utils.descheduler_policy import (
    DeschedulerPolicyError,
    PSI_CPU_QUERY,
    eviction_limits,
    render_policy,
    validate_policy,
)

FILTERS = FilterModule().filters()
CLUSTER_INFO = {"version": {"server": {"kubernetes": {"gitVersion": "v1.36.3"}}}}


def profile(out):
    return out["policy"]["profiles"][0]


def config(out, name):
    return [entry["args"] for entry in profile(out)["pluginConfig"] if entry["name"] == name][0]


def test_filters_are_registered():
    assert sorted(FILTERS) == ["descheduler_dry_run_cycles", "descheduler_dry_run_evictions", "descheduler_policy",
                               "descheduler_policy_validate"]


def test_kubevirt_relieve_defaults():
    out = FILTERS["descheduler_policy"](CLUSTER_INFO)
    policy = out["policy"]
    assert policy["apiVersion"] == "descheduler/v1alpha2"
    assert policy["nodeSelector"] == "kubevirt.io/schedulable=true"
    assert policy["maxNoOfPodsToEvictPerNode"] == 2
    assert policy["maxNoOfPodsToEvictTotal"] == 5
    assert "metricsProviders" not in policy and "metricsCollector" not in policy
    assert profile(out)["plugins"] == {"balance": {"enabled": ["LowNodeUtilization"]}}
    # Only opted-in VMs: no local-storage override, only virt-launcher pods.
    assert config(out, "DefaultEvictor") == {"labelSelector": {"matchLabels": {"kubevirt.io": "virt-launcher"}}}
    assert config(out, "LowNodeUtilization") == {"thresholds": {"cpu": 20, "memory": 20, "pods": 20},
                                                 "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50}}
    assert out["feature_gates"] == ["EvictionsInBackground=true"]
    assert out["descheduler_version"] == "v0.36.0"
    assert out["needs_metrics_api"] is False


def test_evict_all_vms_by_release():
    new = render_policy("v1.36.0", evict_all_vms=True)
    assert config(new, "DefaultEvictor")["podProtections"] == {"defaultDisabled": ["PodsWithLocalStorage"]}
    old = render_policy("v1.33.1", evict_all_vms=True)
    assert config(old, "DefaultEvictor")["evictLocalStoragePods"] is True
    assert "podProtections" not in config(old, "DefaultEvictor")


def test_metrics_fields_by_release():
    v32 = render_policy("v1.32.4", metrics_source="kubernetes_metrics")
    assert v32["policy"]["metricsCollector"] == {"enabled": True}
    assert config(v32, "LowNodeUtilization")["metricsUtilization"] == {"metricsServer": True}
    v33 = render_policy("v1.33.0", metrics_source="kubernetes_metrics")
    assert v33["policy"]["metricsProviders"] == [{"source": "KubernetesMetrics"}]
    assert "metricsCollector" not in v33["policy"]
    assert config(v33, "LowNodeUtilization")["metricsUtilization"] == {"source": "KubernetesMetrics"}
    assert v33["needs_metrics_api"] is True
    with pytest.raises(DeschedulerPolicyError, match="from v0.32"):
        render_policy("v1.31.0", metrics_source="kubernetes_metrics")
    with pytest.raises(DeschedulerPolicyError, match="from v0.33"):
        render_policy("v1.32.0", metrics_source="prometheus", prometheus_url="http://p:9090", prometheus_query="q")


def test_prometheus_psi():
    out = render_policy("v1.36.0", namespace="ops", metrics_source="prometheus",
                        prometheus_url="https://prom.monitoring.svc:9091", prometheus_query=PSI_CPU_QUERY,
                        prometheus_token_secret="prom-token")
    assert out["policy"]["metricsProviders"] == [{"source": "Prometheus", "prometheus": {
        "url": "https://prom.monitoring.svc:9091",
        "authToken": {"secretReference": {"name": "prom-token", "namespace": "ops"}}}}]
    lnu = config(out, "LowNodeUtilization")
    assert lnu["metricsUtilization"] == {"source": "Prometheus", "prometheus": {"query": PSI_CPU_QUERY}}
    assert lnu["thresholds"] == {"MetricResource": 20}
    assert out["token_secret"] == {"name": "prom-token", "namespace": "ops"}


@pytest.mark.parametrize("kwargs, message", [
    ({"metrics_source": "prometheus", "prometheus_query": "q"}, "needs a URL"),
    ({"metrics_source": "prometheus", "prometheus_url": "http://p"}, "needs a query"),
    ({"metrics_source": "prometheus", "prometheus_url": "http://p", "prometheus_query": "q",
      "thresholds": {"cpu": 10}, "target_thresholds": {"cpu": 20}}, "exactly one resource, MetricResource"),
    ({"thresholds": {"cpu": 60}, "target_thresholds": {"cpu": 50}}, r"thresholds.cpu \(60\) is above"),
    ({"thresholds": {"cpu": 10}, "target_thresholds": {"memory": 50}}, "same resources"),
    ({"thresholds": {"cpu": 10}, "target_thresholds": {"cpu": 150}}, "from 0 to 100"),
    ({"strategies": ["RemoveDuplicatesX"]}, "unknown strategy 'RemoveDuplicatesX'"),
    ({"strategies": ["HighNodeUtilization"]}, "enable one of them"),
    ({"max_evictions_per_node": 0}, "at least 1"),
    ({"preset": "nope"}, "unknown preset"),
])
def test_bad_policies_fail_with_clear_messages(kwargs, message):
    with pytest.raises(DeschedulerPolicyError, match=message):
        render_policy("v1.36.0", **kwargs)


def test_deviation_thresholds_allow_low_above_target():
    out = render_policy("v1.36.0", thresholds={"cpu": 30}, target_thresholds={"cpu": 10}, use_deviation_thresholds=True)
    assert config(out, "LowNodeUtilization")["useDeviationThresholds"] is True


def test_strategies_and_args():
    out = render_policy("v1.36.0", strategies=["RemovePodsViolatingNodeTaints", "RemovePodsViolatingNodeAffinity"],
                        strategy_args={"RemovePodsViolatingNodeTaints": {"excludedTaints": ["dedicated"]},
                                       "LowNodeUtilization": {"numberOfNodes": 2}})
    assert profile(out)["plugins"]["deschedule"]["enabled"] == ["RemovePodsViolatingNodeTaints",
                                                                "RemovePodsViolatingNodeAffinity"]
    assert config(out, "RemovePodsViolatingNodeTaints") == {"excludedTaints": ["dedicated"]}
    assert config(out, "LowNodeUtilization")["numberOfNodes"] == 2
    only = render_policy("v1.36.0", preset="none", strategies=["HighNodeUtilization"])
    assert profile(only)["plugins"] == {"balance": {"enabled": ["HighNodeUtilization"]}}


def test_limits_from_kubevirt_cr():
    migrations = {"parallelMigrationsPerCluster": 8, "parallelOutboundMigrationsPerNode": 3}
    cr = {"spec": {"configuration": {"migrations": migrations}}}
    assert eviction_limits([cr]) == {"per_node": 3, "total": 8, "source": "KubeVirt CR spec.configuration.migrations"}
    assert eviction_limits([cr], per_node=1)["per_node"] == 1
    assert eviction_limits([]) == {"per_node": 2, "total": 5, "source": "KubeVirt defaults"}
    out = render_policy("v1.36.0", kubevirt_crs=[cr])
    assert out["policy"]["maxNoOfPodsToEvictPerNode"] == 3 and out["policy"]["maxNoOfPodsToEvictTotal"] == 8


def test_validate_catches_fields_of_other_releases():
    policy = render_policy("v1.36.0", metrics_source="kubernetes_metrics")["policy"]
    assert validate_policy(policy, "v1.35.0")
    with pytest.raises(DeschedulerPolicyError, match="metricsProviders is known from descheduler v0.33"):
        validate_policy(policy, "v1.32.0")
    broken = copy.deepcopy(policy)
    broken["profiles"][0]["pluginConfig"].append({"name": "NoSuchPlugin", "args": {}})
    with pytest.raises(AnsibleFilterError, match="'NoSuchPlugin' in pluginConfig is not a descheduler v0.36 plugin"):
        FILTERS["descheduler_policy_validate"](broken, CLUSTER_INFO)


def test_a_server_one_minor_newer_gets_the_policy_of_the_release_behind_it():
    # Kubernetes 1.37 has no descheduler release: v0.36.0 runs there, so its fields are the ones checked.
    rendered = render_policy("v1.37.2", metrics_source="kubernetes_metrics")
    assert rendered["policy"] == render_policy("v1.36.3", metrics_source="kubernetes_metrics")["policy"]
    assert validate_policy(rendered["policy"], "v1.37.2")


def test_unknown_server_minor():
    with pytest.raises(AnsibleFilterError, match="no release for Kubernetes 1.40"):
        FILTERS["descheduler_policy"]("v1.40.0")
