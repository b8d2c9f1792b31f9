# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement report of scheduling_info: pure functions over the lists the cluster returns, and the engine
that reads them (one list call per kind).

Private to this collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, plan
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import unless_forbidden
from ansible_collections.vmsched.kubevirt.plugins.module_utils.descheduler_policy import EVICT_ANNOTATION
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    CREATED_BY_LABEL,
    FINAL_PHASES,
    MANAGED_BY_LABEL,
    SCHEDULABLE_LABEL,
    cluster_eviction_strategy,
    detect_capabilities,
    effective_eviction_strategy,
    eviction_verdict,
    is_final,
    live_migratable,
    migration_nodes,
    phase,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import VersionError, parse_kube_version

DEFAULT_SCHEDULER = "default-scheduler"
SECONDARY_SCHEDULER_MANAGED_BY = "vmsched.kubevirt.secondary_scheduler"
DESCHEDULER_MANAGED_BY = "vmsched.kubevirt.descheduler"
VM_DEFAULTS_MANAGED_BY = "vmsched.kubevirt.vm_defaults"
INSTANCE_LABEL = "app.kubernetes.io/instance"
LAUNCHER_LABEL = ("kubevirt.io", "virt-launcher")

# kube-scheduler's ImageLocality score, as pkg/scheduler/framework/plugins/imagelocality/image_locality.go
# computes it: per image of the pod the node lists, size x (nodes listing it / all nodes); the sum clamped between
# 23 MiB and 1000 MiB x the pod's image count, scaled to 0..100 in integers. Which images count depends on the
# release: the init containers' and containers' always, the image volumes' from 1.36 in the sum only, from 1.37
# in the sum and in the count (image_volume_rules).
MIB = 1024 * 1024
IMAGE_LOCALITY_MIN = 23 * MIB
IMAGE_LOCALITY_MAX_PER_CONTAINER = 1000 * MIB
MAX_NODE_SCORE = 100
# The kubelet lists at most nodeStatusMaxImages images in status.images, the largest first; 50 unless configured.
DEFAULT_NODE_STATUS_MAX_IMAGES = 50
# The launcher pod assumed when none runs: KubeVirt's compute container and its guest-console-log init container,
# both running the launcher image (VMs with a containerDisk add an image volume of it, and the disk's own image).
ASSUMED_LAUNCHER_CONTAINERS = ("compute", "guest-console-log")


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _spec(obj):
    return (obj or {}).get("spec") or {}


def _status(obj):
    return (obj or {}).get("status") or {}


def _key(obj):
    return "%s/%s" % (_meta(obj).get("namespace"), _meta(obj).get("name"))


def coefficient_of_variation(values):
    """plan.unrounded_cv (the one definition), rounded to 4 decimals; None for no values or a zero mean, where the
    rebalancer's spread says 0 (nothing to even out) and a report says there is no figure."""
    values = [float(v) for v in values]
    if not values or sum(values) == 0:
        return None
    return round(plan.unrounded_cv(values), 4)


def scheduler_of(obj):
    return _spec(obj).get("schedulerName") or DEFAULT_SCHEDULER


def active_vmis(vmis):
    return [v for v in vmis or [] if phase(v) not in FINAL_PHASES]


def launcher_images(kubevirt_cr, pods):
    """The virt-launcher image references: the KubeVirt CR's observed registry and version, and running launchers."""
    images = set()
    status = _status(kubevirt_cr)
    registry, version = status.get("observedKubeVirtRegistry"), status.get("observedKubeVirtVersion")
    if registry and version:
        images.add("%s/virt-launcher:%s" % (registry.rstrip("/"), version))
    for pod in pods or []:
        if _meta(pod).get("labels", {}).get(LAUNCHER_LABEL[0]) != LAUNCHER_LABEL[1]:
            continue
        for container in _spec(pod).get("containers") or []:
            if container.get("name") == "compute" and container.get("image"):
                images.add(container["image"])
    return images


