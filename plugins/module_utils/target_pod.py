# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What KubeVirt's migration target pod will ask of a node, computed before the VMIM exists.

Private to this collection. Pure functions over the API's JSON. virt-controller renders the
target pod afresh from the VMI (pkg/virt-controller/services/template.go renderLaunchManifest,
nodeselectorrenderer.go) and adds the migration's own constraints
(pkg/virt-controller/watch/migration/migration.go createTargetPod); this module follows
KubeVirt v1.9.0, v1.6.6 and v1.5.3 (differences by release through versions.py:
KUBEVIRT_POD_RENDERING, KUBEVIRT_FEATURES). tests/integration/test_target_pod_differential.py
compares it with what the real virt-controller renders, shape by shape.

- nodeSelector (launcher_constraints, the pod of any launcher of the VMI): kubevirt.io/schedulable=true;
  kubernetes.io/arch; the KubeVirt CR's developerConfiguration.nodeSelectors; the VMI's nodeSelector (wins
  over those); then forced by KubeVirt: the release's CPU manager label for dedicated CPUs,
  cpu-model.node.kubevirt.io/<model> for a named model, machine-type.node.kubevirt.io/<machine>,
  cpu-feature.node.kubevirt.io/<f> for required features, scheduling.node.kubevirt.io/tsc-frequency-<Hz> when
  the VMI needs the TSC frequency and virt-controller hinted it (status.topologyHints), kubevirt.io/realtime.
  Not modelled: the hyperv.node.kubevirt.io/ labels (only with the HypervStrictCheck feature gate), the
  confidential-computing labels (SEV, SEV-ES, SEV-SNP, TDX, Secure Execution) and cross-architecture labels.
- target_constraints: the VMIM's addedNodeSelector merged under these (the VMI's values win); for the
  default CPU model, host-model, the source's host model and its required features
  (cpu-model-migration.node.kubevirt.io/<model>, cpu-feature.node.kubevirt.io/<f>), taken from the source
  pod's nodeSelector after a first migration, else from the source node's host-model-cpu /
  host-model-required-features labels; from 1.6 also the source node's CPU vendor.
- affinity: the VMI's, plus (host-model) a required node-labeller.kubevirt.io/obsolete-host-model
  DoesNotExist and, for each feature of policy forbid, a required cpu-feature.node.kubevirt.io/<f>
  DoesNotExist, in every term; the target pod also gets the migration's required pod anti-affinity on
  kubevirt.io/created-by=<VMI uid> (node_fit judges that as "the source node"). tolerations: the VMI's.
- requests: those of the running launcher pod (the target pod is rendered from the same VMI).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import CREATED_BY_LABEL, SCHEDULABLE_LABEL
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    VersionError,
    kubevirt_pod_rendering,
    kubevirt_supports,
)

ARCH_LABEL = "kubernetes.io/arch"
MACHINE_TYPE_PREFIX = "machine-type.node.kubevirt.io/"
CPU_MODEL_PREFIX = "cpu-model.node.kubevirt.io/"
CPU_FEATURE_PREFIX = "cpu-feature.node.kubevirt.io/"
CPU_MIGRATION_MODEL_PREFIX = "cpu-model-migration.node.kubevirt.io/"
CPU_VENDOR_PREFIX = "cpu-vendor.node.kubevirt.io/"
HOST_MODEL_PREFIX = "host-model-cpu.node.kubevirt.io/"
HOST_MODEL_FEATURES_PREFIX = "host-model-required-features.node.kubevirt.io/"
OBSOLETE_HOST_MODEL_LABEL = "node-labeller.kubevirt.io/obsolete-host-model"
TSC_FREQUENCY_PREFIX = "scheduling.node.kubevirt.io/tsc-frequency-"    # topology/filter.go TSCFrequencySchedulingLabel
REALTIME_LABEL = "kubevirt.io/realtime"                                 # v1.RealtimeLabel
HOSTNAME_LABEL = "kubernetes.io/hostname"
HOST_MODEL = "host-model"
HOST_PASSTHROUGH = "host-passthrough"
CPU_PREFIXES = (CPU_MODEL_PREFIX, CPU_FEATURE_PREFIX, CPU_MIGRATION_MODEL_PREFIX, CPU_VENDOR_PREFIX)


def _spec(obj):
    return (obj or {}).get("spec") or {}


def _labels(obj):
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def cpu_of(vmi):
    """The VMI's spec.domain.cpu (virt-api defaults the model to host-model)."""
    return (_spec(vmi).get("domain") or {}).get("cpu") or {}


def is_host_model(vmi):
    return (cpu_of(vmi).get("model") or HOST_MODEL) == HOST_MODEL


def rendering(kubevirt_version=None):
    """versions.kubevirt_pod_rendering for the cluster's KubeVirt; the newest when the version is unknown or unread."""
    try:
        return kubevirt_pod_rendering(kubevirt_version)
    except VersionError:
        return kubevirt_pod_rendering(None)


def _supports(kubevirt_version, feature):
    try:
        return kubevirt_version is None or kubevirt_supports(kubevirt_version, feature)
    except VersionError:
        return True


