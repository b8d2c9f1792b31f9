# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's CustomResourceDefinitions for the local control plane.

KubeVirt cannot run here (no KVM), and its Go modules are not reachable, so the
CRDs that virt-operator would install are written out by hand from KubeVirt's
API types (staging/src/kubevirt.io/api/core/v1/types.go and the operator's
crds.go). The point is that the real kube-apiserver treats our objects the way
it treats them on a KubeVirt cluster: structural schemas, so unknown fields are
pruned (VirtualMachineInstanceMigration.spec.addedNodeSelector on KubeVirt 1.5
vanishes exactly as it would there: the request succeeds with only a Warning
header, unless the client asks for strict field validation as kubectl does),
status subresources where KubeVirt has them and only there, the same names,
short names and columns.

Fields this collection reads or writes are typed precisely. Deep parts of the
VM shape it never touches (devices, volumes, networks, probes...) keep unknown
fields instead of copying thousands of lines of schema. KubeVirt's own schemas
type enumerations such as runStrategy as plain strings and leave the check to
virt-api's admission webhook; no webhook runs here, so the enums (and
VMIM spec.vmiName being required) stand in for it.

Two variants, picked by KubeVirt minor version. They differ only by the API
features listed in FEATURES; everything else is one definition.

Usage: python3 tests/cluster/kubevirt_crds.py --kubevirt-version 1.6 > crds.yaml
"""
from __future__ import annotations

import argparse
import json
import re
import sys

# Newest patch release of each minor we could confirm from public sources;
# the simulator reports it as KubeVirt CR status.observedKubeVirtVersion.
RELEASES = {
    "1.6": "v1.6.6",
    "1.5": "v1.5.2",
}

# The only place the variants differ: API features present in each minor.
#   addedNodeSelector       VirtualMachineInstanceMigration.spec.addedNodeSelector (v1.6.0, no feature gate)
#   decentralizedMigration  cross-namespace/cross-cluster live migration API (v1.6.0; the feature gate only
#                           guards behaviour, the fields are in the schema): VMIM spec.sendTo/receive,
#                           phases WaitingForSync/Synchronizing, runStrategy WaitAsReceiver,
#                           migrationState.sourceState/targetState, synchronizationAddresses.
FEATURES = {
    "1.5": frozenset(),
    "1.6": frozenset({"addedNodeSelector", "decentralizedMigration"}),
}

GROUP = "kubevirt.io"
IMAGE_REGISTRY = "quay.io/kubevirt"

# KubeVirt's VirtualMachineInstance CRD has no status subresource (the type is
# `+genclient:noStatus`; virt-controller and virt-handler update the whole
# object). The other three have one. Clients, the simulator included, must
# write VMI status through the main resource.
STATUS_SUBRESOURCE = {
    "VirtualMachine": True,
    "VirtualMachineInstance": False,
    "VirtualMachineInstanceMigration": True,
    "KubeVirt": True,
}

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?$")

# resource.Quantity as controller-gen renders it.
_QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                     r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def supported_versions() -> list[str]:
    """Minor versions this module can render, newest first."""
    return sorted(RELEASES, key=lambda v: tuple(int(p) for p in v.split(".")), reverse=True)


def minor_version(kubevirt_version: str) -> str:
    """Map "1.6", "v1.6.3", "1.5", "v1.5.2" to the variant key ("1.6", "1.5")."""
    match = _VERSION_RE.match(str(kubevirt_version).strip())
    key = f"{int(match.group(1))}.{int(match.group(2))}" if match else None
    if key not in RELEASES:
        raise ValueError(f"unsupported KubeVirt version {kubevirt_version!r}; supported: "
                         + ", ".join(f"{v} ({RELEASES[v]})" for v in supported_versions()))
    return key


def release(kubevirt_version: str) -> str:
    """The pinned KubeVirt release string for a version, e.g. "1.5" -> "v1.5.2"."""
    return RELEASES[minor_version(kubevirt_version)]


# ---------------------------------------------------------------------------
# Schema building blocks. Every call returns fresh dicts (no shared nodes).

def _string(*enum: str, **extra) -> dict:
    node = {"type": "string"}
    if enum:
        node["enum"] = list(enum)
    node.update(extra)
    return node


def _integer(fmt: str = "int32", **extra) -> dict:
    node = {"type": "integer", "format": fmt}
    node.update(extra)
    return node


def _boolean() -> dict:
    return {"type": "boolean"}


def _timestamp(nullable: bool = False) -> dict:
    node = {"type": "string", "format": "date-time"}
    if nullable:
        node["nullable"] = True
    return node


def _object(properties: dict, required: tuple = (), preserve: bool = False, nullable: bool = False) -> dict:
    node = {"type": "object", "properties": properties}
    if required:
        node["required"] = list(required)
    if preserve:
        node["x-kubernetes-preserve-unknown-fields"] = True
    if nullable:
        node["nullable"] = True
    return node


def _open(nullable: bool = False) -> dict:
    """An object whose content we do not model: kept as is, never pruned."""
    node = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if nullable:
        node["nullable"] = True
    return node


def _array(items: dict, **extra) -> dict:
    node = {"type": "array", "items": items}
    node.update(extra)
    return node


def _strings() -> dict:
    return _array(_string())


def _map(values: dict) -> dict:
    return {"type": "object", "additionalProperties": values}


def _string_map() -> dict:
    return _map(_string())


def _quantity() -> dict:
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": _QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _condition(type_enum: tuple = ()) -> dict:
    """KubeVirt's condition shape (VM, VMI, VMIM and KubeVirt conditions are alike)."""
    return _object({
        "type": _string(*type_enum),
        "status": _string(),
        "reason": _string(),
        "message": _string(),
        "lastProbeTime": _timestamp(nullable=True),
        "lastTransitionTime": _timestamp(nullable=True),
    }, required=("type", "status"))


