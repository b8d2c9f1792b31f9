# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An in-memory cluster for the engines' unit tests: the interface of the cluster object (module_utils/cluster.py),
reads, writes and a watch that plays KubeVirt's part (a migration ends when it is watched: Succeeded on the node its
selector names, else on `land_on`, or Failed for VMIs listed in `fail`)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import KubeVirtError
from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import Cluster
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMIMS, VMIS, VMS, in_flight

HOSTNAME = "kubernetes.io/hostname"


def forbidden():
    return ApiException(status=403, reason="Forbidden")


def node(name, labels=None, cordoned=False, taints=None, cpu="4"):
    return {"metadata": {"name": name, "labels": dict({HOSTNAME: name, "kubevirt.io/schedulable": "true"},
                                                      **(labels or {}))},
            "spec": {"unschedulable": cordoned, "taints": taints or []},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


def vmi(name, node_name, namespace="ns", phase="Running", migratable=True, node_selector=None, uid=None):
    conditions = []
    if migratable is True:
        conditions.append({"type": "LiveMigratable", "status": "True"})
    elif migratable:
        conditions.append({"type": "LiveMigratable", "status": "False", "reason": migratable,
                           "message": "cannot migrate VMI: PVC is not shared, live migration requires "
                                      "that all PVCs must be shared (using ReadWriteMany access mode)"})
    spec = {"nodeSelector": dict(node_selector)} if node_selector else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or "uid-%s" % name},
            "spec": spec, "status": {"phase": phase, "nodeName": node_name, "conditions": conditions}}