def tsc_frequency_label(vmi):
    """topology/tsc.go IsManualTSCFrequencyRequired: a VMI that needs the TSC frequency (GetTscFrequencyRequirement:
    the invtsc feature required or forced, to boot; Hyper-V reenlightenment enabled, to migrate) and has
    virt-controller's hint (status.topologyHints.tscFrequency > 0) selects the nodes labelled with that frequency
    (ToTSCSchedulableLabel). None otherwise."""
    domain = _spec(vmi).get("domain") or {}
    invtsc = any(f.get("name") == "invtsc" and f.get("policy") in ("require", "force")
                 for f in cpu_of(vmi).get("features") or [])
    reenlightenment = ((((domain.get("features") or {}).get("hyperv") or {}).get("reenlightenment") or {})
                       .get("enabled")) is True
    hint = ((((vmi or {}).get("status") or {}).get("topologyHints")) or {}).get("tscFrequency")
    if (invtsc or reenlightenment) and isinstance(hint, int) and hint > 0:
        return "%s%d" % (TSC_FREQUENCY_PREFIX, hint)
    return None


def vmi_node_selector(vmi, cluster_node_selectors=None, kubevirt_version=None):
    """nodeselectorrenderer.go NewNodeSelectorRenderer and Render (template.go newNodeSelectorRenderer): the
    selector of any launcher pod of this VMI."""
    spec = _spec(vmi)
    selector = {SCHEDULABLE_LABEL: "true"}
    if spec.get("architecture"):
        selector[ARCH_LABEL] = spec["architecture"].lower()
    selector.update(cluster_node_selectors or {})
    selector.update(spec.get("nodeSelector") or {})
    cpu = cpu_of(vmi)
    if cpu.get("dedicatedCpuPlacement"):
        selector[rendering(kubevirt_version)["cpumanager_label"]] = "true"
    model = cpu.get("model") or HOST_MODEL
    if model not in (HOST_MODEL, HOST_PASSTHROUGH):
        selector[CPU_MODEL_PREFIX + model] = "true"
    machine = (((vmi or {}).get("status") or {}).get("machine") or {}).get("type") or \
        ((spec.get("domain") or {}).get("machine") or {}).get("type")
    if machine:
        selector[MACHINE_TYPE_PREFIX + machine] = "true"
    for feature in cpu.get("features") or []:
        if feature.get("policy") in (None, "", "require"):
            selector[CPU_FEATURE_PREFIX + feature["name"]] = "true"
    tsc = tsc_frequency_label(vmi)
    if tsc:
        selector[tsc] = "true"
    if cpu.get("realtime") is not None:                  # v1.VirtualMachineInstance IsRealtimeEnabled
        selector[REALTIME_LABEL] = "true"
    return selector


def host_model_selector(source_pod, source_node):
    """prepareNodeSelectorForHostCpuModel: what the source pod already requires (after a first migration),
    else the source node's host model and its required features. {} when the source node has no host model
    (virt-controller then fails to create the target pod)."""
    required = dict((k, v) for k, v in ((_spec(source_pod).get("nodeSelector")) or {}).items()
                    if CPU_FEATURE_PREFIX in k or CPU_MIGRATION_MODEL_PREFIX in k)
    if required:
        return required
    selector = {}
    for key, value in _labels(source_node).items():
        if key.startswith(HOST_MODEL_PREFIX):
            selector[CPU_MIGRATION_MODEL_PREFIX + key[len(HOST_MODEL_PREFIX):]] = value
        elif key.startswith(HOST_MODEL_FEATURES_PREFIX):
            selector[CPU_FEATURE_PREFIX + key[len(HOST_MODEL_FEATURES_PREFIX):]] = value
    return selector


def vendor_selector(selector, source_node):
    """getCPUVendorLabelKey (1.6+): the source node's vendor, unless the selector names one already."""
    if any(k.startswith(CPU_VENDOR_PREFIX) for k in selector):
        return {}
    for key in sorted(_labels(source_node)):
        if key.startswith(CPU_VENDOR_PREFIX):
            return {key: "true"}
    return {}


def with_rejected_label(affinity, label):
    """template.go modifyNodeAffintyToRejectLabel: `label` DoesNotExist, ANDed into every required term (a term of its
    own when there is none)."""
    affinity = copy.deepcopy(affinity) or {}
    requirement = {"key": label, "operator": "DoesNotExist"}
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        for term in terms:
            term["matchExpressions"] = list(term.get("matchExpressions") or []) + [requirement]
    else:
        terms = [{"matchExpressions": [requirement]}]
    required["nodeSelectorTerms"] = terms
    return affinity


def with_obsolete_host_model_rule(affinity):
    """setNodeAffinityForHostModelCpuModel: obsolete-host-model DoesNotExist, ANDed into every required term."""
    return with_rejected_label(affinity, OBSOLETE_HOST_MODEL_LABEL)