# ---------------------------------------------------------------------------
# core/v1 scheduling types, as KubeVirt embeds them (k8s.io/api/core/v1).

def _label_selector() -> dict:
    return _object({
        "matchLabels": _string_map(),
        "matchExpressions": _array(_object({
            "key": _string(),
            "operator": _string(),
            "values": _strings(),
        }, required=("key", "operator"))),
    })


def _node_selector_requirement() -> dict:
    # Operators In, NotIn, Exists, DoesNotExist, Gt, Lt: the API server checks them when the pod is created.
    return _object({"key": _string(), "operator": _string(), "values": _strings()}, required=("key", "operator"))


def _node_selector_term() -> dict:
    return _object({
        "matchExpressions": _array(_node_selector_requirement()),
        "matchFields": _array(_node_selector_requirement()),
    })


def _pod_affinity_term() -> dict:
    return _object({
        "labelSelector": _label_selector(),
        "namespaceSelector": _label_selector(),
        "namespaces": _strings(),
        "topologyKey": _string(),
        "matchLabelKeys": _strings(),
        "mismatchLabelKeys": _strings(),
    }, required=("topologyKey",))


def _pod_affinity() -> dict:
    return _object({
        "requiredDuringSchedulingIgnoredDuringExecution": _array(_pod_affinity_term()),
        "preferredDuringSchedulingIgnoredDuringExecution": _array(_object({
            "weight": _integer(),
            "podAffinityTerm": _pod_affinity_term(),
        }, required=("weight", "podAffinityTerm"))),
    })


def _affinity() -> dict:
    return _object({
        "nodeAffinity": _object({
            "requiredDuringSchedulingIgnoredDuringExecution": _object({
                "nodeSelectorTerms": _array(_node_selector_term()),
            }, required=("nodeSelectorTerms",)),
            "preferredDuringSchedulingIgnoredDuringExecution": _array(_object({
                "weight": _integer(),
                "preference": _node_selector_term(),
            }, required=("weight", "preference"))),
        }),
        "podAffinity": _pod_affinity(),
        "podAntiAffinity": _pod_affinity(),
    })


def _toleration() -> dict:
    return _object({
        "key": _string(),
        "operator": _string(),
        "value": _string(),
        "effect": _string(),
        "tolerationSeconds": _integer("int64"),
    })


def _topology_spread_constraints() -> dict:
    return _array(_object({
        "maxSkew": _integer(),
        "topologyKey": _string(),
        "whenUnsatisfiable": _string(),
        "labelSelector": _label_selector(),
        "minDomains": _integer(),
        "nodeAffinityPolicy": _string(),
        "nodeTaintsPolicy": _string(),
        "matchLabelKeys": _array(_string(), **{"x-kubernetes-list-type": "atomic"}),
    }, required=("maxSkew", "topologyKey", "whenUnsatisfiable")), **{
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["topologyKey", "whenUnsatisfiable"],
    })


# ---------------------------------------------------------------------------
# KubeVirt types.

EVICTION_STRATEGIES = ("None", "LiveMigrate", "LiveMigrateIfPossible", "External")


