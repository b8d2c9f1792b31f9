# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/filter/scheduler_config.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.filter.scheduler_config import FilterModule

FILTERS = FilterModule().filters()
CLUSTER_INFO = {"version": {"server": {"kubernetes": {"gitVersion": "v1.36.3"}}}}


def test_filters_are_registered():
    assert sorted(FILTERS) == ["scheduler_config", "scheduler_config_validate"]


def test_render_from_cluster_info():
    out = FILTERS["scheduler_config"](CLUSTER_INFO, scheduler_name="vms", leader_elect=True, lease_namespace="ns")
    assert out["config"]["profiles"][0]["schedulerName"] == "vms"
    assert out["config"]["leaderElection"]["resourceNamespace"] == "ns"


def test_errors_become_filter_errors():
    with pytest.raises(AnsibleFilterError, match="scheduler-plugins"):
        FILTERS["scheduler_config"](CLUSTER_INFO, preset="load_aware")
    with pytest.raises(AnsibleFilterError, match="cannot read a Kubernetes version"):
        FILTERS["scheduler_config"]("not-a-version")
    with pytest.raises(AnsibleFilterError, match="unknown plugin 'Nope'"):
        FILTERS["scheduler_config_validate"]({"apiVersion": "kubescheduler.config.k8s.io/v1",
                                              "kind": "KubeSchedulerConfiguration",
                                              "profiles": [{"schedulerName": "a", "plugins": {
                                                  "filter": {"enabled": [{"name": "Nope"}]}}}]}, "v1.36.3")


def test_validate_returns_the_config():
    config = FILTERS["scheduler_config"]("v1.36.3")["config"]
    assert FILTERS["scheduler_config_validate"](config, "v1.36.3") is config
