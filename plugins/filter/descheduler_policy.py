# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters exposing plugins/module_utils/descheduler_policy.py and descheduler_log.py to roles and playbooks.

Thin wrappers: the preset, the field tables and the validation live in
module_utils/descheduler_policy.py, the reading of dry-run logs in
module_utils/descheduler_log.py. Each filter is documented in the sidecar file
named after it (descheduler_policy.yml, descheduler_policy_validate.yml,
descheduler_dry_run_cycles.yml, descheduler_dry_run_evictions.yml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.module_utils.descheduler_log import (
    DeschedulerLogError,
    dry_run_cycles,
    dry_run_evictions,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.descheduler_policy import (
    DeschedulerPolicyError,
    render_policy,
    validate_policy,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import VersionError


def _wrap(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (DeschedulerPolicyError, DeschedulerLogError, VersionError) as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def descheduler_policy(server_version, preset="kubevirt_relieve", namespace="kube-system", thresholds=None,
                       target_thresholds=None, use_deviation_thresholds=False, metrics_source="requests",
                       prometheus_url="", prometheus_query="", prometheus_token_secret=None, evict_all_vms=False,
                       vms_only=True, strategies=None, strategy_args=None, max_evictions_per_node=None,
                       max_evictions_total=None, kubevirt_crs=None, node_selector="kubevirt.io/schedulable=true",
                       number_of_nodes=0):
    """Render a validated DeschedulerPolicy for a server version."""
    return _wrap(render_policy, server_version, preset=preset, namespace=namespace, thresholds=thresholds,
                 target_thresholds=target_thresholds, use_deviation_thresholds=use_deviation_thresholds,
                 metrics_source=metrics_source, prometheus_url=prometheus_url, prometheus_query=prometheus_query,
                 prometheus_token_secret=prometheus_token_secret, evict_all_vms=evict_all_vms, vms_only=vms_only,
                 strategies=strategies, strategy_args=strategy_args, max_evictions_per_node=max_evictions_per_node,
                 max_evictions_total=max_evictions_total, kubevirt_crs=kubevirt_crs, node_selector=node_selector,
                 number_of_nodes=number_of_nodes)


def descheduler_policy_validate(policy, server_version):
    """Validate a DeschedulerPolicy dict; returns it unchanged."""
    _wrap(validate_policy, policy, server_version)
    return policy


def descheduler_dry_run_cycles(log):
    """The complete descheduling cycles of a descheduler's dry-run log."""
    return _wrap(dry_run_cycles, log)


def descheduler_dry_run_evictions(log, cycle=-1):
    """The evictions one complete cycle of a descheduler's dry-run log would make."""
    return _wrap(dry_run_evictions, log, cycle=cycle)


class FilterModule:
    """vmsched.kubevirt descheduler policy and dry-run log filters."""

    def filters(self):
        return {
            "descheduler_policy": descheduler_policy,
            "descheduler_policy_validate": descheduler_policy_validate,
            "descheduler_dry_run_cycles": descheduler_dry_run_cycles,
            "descheduler_dry_run_evictions": descheduler_dry_run_evictions,
        }