def run_strategies(features: frozenset) -> tuple:
    base = ("Always", "Halted", "Manual", "RerunOnFailure", "Once")
    return base + (("WaitAsReceiver",) if "decentralizedMigration" in features else ())


def vmi_phases(features: frozenset) -> tuple:
    base = ("Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed", "Unknown")
    return base + (("WaitingForSync",) if "decentralizedMigration" in features else ())


def migration_phases(features: frozenset) -> tuple:
    base = ("Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded", "Failed")
    return base + (("WaitingForSync", "Synchronizing") if "decentralizedMigration" in features else ())


def _domain() -> dict:
    # Typed: what placement and capacity decisions read. The rest of DomainSpec
    # (devices, firmware, machine, features, clock...) is kept unpruned.
    return _object({
        "resources": _object({
            "requests": _map(_quantity()),
            "limits": _map(_quantity()),
            "overcommitGuestOverhead": _boolean(),
        }),
        "cpu": _object({
            "cores": _integer("int64"),
            "sockets": _integer("int64"),
            "threads": _integer("int64"),
            "maxSockets": _integer("int64"),
            "model": _string(),
            "dedicatedCpuPlacement": _boolean(),
            "isolateEmulatorThread": _boolean(),
        }, preserve=True),
        "memory": _object({
            "guest": _quantity(),
            "maxGuest": _quantity(),
        }, preserve=True),
        "devices": _open(),
    }, required=("devices",), preserve=True)


def _vmi_spec() -> dict:
    """VirtualMachineInstanceSpec: the same in both variants."""
    return _object({
        "priorityClassName": _string(),
        "domain": _domain(),
        "nodeSelector": _string_map(),
        "affinity": _affinity(),
        "schedulerName": _string(),
        "tolerations": _array(_toleration()),
        "topologySpreadConstraints": _topology_spread_constraints(),
        "evictionStrategy": _string(*EVICTION_STRATEGIES),
        "startStrategy": _string("Paused"),
        "terminationGracePeriodSeconds": _integer("int64"),
        "volumes": _array(_open(), maxItems=256),
        "networks": _array(_open(), maxItems=256),
        "livenessProbe": _open(),
        "readinessProbe": _open(),
        "hostname": _string(),
        "subdomain": _string(),
        "dnsPolicy": _string(),
        "dnsConfig": _open(),
        "accessCredentials": _array(_open(), maxItems=256),
        "architecture": _string(),
        "resourceClaims": _array(_open()),
    }, required=("domain",))


def _template_metadata() -> dict:
    # KubeVirt: `+kubebuilder:pruning:PreserveUnknownFields +nullable` on the template's ObjectMeta.
    return _object({
        "labels": _string_map(),
        "annotations": _string_map(),
    }, preserve=True, nullable=True)


def _common_migration_state() -> dict:
    return {
        "node": _string(),
        "pod": _string(),
        "migrationUID": _string(),
        "domainName": _string(),
        "domainNamespace": _string(),
        "syncAddress": _string(),
        "persistentStatePVCName": _string(),
        "selinuxContext": _string(),
        "virtualMachineInstanceUID": _string(),
    }


def _migration_state(features: frozenset) -> dict:
    """VirtualMachineInstanceMigrationState, in VMI status and VMIM status."""
    properties = {
        "startTimestamp": _timestamp(nullable=True),
        "endTimestamp": _timestamp(nullable=True),
        "targetNodeDomainReadyTimestamp": _timestamp(),
        "targetNodeDomainDetected": _boolean(),
        "targetNodeAddress": _string(),
        "targetDirectMigrationNodePorts": _map(_integer()),
        "targetNode": _string(),
        "targetPod": _string(),
        "targetAttachmentPodUID": _string(),
        "sourceNode": _string(),
        "sourcePod": _string(),
        "completed": _boolean(),
        "failed": _boolean(),
        "abortRequested": _boolean(),
        "abortStatus": _string("Succeeded", "Failed", "Aborting"),
        "failureReason": _string(),
        "migrationUid": _string(),
        "mode": _string("PreCopy", "PostCopy", "Paused"),
        "migrationPolicyName": _string(),
        "migrationConfiguration": _open(),
        "targetCPUSet": _array(_integer()),
        "targetNodeTopology": _string(),
        "sourcePersistentStatePVCName": _string(),
        "targetPersistentStatePVCName": _string(),
        "migrationNetworkType": _string(),
    }
    if "decentralizedMigration" in features:
        source = _common_migration_state()
        source["nodeSelectors"] = _string_map()
        target = _common_migration_state()
        target.update({
            "domainReadyTimestamp": _timestamp(),
            "domainDetected": _boolean(),
            "nodeAddress": _string(),
            "directMigrationNodePorts": _map(_integer()),
            "attachmentPodUID": _string(),
            "cpuSet": _array(_integer()),
            "nodeTopology": _string(),
        })
        properties["sourceState"] = _object(source)
        properties["targetState"] = _object(target)
    return _object(properties)


