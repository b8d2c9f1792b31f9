# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""virt-launcher pods, rendered the way virt-controller's template service renders them.

Follows pkg/virt-controller/services/template.go (RenderLaunchManifest) for what
scheduling sees: generateName `virt-launcher-<vmi>-`, the VMI's labels plus
`kubevirt.io: virt-launcher`, `kubevirt.io/created-by: <vmi uid>` and
`vm.kubevirt.io/name: <hostname>`; the VMI's annotations (minus kubectl's and the
api-version bookkeeping ones) plus `kubevirt.io/domain`; a controller owner
reference to the VMI; nodeSelector = VMI nodeSelector + the KubeVirt CR's
developerConfiguration.nodeSelectors + `kubevirt.io/schedulable: "true"`;
affinity, tolerations, schedulerName, priorityClassName and
topologySpreadConstraints copied from the VMI spec.

Resources of the `compute` container (simplified from GetMemoryOverhead and the
resource rules of template.go, default memoryOvercommit 100):
- memory request = guest memory (spec.domain.resources.requests.memory, else
  spec.domain.memory.guest) + overhead, where overhead = guest/512 (page tables)
  + 138Mi + 8Mi per vCPU + 8Mi (IOThread) + 16Mi (video, unless
  autoattachGraphicsDevice is false);
- memory limit = spec.domain.resources.limits.memory + overhead, when given;
- cpu request = spec.domain.resources.requests.cpu, else vCPUs / cpuAllocationRatio
  (KubeVirt CR developerConfiguration.cpuAllocationRatio, default 10), i.e. 100m
  per vCPU; vCPUs = cores x sockets x threads (default 1 each);
- dedicatedCpuPlacement: cpu request = limit = vCPUs, memory limit = request;
- any other requests/limits (extended resources, ephemeral-storage) are copied.
The pod has KubeVirt's emptyDir volumes (private, public, sockets,
virt-bin-share-dir, libvirt-runtime, ephemeral-disks, container-disks,
hotplug-disks), so the descheduler sees a pod with local storage, as it does on a
real cluster. Left out on purpose: the devices.kubevirt.io/kvm|tun|vhost-net
limits (the fake nodes have no device plugins), the virt-unpaused readiness gate
(KWOK would never satisfy it), init containers, and the VMI's own volumes (PVCs
would have to exist and bind).

