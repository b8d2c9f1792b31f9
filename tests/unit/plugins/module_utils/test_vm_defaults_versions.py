# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the MutatingAdmissionPolicy apiVersion choice (versions.py) and its filter."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.filter.versions import FilterModule
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    VersionError,
    mutating_admission_policy_api_version,
)

V1 = "admissionregistration.k8s.io/v1"
V1BETA1 = "admissionregistration.k8s.io/v1beta1"
KINDS = {"MutatingAdmissionPolicy": {"name": "mutatingadmissionpolicies"},
         "MutatingAdmissionPolicyBinding": {"name": "mutatingadmissionpolicybindings"}}
VALIDATING = {"ValidatingAdmissionPolicy": {}, "ValidatingAdmissionPolicyBinding": {}, "MutatingWebhookConfiguration": {}}


def cluster_info(git_version, *group_versions, extra=None):
    """A k8s_cluster_info result whose discovery serves the MutatingAdmissionPolicy kinds in group_versions."""
    apis = {"v1": {"Pod": {}}, V1: dict(VALIDATING)}
    for group_version in group_versions:
        apis[group_version] = dict(apis.get(group_version, {}), **KINDS)
    apis.update(extra or {})
    return {"changed": False, "apis": apis,
            "version": {"client": "33.1.0", "server": {"kubernetes": {"gitVersion": git_version}}}}


@pytest.mark.parametrize("info, expected", [
    (cluster_info("v1.36.3", V1), V1),
    (cluster_info("v1.37.0", V1, V1BETA1), V1),
    (cluster_info("v1.36.0+k3s1", V1), V1),
    (cluster_info("v1.35.2", V1BETA1), V1BETA1),
    (cluster_info("v1.34.1-eks-1234abc", V1BETA1), V1BETA1),
    # A 1.36 server with v1 turned off but beta on still gets a policy.
    (cluster_info("v1.36.1", V1BETA1), V1BETA1),
    # A version alone is enough where the GA API is on by default.
    ("v1.36.3", V1),
    ({"gitVersion": "v1.38.0"}, V1),
])
def test_api_version_follows_the_server(info, expected):
    assert mutating_admission_policy_api_version(info) == expected


@pytest.mark.parametrize("info, words", [
    # 1.34/1.35 without the beta API in discovery (the default there).
    (cluster_info("v1.35.2"), ["Kubernetes 1.35", "v1.35.2", "discovery lists no MutatingAdmissionPolicy",
                               "feature gate", "runtime-config", "vmsched.kubevirt.vm_placement"]),
    (cluster_info("v1.34.0-gke.100"), ["v1.34.0-gke.100", "vm_placement"]),
    # Only one of the two kinds served is not enough.
    (cluster_info("v1.35.0", extra={V1BETA1: {"MutatingAdmissionPolicy": {}}}), ["v1.35.0", "discovery lists no"]),
    # The alpha API is never used.
    (cluster_info("v1.33.4", "admissionregistration.k8s.io/v1alpha1"), ["v1.33.4", "GA from 1.36", "vm_placement"]),
    (cluster_info("v1.31.4"), ["Kubernetes 1.31", "beta from Kubernetes 1.34", "vm_placement"]),
    # A 1.36 server whose discovery does not serve the API (turned off with --runtime-config).
    (cluster_info("v1.36.3"), ["v1.36.3", "discovery lists no"]),
    # A bare 1.35 version cannot prove the beta API is on.
    ("v1.35.2", ["v1.35.2", "only discovery can tell"]),
])
def test_unsupported_servers_fail_naming_the_version_and_the_alternative(info, words):
    with pytest.raises(VersionError) as err:
        mutating_admission_policy_api_version(info)
    for word in words:
        assert word in str(err.value)


def test_not_required_returns_none_instead_of_failing():
    assert mutating_admission_policy_api_version(cluster_info("v1.35.2"), required=False) is None
    assert mutating_admission_policy_api_version(cluster_info("v1.36.3", V1), required=False) == V1


@pytest.mark.parametrize("info", [
    None,
    "1.36",
    {"failed": True, "msg": "Unauthorized"},
    "v2.0.0",
])
def test_unreadable_or_foreign_versions_fail(info):
    with pytest.raises(VersionError):
        mutating_admission_policy_api_version(info)


def test_filter_wraps_errors():
    function = FilterModule().filters()["mutating_admission_policy_api_version"]
    assert function(cluster_info("v1.36.3", V1)) == V1
    assert function(cluster_info("v1.35.2"), required=False) is None
    with pytest.raises(AnsibleFilterError, match="vm_placement"):
        function(cluster_info("v1.35.2"))