def _vmi_status(features: frozenset) -> dict:
    return _object({
        "nodeName": _string(),
        "reason": _string(),
        # Condition types include Ready, LiveMigratable, StorageLiveMigratable, Paused, AgentConnected...
        "conditions": _array(_condition()),
        "phase": _string(*vmi_phases(features)),
        "phaseTransitionTimestamps": _array(_object({
            "phase": _string(*vmi_phases(features)),
            "phaseTransitionTimestamp": _timestamp(),
        })),
        "interfaces": _array(_object({
            "ipAddress": _string(),
            "ipAddresses": _strings(),
            "mac": _string(),
            "name": _string(),
            "interfaceName": _string(),
            "infoSource": _string(),
        }, preserve=True)),
        "guestOSInfo": _open(),
        "migrationState": _migration_state(features),
        "migrationMethod": _string("BlockMigration", "LiveMigration"),
        "migrationTransport": _string(),
        "qosClass": _string("Guaranteed", "Burstable", "BestEffort"),
        "launcherContainerImageVersion": _string(),
        "evacuationNodeName": _string(),
        "activePods": _string_map(),
        "volumeStatus": _array(_open()),
        "kernelBootStatus": _open(),
        "fsFreezeStatus": _string(),
        "topologyHints": _open(),
        "virtualMachineRevisionName": _string(),
        "runtimeUser": _integer("int64"),
        "VSOCKCID": _integer("int64"),
        "selinuxContext": _string(),
        "machine": _open(),
        "currentCPUTopology": _open(),
        "memory": _open(),
        "migratedVolumes": _array(_open()),
    })


def _vm_status(features: frozenset) -> dict:
    return _object({
        "snapshotInProgress": _string(),
        "restoreInProgress": _string(),
        "created": _boolean(),
        "ready": _boolean(),
        # Stopped, Provisioning, Starting, Running, Paused, Stopping, Terminating, CrashLoopBackOff, Migrating,
        # Unknown, ErrorUnschedulable, ErrImagePull, ImagePullBackOff, ErrorPvcNotFound, DataVolumeError,
        # WaitingForVolumeBinding (+ WaitingForReceiver with decentralized migration): display text only.
        "printableStatus": _string(),
        "conditions": _array(_condition()),
        "stateChangeRequests": _array(_object({
            "action": _string("Start", "Stop"),
            "data": _string_map(),
            "uid": _string(),
        }, required=("action",))),
        "volumeRequests": _array(_open()),
        "volumeSnapshotStatuses": _array(_open()),
        "startFailure": _object({
            "consecutiveFailCount": _integer("int64"),
            "lastFailedVMIUID": _string(),
            "retryAfterTimestamp": _timestamp(),
        }, nullable=True),
        "memoryDumpRequest": _open(nullable=True),
        "observedGeneration": _integer("int64"),
        "desiredGeneration": _integer("int64"),
        "runStrategy": _string(*run_strategies(features)),
        "volumeUpdateState": _open(),
        "instancetypeRef": _open(nullable=True),
        "preferenceRef": _open(nullable=True),
    })


def _root(spec: dict, status: dict) -> dict:
    return _object({
        "apiVersion": _string(),
        "kind": _string(),
        "metadata": {"type": "object"},
        "spec": spec,
        "status": status,
    }, required=("spec",))


def vm_schema(features: frozenset) -> dict:
    spec = _object({
        "running": _boolean(),  # deprecated, mutually exclusive with runStrategy (virt-api's webhook checks)
        "runStrategy": _string(*run_strategies(features)),
        "instancetype": _open(),
        "preference": _open(),
        "template": _object({"metadata": _template_metadata(), "spec": _vmi_spec()}),
        "dataVolumeTemplates": _array(_open()),
        "updateVolumesStrategy": _string("Migration", "Replacement"),
    }, required=("template",))
    return _root(spec, _vm_status(features))


def vmi_schema(features: frozenset) -> dict:
    return _root(_vmi_spec(), _vmi_status(features))


