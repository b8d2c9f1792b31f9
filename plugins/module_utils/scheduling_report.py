# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement report of scheduling_info: pure functions over the lists the cluster returns, and the engine
that reads them (one list call per kind).

Private to this collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    FINAL_PHASES,
    MANAGED_BY_LABEL,
    SCHEDULABLE_LABEL,
    detect_capabilities,
    is_final,
    migration_nodes,
    phase,
)

DEFAULT_SCHEDULER = "default-scheduler"
SECONDARY_SCHEDULER_MANAGED_BY = "vmsched.kubevirt.secondary_scheduler"
INSTANCE_LABEL = "app.kubernetes.io/instance"
LAUNCHER_LABEL = ("kubevirt.io", "virt-launcher")


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _spec(obj):
    return (obj or {}).get("spec") or {}


def _status(obj):
    return (obj or {}).get("status") or {}


def _key(obj):
    return "%s/%s" % (_meta(obj).get("namespace"), _meta(obj).get("name"))


def coefficient_of_variation(values):
    """Population standard deviation / mean, rounded to 4 decimals; None for no values or a zero mean."""
    values = [float(v) for v in values]
    if not values:
        return None
    mean = sum(values) / len(values)
    if mean == 0:
        return None
    variance = sum((v - mean) ** 2 for v in values) / len(values)
    return round(math.sqrt(variance) / mean, 4)


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
            "taints": _spec(node).get("taints") or [],
            "unschedulable": bool(_spec(node).get("unschedulable")),
            "lists_virt_launcher_image": node_lists_image(node, images),
        })
    result.sort(key=lambda n: n["name"] or "")
    return result


def balance(node_rows, nodes):
    """CVs over uncordoned nodes labelled kubevirt.io/schedulable=true (all uncordoned ones if none is labelled)."""
    labelled = {_meta(n).get("name") for n in nodes or []
                if (_meta(n).get("labels") or {}).get(SCHEDULABLE_LABEL) == "true"}
    usable = [r for r in node_rows if not r["unschedulable"]]
    if labelled:
        usable = [r for r in usable if r["name"] in labelled]
    shares = [r["cpu_requested"] / r["cpu_allocatable"] for r in usable if r["cpu_allocatable"] > 0]
    return {"vmi_count_cv": coefficient_of_variation([r["vmi_count"] for r in usable]),
            "cpu_share_cv": coefficient_of_variation(shares),
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


def report(server_version, capabilities, nodes, pods, vmis, vmims, kubevirt_cr, deployments):
    """The whole result from the lists (plain dicts as the API returns them)."""
    rows = summarize_nodes(nodes, pods, vmis, launcher_images(kubevirt_cr, pods))
    return {
        "server_version": server_version,
        "kubevirt": {
            "version": capabilities.version,
            "supports_added_node_selector": capabilities.added_node_selector,
            "parallel_migrations_per_cluster": capabilities.parallel_per_cluster,
            "parallel_outbound_migrations_per_node": capabilities.parallel_outbound_per_node,
        },
        "schedulers": summarize_schedulers(pods, vmis, deployments),
        "nodes": rows,
        "balance": balance(rows, nodes),
        "vmis_on_default_scheduler": sorted(_key(v) for v in active_vmis(vmis) if scheduler_of(v) == DEFAULT_SCHEDULER),
        "migrations_in_flight": summarize_migrations(vmims, vmis, pods),
    }


class SchedulingReport:
    """scheduling_info (see module_runner.py): reads each kind once, capabilities first, so that a KubeVirt CR
    the user may not read only warns. Run with a reader made with page_size=None: one list call per kind."""

    def __init__(self, reader, params, check_mode=False, diff=False):
        self.reader = reader
        self.warnings = []
        self.result = {}

    def run(self):
        reader = self.reader
        capabilities = detect_capabilities(reader)
        self.warnings.extend(capabilities.warnings)
        found = report(reader.server_version(), capabilities, reader.nodes(), reader.active_pods(),
                       reader.list_vmis(), reader.list_vmims(), capabilities.kubevirt_cr, reader.deployments())
        self.result = dict(changed=False, **found)
