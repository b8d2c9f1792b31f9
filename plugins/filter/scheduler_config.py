# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters exposing plugins/module_utils/scheduler_config.py to roles and playbooks.

Thin wrappers: presets, plugin tables and validation live in
module_utils/scheduler_config.py. Each filter is documented in the sidecar file
named after it (scheduler_config.yml, scheduler_config_validate.yml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.module_utils.scheduler_config import (
    SchedulerConfigError,
    render_config,
    validate_config,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import VersionError


def _wrap(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (SchedulerConfigError, VersionError) as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def scheduler_config(server_version, scheduler_name="kubevirt-scheduler", preset="kubevirt", flavor="kube-scheduler",
                     load_aware_plugin="TargetLoadPacking", load_aware_args=None, metric_provider=None,
                     plugin_config=None, profiles=None, extra_plugins=None, api_version=None,
                     leader_elect=False, lease_namespace=None, lease_name=None):
    """Render a validated KubeSchedulerConfiguration for a server version."""
    return _wrap(render_config, server_version, scheduler_name=scheduler_name, preset=preset, flavor=flavor,
                 load_aware_plugin=load_aware_plugin, load_aware_args=load_aware_args,
                 metric_provider=metric_provider, plugin_config=plugin_config, profiles=profiles,
                 extra_plugins=extra_plugins, api_version=api_version, leader_elect=leader_elect,
                 lease_namespace=lease_namespace, lease_name=lease_name)


def scheduler_config_validate(config, server_version, flavor="kube-scheduler", extra_plugins=None):
    """Validate a KubeSchedulerConfiguration dict; returns it unchanged."""
    _wrap(validate_config, config, server_version, flavor=flavor, extra_plugins=extra_plugins)
    return config


class FilterModule:
    """vmsched.kubevirt scheduler configuration filters."""

    def filters(self):
        return {
            "scheduler_config": scheduler_config,
            "scheduler_config_validate": scheduler_config_validate,
        }