def vmim_schema(features: frozenset) -> dict:
    # Structural and closed at spec level in both variants: on 1.5 the API
    # server prunes spec.addedNodeSelector without a word, as KubeVirt 1.5 does.
    # vmiName is `omitempty` in Go; virt-api's admission webhook is what rejects
    # an empty one, and no webhook runs here, so the schema requires it instead.
    properties = {"vmiName": _string(minLength=1)}
    if "addedNodeSelector" in features:
        properties["addedNodeSelector"] = _string_map()
    if "decentralizedMigration" in features:
        properties["sendTo"] = _object({"migrationID": _string(), "connectURL": _string()},
                                       required=("migrationID", "connectURL"))
        properties["receive"] = _object({"migrationID": _string()}, required=("migrationID",))
    status = {
        "phase": _string(*migration_phases(features)),
        # migrationAbortRequested, migrationRejectedByResourceQuota, ...
        "conditions": _array(_condition()),
        "phaseTransitionTimestamps": _array(_object({
            "phase": _string(*migration_phases(features)),
            "phaseTransitionTimestamp": _timestamp(),
        })),
        "migrationState": _migration_state(features),
    }
    if "decentralizedMigration" in features:
        status["synchronizationAddresses"] = _strings()
    return _root(_object(properties, required=("vmiName",)), _object(status))


def _migration_configuration() -> dict:
    """KubeVirt CR spec.configuration.migrations (MigrationConfiguration)."""
    return _object({
        "nodeDrainTaintKey": _string(),
        "parallelOutboundMigrationsPerNode": _integer("int64"),  # default 2
        "parallelMigrationsPerCluster": _integer("int64"),  # default 5
        "allowAutoConverge": _boolean(),
        "bandwidthPerMigration": _quantity(),
        "completionTimeoutPerGiB": _integer("int64"),
        "progressTimeout": _integer("int64"),
        "unsafeMigrationOverride": _boolean(),
        "allowPostCopy": _boolean(),
        "allowWorkloadDisruption": _boolean(),
        "disableTLS": _boolean(),
        "network": _string(),
        "matchSELinuxLevelOnMigration": _boolean(),
    })


def kubevirt_schema(features: frozenset) -> dict:
    configuration = _object({
        "migrations": _migration_configuration(),
        "developerConfiguration": _object({
            "featureGates": _strings(),
            "useEmulation": _boolean(),
            "nodeSelectors": _string_map(),
            "cpuAllocationRatio": _integer(),
            "memoryOvercommit": _integer(),
        }, preserve=True),
        "evictionStrategy": _string(*EVICTION_STRATEGIES),
        "vmRolloutStrategy": _string("Stage", "LiveUpdate"),
    }, preserve=True)
    spec = {
        "imageTag": _string(),
        "imageRegistry": _string(),
        "imagePullPolicy": _string(),
        "imagePullSecrets": _array(_object({"name": _string()})),
        "monitorNamespace": _string(),
        "serviceMonitorNamespace": _string(),
        "monitorAccount": _string(),
        "workloadUpdateStrategy": _open(),
        "uninstallStrategy": _string(),
        "certificateRotateStrategy": _open(),
        "productVersion": _string(),
        "productName": _string(),
        "productComponent": _string(),
        "configuration": configuration,
        "infra": _open(),
        "workloads": _open(),
        "customizeComponents": _open(),
    }
    status = {
        "phase": _string("Deploying", "Deployed", "Deleting", "Deleted"),
        # Available, Progressing, Degraded, Created, Synchronized
        "conditions": _array(_condition()),
        "operatorVersion": _string(),
        "targetKubeVirtRegistry": _string(),
        "targetKubeVirtVersion": _string(),
        "targetDeploymentConfig": _string(),
        "targetDeploymentID": _string(),
        "observedKubeVirtRegistry": _string(),
        "observedKubeVirtVersion": _string(),
        "observedDeploymentConfig": _string(),
        "observedDeploymentID": _string(),
        "outdatedVirtualMachineInstanceWorkloads": _integer("int64"),
        "observedGeneration": _integer("int64"),
        "defaultArchitecture": _string(),
        "generations": _array(_object({
            "group": _string(),
            "resource": _string(),
            "namespace": _string(),
            "name": _string(),
            "lastGeneration": _integer("int64"),
            "hash": _string(),
        }, required=("group", "resource", "name", "lastGeneration"))),
    }
    if "decentralizedMigration" in features:
        spec["synchronizationPort"] = _string()
        status["synchronizationAddresses"] = _strings()
    return _root(_object(spec), _object(status))