def launcher(vmi_obj, cpu="1"):
    return {"metadata": {"name": "virt-launcher-%s" % vmi_obj["metadata"]["name"],
                         "namespace": vmi_obj["metadata"]["namespace"],
                         "labels": {"kubevirt.io/created-by": vmi_obj["metadata"]["uid"]}},
            "spec": {"nodeName": vmi_obj["status"]["nodeName"],
                     "containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}}


def kubevirt_cr(version="v1.6.6", per_cluster=None, per_node=None, rollout=None):
    migrations = {}
    if per_cluster:
        migrations["parallelMigrationsPerCluster"] = per_cluster
    if per_node:
        migrations["parallelOutboundMigrationsPerNode"] = per_node
    configuration = {"migrations": migrations}
    if rollout:
        configuration["vmRolloutStrategy"] = rollout
    return {"metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": {"configuration": configuration},
            "status": {"observedKubeVirtVersion": version, "observedKubeVirtRegistry": "quay.io/kubevirt"}}


def apply(obj, patch):
    """RFC 7386 merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(obj) if isinstance(obj, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply(result.get(key), value)
    return result


def evacuation_vmim(vmi_name, name=None, node="n1", phase="Running", namespace="ns"):
    """A VMIM as KubeVirt's evacuation controller creates it after an eviction of the VMI's pod (kubectl drain,
    the descheduler): no selector of its own, the node in the kubevirt.io/evacuationMigration annotation."""
    name = name or "kubevirt-evacuation-%s" % vmi_name
    return {"metadata": {"name": name, "namespace": namespace, "uid": "uid-" + name,
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"kubevirt.io/evacuationMigration": node}},
            "spec": {"vmiName": vmi_name}, "status": {"phase": phase} if phase else {}}


def evacuated(vmi_obj):
    """The VMI as virt-api marks it when it answers the eviction of its pod with 429: status.evacuationNodeName."""
    vmi_obj["status"]["evacuationNodeName"] = vmi_obj["status"]["nodeName"]
    return vmi_obj


def vmim(rv, phase=None, name="mig"):
    obj = {"metadata": {"name": name, "resourceVersion": str(rv), "creationTimestamp": "2025-01-01T00:00:00Z"},
           "status": {}}
    if phase:
        obj["status"]["phase"] = phase
        obj["status"]["phaseTransitionTimestamps"] = [
            {"phase": phase, "phaseTransitionTimestamp": "2025-01-01T00:00:12Z"}]
    return obj


class FakeCluster(Cluster):
    """The cluster object with the API server in memory: get_vm, get_vmi and get_vmim are the real ones, over the
    fake's get_kubevirt; any other call the fake does not make fails (the real object's clients are absent).
    `forbidden`: the methods answering 403 (get_<plural> for get_kubevirt). `prune_added_node_selector`: an API
    server that drops spec.addedNodeSelector (KubeVirt older than 1.6). `fail`: VMI name -> failureReason (None: the
    reason only in a Warning event). `stuck`: VMI names whose migrations never end. `land_on`: the target
    node of a migration without a hostname in its selector. `namespaces`: the namespaces that exist (None: any).
    `metrics`: metrics.k8s.io's NodeMetrics items (None: the API is not served)."""

    def __init__(self, nodes=(), vmis=(), pods=(), vms=(), vmims=(), cr=None, forbidden=(),
                 prune_added_node_selector=False, fail=None, stuck=(), land_on=None, openapi=None, namespaces=None,
                 metrics=None):
        self.objects = {}
        self.rv = 100
        for plural, items in ((VMIS, vmis), (VMS, vms), (VMIMS, vmims)):
            for item in items:
                self.put(plural, copy.deepcopy(item))
        self._nodes = [copy.deepcopy(n) for n in nodes]
        self.pods = [copy.deepcopy(p) for p in pods]
        self.cr = cr
        self.openapi = openapi
        self.forbidden = set(forbidden)
        self.prune = prune_added_node_selector
        self.fail = dict(fail or {})
        self.stuck = set(stuck)
        self.land_on = land_on
        self.namespaces = None if namespaces is None else set(namespaces)
        self.metrics = metrics      # metrics.k8s.io's NodeMetrics items; None: not served
        self.events = []
        self.writes = []
        self.in_flight_at_create = []   # for each VMIM created: the migrations then in flight, the new one included
        self.clock = [0.0]

    # --- bookkeeping ----------------------------------------------------------------------------------------

    def put(self, plural, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[(plural, obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        return obj

    def items(self, plural, namespace=None):
        return [copy.deepcopy(o) for (p, ns, _n), o in sorted(self.objects.items()) if p == plural
                and (namespace is None or ns == namespace)]

    def vmims(self, namespace="ns"):
        return self.items(VMIMS, namespace)

    def _check(self, what):
        if what in self.forbidden:
            raise forbidden()

    # --- the cluster object's reads -------------------------------------------------------------------------

    def get_kubevirt(self, plural, namespace, name):
        self._check("get_" + plural)
        obj = self.objects.get((plural, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def snapshot_kubevirt(self, plural, namespace=None, label_selector=None, field_selector=None):
        items = self.items(plural, namespace)
        if label_selector:
            key, value = label_selector.split("=")
            items = [i for i in items if (i["metadata"].get("labels") or {}).get(key) == value]
        return str(self.rv), items

    def list_vms(self, namespace=None, label_selector=None):
        return self.items(VMS, namespace)

    def list_vmis(self, namespace=None, label_selector=None):
        items = self.items(VMIS, namespace)
        if label_selector:
            key, value = label_selector.split("=")
            items = [i for i in items if (i["metadata"].get("labels") or {}).get(key) == value]
        return items

    def list_vmims(self, namespace=None, vmi_name=None):
        return [m for m in self.items(VMIMS, namespace) if vmi_name is None or m["spec"]["vmiName"] == vmi_name]

    def kubevirt_cr(self):
        self._check("kubevirt_cr")
        return copy.deepcopy(self.cr)

    def openapi_has_added_node_selector(self):
        return self.openapi

    def nodes(self):
        self._check("nodes")
        return copy.deepcopy(self._nodes)

    def node(self, name):
        self._check("node")
        found = [n for n in self._nodes if n["metadata"]["name"] == name]
        return copy.deepcopy(found[0]) if found else None

    def live_node(self, name):
        """The node object itself, to change it as the cluster would (a test's hand, not the reader's)."""
        return [n for n in self._nodes if n["metadata"]["name"] == name][0]

    def namespace(self, name):
        self._check("namespace")
        if self.namespaces is not None and name not in self.namespaces:
            return None
        return {"metadata": {"name": name}}

    def active_pods(self, node=None):
        self._check("active_pods")
        return copy.deepcopy([p for p in self.pods if node is None or p["spec"].get("nodeName") == node])

    def node_metrics(self):
        self._check("node_metrics")
        return copy.deepcopy(self.metrics)

    def events_for(self, namespace, kind, name, uid=None):
        return [e for e in self.events if e["involvedObject"]["name"] == name]

    # --- the cluster object's writes ------------------------------------------------------------------------

    def create_vmim(self, namespace, body):
        obj = copy.deepcopy(body)
        name = obj["metadata"].get("name") or "%s%05d" % (obj["metadata"]["generateName"], self.rv)
        obj["metadata"].update(name=name, namespace=namespace, uid="uid-%s" % name,
                               creationTimestamp="2026-01-01T00:00:00Z")
        if in_flight(self.list_vmims(namespace, obj["spec"]["vmiName"])):
            raise ApiException(status=422, reason="Unprocessable Entity")
        if self.prune:
            obj["spec"].pop("addedNodeSelector", None)
        obj["status"] = {}
        self.in_flight_at_create.append(1 + sum(1 for m in self.items(VMIMS) if (m.get("status") or {})
                                                .get("phase") not in ("Succeeded", "Failed")))
        self.writes.append(("create", VMIMS, name))
        return copy.deepcopy(self.put(VMIMS, obj))

    def delete_vmim(self, namespace, name):
        self.writes.append(("delete", VMIMS, name))
        return self.objects.pop((VMIMS, namespace, name), None) is not None

    def patch_vm(self, namespace, name, patch, field_manager=None):
        self.writes.append(("patch", VMS, name))
        obj = apply(self.objects[(VMS, namespace, name)], patch)
        if (obj["spec"].get("template") or {}).get("spec", {}).get("nodeSelector") is not None:
            # vmRolloutStrategy LiveUpdate: the VMI follows the VM's nodeSelector.
            vmi_obj = self.objects.get((VMIS, namespace, name))
            if vmi_obj is not None:
                vmi_obj["spec"]["nodeSelector"] = dict(obj["spec"]["template"]["spec"]["nodeSelector"])
        return copy.deepcopy(self.put(VMS, obj))

    def patch_node(self, name, patch):
        self.writes.append(("patch", "nodes", name))
        for item in self._nodes:
            if item["metadata"]["name"] == name:
                item.update(apply(item, patch))

    # --- KubeVirt's part ------------------------------------------------------------------------------------

    def end(self, vmim):
        """Finish a migration as KubeVirt would; the VMIM as it is then."""
        name = vmim["spec"]["vmiName"]
        ns = vmim["metadata"]["namespace"]
        target_vmi = self.objects[(VMIS, ns, name)]
        annotation = (vmim["metadata"].get("annotations") or {}).get("vmsched.kubevirt.io/node-selector")
        selector = json.loads(annotation) if annotation else (vmim["spec"].get("addedNodeSelector") or {})
        source = target_vmi["status"]["nodeName"]
        target = selector.get(HOSTNAME) or self.land_on
        state = {"sourceNode": source, "targetNode": target, "migrationUid": vmim["metadata"].get("uid")}
        if name in self.fail:
            phase = "Failed"
            if self.fail[name]:
                state["failureReason"] = self.fail[name]
            else:
                self.events.append({"involvedObject": {"name": vmim["metadata"]["name"]}, "type": "Warning",
                                    "reason": "FailedMigration", "message": "target pod unschedulable"})
        else:
            phase = "Succeeded"
            target_vmi["status"]["nodeName"] = target
        target_vmi["status"]["migrationState"] = dict(state)
        vmim["status"] = {"phase": phase, "migrationState": state, "phaseTransitionTimestamps": [
            {"phase": "Pending", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"},
            {"phase": phase, "phaseTransitionTimestamp": "2026-01-01T00:00:07Z"}]}
        return self.put(VMIMS, vmim)

    def watch_kubevirt(self, plural, namespace, resource_version, window, label_selector=None, field_selector=None):
        """A watch stream that ends the watched migrations (all of them for a label selector, the oldest first;
        the named one for a field selector), except stuck ones; a VMI is followed as it is. A stuck wait moves the
        clock by the stream's window, as a server-side timeout would."""
        if plural == VMIS:
            name = field_selector.split("=", 1)[1]
            yield {"type": "MODIFIED", "raw_object": copy.deepcopy(self.objects[(VMIS, namespace, name)])}
            return
        while True:
            if field_selector:
                keys = [(VMIMS, namespace, field_selector.split("=", 1)[1])]
            else:
                keys = sorted((k for k in self.objects if k[0] == VMIMS and namespace in (None, k[1])),
                              key=lambda k: int(self.objects[k]["metadata"]["resourceVersion"]))
            pending = [k for k in keys if k in self.objects and self.objects[k]["spec"]["vmiName"]
                       not in self.stuck and (self.objects[k].get("status") or {}).get("phase")
                       not in ("Succeeded", "Failed")]
            if not pending:
                break
            yield {"type": "MODIFIED", "raw_object": copy.deepcopy(self.end(self.objects[pending[0]]))}
        self.clock[0] += window


def wire(migrator, cluster):
    """Point a VmiMigrator's sleeps and clock at the fake cluster."""
    migrator.clock = lambda: cluster.clock[0]

    def sleep(seconds):
        cluster.clock[0] += seconds
    migrator.sleep = sleep
    return migrator


def engine_for(engine_class, fake, params, check_mode=False):
    """An engine (Migration, Evacuation) over the fake cluster, its waits on the fake's clock."""
    instance = engine_class(fake, params, check_mode=check_mode)
    wire(instance.m, fake)
    return instance


def ran(engine_class, fake, params, check_mode=False):
    instance = engine_for(engine_class, fake, params, check_mode)
    instance.run()
    return instance


def failed(engine_class, fake, params, check_mode=False):
    """(the engine, its error message) of a run that must fail."""
    instance = engine_for(engine_class, fake, params, check_mode)
    with pytest.raises(KubeVirtError) as info:
        instance.run()
    return instance, str(info.value)