def launcher_affinity(vmi):
    """template.go setNodeAffinityForPod: the VMI's affinity, then setNodeAffinityForHostModelCpuModel (host-model),
    then setNodeAffinityForbiddenFeaturePolicy (each feature of policy forbid, in order). None when it has none."""
    affinity = copy.deepcopy(_spec(vmi).get("affinity")) or None
    if is_host_model(vmi):
        affinity = with_rejected_label(affinity, OBSOLETE_HOST_MODEL_LABEL)
    for feature in cpu_of(vmi).get("features") or []:
        if feature.get("policy") == "forbid":
            affinity = with_rejected_label(affinity, CPU_FEATURE_PREFIX + feature["name"])
    return affinity


def launcher_constraints(vmi, cluster_node_selectors=None, kubevirt_version=None):
    """{"nodeSelector", "affinity", "tolerations"} of any launcher pod of the VMI (renderLaunchManifest), which the
    migration target pod builds on."""
    return {"nodeSelector": vmi_node_selector(vmi, cluster_node_selectors, kubevirt_version),
            "affinity": launcher_affinity(vmi), "tolerations": _spec(vmi).get("tolerations") or []}


def with_migration_anti_affinity(affinity, vmi):
    """migration.go createMigrationPodAntiAffinityRule: never on a node with a pod of the same VMI (its source pod)."""
    affinity = copy.deepcopy(affinity) or {}
    anti = affinity.setdefault("podAntiAffinity", {})
    anti["requiredDuringSchedulingIgnoredDuringExecution"] = list(
        anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []) + [
        {"labelSelector": {"matchLabels": {CREATED_BY_LABEL: ((vmi or {}).get("metadata") or {}).get("uid")}},
         "topologyKey": HOSTNAME_LABEL}]
    return affinity


def target_constraints(vmi, source_pod=None, source_node=None, cluster_node_selectors=None, added_selector=None,
                       kubevirt_version=None):
    """{"nodeSelector", "affinity", "tolerations", "cpu"} of the migration target pod KubeVirt will create.

    cpu describes the CPU constraint for messages: {"model", "host_model", "features", "vendor", "source"}.
    kubevirt_version: the cluster's KubeVirt (None: the newest behaviour), for what its releases render differently
    (versions.KUBEVIRT_POD_RENDERING; the source's CPU vendor from 1.6, KUBEVIRT_FEATURES).
    """
    launcher = launcher_constraints(vmi, cluster_node_selectors, kubevirt_version)
    selector = dict(added_selector or {})
    selector.update(launcher["nodeSelector"])            # createTargetPod: the template's values win
    host_model = is_host_model(vmi)
    if host_model:
        selector.update(host_model_selector(source_pod, source_node))
    if _supports(kubevirt_version, "migration_cpu_vendor_selector"):
        selector.update(vendor_selector(selector, source_node))
    cpu = {"host_model": host_model,
           "model": next((k[len(CPU_MIGRATION_MODEL_PREFIX):] for k in selector if k.startswith(CPU_MIGRATION_MODEL_PREFIX)),
                         None) if host_model else cpu_of(vmi).get("model"),
           "features": sorted(k[len(CPU_FEATURE_PREFIX):] for k in selector if k.startswith(CPU_FEATURE_PREFIX)),
           "vendor": next((k[len(CPU_VENDOR_PREFIX):] for k in selector if k.startswith(CPU_VENDOR_PREFIX)), None),
           "source": ((source_node or {}).get("metadata") or {}).get("name")}
    return {"nodeSelector": selector, "affinity": with_migration_anti_affinity(launcher["affinity"], vmi),
            "tolerations": launcher["tolerations"], "cpu": cpu}


def split_cpu_selector(selector):
    """(the CPU part of a target pod's nodeSelector, the rest)."""
    cpu, rest = {}, {}
    for key, value in (selector or {}).items():
        (cpu if key.startswith(CPU_PREFIXES) else rest)[key] = value
    return cpu, rest


def cpu_reasons(node, constraints):
    """Why a node cannot run the VM's CPU as KubeVirt will require it; [] when it can."""
    cpu_selector, _rest = split_cpu_selector(constraints.get("nodeSelector"))
    labels = _labels(node)
    missing = sorted(k for k, v in cpu_selector.items() if labels.get(k) != v)
    if not missing:
        return []
    cpu = constraints.get("cpu") or {}
    features = [k[len(CPU_FEATURE_PREFIX):] for k in missing if k.startswith(CPU_FEATURE_PREFIX)]
    others = [k for k in missing if not k.startswith(CPU_FEATURE_PREFIX)]
    if cpu.get("host_model"):
        what = "CPU: the VM runs with host-model %s%s" % (
            cpu.get("model") or "?", " (the CPU of its node %s)" % cpu["source"] if cpu.get("source") else "")
    else:
        what = "CPU: the VM requires CPU model %s" % cpu.get("model")
    lacks = []
    if others:
        lacks.append(", ".join("%s=%s" % (k, cpu_selector[k]) for k in others))
    if features:
        lacks.append("the feature%s %s" % ("" if len(features) == 1 else "s", ", ".join(features)))
    return ["%s, which this node cannot run: it lacks %s" % (what, "; ".join(lacks))]
