# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's names, what its objects say, and what the cluster's KubeVirt can do.

Private to this collection. Objects are the API's JSON (plain dicts, camelCase keys),
as module_utils/cluster_reader.py returns them. Capability detection (KubeVirt's
version, spec.addedNodeSelector support, the migration limits, the VM rollout
strategy) happens here and only here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    ApiException,
    unless_forbidden,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    KUBEVIRT_FEATURES,
    KUBEVIRT_MIGRATION_DEFAULTS,
    VersionError,
    kubevirt_supports,
    parse_kubevirt_version,
)

GROUP = "kubevirt.io"
VERSION = "v1"
VMS = "virtualmachines"
VMIS = "virtualmachineinstances"
VMIMS = "virtualmachineinstancemigrations"
KUBEVIRTS = "kubevirts"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "vmsched.kubevirt"
CREATED_BY_LABEL = "kubevirt.io/created-by"
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
UNSCHEDULABLE_TIMEOUT_ANNOTATION = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
FINAL_PHASES = ("Succeeded", "Failed")
# What KubeVirt copies from a VM's template to its running VMI with vmRolloutStrategy LiveUpdate.
LIVE_UPDATE_FIELDS = ("nodeSelector", "affinity", "tolerations")


def phase(obj):
    return ((obj or {}).get("status") or {}).get("phase")


def condition(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_final(vmim):
    return phase(vmim) in FINAL_PHASES


def in_flight(vmims):
    """VMIMs that are neither Succeeded nor Failed nor being deleted (KubeVirt allows one per VMI)."""
    return [m for m in vmims if not is_final(m) and not (m.get("metadata") or {}).get("deletionTimestamp")]


def source_pod(vmi, pods):
    """Of `pods`, the launcher pod the VMI runs in now (on its node, not a migration target, not terminated)."""
    uid = ((vmi or {}).get("metadata") or {}).get("uid")
    node = ((vmi or {}).get("status") or {}).get("nodeName")
    for pod in pods or []:
        if (((pod.get("metadata") or {}).get("labels") or {}).get(CREATED_BY_LABEL) == uid
                and (pod.get("spec") or {}).get("nodeName") == node
                and (pod.get("status") or {}).get("phase") not in FINAL_PHASES):
            return pod
    return None


class Capabilities:
    """What the cluster's KubeVirt supports, and how we know it. `kubevirt_cr` is the CR read (None if none or unreadable)."""

    def __init__(self, version=None, source=None, added_node_selector=None, parallel_per_cluster=None,
                 parallel_outbound_per_node=None, node_selectors=None, warnings=None, kubevirt_cr=None):
        self.version = version
        self.node_selectors = dict(node_selectors or {})
        self.source = source
        self.added_node_selector = added_node_selector
        self.parallel_per_cluster = \
            parallel_per_cluster or KUBEVIRT_MIGRATION_DEFAULTS["parallelMigrationsPerCluster"]
        self.parallel_outbound_per_node = \
            parallel_outbound_per_node or KUBEVIRT_MIGRATION_DEFAULTS["parallelOutboundMigrationsPerNode"]
        self.warnings = warnings or []
        self.kubevirt_cr = kubevirt_cr

    def as_dict(self):
        return {
            "kubevirt_version": self.version,
            "detected_from": self.source,
            "added_node_selector": self.added_node_selector,
            "parallel_migrations_per_cluster": self.parallel_per_cluster,
            "parallel_outbound_migrations_per_node": self.parallel_outbound_per_node,
        }


_UNREADABLE = object()


def _read_kubevirt_cr(reader, warn, consequence):
    """The KubeVirt CR, None when there is none, _UNREADABLE (after a warning) when the user may not read it."""
    return unless_forbidden(reader.kubevirt_cr, lambda why: warn("cannot read the KubeVirt CR (%s)%s" % (why, consequence)),
                            default=_UNREADABLE)


def detect_capabilities(reader):
    """KubeVirt version from the KubeVirt CR (status.observedKubeVirtVersion) -> versions.py.

    A user who may not read the CR (e.g. bound only to kubevirt.io:migrate) gets the
    answer from the served OpenAPI schema instead, which is what the API server will
    actually keep of a VMIM; the migration limits then stay at KubeVirt's defaults.
    """
    warnings = []
    cr = _read_kubevirt_cr(reader, warnings.append, "; KubeVirt's version is unknown and the migration limits are "
                                                    "assumed to be the defaults")
    if cr is None:
        warnings.append("no KubeVirt CR found; is KubeVirt deployed?")
    elif cr is not _UNREADABLE:
        configuration = (cr.get("spec") or {}).get("configuration") or {}
        migrations = configuration.get("migrations") or {}
        node_selectors = (configuration.get("developerConfiguration") or {}).get("nodeSelectors")
        observed = (cr.get("status") or {}).get("observedKubeVirtVersion")
        try:
            version = str(parse_kubevirt_version(observed))
            supported = kubevirt_supports(observed, "added_node_selector")
        except VersionError as exc:
            version, supported = observed, None
            warnings.append(str(exc))
        return Capabilities(version=version, source="KubeVirt CR status.observedKubeVirtVersion",
                            added_node_selector=supported,
                            parallel_per_cluster=migrations.get("parallelMigrationsPerCluster"),
                            parallel_outbound_per_node=migrations.get("parallelOutboundMigrationsPerNode"),
                            node_selectors=node_selectors, warnings=warnings, kubevirt_cr=cr)
    try:
        supported = reader.openapi_has_added_node_selector()
        source = "the served OpenAPI schema of VirtualMachineInstanceMigration"
    except (ApiException, ValueError) as exc:
        supported, source = None, None
        warnings.append("cannot read the OpenAPI schema of kubevirt.io/v1 either: %s" % exc)
    return Capabilities(source=source, added_node_selector=supported, warnings=warnings)


def detect_live_updated_fields(reader, warn):
    """The VM template fields KubeVirt copies to running VMIs: LIVE_UPDATE_FIELDS with the KubeVirt CR's
    spec.configuration.vmRolloutStrategy LiveUpdate, else none (Stage, unset, no CR: taken conservatively).
    A user who may not read the CR is warned that every change is taken to need a restart."""
    cr = _read_kubevirt_cr(reader, warn, ": assuming every change needs a restart")
    if cr is _UNREADABLE:
        return []
    strategy = (((cr or {}).get("spec") or {}).get("configuration") or {}).get("vmRolloutStrategy")
    return list(LIVE_UPDATE_FIELDS) if strategy == "LiveUpdate" else []


def launcher_scheduling(vmi, extra_node_selectors=None):
    """The constraints KubeVirt puts on a (target) launcher pod: the VMI's nodeSelector plus the KubeVirt CR's
    developerConfiguration.nodeSelectors and kubevirt.io/schedulable=true, its affinity and tolerations.

    Built from the VMI rather than copied from the running launcher pod: after a migration with
    addedNodeSelector, that pod carries the one-off selector, which the next migration does not.
    """
    spec = (vmi or {}).get("spec") or {}
    node_selector = dict(spec.get("nodeSelector") or {})
    node_selector[SCHEDULABLE_LABEL] = "true"
    node_selector.update(extra_node_selectors or {})
    return {"nodeSelector": node_selector, "affinity": spec.get("affinity"),
            "tolerations": spec.get("tolerations") or []}


def added_node_selector_minimum():
    return KUBEVIRT_FEATURES["added_node_selector"]["min_version"]