Migration target pods are the same pod plus, as in migration.go createTargetPod:
label `kubevirt.io/migrationJobUID`, annotation `kubevirt.io/migrationJobName`,
nodeSelector = VMIM spec.addedNodeSelector overlaid with the pod's own
nodeSelector (the VMI's value wins on a key collision), and a required pod
anti-affinity term against pods with the VMI's `kubevirt.io/created-by` label on
the same `kubernetes.io/hostname` (so never the source node).
"""
from __future__ import annotations

import copy
import math
import re
from decimal import Decimal

from . import constants as c

_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[a-zA-Z]*)$")
MI = 2**20


def parse_quantity(value) -> Decimal:
    """A Kubernetes quantity ("1Gi", "500m", "2", 1e9) as a Decimal in base units."""
    if value is None:
        return Decimal(0)
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"bad quantity {value!r}")
    number, suffix = match.groups()
    if suffix and suffix[0] in "eE" and suffix[1:].lstrip("+-").isdigit():
        return Decimal(number + suffix)
    return Decimal(number) * Decimal(_SUFFIX[suffix] if suffix else 1)


def format_memory(amount: Decimal) -> str:
    amount = int(math.ceil(amount))
    return f"{amount // MI}Mi" if amount % MI == 0 else str(amount)


def format_cpu(cores: Decimal) -> str:
    millis = int(math.ceil(cores * 1000))
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def vcpus(domain) -> int:
    cpu = domain.get("cpu") or {}
    if any(cpu.get(k) for k in ("cores", "sockets", "threads")):
        return max(1, int(cpu.get("cores") or 1) * int(cpu.get("sockets") or 1) * int(cpu.get("threads") or 1))
    resources = domain.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get("cpu")
        if value is not None:
            return max(1, int(parse_quantity(value)))
    return 1


def memory_overhead(domain, guest: Decimal) -> Decimal:
    overhead = Decimal(int(guest) // 512)  # page tables: one byte per 512 of guest RAM
    overhead += 138 * MI + 8 * MI * vcpus(domain) + 8 * MI
    if (domain.get("devices") or {}).get("autoattachGraphicsDevice", True) is not False:
        overhead += 16 * MI
    return overhead


def compute_resources(vmi, cpu_allocation_ratio=c.DEFAULT_CPU_ALLOCATION_RATIO):
    domain = vmi.get("spec", {}).get("domain") or {}
    resources = domain.get("resources") or {}
    req_in = dict(resources.get("requests") or {})
    lim_in = dict(resources.get("limits") or {})
    guest_raw = req_in.get("memory") or (domain.get("memory") or {}).get("guest") or lim_in.get("memory")
    guest = parse_quantity(guest_raw) if guest_raw is not None else Decimal(0)
    overhead = memory_overhead(domain, guest)
    requests = {k: v for k, v in req_in.items() if k not in ("cpu", "memory")}
    limits = {k: v for k, v in lim_in.items() if k not in ("cpu", "memory")}
    requests["memory"] = format_memory(guest + overhead)
    if lim_in.get("memory") is not None:
        limits["memory"] = format_memory(parse_quantity(lim_in["memory"]) + overhead)
    n_cpus = vcpus(domain)
    if (domain.get("cpu") or {}).get("dedicatedCpuPlacement"):
        requests["cpu"] = limits["cpu"] = str(n_cpus)
        limits["memory"] = requests["memory"]
    else:
        if req_in.get("cpu") is not None:
            requests["cpu"] = req_in["cpu"]
        else:
            ratio = cpu_allocation_ratio if cpu_allocation_ratio and cpu_allocation_ratio > 0 else c.DEFAULT_CPU_ALLOCATION_RATIO
            requests["cpu"] = format_cpu(Decimal(n_cpus) / Decimal(ratio))
        if lim_in.get("cpu") is not None:
            limits["cpu"] = lim_in["cpu"]
    out = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def sanitize_hostname(vmi):
    host = vmi.get("spec", {}).get("hostname") or vmi["metadata"]["name"]
    host = re.sub(r"[^a-z0-9-]", "-", host.lower())[:63].strip("-")
    return host or "vmi"


def _empty_dirs(spec):
    if ((spec.get("domain") or {}).get("devices") or {}).get("disableHotplug"):
        return {k: v for k, v in EMPTY_DIRS.items() if k != "hotplug-disks"}
    return EMPTY_DIRS


def _pod_annotations(vmi):
    annotations = {c.DOMAIN_ANNOTATION: vmi["metadata"]["name"]}
    for key, value in (vmi["metadata"].get("annotations") or {}).items():
        if key.startswith("kubectl.kubernetes.io") or key.startswith(c.STORAGE_API_ANNOTATION) \
                or key.startswith(c.LATEST_API_ANNOTATION):
            continue
        annotations[key] = value
    annotations[c.DEFAULT_CONTAINER_ANNOTATION] = "compute"
    annotations[c.MIGRATION_TRANSPORT_UNIX_ANNOTATION] = "true"
    annotations[c.REQUEST_EVICT_ONLY_ANNOTATION] = ""
    return annotations


# template.go: every virt-launcher pod has these emptyDir volumes (hotplug-disks unless hotplug is disabled).
EMPTY_DIRS = {
    "private": "/var/run/kubevirt-private",
    "public": "/var/run/kubevirt",
    "sockets": "/var/run/kubevirt/sockets",
    "virt-bin-share-dir": "/var/run/kubevirt/container-disks-bin",
    "libvirt-runtime": "/var/run/libvirt",
    "ephemeral-disks": "/var/run/kubevirt-ephemeral-disks",
    "container-disks": "/var/run/kubevirt/container-disks",
    "hotplug-disks": "/var/run/kubevirt/hotplug-disks",
}


def render_launcher_pod(vmi, image, cpu_allocation_ratio=c.DEFAULT_CPU_ALLOCATION_RATIO, extra_node_selectors=None):
    meta = vmi["metadata"]
    spec = vmi.get("spec") or {}
    hostname = sanitize_hostname(vmi)
    labels = dict(meta.get("labels") or {})
    labels[c.APP_LABEL] = "virt-launcher"
    labels[c.CREATED_BY_LABEL] = meta["uid"]
    labels[c.VM_NAME_LABEL] = hostname
    node_selector = dict(spec.get("nodeSelector") or {})
    node_selector[c.SCHEDULABLE_LABEL] = "true"
    node_selector.update(extra_node_selectors or {})
    grace = spec.get("terminationGracePeriodSeconds")
    grace = 30 if grace is None else int(grace)
    pod_spec = {
        "hostname": hostname,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace + 15,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsUser": 107, "runAsGroup": 107, "runAsNonRoot": True},
        "nodeSelector": node_selector,
        "containers": [{
            "name": "compute",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/usr/bin/virt-launcher-monitor", "--qemu-timeout", "240s", "--name", meta["name"],
                        "--uid", meta["uid"], "--namespace", meta["namespace"]],
            "resources": compute_resources(vmi, cpu_allocation_ratio),
            "volumeMounts": [{"name": vol, "mountPath": mount} for vol, mount in _empty_dirs(spec).items()],
        }],
        "volumes": [{"name": vol, "emptyDir": {}} for vol in _empty_dirs(spec)],
    }
    for field in ("subdomain", "dnsPolicy", "dnsConfig", "priorityClassName", "schedulerName"):
        if spec.get(field):
            pod_spec[field] = copy.deepcopy(spec[field])
    for field in ("affinity", "tolerations", "topologySpreadConstraints"):
        if spec.get(field):
            pod_spec[field] = copy.deepcopy(spec[field])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": _pod_annotations(vmi),
            "ownerReferences": [{
                "apiVersion": c.API_VERSION,
                "kind": "VirtualMachineInstance",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }],
        },
        "spec": pod_spec,
    }


def render_target_pod(vmi, vmim, image, cpu_allocation_ratio=c.DEFAULT_CPU_ALLOCATION_RATIO,
                      extra_node_selectors=None):
    pod = render_launcher_pod(vmi, image, cpu_allocation_ratio, extra_node_selectors)
    spec = pod["spec"]
    # createMigrationPodAntiAffinityRule: never next to a pod of the same VMI.
    term = {"labelSelector": {"matchLabels": {c.CREATED_BY_LABEL: vmi["metadata"]["uid"]}},
            "topologyKey": "kubernetes.io/hostname"}
    affinity = spec.setdefault("affinity", {})
    anti = affinity.setdefault("podAntiAffinity", {})
    anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(term)
    # maps.Copy(nodeSelector, AddedNodeSelector); maps.Copy(nodeSelector, template's): the VMI wins.
    node_selector = dict((vmim.get("spec") or {}).get("addedNodeSelector") or {})
    node_selector.update(spec.get("nodeSelector") or {})
    spec["nodeSelector"] = node_selector
    pod["metadata"]["labels"][c.MIGRATION_JOB_LABEL] = vmim["metadata"]["uid"]
    pod["metadata"]["annotations"][c.MIGRATION_JOB_NAME_ANNOTATION] = vmim["metadata"]["name"]
    return pod
