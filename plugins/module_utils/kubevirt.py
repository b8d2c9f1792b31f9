# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's names, what its objects say, and what the cluster's KubeVirt can do.

Private to this collection. Objects are the API's JSON (plain dicts, camelCase keys),
as module_utils/cluster.py returns them. Capability detection (KubeVirt's
version, spec.addedNodeSelector support, the migration limits, the VM rollout
strategy) happens here and only here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    UNREADABLE,
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
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"     # a migration target pod -> its VMIM
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


def being_cancelled(vmims):
    """VMIMs deleted before they ended: KubeVirt keeps them (finalizer kubevirt.io/migrationJobFinalize) until the
    migration is cancelled (before the hand-off to the target), aborted (while Running) or, when deleted between
    the hand-off and Running, has finished anyway (pkg/virt-controller/watch/migration/migration.go). Until then
    virt-api refuses another migration of the VMI ("in-flight migration detected")."""
    return [m for m in vmims if not is_final(m) and (m.get("metadata") or {}).get("deletionTimestamp")]


def migration_nodes(vmim, vmi=None, pods=None):
    """(source node, target node) of a migration as the cluster tells it now. KubeVirt copies the VMI's
    status.migrationState to the VMIM only once the VMIM is final, so while it runs: the VMI's migrationState
    once virt-controller handed the migration to the target (its migrationUid is the VMIM's), before that the
    node the VMI runs on and the node of the target pod (label kubevirt.io/migrationJobUID)."""
    uid = ((vmim or {}).get("metadata") or {}).get("uid")
    for state in (((vmim or {}).get("status") or {}).get("migrationState") or {},
                  ((vmi or {}).get("status") or {}).get("migrationState") or {}):
        if state.get("sourceNode") and state.get("targetNode") and state.get("migrationUid") in (None, uid):
            return state["sourceNode"], state["targetNode"]
    if is_final(vmim):
        return None, None   # ended before the hand-off: KubeVirt recorded no nodes
    target = None
    for pod in pods or []:
        if (((pod.get("metadata") or {}).get("labels") or {}).get(MIGRATION_JOB_LABEL) == uid
                and (pod.get("spec") or {}).get("nodeName")):
            target = pod["spec"]["nodeName"]
    return ((vmi or {}).get("status") or {}).get("nodeName"), target


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
                 parallel_outbound_per_node=None, node_selectors=None, warnings=None, kubevirt_cr=None,
                 bandwidth_per_migration=None):
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
        # spec.configuration.migrations.bandwidthPerMigration as configured (a quantity per second; None when unset
        # or unreadable: KubeVirt's default 0Mi sets no cap). MigrationPolicies may set another per VMI.
        self.bandwidth_per_migration = bandwidth_per_migration

    def supports(self, feature):
        """Whether the detected KubeVirt has a feature of versions.KUBEVIRT_FEATURES; True when the version is
        unknown (the newest behaviour is assumed)."""
        try:
            return kubevirt_supports(self.version, feature)
        except VersionError:
            return True

    def as_dict(self):
        return {
            "kubevirt_version": self.version,
            "detected_from": self.source,
            "added_node_selector": self.added_node_selector,
            "parallel_migrations_per_cluster": self.parallel_per_cluster,
            "parallel_outbound_migrations_per_node": self.parallel_outbound_per_node,
        }


def _read_kubevirt_cr(cluster, warn, consequence):
    """The KubeVirt CR, None when there is none, UNREADABLE (after a warning) when the user may not read it."""
    return unless_forbidden(cluster.kubevirt_cr,
                            lambda why: warn("cannot read the KubeVirt CR (%s)%s" % (why, consequence)),
                            default=UNREADABLE)