def node_lists_image(node, images):
    if not images:
        return None
    for entry in _status(node).get("images") or []:
        if any(name in images for name in entry.get("names") or []):
            return True
    return False


def normalized_image_name(name):
    """The name the scheduler looks an image up by: the reference, with ``:latest`` added when it has no tag."""
    if name.rfind(":") <= name.rfind("/"):
        name = name + ":latest"
    return name


def image_states(nodes):
    """Per image name, as kube-scheduler's cache keeps it: the size the first node listing it reports, and the names
    of the nodes listing it. Nodes are taken by name, so the size is deterministic where nodes disagree."""
    states = {}
    for node in sorted(nodes or [], key=lambda n: _meta(n).get("name") or ""):
        name = _meta(node).get("name")
        for entry in _status(node).get("images") or []:
            for image in entry.get("names") or []:
                state = states.setdefault(image, {"size": int(entry.get("sizeBytes") or 0), "nodes": set()})
                state["nodes"].add(name)
    return states


def image_volume_rules(server_version):
    """How the server's ImageLocality counts a pod's image volumes: (in the sum, in the image count).

    Kubernetes 1.34 and 1.35 ignore them, 1.36 adds their sizes to the sum, 1.37 also counts them (the
    maximum grows with them): image_locality.go at v1.35.4, v1.36.3 and v1.37.2."""
    try:
        minor = parse_kube_version(server_version).minor
    except VersionError:  # a server that reports no release (v0.0.0, unstamped): the newest rules
        return True, True
    return minor >= 36, minor >= 37


def pod_images(pod, server_version):
    """The image references ImageLocality sums for a pod on this server, and the image count that scales its
    score."""
    spec = _spec(pod)
    in_sum, in_count = image_volume_rules(server_version)
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    refs = [c.get("image") for c in containers if c.get("image")]
    volumes = [(v.get("image") or {}).get("reference") for v in spec.get("volumes") or [] if v.get("image")]
    if in_sum:
        refs += [r for r in volumes if r]
    return [normalized_image_name(r) for r in refs], len(containers) + (len(volumes) if in_count else 0)


def image_locality_score(refs, num_containers, node_name, states, total_nodes):
    """kube-scheduler's ImageLocality score (0..100) of a pod with these image references on one node."""
    total = 0
    for ref in refs:
        state = states.get(ref)
        if state and node_name in state["nodes"]:
            total += int(state["size"] * (float(len(state["nodes"])) / float(total_nodes)))
    maximum = IMAGE_LOCALITY_MAX_PER_CONTAINER * max(num_containers, 1)
    total = min(max(total, IMAGE_LOCALITY_MIN), maximum)
    return MAX_NODE_SCORE * (total - IMAGE_LOCALITY_MIN) // (maximum - IMAGE_LOCALITY_MIN)


def _is_launcher(pod):
    return (_meta(pod).get("labels") or {}).get(LAUNCHER_LABEL[0]) == LAUNCHER_LABEL[1]


def reference_launcher_pod(pods, images):
    """The launcher pod whose ImageLocality score is reported: the newest non-terminal one (it stands for the VMs to
    come), else the smallest pod KubeVirt makes for a VM, on one of the launcher images (None if none is known)."""
    launchers = [p for p in pods or [] if _is_launcher(p) and not node_fit.pod_is_terminal(p)]
    if launchers:
        return max(launchers, key=lambda p: (_meta(p).get("creationTimestamp") or "", _key(p)))
    if not images:
        return None
    image = sorted(images)[0]
    return {"spec": {"initContainers": [{"name": ASSUMED_LAUNCHER_CONTAINERS[1], "image": image}],
                     "containers": [{"name": ASSUMED_LAUNCHER_CONTAINERS[0], "image": image}]}}


