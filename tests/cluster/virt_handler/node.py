# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What virt-handler puts on its Node: device-plugin resources, the node labeller's labels, the heartbeat.

Pure functions over plain dicts; agent.py sends them. Each follows the virt-handler code named
(KubeVirt v1.9.0 unless another release is named; differences by release are parameters).
"""
from __future__ import annotations

import time
from pathlib import Path

import yaml

from .versions import Release

CPUS = yaml.safe_load((Path(__file__).resolve().parent / "cpus.yaml").read_text())
CPU_ANNOTATION = "vmsched.kubevirt.io/cpu"     # set at registration (cluster.py): the fake node's processor
# set at registration from nodes.yaml's cpu_manager_policy: the kubelet's --cpu-manager-policy, which virt-handler
# reads from the kubelet's cpu_manager_state file (heartbeat.go isCPUManagerEnabled: policyName "static")
CPU_MANAGER_ANNOTATION = "vmsched.kubevirt.io/cpu-manager-policy"

# pkg/virt-handler/device-manager/device_controller.go PermanentHostDevicePlugins: always-on plugins,
# each advertising --max-devices (cmd/virt-handler/virt-handler.go maxDevices = 1000) healthy devices.
# The kubelet turns them into capacity and allocatable; the quantity 1000 serializes as "1k".
PERMANENT_DEVICES = ("kvm", "tun", "vhost-net")
MAX_DEVICES = "1k"

# pkg/virt-handler/node-labeller/util/util.go DefaultObsoleteCPUModels (used while the KubeVirt CR sets none)
DEFAULT_OBSOLETE_CPU_MODELS = frozenset(
    m + suffix for m in ("486", "pentium", "pentium2", "pentium3", "pentiumpro", "coreduo", "n270", "core2duo",
                         "Conroe", "athlon", "phenom", "qemu64", "qemu32", "kvm64", "kvm32", "Opteron_G1",
                         "Opteron_G2") for suffix in ("", "-v1"))

# node_labeller.go nodeLabellerLabels: prefixes removed before the labeller adds its labels again (kubevirt.io/sev
# covers sev-es and sev-snp); 1.9 adds kubevirt.io/tdx and kubevirt.io/vm-arch- (Release.labeller_prefixes_19).
LABELLER_PREFIXES = ("cpu-feature.node.kubevirt.io/", "cpu-model.node.kubevirt.io/",
                     "cpu-model-migration.node.kubevirt.io/", "cpu-timer.node.kubevirt.io/",
                     "hyperv.node.kubevirt.io/", "kubevirt.io/realtime", "kubevirt.io/sev",
                     "host-model-cpu.node.kubevirt.io/", "host-model-required-features.node.kubevirt.io/",
                     "node-labeller.kubevirt.io/obsolete-host-model", "machine-type.node.kubevirt.io/")
LABELLER_PREFIXES_19 = LABELLER_PREFIXES + ("kubevirt.io/tdx", "kubevirt.io/vm-arch-")
# kvm-caps-info-plugin_amd64.go CapsDesc: the Hyper-V enlightenments KVM reports on these hosts.
HYPERV_FEATURES = ("base", "time", "vpindex", "tlbflush", "ipi", "synic", "synic2", "frequencies", "reset",
                   "runtime", "synictimer", "reenlightenment")

SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
HEARTBEAT_ANNOTATION = "kubevirt.io/heartbeat"
SKIP_NODE_ANNOTATION = "node-labeller.kubevirt.io/skip-node"       # kubevirtv1.LabellerSkipNodeAnnotation
OBSOLETE_HOST_MODEL_LABEL = "node-labeller.kubevirt.io/obsolete-host-model"
KSM_ENABLED_LABEL = "kubevirt.io/ksm-enabled"
KSM_MANAGED_ANNOTATION = "kubevirt.io/ksm-handler-managed"


DEFAULT_CPU = "skylake"     # for a node registered without the annotation (one a test or a benchmark adds)


def cpu_of(node):
    name = ((node.get("metadata") or {}).get("annotations") or {}).get(CPU_ANNOTATION, DEFAULT_CPU)
    if name not in CPUS:
        raise ValueError(f"node {node['metadata']['name']}: annotation {CPU_ANNOTATION}={name!r} names no "
                         f"processor of cpus.yaml ({', '.join(sorted(CPUS))})")
    return CPUS[name]


def device_resources(node):
    """The kubelet's view after virt-handler's permanent device plugins registered: status.capacity and
    allocatable with devices.kubevirt.io/<name>. None when the node already has them."""
    status = node.get("status") or {}
    patch = {}
    for field in ("capacity", "allocatable"):
        have = status.get(field) or {}
        want = {f"devices.kubevirt.io/{d}": MAX_DEVICES for d in PERMANENT_DEVICES}
        if any(have.get(k) != v for k, v in want.items()):
            patch[field] = dict(have, **want)
    return {"status": patch} if patch else None


def feature_gate(config, gate):
    """featuregate.IsEnabled (1.9) / isFeatureGateEnabled (1.6, 1.5) for an Alpha gate: listed in the CR's
    developerConfiguration.featureGates."""
    return gate in (((config or {}).get("developerConfiguration") or {}).get("featureGates") or [])


def obsolete_cpu_models(config):
    """virt-config GetObsoleteCPUModels: the CR's spec.configuration.obsoleteCPUModels, or None. An empty map is None
    too: setConfigFromKubeVirt marshals the CR's configuration, whose obsoleteCPUModels is omitempty."""
    return ((config or {}).get("obsoleteCPUModels")) or None