def detect_capabilities(cluster):
    """KubeVirt version from the KubeVirt CR (status.observedKubeVirtVersion) -> versions.py.

    A user who may not read the CR (KubeVirt's kubevirt.io:default grants it to every authenticated user, so only
    where an admin removed that binding) gets the
    answer from the served OpenAPI schema instead, which is what the API server will
    actually keep of a VMIM; the migration limits then stay at KubeVirt's defaults.
    """
    warnings = []
    cr = _read_kubevirt_cr(cluster, warnings.append, "; KubeVirt's version is unknown and the migration limits are "
                                                     "assumed to be the defaults")
    if cr is None:
        warnings.append("no KubeVirt CR found; is KubeVirt deployed?")
    elif cr is not UNREADABLE:
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
                            node_selectors=node_selectors, warnings=warnings, kubevirt_cr=cr,
                            bandwidth_per_migration=migrations.get("bandwidthPerMigration"))
    try:
        supported = cluster.openapi_has_added_node_selector()
        source = "the served OpenAPI schema of VirtualMachineInstanceMigration"
    except (ApiException, ValueError) as exc:
        supported, source = None, None
        warnings.append("cannot read the OpenAPI schema of kubevirt.io/v1 either: %s" % exc)
    return Capabilities(source=source, added_node_selector=supported, warnings=warnings)


def rollout_strategy(cr):
    """(vmRolloutStrategy, how it is known) of a KubeVirt CR: as configured, else the release's default
    (pkg/virt-config/virt-config.go DefaultVMRolloutStrategy: LiveUpdate from 1.6, Stage in 1.5)."""
    configured = (((cr or {}).get("spec") or {}).get("configuration") or {}).get("vmRolloutStrategy")
    if configured:
        return configured, "spec.configuration.vmRolloutStrategy"
    observed = ((cr or {}).get("status") or {}).get("observedKubeVirtVersion")
    try:
        default = "LiveUpdate" if kubevirt_supports(observed, "live_update_by_default") else "Stage"
    except VersionError:
        return None, "unknown: KubeVirt's version is unknown"
    return default, "the default of KubeVirt %s" % observed


# What KubeVirt does with an eviction of a VM's launcher pod, by the VMI's effective eviction strategy
# (pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go admitLauncherPod, the same in 1.5.3,
# 1.6.6 and 1.9.0): LiveMigrate denies the eviction and marks the VMI for evacuation (a live migration), or denies
# it outright when the VMI is not live-migratable; LiveMigrateIfPossible migrates a migratable VMI and lets the
# eviction through otherwise; External denies it and marks the VMI for an outside controller; None (and no
# strategy) lets the eviction through: the launcher pod goes, the VM stops and its run strategy restarts it.
EVICTION_STRATEGIES = ("None", "LiveMigrate", "LiveMigrateIfPossible", "External")
# KubeVirt's own default when neither the VMI nor the KubeVirt CR sets one: None in 1.5.3, 1.6.6 and 1.9.0
# (pkg/virt-config/configuration.go, defaultEvictionStrategy).
DEFAULT_EVICTION_STRATEGY = "None"


def cluster_eviction_strategy(cr):
    """(strategy, where it comes from) of the cluster: the KubeVirt CR's spec.configuration.evictionStrategy, else
    KubeVirt's default. An unreadable CR (cr is None) counts as the default: the safe assumption."""
    configured = (((cr or {}).get("spec") or {}).get("configuration") or {}).get("evictionStrategy")
    if configured:
        return configured, "the KubeVirt CR's spec.configuration.evictionStrategy"
    return DEFAULT_EVICTION_STRATEGY, "KubeVirt's default (the KubeVirt CR sets none)"


def effective_eviction_strategy(spec, cluster):
    """(strategy, source) for a VMI spec or a VM template's spec: its own evictionStrategy, else the cluster's
    (migrations.VMIEvictionStrategy). `cluster` is cluster_eviction_strategy's pair.

    virt-api's VMI mutator writes the cluster's strategy into every new VMI that has none
    (pkg/defaults/defaults.go setDefaultEvictionStrategy, 1.5.3 to 1.9.0): a running VMI keeps the strategy it
    started with, whatever the KubeVirt CR says later, until it restarts."""
    own = (spec or {}).get("evictionStrategy")
    if own:
        return own, "its own evictionStrategy"
    return cluster