def _advice(difference, listing, not_listing, at_cap, image):
    lines = ["ImageLocality gives a virt-launcher pod %d more points (of 100) on the %d node(s) for VMs that list %s "
             "in status.images than on the %d that do not, so new VMs lean toward the first."
             % (difference, len(listing), image, len(not_listing)),
             "Place VMs with a scheduler running the kubevirt profile (role vmsched.kubevirt.secondary_scheduler, "
             "ImageLocality off), or raise the kubelet's nodeStatusMaxImages (-1: no cap) so that every node lists it."]
    capped = [n for n in not_listing if n in at_cap]
    if capped:
        lines.append("Not listing it at the kubelet's default cap of %d images: %s."
                     % (DEFAULT_NODE_STATUS_MAX_IMAGES, ", ".join(capped)))
    others = [n for n in not_listing if n not in at_cap]
    if others:
        lines.append("Not listing it below the default cap (the image is not there yet, or the node's cap is lower): "
                     "%s." % ", ".join(others))
    return " ".join(lines)


def image_locality_exposure(server_version, nodes, pods, images, vm_nodes):
    """Whether ImageLocality (the server's release of it) favours some of the nodes VMs run on (vm_nodes, names):
    which of them list a launcher image, which report the kubelet's default cap of images, the score the reference
    launcher pod gets for the launcher image on nodes listing it and on the others, and the advice. Returns (summary, {node: score}), the
    score being the reference pod's whole ImageLocality score on each node."""
    images = set(normalized_image_name(i) for i in images or [])
    reported = {_meta(n).get("name"): len(_status(n).get("images") or []) for n in nodes or []}
    summary = {"launcher_images": sorted(images), "reference_pod": None, "nodes_listing": None,
               "nodes_not_listing": None,
               "nodes_at_image_cap": [n for n in vm_nodes if reported.get(n) == DEFAULT_NODE_STATUS_MAX_IMAGES],
               "score_on_listing_nodes": None, "score_on_other_nodes": None, "score_difference": None,
               "exposed": None, "advice": None}
    pod = reference_launcher_pod(pods, images)
    if pod is None or not reported:
        return summary, {}
    summary["reference_pod"] = _key(pod) if _meta(pod).get("name") else None
    states = image_states(nodes)
    refs, num_containers = pod_images(pod, server_version)
    scores = {name: image_locality_score(refs, num_containers, name, states, len(reported)) for name in reported}
    listed = set()
    for image in images:
        listed |= (states.get(image) or {}).get("nodes") or set()
    listing = [n for n in vm_nodes if n in listed]
    not_listing = [n for n in vm_nodes if n not in listed]
    # The launcher's share: the pod's launcher references alone, on each node.
    launcher_refs = [r for r in refs if r in images]
    own = {name: image_locality_score(launcher_refs, num_containers, name, states, len(reported)) for name in vm_nodes}
    on = max(own[n] for n in listing) if listing else None
    off = min(own[n] for n in not_listing) if not_listing else None
    difference = on - off if listing and not_listing else 0
    summary.update(nodes_listing=listing, nodes_not_listing=not_listing, score_on_listing_nodes=on,
                   score_on_other_nodes=off, score_difference=difference, exposed=difference > 0)
    if difference > 0:
        shown = sorted(set(launcher_refs)) or sorted(images)
        summary["advice"] = _advice(difference, listing, not_listing, summary["nodes_at_image_cap"], " / ".join(shown))
    return summary, scores


def _mentions_kube_scheduler(pod_spec):
    for container in pod_spec.get("containers") or []:
        words = [container.get("image") or ""] + list(container.get("command") or []) + list(container.get("args") or [])
        if any("kube-scheduler" in str(word) for word in words):
            return True
    return False


def scheduler_deployments(deployments):
    """(scheduler name or None, "namespace/name") for Deployments that run a scheduler."""
    found = []
    for deployment in deployments or []:
        labels = _meta(deployment).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) == SECONDARY_SCHEDULER_MANAGED_BY:
            found.append((labels.get(INSTANCE_LABEL) or None, _key(deployment)))
        elif _mentions_kube_scheduler(_spec(_spec(deployment).get("template"))):
            found.append((None, _key(deployment)))
    return found