def labeller_labels(cpu, release: Release, obsolete=None):
    """node_labeller.go prepareLabels: KubeVirt's CPU, machine and timer labels for a host. `obsolete` is the CR's
    map (obsolete_cpu_models): cpu_plugin.go filterCpuModels uses DefaultObsoleteCPUModels where it is None, while
    the host model is obsolete (and, in 1.5, kept out of the migration models) only when the CR's map names it."""
    named = frozenset(obsolete or ())                 # a key counts, whatever its value (Go: _, ok := m[k])
    filtered = DEFAULT_OBSOLETE_CPU_MODELS if obsolete is None else named
    usable = [m for m in cpu["usable_models"] if m not in filtered]
    if release.known_models_for_migration:
        # 1.6+: every model libvirt knows (usable yes or no) may be a migration target's model (knownModels)
        known = usable + [m for m in cpu["unusable_models"] if m not in filtered]
    else:
        # 1.5: the usable models plus the host model when the CR does not call it obsolete
        known = usable + ([cpu["host_model"]] if cpu["host_model"] not in named else [])
    labels = {}
    labels.update({f"cpu-feature.node.kubevirt.io/{f}": "true" for f in cpu["features"]})
    labels.update({f"cpu-model.node.kubevirt.io/{m}": "true" for m in usable})
    labels.update({f"cpu-model-migration.node.kubevirt.io/{m}": "true" for m in known})
    labels[f"host-model-cpu.node.kubevirt.io/{cpu['host_model']}"] = "true"
    labels.update({f"host-model-required-features.node.kubevirt.io/{f}": "true" for f in cpu["required_features"]})
    labels[f"cpu-vendor.node.kubevirt.io/{cpu['vendor']}"] = "true"
    labels.update({f"machine-type.node.kubevirt.io/{m}": "true" for m in cpu["machines"]})
    labels.update({f"hyperv.node.kubevirt.io/{f}": "true" for f in HYPERV_FEATURES})
    tsc = cpu.get("tsc_frequency")
    if tsc:
        labels["cpu-timer.node.kubevirt.io/tsc-frequency"] = str(tsc["hz"])
        labels["cpu-timer.node.kubevirt.io/tsc-scalable"] = "true" if tsc.get("scaling") == "yes" else "false"
    if cpu["host_model"] in named:
        labels[OBSOLETE_HOST_MODEL_LABEL] = "true"
    return labels


def relabelled(current, wanted, prefixes=LABELLER_PREFIXES):
    """removeLabellerLabels then addLabellerLabels: the node's labels with the labeller's replaced."""
    kept = {k: v for k, v in (current or {}).items() if not k.startswith(prefixes)}
    kept.update(wanted)
    return kept


def labeller_patch(current, wanted, prefixes=LABELLER_PREFIXES):
    """node_labeller.go patchNode: a JSON patch (test, then replace /metadata/labels), or None when unchanged."""
    new = relabelled(current, wanted, prefixes)
    if new == (current or {}):
        return None
    return [{"op": "test", "path": "/metadata/labels", "value": current or {}},
            {"op": "replace", "path": "/metadata/labels", "value": new}]


def labeller_update(node, cpu, release: Release, config):
    """node_labeller.go run: nothing for a node annotated node-labeller.kubevirt.io/skip-node (skipNodeLabelling;
    1.5 and 1.6 compute the labels and patch nothing), else patchNode's JSON patch (or None when unchanged)."""
    meta = node.get("metadata") or {}
    if SKIP_NODE_ANNOTATION in (meta.get("annotations") or {}):
        return None
    return labeller_patch(meta.get("labels") or {}, labeller_labels(cpu, release, obsolete_cpu_models(config)),
                          LABELLER_PREFIXES_19 if release.labeller_prefixes_19 else LABELLER_PREFIXES)


def cpu_manager_enabled(node, config):
    """heartbeat.go do(): CPUManagerEnabled() (the CR's feature gate CPUManager, Alpha in 1.5 to 1.9) and
    isCPUManagerEnabled (the kubelet's cpu_manager_state has policyName "static")."""
    policy = ((node.get("metadata") or {}).get("annotations") or {}).get(CPU_MANAGER_ANNOTATION)
    return feature_gate(config, "CPUManager") and policy == "static"


def ksm_patch():
    """ksm.go Handler.patchKSM (1.6+; 1.5: inside the heartbeat): with no ksmConfiguration in the CR the node is not
    eligible (shouldNodeHandleKSM) and KSM is not enabled by virt-handler."""
    return {"metadata": {"labels": {KSM_ENABLED_LABEL: "false"}, "annotations": {KSM_MANAGED_ANNOTATION: "false"}}}


def heartbeat_patch(release: Release, schedulable=True, now=None, cpu_manager=False):
    """heartbeat.go do(): a strategic merge patch of the schedulable and cpumanager labels and the heartbeat
    (1.5: with handleKSM's label and annotation)."""
    labels = {SCHEDULABLE_LABEL: "true" if schedulable else "false"}
    labels.update({key: "true" if cpu_manager else "false" for key in release.cpumanager_labels})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    annotations = {HEARTBEAT_ANNOTATION: stamp}
    if release.ksm_in_heartbeat:
        labels.update(ksm_patch()["metadata"]["labels"])
        annotations.update(ksm_patch()["metadata"]["annotations"])
    return {"metadata": {"labels": labels, "annotations": annotations}}


def unschedulable_patch():
    """cmd/virt-handler markNodeAsUnschedulable: at start (before anything else) and on SIGTERM."""
    return {"metadata": {"labels": {SCHEDULABLE_LABEL: "false"}}}