# ---------------------------------------------------------------------------
# CRDs.

_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_PHASE = {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}

# kind: (plural, short names, printer columns, schema builder)
_RESOURCES = {
    "VirtualMachine": ("virtualmachines", ["vm", "vms"], [
        _AGE,
        {"name": "Status", "type": "string", "jsonPath": ".status.printableStatus", "description": "Human Readable Status"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    ], vm_schema),
    "VirtualMachineInstance": ("virtualmachineinstances", ["vmi", "vmis"], [
        _AGE,
        _PHASE,
        {"name": "IP", "type": "string", "jsonPath": ".status.interfaces[0].ipAddress"},
        {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeName"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
        {"name": "Live-Migratable", "type": "string", "jsonPath": ".status.conditions[?(@.type=='LiveMigratable')].status", "priority": 1},
        {"name": "Paused", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Paused')].status", "priority": 1},
    ], vmi_schema),
    "VirtualMachineInstanceMigration": ("virtualmachineinstancemigrations", ["vmim", "vmims"], [
        dict(_PHASE, description="The current phase of VM instance migration"),
        {"name": "VMI", "type": "string", "jsonPath": ".spec.vmiName", "description": "The name of the VMI to perform the migration on"},
    ], vmim_schema),
    "KubeVirt": ("kubevirts", ["kv", "kvs"], [_AGE, _PHASE], kubevirt_schema),
}

KINDS = tuple(_RESOURCES)

_DEPRECATION_WARNING = "kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."


def _metadata(kind: str, release_name: str) -> dict:
    plural = _RESOURCES[kind][0]
    if kind == "KubeVirt":
        # Shipped in kubevirt-operator.yaml, not created by virt-operator.
        return {"name": f"{plural}.{GROUP}", "labels": {"operator.kubevirt.io": ""}}
    # virt-operator creates the others and stamps them (injectOperatorMetadata).
    return {
        "name": f"{plural}.{GROUP}",
        "labels": {
            "kubevirt.io": "",
            "app.kubernetes.io/component": "kubevirt",
            "app.kubernetes.io/managed-by": "virt-operator",
        },
        "annotations": {
            "kubevirt.io/install-strategy-version": release_name,
            "kubevirt.io/install-strategy-registry": IMAGE_REGISTRY,
        },
    }


def crd(kind: str, kubevirt_version: str) -> dict:
    """One CustomResourceDefinition (apiextensions.k8s.io/v1) for a KubeVirt kind."""
    minor = minor_version(kubevirt_version)
    features = FEATURES[minor]
    plural, short_names, columns, schema = _RESOURCES[kind]
    versions = []
    # v1 is served and stored; v1alpha3 is still served (deprecated) with the
    # same schema and no conversion, as in KubeVirt since v1.0.
    for name in ("v1", "v1alpha3"):
        version = {
            "name": name,
            "served": True,
            "storage": name == "v1",
            "schema": {"openAPIV3Schema": schema(features)},
            "additionalPrinterColumns": [dict(column) for column in columns],
        }
        if name == "v1alpha3":
            version["deprecated"] = True
            version["deprecationWarning"] = _DEPRECATION_WARNING
        if STATUS_SUBRESOURCE[kind]:
            version["subresources"] = {"status": {}}
        versions.append(version)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": _metadata(kind, RELEASES[minor]),
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": list(short_names),
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": versions,
        },
    }


def crds(kubevirt_version: str) -> list[dict]:
    """The four KubeVirt CRDs for a KubeVirt version ("1.6", "v1.6.3", "1.5", "v1.5.2")."""
    return [crd(kind, kubevirt_version) for kind in KINDS]


def dump(documents: list[dict]) -> str:
    """Multi-document YAML; JSON documents (valid YAML) when PyYAML is missing."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "".join("---\n" + json.dumps(doc, indent=2) + "\n" for doc in documents)

    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, explicit_start=True, width=160)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubevirt-version", default="1.6",
                        help="KubeVirt version to mimic: " + ", ".join(supported_versions()) + " (a v-prefix and patch are accepted)")
    parser.add_argument("--print-release", action="store_true",
                        help="print the pinned KubeVirt release for the version instead of the CRDs")
    args = parser.parse_args(argv)
    try:
        if args.print_release:
            sys.stdout.write(release(args.kubevirt_version) + "\n")
        else:
            sys.stdout.write(dump(crds(args.kubevirt_version)))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