def summarize_schedulers(pods, vmis, deployments):
    table = {}

    def entry(name):
        return table.setdefault(name, {"name": name, "default": name == DEFAULT_SCHEDULER, "pods": 0, "vmis": 0,
                                       "deployments": []})
    for pod in pods or []:
        if not node_fit.pod_is_terminal(pod):
            entry(scheduler_of(pod))["pods"] += 1
    for vmi in active_vmis(vmis):
        entry(scheduler_of(vmi))["vmis"] += 1
    for name, key in scheduler_deployments(deployments):
        entry(name)["deployments"].append(key)
    for item in table.values():
        item["deployments"].sort()
    return sorted(table.values(), key=lambda s: (s["name"] is None, s["name"] or ""))


def _workload(obj, kind, pod_template):
    """A role's workload as the cluster has it: where, which scheduler or descheduler instance, which image."""
    containers = _spec(pod_template).get("containers") or [{}]
    return {"namespace": _meta(obj).get("namespace"), "name": _meta(obj).get("name"), "kind": kind,
            "instance": (_meta(obj).get("labels") or {}).get(INSTANCE_LABEL), "image": containers[0].get("image")}


def _descheduler(obj, kind, pod_template):
    """A descheduler workload, and whether it only logs what it would evict (the role's --dry-run)."""
    found = _workload(obj, kind, pod_template)
    container = (_spec(pod_template).get("containers") or [{}])[0]
    found["dry_run"] = "--dry-run" in [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    return found


def installed(deployments, cronjobs, policy_version, policies):
    """What this collection's roles have installed, read from the cluster by their managed-by labels, whichever
    steps a run took: secondary schedulers, deschedulers, VM-defaults policies. A kind the user may not list is
    None."""
    def managed_by(obj, who):
        return (_meta(obj).get("labels") or {}).get(MANAGED_BY_LABEL) == who
    found = {"schedulers": None, "deschedulers": None, "vm_defaults": None}
    if deployments is not None:
        found["schedulers"] = [_workload(d, "Deployment", _spec(d).get("template"))
                               for d in deployments if managed_by(d, SECONDARY_SCHEDULER_MANAGED_BY)]
        found["deschedulers"] = [_descheduler(d, "Deployment", _spec(d).get("template"))
                                 for d in deployments if managed_by(d, DESCHEDULER_MANAGED_BY)]
    if cronjobs is None:
        found["deschedulers"] = None
    elif found["deschedulers"] is not None:
        found["deschedulers"] += [_descheduler(c, "CronJob", _spec(_spec(c).get("jobTemplate")).get("template"))
                                  for c in cronjobs if managed_by(c, DESCHEDULER_MANAGED_BY)]
    if policies is not None:
        found["vm_defaults"] = [{"name": _meta(p).get("name"), "api_version": "admissionregistration.k8s.io/%s"
                                 % policy_version} for p in policies if managed_by(p, VM_DEFAULTS_MANAGED_BY)]
    for items in found.values():
        if items:
            items.sort(key=lambda i: (i.get("namespace") or "", i["name"]))
    return found


def node_ready(node):
    """The node's Ready condition: True, False, or None when it reports none (or Unknown)."""
    for condition in _status(node).get("conditions") or []:
        if condition.get("type") == "Ready":
            return {"True": True, "False": False}.get(condition.get("status"))
    return None


def summarize_nodes(nodes, pods, vmis, images):
    usage = node_fit.node_usage(pods)
    counts = {}
    for vmi in active_vmis(vmis):
        node = _status(vmi).get("nodeName")
        if node:
            counts[node] = counts.get(node, 0) + 1
    result = []
    for node in nodes or []:
        name = _meta(node).get("name")
        allocatable = _status(node).get("allocatable") or {}
        used = usage.get(name) or {}
        result.append({
            "name": name,
            "vmi_count": counts.get(name, 0),
            "cpu_requested": round(used.get("cpu", 0.0), 3),
            "cpu_allocatable": round(node_fit.parse_quantity(allocatable.get("cpu", 0)), 3),
            "memory_requested": int(round(used.get("memory", 0.0))),
            "memory_allocatable": int(round(node_fit.parse_quantity(allocatable.get("memory", 0)))),
            "ready": node_ready(node),
            "labels": _meta(node).get("labels") or {},
            "taints": _spec(node).get("taints") or [],
            "unschedulable": bool(_spec(node).get("unschedulable")),
            "lists_virt_launcher_image": node_lists_image(node, images),
            "images_reported": len(_status(node).get("images") or []),
        })
    result.sort(key=lambda n: n["name"] or "")
    return result


def vm_node_rows(node_rows, nodes):
    """The rows of the nodes that can take VMs: uncordoned and labelled kubevirt.io/schedulable=true (all uncordoned
    ones if none is labelled)."""
    labelled = {_meta(n).get("name") for n in nodes or []
                if (_meta(n).get("labels") or {}).get(SCHEDULABLE_LABEL) == "true"}
    usable = [r for r in node_rows if not r["unschedulable"]]
    if labelled:
        usable = [r for r in usable if r["name"] in labelled]
    return usable


def balance(node_rows, nodes):
    """CVs over the nodes that can take VMs (vm_node_rows)."""
    usable = vm_node_rows(node_rows, nodes)
    shares = [r["cpu_requested"] / r["cpu_allocatable"] for r in usable if r["cpu_allocatable"] > 0]
    return {"vmi_count_cv": coefficient_of_variation([r["vmi_count"] for r in usable]),
            "cpu_share_cv": coefficient_of_variation(shares),
            # vm_rebalance's spread.before of objectives vms, memory and cpu over these nodes (plan.spread).
            "spread": {"vms": plan.spread(dict((r["name"], r["vmi_count"]) for r in usable)),
                       "memory": plan.spread(dict((r["name"], r["memory_requested"]) for r in usable)),
                       "cpu": plan.spread(dict((r["name"], r["cpu_requested"]) for r in usable))},
            "nodes": [r["name"] for r in usable]}


def summarize_migrations(vmims, vmis=None, pods=None):
    """The migrations not yet Succeeded or Failed, those being cancelled too, with their source and target
    nodes (kubevirt.migration_nodes: from the VMI and the target pod while the VMIM carries none)."""
    by_vmi = dict(((_meta(v).get("namespace"), _meta(v).get("name")), v) for v in vmis or [])
    result = []
    unfinished = [m for m in vmims or [] if not is_final(m)]
    for vmim in sorted(unfinished, key=lambda m: _meta(m).get("creationTimestamp") or ""):
        source, target = migration_nodes(vmim, by_vmi.get((_meta(vmim).get("namespace"), _spec(vmim).get("vmiName"))),
                                         pods)
        result.append({"namespace": _meta(vmim).get("namespace"), "name": _meta(vmim).get("name"),
                       "vmi": _spec(vmim).get("vmiName"), "phase": phase(vmim),
                       "source_node": source, "target_node": target,
                       "cancel_requested": bool(_meta(vmim).get("deletionTimestamp"))})
    return result


def eviction_at_risk(vmis, pods, kubevirt_cr):
    """Running VMIs opted in to eviction (the evict annotation on the VMI or on its launcher pod, which is what the
    descheduler reads) whose eviction would restart them or never move them, with the reason (kubevirt.eviction_verdict).
    A KubeVirt CR that could not be read counts as KubeVirt's default strategy, None."""
    cluster = cluster_eviction_strategy(kubevirt_cr)
    launchers = {}
    for pod in pods or []:
        uid = (_meta(pod).get("labels") or {}).get(CREATED_BY_LABEL)
        if uid and _is_launcher(pod):
            launchers.setdefault(uid, []).append(pod)
    risky = []
    for vmi in active_vmis(vmis):
        opted = [(_meta(o).get("annotations") or {}).get(EVICT_ANNOTATION) == "true"
                 for o in [vmi] + launchers.get(_meta(vmi).get("uid"), [])]
        if not any(opted):
            continue
        strategy, source = effective_eviction_strategy(_spec(vmi), cluster)
        migratable, why = live_migratable(vmi)
        verdict = eviction_verdict(strategy, source, migratable, why)
        if verdict["outcome"] in ("restart", "blocked"):
            risky.append({"namespace": _meta(vmi).get("namespace"), "name": _meta(vmi).get("name"),
                          "node": _status(vmi).get("nodeName"), "outcome": verdict["outcome"],
                          "strategy": strategy, "reason": verdict["reason"]})
    return sorted(risky, key=lambda r: (r["namespace"], r["name"]))


def report(server_version, capabilities, nodes, pods, vmis, vmims, kubevirt_cr, deployments, installed_parts=None):
    """The whole result from the lists (plain dicts as the API returns them)."""
    images = launcher_images(kubevirt_cr, pods)
    rows = summarize_nodes(nodes, pods, vmis, images)
    vm_nodes = [r["name"] for r in vm_node_rows(rows, nodes)]
    exposure, scores = image_locality_exposure(server_version, nodes, pods, images, vm_nodes)
    for row in rows:
        row["image_locality_score"] = scores.get(row["name"])
    return {
        "server_version": server_version,
        "kubevirt": {
            "namespace": _meta(kubevirt_cr).get("namespace") if kubevirt_cr else None,
            "name": _meta(kubevirt_cr).get("name") if kubevirt_cr else None,
            "phase": _status(kubevirt_cr).get("phase") if kubevirt_cr else None,
            "version": capabilities.version,
            "supports_added_node_selector": capabilities.added_node_selector,
            "parallel_migrations_per_cluster": capabilities.parallel_per_cluster,
            "parallel_outbound_migrations_per_node": capabilities.parallel_outbound_per_node,
        },
        "schedulers": summarize_schedulers(pods, vmis, deployments),
        "nodes": rows,
        "balance": balance(rows, nodes),
        "image_locality": exposure,
        "vmis_on_default_scheduler": sorted(_key(v) for v in active_vmis(vmis) if scheduler_of(v) == DEFAULT_SCHEDULER),
        "migrations_in_flight": summarize_migrations(vmims, vmis, pods),
        "eviction_at_risk": eviction_at_risk(vmis, pods, kubevirt_cr),
        "installed": installed_parts or installed(deployments, None, None, None),
    }


class SchedulingReport:
    """scheduling_info (see module_runner.py): reads each kind once, capabilities first, so that a KubeVirt CR
    the user may not read only warns. Run with a cluster made with page_size=None: one list call per kind."""

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.cluster = cluster
        self.warnings = []
        self.result = {}

    def run(self):
        cluster = self.cluster
        capabilities = detect_capabilities(cluster)
        self.warnings.extend(capabilities.warnings)
        deployments = cluster.deployments()
        found = report(cluster.server_version(), capabilities, cluster.nodes(), cluster.active_pods(),
                       cluster.list_vmis(), cluster.list_vmims(), capabilities.kubevirt_cr, deployments,
                       self.installed(deployments))
        self.result = dict(changed=False, **found)

    def installed(self, deployments):
        """installed(): CronJobs and MutatingAdmissionPolicies too, each only warned about when it may not be read."""
        def skipped(what, field):
            return lambda why: self.warnings.append("cannot list %s (%s): installed.%s is null" % (what, why, field))
        cronjobs = unless_forbidden(self.cluster.cronjobs, skipped("CronJobs", "deschedulers"))
        policies = unless_forbidden(self.cluster.mutating_admission_policies,
                                    skipped("MutatingAdmissionPolicies", "vm_defaults"), default=(None, None))
        return installed(deployments, cronjobs, policies[0], policies[1])