def eviction_outcome(strategy, migratable):
    """What an eviction of the launcher pod does: migrate, blocked (refused, nothing moves), external (marked for an
    outside controller) or restart. `migratable`: the VMI's LiveMigratable condition (None when no VMI runs: the
    strategy alone decides, and KubeVirt checks again when the VM runs)."""
    if strategy == "LiveMigrate":
        return "blocked" if migratable is False else "migrate"
    if strategy == "LiveMigrateIfPossible":
        return "restart" if migratable is False else "migrate"
    if strategy == "External":
        return "external"
    return "restart"


def eviction_verdict(strategy, source, migratable, why=None):
    """eviction_outcome with the strategy, where it comes from, `migratable`, and a reason an admin can act on when
    the outcome is not a migration (restart or blocked)."""
    outcome = eviction_outcome(strategy, migratable)
    verdict = {"outcome": outcome, "strategy": strategy, "source": source, "migratable": migratable}
    if outcome == "restart" and migratable is False:
        verdict["reason"] = ("evictionStrategy %s (%s) lets the eviction through because the VMI is not "
                             "live-migratable (%s): KubeVirt would restart the VM" % (strategy, source, why))
    elif outcome == "restart":
        verdict["reason"] = ("evictionStrategy %s (%s): an eviction deletes the launcher pod and the VM restarts "
                             "instead of migrating; set spec.template.spec.evictionStrategy: LiveMigrate on the VM "
                             "(unsafe_eviction=set_live_migrate does) or the KubeVirt CR's "
                             "spec.configuration.evictionStrategy: LiveMigrate; a running VMI keeps the strategy it "
                             "started with until it restarts" % (strategy, source))
    elif outcome == "blocked":
        verdict["reason"] = ("the VMI is not live-migratable (%s): under evictionStrategy LiveMigrate every eviction "
                             "is refused and the VM never moves; LiveMigrateIfPossible would restart it instead"
                             % why)
    return verdict


def live_migratable(vmi):
    """The VMI's LiveMigratable condition: (True/False, KubeVirt's reason), (None, None) when it has none."""
    cond = condition(vmi, "LiveMigratable")
    if cond is None:
        return None, None
    return cond.get("status") == "True", cond.get("message") or cond.get("reason")


def read_kubevirt_cr(cluster, warn, consequence):
    """The KubeVirt CR, or None when there is none or the user may not read it (warned, with the consequence)."""
    cr = _read_kubevirt_cr(cluster, warn, consequence)
    return None if cr is UNREADABLE else cr


def live_updated_fields(cr):
    """detect_live_updated_fields for a CR already read (None: none, conservatively)."""
    if cr is None:
        return []
    strategy, _source = rollout_strategy(cr)
    fields = list(LIVE_UPDATE_FIELDS) if strategy == "LiveUpdate" else []
    try:
        if kubevirt_supports(cr, "evict_annotation_synced"):
            fields.append("evict")
    except VersionError:
        pass
    return fields


def detect_live_updated_fields(cluster, warn):
    """The managed VM template fields KubeVirt copies to a running VMI on this cluster:
    - nodeSelector, affinity and tolerations under vmRolloutStrategy LiveUpdate (explicit, or the default from
      1.6; pkg/virt-controller/watch/vm/vm.go handleAffinityChangeRequest, handleTolerationsChangeRequest);
    - the descheduler's evict annotation from 1.6, whatever the strategy (vm.go syncVMAnnotationsToVMI, then
      the VMI controller to the launcher pod).
    No CR, or one the user may not read (warned): none, conservatively."""
    return live_updated_fields(read_kubevirt_cr(cluster, warn, ": assuming every change needs a restart"))


def added_node_selector_minimum():
    return KUBEVIRT_FEATURES["added_node_selector"]["min_version"]
