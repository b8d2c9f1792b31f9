# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters exposing plugins/module_utils/versions.py to roles and playbooks.

Thin wrappers: the knowledge and the tables live in module_utils/versions.py.
Each filter is documented in the sidecar file named after it (kube_version.yml, ...).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    VersionError,
    descheduler_choice,
    descheduler_image as _descheduler_image,
    kube_version_info,
    kubevirt_supports as _kubevirt_supports,
    mutating_admission_policy_api_version as _mutating_admission_policy_api_version,
    scheduler_config_api_version as _scheduler_config_api_version,
    scheduler_image as _scheduler_image,
    scheduler_plugins_choice,
    version_mismatch,
)


def _wrap(function, *args, **kwargs):
    # Ansible names the failing filter itself ("The filter plugin 'vmsched.kubevirt.X' failed: ...").
    try:
        return function(*args, **kwargs)
    except VersionError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def kube_version(version):
    """Parse a Kubernetes server version into a dict."""
    return _wrap(kube_version_info, version)


def scheduler_image(version, flavor="kube-scheduler", registry=None):
    """The scheduler image matching a server version."""
    return _wrap(_scheduler_image, version, flavor=flavor, registry=registry)


def scheduler_config_api_version(version):
    """The KubeSchedulerConfiguration apiVersion the server's kube-scheduler accepts."""
    return _wrap(_scheduler_config_api_version, version)


def descheduler_image(version, registry=None):
    """The descheduler image for a server version."""
    return _wrap(_descheduler_image, version, registry=registry)


_CHOICES = {"descheduler": descheduler_choice, "scheduler-plugins": scheduler_plugins_choice}


def component_release(version, component):
    """Which release of a component runs on the server, with its skew and warning."""
    if component not in _CHOICES:
        raise AnsibleFilterError("unknown component %r: expected one of %s" % (component, ", ".join(_CHOICES)))
    return _wrap(lambda: _CHOICES[component](version).as_dict())


def kubevirt_supports(kubevirt_version, feature):
    """Whether a KubeVirt version has a feature."""
    return _wrap(_kubevirt_supports, kubevirt_version, feature)


def kube_version_mismatch(server_version, override):
    """A warning message when a version override differs from the server's version, else None."""
    return _wrap(version_mismatch, server_version, override)


def mutating_admission_policy_api_version(cluster_info, required=True):
    """The MutatingAdmissionPolicy apiVersion the server serves (None when it serves none and not required)."""
    return _wrap(_mutating_admission_policy_api_version, cluster_info, required=required)


class FilterModule:
    """vmsched.kubevirt version filters."""

    def filters(self):
        return {
            "kube_version": kube_version,
            "scheduler_image": scheduler_image,
            "scheduler_config_api_version": scheduler_config_api_version,
            "descheduler_image": descheduler_image,
            "component_release": component_release,
            "kubevirt_supports": kubevirt_supports,
            "kube_version_mismatch": kube_version_mismatch,
            "mutating_admission_policy_api_version": mutating_admission_policy_api_version,
        }
