# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controllers: what virt-controller (and, for migrations, virt-handler) would do.

Event-driven and level-triggered: informers feed keys into one work queue, every
reconcile reads the cache, compares with what should be, and makes at most a few
writes, each guarded by the resourceVersion it read (a conflict just requeues).
Reconciles of one VMI and of its migrations share a lock, so the simulator never
races itself on a VMI. Timers (migration duration, unschedulable timeouts,
backoffs) are delayed queue adds; a periodic resync re-enqueues everything.

Keys:
    ("vm", ns, name)        VirtualMachine -> VMI of the same name, VM status
    ("vmi", ns, name)       VMI -> virt-launcher pod, VMI phase and status
    ("vmim", ns, name)      migration state machine (virt-controller + simulated virt-handler)
    ("evac", node)          evacuation: VMIs marked by the eviction webhook get a VMIM
    ("migrations-of", ns, vmi)  fan-out to the VMIMs of one VMI
    ("pending-migrations",) fan-out to all Pending VMIMs (a slot may have freed)
"""
from __future__ import annotations

import calendar
import copy
import logging
import threading
import time
import zlib

from . import constants as c
from .informer import Informer, WorkQueue
from .kube import ApiError
from .launcher import render_launcher_pod, render_target_pod

log = logging.getLogger("sim")

RUNNING_MIGRATION_PHASES = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")


# Small helpers ------------------------------------------------------------------

def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse_time(value):
    if not value:
        return None
    try:
        return calendar.timegm(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def meta(obj):
    return obj.get("metadata", {})


def status(obj):
    return obj.get("status") or {}


def labels_of(obj):
    return meta(obj).get("labels") or {}


def annotations_of(obj):
    return meta(obj).get("annotations") or {}


def pod_is_down(pod):
    return status(pod).get("phase") in ("Succeeded", "Failed") or bool(meta(pod).get("deletionTimestamp"))


def pod_is_ready(pod):
    if status(pod).get("phase") != "Running":
        return False
    for cond in status(pod).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_unschedulable(pod):
    """(True, message) when the scheduler reported the pod Unschedulable."""
    if status(pod).get("phase") != "Pending" or meta(pod).get("deletionTimestamp"):
        return False, ""
    for cond in status(pod).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                and cond.get("reason") == "Unschedulable":
            return True, cond.get("message", "")
    return False, ""


def namespace_terminating(exc):
    return exc.status == 403 and "because it is being terminated" in exc.message


def condition(obj, ctype):
    for cond in status(obj).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def map_patch(old, new):
    """A merge-patch value turning map `old` into map `new` (absent keys become null)."""
    patch = {k: None for k in (old or {}) if k not in (new or {})}
    patch.update(new or {})
    return patch


def set_conditions(current, wanted):
    """Merge wanted conditions ({type: (status, reason, message)}) into a list, keeping transition times."""
    now = now_iso()
    by_type = {cond.get("type"): cond for cond in current or []}
    out = []
    for cond in current or []:
        ctype = cond.get("type")
        if ctype in wanted and wanted[ctype] is None:
            continue
        if ctype in wanted:
            st, reason, message = wanted[ctype]
            if (cond.get("status"), cond.get("reason", ""), cond.get("message", "")) == (st, reason, message):
                out.append(cond)
            else:
                new = {"type": ctype, "status": st, "lastProbeTime": None,
                       "lastTransitionTime": now if cond.get("status") != st else cond.get("lastTransitionTime", now)}
                if reason:
                    new["reason"] = reason
                if message:
                    new["message"] = message
                out.append(new)
        else:
            out.append(cond)
    for ctype, value in wanted.items():
        if value is not None and ctype not in by_type:
            st, reason, message = value
            new = {"type": ctype, "status": st, "lastProbeTime": None, "lastTransitionTime": now}
            if reason:
                new["reason"] = reason
            if message:
                new["message"] = message
            out.append(new)
    return out


def _strip_times(conds):
    return [{k: v for k, v in cond.items() if k not in ("lastProbeTime", "lastTransitionTime")} for cond in conds or []]


def conditions_differ(a, b):
    return _strip_times(a) != _strip_times(b)


def with_phase(obj, phase):
    """Status fragment moving obj to `phase`, appending to phaseTransitionTimestamps."""
    stamps = list(status(obj).get("phaseTransitionTimestamps") or [])
    stamps.append({"phase": phase, "phaseTransitionTimestamp": now_iso()})
    return {"phase": phase, "phaseTransitionTimestamps": stamps}


class KubeVirtConfig:
    """What the simulator reads from the KubeVirt CR (spec.configuration, status)."""

    def __init__(self, kv=None, default_image=None):
        spec_cfg = ((kv or {}).get("spec") or {}).get("configuration") or {}
        migrations = spec_cfg.get("migrations") or {}
        dev = spec_cfg.get("developerConfiguration") or {}
        self.parallel_per_cluster = int(migrations.get("parallelMigrationsPerCluster")
                                        or c.DEFAULT_PARALLEL_MIGRATIONS_PER_CLUSTER)
        self.parallel_outbound_per_node = int(migrations.get("parallelOutboundMigrationsPerNode")
                                              or c.DEFAULT_PARALLEL_OUTBOUND_PER_NODE)
        self.node_drain_taint_key = migrations.get("nodeDrainTaintKey") or c.DEFAULT_NODE_DRAIN_TAINT_KEY
        self.eviction_strategy = spec_cfg.get("evictionStrategy")
        self.cpu_allocation_ratio = int(dev.get("cpuAllocationRatio") or c.DEFAULT_CPU_ALLOCATION_RATIO)
        self.node_selectors = dict(dev.get("nodeSelectors") or {})
        kv_status = (kv or {}).get("status") or {}
        kv_spec = (kv or {}).get("spec") or {}
        version = kv_spec.get("imageTag") or kv_status.get("observedKubeVirtVersion") \
            or kv_status.get("targetKubeVirtVersion")
        registry = kv_spec.get("imageRegistry") or kv_status.get("observedKubeVirtRegistry") or "quay.io/kubevirt"
        self.launcher_image = f"{registry}/virt-launcher:{version}" if version else default_image


def eviction_strategy(vmi, config):
    return (vmi.get("spec") or {}).get("evictionStrategy") or config.eviction_strategy


def is_migratable(vmi):
    cond = condition(vmi, "LiveMigratable")
    return bool(cond) and cond.get("status") == "True"


class Simulator:
    """Informers, the work queue, workers and the reconcilers."""

    def __init__(self, kube, migration_seconds=1.0, workers=4, resync_seconds=5.0, default_image=None):
        self.kube = kube
        self.migration_seconds = migration_seconds
        self.n_workers = workers
        self.resync_seconds = resync_seconds
        self.default_image = default_image or "quay.io/kubevirt/virt-launcher:latest"
        self.queue = WorkQueue()
        self.stopping = threading.Event()
        self.locks = [threading.Lock() for _lock in range(128)]
        self.start_lock = threading.Lock()
        self.failures = {}
        self.noted = {}  # once-only log lines: key -> (message, when)
        self.started = {}  # migration uid -> wall-clock start of its Running phase
        group = "/apis/kubevirt.io/v1"
        self.vms = Informer(kube, "vms", f"{group}/virtualmachines", self._on_vm)
        self.vmis = Informer(kube, "vmis", f"{group}/virtualmachineinstances", self._on_vmi, indexers={
            "node": lambda o: [status(o)["nodeName"]] if status(o).get("nodeName") else []})
        self.vmims = Informer(kube, "vmims", f"{group}/virtualmachineinstancemigrations", self._on_vmim, indexers={
            "vmi": lambda o: [f"{meta(o).get('namespace')}/{(o.get('spec') or {}).get('vmiName')}"]})
        self.pods = Informer(kube, "pods", "/api/v1/pods", self._on_pod,
                             label_selector=f"{c.APP_LABEL}=virt-launcher", indexers={
                                 "vmi-uid": lambda o: [labels_of(o)[c.CREATED_BY_LABEL]]
                                 if labels_of(o).get(c.CREATED_BY_LABEL) else [],
                                 "migration-uid": lambda o: [labels_of(o)[c.MIGRATION_JOB_LABEL]]
                                 if labels_of(o).get(c.MIGRATION_JOB_LABEL) else []})
        self.kubevirts = Informer(kube, "kubevirts", f"{group}/kubevirts", self._on_kubevirt)
        self.informers = [self.kubevirts, self.pods, self.vmis, self.vmims, self.vms]
        self.threads = []

    # Configuration ------------------------------------------------------------------

    def config(self):
        kvs = self.kubevirts.list()
        kv = None
        for candidate in kvs:
            if meta(candidate).get("namespace") == c.KUBEVIRT_NAMESPACE:
                kv = candidate
                break
        if kv is None and kvs:
            kv = kvs[0]
        return KubeVirtConfig(kv, self.default_image)

    # Event handlers: only enqueue keys derived from the object itself ----------------

    def _on_vm(self, old, new):
        obj = new or old
        self.queue.add(("vm", meta(obj)["namespace"], meta(obj)["name"]))

    def _on_vmi(self, old, new):
        obj = new or old
        ns, name = meta(obj)["namespace"], meta(obj)["name"]
        self.queue.add(("vmi", ns, name))
        self.queue.add(("vm", ns, name))
        self.queue.add(("migrations-of", ns, name))
        evac = status(obj).get("evacuationNodeName")
        if evac:
            self.queue.add(("evac", evac))

    def _on_vmim(self, old, new):
        obj = new or old
        ns = meta(obj)["namespace"]
        self.queue.add(("vmim", ns, meta(obj)["name"]))
        vmi_name = (obj.get("spec") or {}).get("vmiName")
        if vmi_name:
            self.queue.add(("vmi", ns, vmi_name))
        old_phase = status(old).get("phase") if old else None
        new_phase = status(new).get("phase") if new else None
        if new is None or (new_phase != old_phase and new_phase in c.VMIM_FINAL_PHASES + RUNNING_MIGRATION_PHASES):
            self.queue.add(("pending-migrations",))
            self.queue.add(("evac-all",))

    def _on_pod(self, old, new):
        obj = new or old
        ns = meta(obj)["namespace"]
        vmi_name = annotations_of(obj).get(c.DOMAIN_ANNOTATION)
        if vmi_name:
            self.queue.add(("vmi", ns, vmi_name))
        job = annotations_of(obj).get(c.MIGRATION_JOB_NAME_ANNOTATION)
        if job:
            self.queue.add(("vmim", ns, job))

    def _on_kubevirt(self, old, new):
        self.queue.add(("pending-migrations",))

    # Running -----------------------------------------------------------------------

    def start(self, sync_timeout=60):
        for informer in self.informers:
            informer.start()
        deadline = time.monotonic() + sync_timeout
        for informer in self.informers:
            if not informer.synced.wait(max(0.1, deadline - time.monotonic())):
                raise RuntimeError(f"informer {informer.name} did not sync within {sync_timeout}s")
        for i in range(self.n_workers):
            thread = threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True)
            thread.start()
            self.threads.append(thread)
        thread = threading.Thread(target=self._resync_loop, name="resync", daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self):
        self.stopping.set()
        self.queue.shutdown()
        for informer in self.informers:
            informer.stop()

    def _resync_loop(self):
        while not self.stopping.wait(self.resync_seconds):
            for vm in self.vms.list():
                self.queue.add(("vm", meta(vm)["namespace"], meta(vm)["name"]))
            for vmi in self.vmis.list():
                self.queue.add(("vmi", meta(vmi)["namespace"], meta(vmi)["name"]))
                if status(vmi).get("evacuationNodeName"):
                    self.queue.add(("evac", status(vmi)["evacuationNodeName"]))
            for vmim in self.vmims.list():
                self.queue.add(("vmim", meta(vmim)["namespace"], meta(vmim)["name"]))
            now = time.monotonic()
            for key, when in list(self.noted.items()):
                if now - when[1] > 600:
                    self.noted.pop(key, None)

    def _worker(self):
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self._dispatch(key)
                self.failures.pop(key, None)
            except ApiError as exc:
                self._retry(key, exc, quiet=exc.conflict or exc.not_found)
            except Exception as exc:  # pylint: disable=broad-except
                log.exception("reconcile %s failed", key)
                self._retry(key, exc, quiet=True)
            finally:
                self.queue.done(key)

    def _retry(self, key, exc, quiet):
        count = self.failures.get(key, 0) + 1
        self.failures[key] = count
        delay = min(0.05 * 2 ** count, 10.0)
        if quiet:
            log.debug("reconcile %s: %s; retry in %.2fs", key, exc, delay)
        else:
            log.warning("reconcile %s: %s; retry in %.2fs", key, exc, delay)
        self.queue.add_after(key, delay)

    def _dispatch(self, key):
        kind = key[0]
        if kind == "vm":
            self.sync_vm(key[1], key[2])
        elif kind == "vmi":
            self.sync_vmi(key[1], key[2])
        elif kind == "vmim":
            self.sync_vmim(key[1], key[2])
        elif kind == "evac":
            self.sync_evacuation(key[1])
        elif kind == "migrations-of":
            for vmim in self.vmims.by_index("vmi", f"{key[1]}/{key[2]}"):
                self.queue.add(("vmim", key[1], meta(vmim)["name"]))
        elif kind == "pending-migrations":
            for vmim in self.vmims.list():
                if status(vmim).get("phase") in (None, "", "Pending"):
                    self.queue.add(("vmim", meta(vmim)["namespace"], meta(vmim)["name"]))
        elif kind == "evac-all":
            nodes = {status(v).get("evacuationNodeName") for v in self.vmis.list()}
            for node in nodes - {None, ""}:
                self.queue.add(("evac", node))

    def vmi_lock(self, ns, name):
        return self.locks[zlib.crc32(f"{ns}/{name}".encode()) % len(self.locks)]

    def note_once(self, key, message, level=logging.INFO):
        if self.noted.get(key, (None,))[0] != message:
            self.noted[key] = (message, time.monotonic())
            log.log(level, message)

    # Writes (each guarded by the resourceVersion the decision was based on) ----------

    def patch_vmi(self, vmi, status_patch=None, labels=None, annotations=None):
        body = {"metadata": {"resourceVersion": meta(vmi)["resourceVersion"]}}
        if labels:
            body["metadata"]["labels"] = labels
        if annotations:
            body["metadata"]["annotations"] = annotations
        if status_patch:
            body["status"] = status_patch
        new = self.kube.merge_patch("virtualmachineinstances", meta(vmi)["namespace"], meta(vmi)["name"], body)
        self.vmis.upsert(new)
        return new

    def patch_vmim_status(self, vmim, status_patch):
        body = {"metadata": {"resourceVersion": meta(vmim)["resourceVersion"]}, "status": status_patch}
        new = self.kube.merge_patch("virtualmachineinstancemigrations", meta(vmim)["namespace"],
                                    meta(vmim)["name"], body, subresource="status")
        self.vmims.upsert(new)
        return new

    def patch_vmim_meta(self, vmim, metadata):
        body = {"metadata": dict(metadata, resourceVersion=meta(vmim)["resourceVersion"])}
        new = self.kube.merge_patch("virtualmachineinstancemigrations", meta(vmim)["namespace"],
                                    meta(vmim)["name"], body)
        self.vmims.upsert(new)
        return new

    def create_pod(self, pod):
        new = self.kube.create("pods", pod["metadata"]["namespace"], pod)
        self.pods.upsert(new)
        return new

    def delete_pod(self, pod, why):
        try:
            self.kube.delete("pods", meta(pod)["namespace"], meta(pod)["name"], uid=meta(pod)["uid"])
            log.info("pod %s/%s: deleted (%s)", meta(pod)["namespace"], meta(pod)["name"], why)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                raise

    def record_event(self, obj, etype, reason, message):
        """A core/v1 Event on obj, as KubeVirt's recorders emit them (best effort)."""
        m = meta(obj)
        now = now_iso()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{m['name']}.", "namespace": m["namespace"]},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
                               "resourceVersion": m.get("resourceVersion")},
            "reason": reason, "message": message, "type": etype,
            "source": {"component": "virt-controller"}, "reportingComponent": "virt-controller",
            "reportingInstance": "vmsched-kubevirt-simulator",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.kube.request("POST", f"/api/v1/namespaces/{m['namespace']}/events", body=event)
        except ApiError as exc:
            log.debug("event %s on %s/%s not recorded: %s", reason, m["namespace"], m["name"], exc)

    # VirtualMachine --------------------------------------------------------------------

    @staticmethod
    def run_strategy(vm):
        spec = vm.get("spec") or {}
        if spec.get("runStrategy"):
            return spec["runStrategy"]
        if spec.get("running") is True:
            return "Always"
        return "Halted"

    def sync_vm(self, ns, name):
        vm = self.vms.get(f"{ns}/{name}")
        if vm is None:
            return  # the garbage collector deletes the VMI through its owner reference
        with self.vmi_lock(ns, name):
            vm = self.vms.get(f"{ns}/{name}")
            if vm is None:
                return
            vmi = self.vmis.get(f"{ns}/{name}")
            if vmi is not None and not any(ref.get("uid") == meta(vm)["uid"] and ref.get("controller")
                                           for ref in meta(vmi).get("ownerReferences") or []):
                self.note_once(("vm-foreign", ns, name),
                               f"vm {ns}/{name}: a VMI of that name exists and is not owned by the VM; leaving it alone",
                               logging.WARNING)
                return
            strategy = self.run_strategy(vm)
            vmi_deleting = vmi is not None and bool(meta(vmi).get("deletionTimestamp"))
            if meta(vm).get("deletionTimestamp") or strategy == "Halted":
                if vmi is not None and not vmi_deleting:
                    self.kube.delete("virtualmachineinstances", ns, name, uid=meta(vmi)["uid"])
                    log.info("vm %s/%s: %s, deleting VMI", ns, name,
                             "being deleted" if meta(vm).get("deletionTimestamp") else "runStrategy Halted")
            elif strategy in ("Always", "RerunOnFailure"):
                if vmi is None:
                    vmi = self.create_vmi(vm)
                elif not vmi_deleting and status(vmi).get("phase") in c.VMI_FINAL_PHASES:
                    if strategy == "Always" or status(vmi).get("phase") == "Failed":
                        self.kube.delete("virtualmachineinstances", ns, name, uid=meta(vmi)["uid"])
                        log.info("vm %s/%s: VMI %s, restarting (runStrategy %s)", ns, name,
                                 status(vmi).get("phase"), strategy)
            self.update_vm_status(vm, vmi, strategy)

    def create_vmi(self, vm):
        template = (vm.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        annotations = dict(tmeta.get("annotations") or {})
        annotations.setdefault(c.LATEST_API_ANNOTATION, "v1")
        annotations.setdefault(c.STORAGE_API_ANNOTATION, "v1")
        vmi = {
            "apiVersion": c.API_VERSION,
            "kind": "VirtualMachineInstance",
            "metadata": {
                "name": meta(vm)["name"],
                "namespace": meta(vm)["namespace"],
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [{
                    "apiVersion": c.API_VERSION, "kind": "VirtualMachine", "name": meta(vm)["name"],
                    "uid": meta(vm)["uid"], "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": copy.deepcopy(template.get("spec") or {"domain": {"devices": {}}}),
        }
        try:
            new = self.kube.create("virtualmachineinstances", meta(vm)["namespace"], vmi)
        except ApiError as exc:
            if exc.status == 409 or namespace_terminating(exc):
                return None
            raise
        self.vmis.upsert(new)
        log.info("vm %s/%s: created VMI", meta(vm)["namespace"], meta(vm)["name"])
        return new

    def update_vm_status(self, vm, vmi, strategy):
        vst = status(vm)
        wants_running = strategy in ("Always", "RerunOnFailure") and not meta(vm).get("deletionTimestamp")
        ready = False
        if vmi is None:
            printable = "Starting" if wants_running else "Stopped"
        elif meta(vm).get("deletionTimestamp"):
            printable = "Terminating"
        elif meta(vmi).get("deletionTimestamp"):
            printable = "Stopping"
        else:
            phase = status(vmi).get("phase") or "Pending"
            ready_cond = condition(vmi, "Ready")
            ready = phase == "Running" and bool(ready_cond) and ready_cond.get("status") == "True"
            sched = condition(vmi, "PodScheduled")
            mstate = status(vmi).get("migrationState") or {}
            if phase in ("Pending", "Scheduling", "Scheduled"):
                printable = "ErrorUnschedulable" if sched and sched.get("status") == "False" \
                    and sched.get("reason") == "Unschedulable" else "Starting"
            elif phase == "Running":
                printable = "Migrating" if mstate and not mstate.get("completed") else "Running"
            elif phase in c.VMI_FINAL_PHASES:
                printable = "Stopped" if strategy not in ("Always",) else "Starting"
            else:
                printable = "Unknown"
        if vmi is not None and not meta(vmi).get("deletionTimestamp"):
            ready_wanted = ("True", "", "") if ready else ("False", "NotReady" if status(vmi).get("phase") != "Running"
                                                           else "PodNotReady", "VMI is not ready")
        else:
            ready_wanted = ("False", "VMINotExists", "VMI does not exist")
        conditions = set_conditions(vst.get("conditions"), {"Ready": ready_wanted})
        patch = {}
        created = vmi is not None
        # created and ready are `omitempty` booleans in KubeVirt's VirtualMachineStatus: false is absent.
        if vst.get("created") != (created or None):
            patch["created"] = created or None
        if vst.get("ready") != (ready or None):
            patch["ready"] = ready or None
        if vst.get("printableStatus") != printable:
            patch["printableStatus"] = printable
        if vst.get("runStrategy") != strategy:
            patch["runStrategy"] = strategy
        if conditions_differ(vst.get("conditions"), conditions):
            patch["conditions"] = conditions
        if not patch:
            return
        body = {"metadata": {"resourceVersion": meta(vm)["resourceVersion"]}, "status": patch}
        new = self.kube.merge_patch("virtualmachines", meta(vm)["namespace"], meta(vm)["name"], body,
                                    subresource="status")
        self.vms.upsert(new)
        if "printableStatus" in patch:
            log.info("vm %s/%s: %s -> %s", meta(vm)["namespace"], meta(vm)["name"],
                     vst.get("printableStatus") or "-", printable)

    # VirtualMachineInstance -----------------------------------------------------------------

    def vmi_pods(self, vmi):
        ns = meta(vmi)["namespace"]
        return [p for p in self.pods.by_index("vmi-uid", meta(vmi)["uid"]) if meta(p)["namespace"] == ns]

    @staticmethod
    def current_pod(vmi, pods):
        """The pod the VMI runs in: on status.nodeName once scheduled, else the non-migration pod."""
        node = status(vmi).get("nodeName")
        if node:
            candidates = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]
        else:
            candidates = [p for p in pods if not labels_of(p).get(c.MIGRATION_JOB_LABEL)]
        if not candidates:
            return None
        live = [p for p in candidates if not pod_is_down(p)]
        pick = live or candidates
        return sorted(pick, key=lambda p: meta(p).get("creationTimestamp", ""))[-1]

    def vmi_transition(self, vmi, phase, extra=None, labels=None):
        patch = with_phase(vmi, phase)
        patch.update(extra or {})
        new = self.patch_vmi(vmi, patch, labels=labels)
        log.info("vmi %s/%s: %s -> %s%s", meta(vmi)["namespace"], meta(vmi)["name"],
                 status(vmi).get("phase") or "-", phase,
                 f" on {patch['nodeName']}" if patch.get("nodeName") else "")
        return new

    def sync_vmi(self, ns, name):
        if self.vmis.get(f"{ns}/{name}") is None:
            return  # pods go with the owner reference (garbage collector)
        with self.vmi_lock(ns, name):
            vmi = self.vmis.get(f"{ns}/{name}")
            if vmi is None:
                return
            self._sync_vmi(vmi)

    def _sync_vmi(self, vmi):
        ns, name = meta(vmi)["namespace"], meta(vmi)["name"]
        pods = self.vmi_pods(vmi)
        phase = status(vmi).get("phase") or ""
        if meta(vmi).get("deletionTimestamp"):
            for pod in pods:
                if not meta(pod).get("deletionTimestamp"):
                    self.delete_pod(pod, f"VMI {ns}/{name} is being deleted")
            return
        if phase in c.VMI_FINAL_PHASES:
            for pod in pods:
                if not pod_is_down(pod):
                    self.delete_pod(pod, f"VMI {ns}/{name} is {phase}")
            return
        config = self.config()
        if phase in ("", "Pending"):
            if phase == "":
                self.vmi_transition(vmi, "Pending")
                return
            if not [p for p in pods if not labels_of(p).get(c.MIGRATION_JOB_LABEL)]:
                pod = render_launcher_pod(vmi, config.launcher_image, config.cpu_allocation_ratio,
                                          config.node_selectors)
                try:
                    created = self.create_pod(pod)
                except ApiError as exc:
                    if namespace_terminating(exc):
                        return
                    if exc.status in (400, 403, 422):
                        self.note_once(("vmi-pod", ns, name), f"vmi {ns}/{name}: launcher pod rejected: {exc.message}",
                                       logging.WARNING)
                        self.record_event(vmi, "Warning", "FailedCreate", f"Error creating pod: {exc.message}")
                        self.queue.add_after(("vmi", ns, name), 2)
                        return
                    raise
                log.info("vmi %s/%s: created launcher pod %s", ns, name, meta(created)["name"])
                self.record_event(vmi, "Normal", "SuccessfulCreate", f"Created virtual machine pod {meta(created)['name']}")
            self.vmi_transition(self.vmis.get(f"{ns}/{name}") or vmi, "Scheduling")
            return
        pod = self.current_pod(vmi, pods)
        if phase == "Scheduling":
            if pod is None or pod_is_down(pod):
                reason = "PodNotExists" if pod is None else "PodTerminating"
                conds = set_conditions(status(vmi).get("conditions"), {"Ready": ("False", reason, "")})
                self.vmi_transition(vmi, "Failed", {"conditions": conds})
                return
            unschedulable, message = pod_unschedulable(pod)
            sched = ("False", "Unschedulable", message) if unschedulable else None
            conds = set_conditions(status(vmi).get("conditions"), {"PodScheduled": sched})
            node = (pod.get("spec") or {}).get("nodeName")
            if node and pod_is_ready(pod):
                self.vmi_transition(vmi, "Scheduled", {
                    "nodeName": node, "conditions": conds,
                    "activePods": map_patch(status(vmi).get("activePods"), {meta(pod)["uid"]: node}),
                }, labels={c.NODE_NAME_LABEL: node})
            elif conditions_differ(status(vmi).get("conditions"), conds):
                self.patch_vmi(vmi, {"conditions": conds})
                if unschedulable:
                    log.info("vmi %s/%s: launcher pod %s unschedulable: %s", ns, name, meta(pod)["name"], message)
            return
        # Scheduled / Running
        if pod is None or pod_is_down(pod):
            reason = "PodNotExists" if pod is None else "PodTerminating"
            conds = set_conditions(status(vmi).get("conditions"), {"Ready": ("False", reason, "")})
            self.vmi_transition(vmi, "Failed", {"conditions": conds})
            return
        self.delete_orphaned_targets(vmi, pod, pods)
        wanted = self.running_status(vmi, pod, pods, config)
        if phase == "Scheduled":
            self.vmi_transition(vmi, "Running", wanted)
            return
        changed = {}
        for key, value in wanted.items():
            current = status(vmi).get(key)
            if key == "conditions":
                if conditions_differ(current, value):
                    changed[key] = value
            elif key == "activePods":
                if current != {k: v for k, v in value.items() if v is not None}:
                    changed[key] = value
            elif current != value:
                changed[key] = value
        node = status(vmi).get("nodeName")
        labels = {c.NODE_NAME_LABEL: node} if node and labels_of(vmi).get(c.NODE_NAME_LABEL) != node else None
        if changed or labels:
            self.patch_vmi(vmi, changed, labels=labels)
        self.sync_pod_annotations(vmi, pod)

    def delete_orphaned_targets(self, vmi, current, pods):
        """Target pods whose migration object is gone (deleted without finalizer) and that never took over."""
        node = status(vmi).get("nodeName")
        for pod in pods:
            job = labels_of(pod).get(c.MIGRATION_JOB_LABEL)
            if not job or pod_is_down(pod) or meta(pod)["uid"] == meta(current)["uid"] \
                    or (pod.get("spec") or {}).get("nodeName") == node:
                continue
            if not any(meta(m)["uid"] == job for m in self.vmims.by_index(
                    "vmi", f"{meta(vmi)['namespace']}/{meta(vmi)['name']}")):
                self.delete_pod(pod, "its migration no longer exists")

    def running_status(self, vmi, pod, pods, config):
        annotations = annotations_of(vmi)
        reason = annotations.get(c.SIM_NOT_MIGRATABLE)
        if reason:
            message = annotations.get(c.SIM_NOT_MIGRATABLE_MESSAGE) or c.NOT_MIGRATABLE_MESSAGES.get(
                reason, f"cannot migrate VMI: {reason}")
            migratable = ("False", reason, message)
        else:
            migratable = ("True", "", "")
        ready = ("True", "", "") if pod_is_ready(pod) else ("False", "PodNotReady", "")
        conds = set_conditions(status(vmi).get("conditions"), {
            "Ready": ready, "LiveMigratable": migratable, "PodScheduled": None})
        active = {meta(p)["uid"]: p["spec"]["nodeName"] for p in pods
                  if (p.get("spec") or {}).get("nodeName") and not pod_is_down(p)}
        wanted = {
            "conditions": conds,
            "activePods": map_patch(status(vmi).get("activePods"), active),
            "migrationMethod": "LiveMigration",
            "migrationTransport": "Unix",
            "launcherContainerImageVersion": pod["spec"]["containers"][0].get("image"),
        }
        qos = status(pod).get("qosClass")
        if qos:
            wanted["qosClass"] = qos
        ip = status(pod).get("podIP")
        if ip:
            networks = (vmi.get("spec") or {}).get("networks") or [{"name": "default"}]
            wanted["interfaces"] = [{"name": networks[0].get("name", "default"), "ipAddress": ip,
                                     "ipAddresses": [p["ip"] for p in status(pod).get("podIPs") or []] or [ip],
                                     "infoSource": "domain, guest-agent", "interfaceName": "eth0"}]
        return wanted

    def sync_pod_annotations(self, vmi, pod):
        """descheduler eviction-in-progress on the active pod while its VMI is being evacuated."""
        node = (pod.get("spec") or {}).get("nodeName")
        marked = status(vmi).get("evacuationNodeName") == node and bool(node)
        if marked:
            migrations = sorted(self.vmims.by_index("vmi", f"{meta(vmi)['namespace']}/{meta(vmi)['name']}"),
                                key=lambda m: meta(m).get("creationTimestamp", ""))
            if migrations and status(migrations[-1]).get("phase") == "Failed":
                marked = False
        has = c.EVICTION_IN_PROGRESS_ANNOTATION in annotations_of(pod)
        if marked == has or pod_is_down(pod):
            return
        body = {"metadata": {"annotations": {c.EVICTION_IN_PROGRESS_ANNOTATION: "kubevirt" if marked else None}}}
        try:
            new = self.kube.merge_patch("pods", meta(pod)["namespace"], meta(pod)["name"], body)
            self.pods.upsert(new)
        except ApiError as exc:
            if not exc.not_found:
                raise

    # Migrations -------------------------------------------------------------------------------

    def target_pods(self, vmim):
        ns = meta(vmim)["namespace"]
        pods = [p for p in self.pods.by_index("migration-uid", meta(vmim)["uid"]) if meta(p)["namespace"] == ns]
        return sorted(pods, key=lambda p: meta(p).get("creationTimestamp", ""))

    def migration_duration(self, vmim, vmi):
        for source in (annotations_of(vmim), annotations_of(vmi)):
            value = source.get(c.SIM_MIGRATION_SECONDS)
            if value:
                try:
                    return max(0.0, float(value))
                except ValueError:
                    pass
        return self.migration_seconds

    def migration_fail_reason(self, vmim, vmi):
        for source in (annotations_of(vmim), annotations_of(vmi)):
            if source.get(c.SIM_MIGRATION_FAIL):
                return source[c.SIM_MIGRATION_FAIL]
        return None

    @staticmethod
    def _timeout(vmim, annotation, default):
        value = annotations_of(vmim).get(annotation)
        try:
            return int(value) if value is not None else default
        except ValueError:
            return default

    def vmim_transition(self, vmim, phase, extra=None, why="", vmi=None):
        patch = with_phase(vmim, phase)
        mstate = (status(vmi).get("migrationState") or {}) if vmi else {}
        if phase in c.VMIM_FINAL_PHASES and mstate.get("migrationUid") == meta(vmim)["uid"]:
            # Like virt-controller: the final phase and the VMI's migrationState in one update,
            # so a client that sees the phase also sees why.
            patch["migrationState"] = map_patch(status(vmim).get("migrationState"), mstate)
        patch.update(extra or {})
        new = self.patch_vmim_status(vmim, patch)
        log.info("vmim %s/%s (vmi %s): %s -> %s%s", meta(vmim)["namespace"], meta(vmim)["name"],
                 vmim["spec"].get("vmiName"), status(vmim).get("phase") or "-", phase, f" ({why})" if why else "")
        return new

    def fail_migration(self, vmim, why, extra=None, vmi=None):
        self.record_event(vmim, "Warning", "FailedMigration", why)
        return self.vmim_transition(vmim, "Failed", extra, why=why, vmi=vmi)

    def sync_vmim(self, ns, name):
        vmim = self.vmims.get(f"{ns}/{name}")
        if vmim is None:
            return
        vmi_name = (vmim.get("spec") or {}).get("vmiName") or ""
        with self.vmi_lock(ns, vmi_name):
            vmim = self.vmims.get(f"{ns}/{name}")
            if vmim is None:
                return
            self._sync_vmim(vmim, self.vmis.get(f"{ns}/{vmi_name}"))

    def _sync_vmim(self, vmim, vmi):
        ns, name = meta(vmim)["namespace"], meta(vmim)["name"]
        vmi_name = vmim["spec"].get("vmiName") or ""
        phase = status(vmim).get("phase") or ""
        deleting = bool(meta(vmim).get("deletionTimestamp"))
        finalizers = meta(vmim).get("finalizers") or []

        if vmi is None:
            if not deleting:
                self.kube.delete("virtualmachineinstancemigrations", ns, name, uid=meta(vmim)["uid"])
                log.info("vmim %s/%s: VMI %s does not exist, deleting the migration", ns, name, vmi_name)
            elif c.MIGRATION_FINALIZER in finalizers:
                self.patch_vmim_meta(vmim, {"finalizers": [f for f in finalizers if f != c.MIGRATION_FINALIZER]})
            return
        if not deleting and labels_of(vmim).get(c.MIGRATION_SELECTOR_LABEL) != vmi_name:
            self.patch_vmim_meta(vmim, {"labels": {c.MIGRATION_SELECTOR_LABEL: vmi_name}})
            return

        mstate = status(vmi).get("migrationState") or {}
        handed_off = mstate.get("migrationUid") == meta(vmim)["uid"]
        pods = self.target_pods(vmim)
        pod = pods[-1] if pods else None

        if phase in c.VMIM_FINAL_PHASES:
            self.started.pop(meta(vmim)["uid"], None)
            if handed_off and status(vmim).get("migrationState") != mstate:
                vmim = self.patch_vmim_status(vmim, {"migrationState": map_patch(
                    status(vmim).get("migrationState"), mstate)})
            if c.MIGRATION_FINALIZER in finalizers:
                self.patch_vmim_meta(vmim, {"finalizers": [f for f in finalizers if f != c.MIGRATION_FINALIZER]})
            if phase == "Failed":
                current = self.current_pod(vmi, self.vmi_pods(vmi))
                for target in pods:
                    if not pod_is_down(target) and (current is None or meta(target)["uid"] != meta(current)["uid"]):
                        self.delete_pod(target, f"migration {ns}/{name} failed")
            if not deleting:
                self.garbage_collect_migrations(vmi)
            return

        vmi_phase = status(vmi).get("phase")
        if vmi_phase in c.VMI_FINAL_PHASES:
            for target in pods:
                if not pod_is_down(target):
                    self.delete_pod(target, "VMI shut down during migration")
            self.fail_migration(vmim, "Migration failed vmi shutdown during migration.")
            return

        if deleting:
            self.abort_migration(vmim, vmi, pod, handed_off)
            return

        # Failures that can happen in any active phase.
        if phase in RUNNING_MIGRATION_PHASES and pod is None:
            if handed_off and not mstate.get("completed"):
                vmi = self.mark_vmi_migration_failed(vmi, "Target pod is down")
            self.fail_migration(vmim, "Migration target pod was removed during active migration.", vmi=vmi)
            return
        if pod is not None and pod_is_down(pod) and phase not in ("", "Pending"):
            if handed_off and not mstate.get("completed"):
                vmi = self.mark_vmi_migration_failed(vmi, "Target pod is down")
            self.fail_migration(vmim, "Migration failed because target pod shutdown during migration", vmi=vmi)
            return
        if handed_off and mstate.get("failed"):
            self.fail_migration(vmim, "source node reported migration failed", vmi=vmi)
            return

        if phase == "":
            other = mstate.get("migrationUid")
            if other and other != meta(vmim)["uid"] and not mstate.get("completed"):
                running = [m for m in self.vmims.list() if meta(m).get("uid") == other
                           and status(m).get("phase") not in c.VMIM_FINAL_PHASES]
                if running:
                    self.fail_migration(vmim, "VMI is not eligible for migration because another migration job "
                                              "is in progress.")
                    return
            self.vmim_transition(vmim, "Pending")
        elif phase == "Pending":
            self.migration_pending(vmim, vmi, pod)
        elif phase == "Scheduling":
            if pod_is_ready(pod):
                self.vmim_transition(vmim, "Scheduled", why=f"target pod {meta(pod)['name']} on "
                                                            f"{pod['spec']['nodeName']}")
            else:
                self.handle_pending_target(vmim, vmi, pod)
        elif phase == "Scheduled":
            if not handed_off:
                self.hand_off(vmim, vmi, pod)
                return
            self.vmim_transition(vmim, "PreparingTarget")
        elif phase == "PreparingTarget":
            # virt-handler on the target node: domain prepared, reports its address.
            if not mstate.get("targetNodeAddress"):
                target_ip = status(pod).get("hostIP") or status(pod).get("podIP") or "127.0.0.1"
                self.patch_vmi(vmi, {"migrationState": {"targetNodeAddress": target_ip,
                                                        "targetDirectMigrationNodePorts": {"49152": 0, "49153": 49152}}})
                return
            self.vmim_transition(vmim, "TargetReady")
        elif phase == "TargetReady":
            # virt-handler on the source node starts the live migration.
            if not mstate.get("startTimestamp"):
                self.patch_vmi(vmi, {"migrationState": {"startTimestamp": now_iso(), "mode": "PreCopy"}})
                self.started[meta(vmim)["uid"]] = time.time()  # sub-second start; the timestamp has seconds
                return
            self.vmim_transition(vmim, "Running")
        elif phase == "Running":
            self.migration_running(vmim, vmi, pod, mstate)

    def running_migrations(self):
        """findRunningMigrations: active phases, plus Pending ones that already have a target pod."""
        out = []
        for m in self.vmims.list():
            phase = status(m).get("phase") or ""
            if phase in c.VMIM_FINAL_PHASES:
                continue
            if phase in RUNNING_MIGRATION_PHASES or self.target_pods(m):
                out.append(m)
        return out

    def outbound_migrations(self, node, running):
        total = 0
        for m in running:
            vmi = self.vmis.get(f"{meta(m)['namespace']}/{m['spec'].get('vmiName')}")
            if vmi is None:
                continue
            mstate = status(vmi).get("migrationState") or {}
            if status(vmi).get("nodeName") == node or mstate.get("sourceNode") == node:
                total += 1
        return total

    def evacuation_backoff(self, vmim, vmi):
        """Seconds left of the backoff KubeVirt puts on repeated failed evacuation migrations."""
        if c.EVACUATION_ANNOTATION not in annotations_of(vmim):
            return 0
        migrations = [m for m in self.vmims.by_index("vmi", f"{meta(vmi)['namespace']}/{meta(vmi)['name']}")
                      if c.EVACUATION_ANNOTATION in annotations_of(m)]
        if len(migrations) < 2:
            return 0
        migrations.sort(key=lambda m: meta(m).get("creationTimestamp", ""), reverse=True)
        if meta(migrations[0])["uid"] != meta(vmim)["uid"]:
            return 0
        backoff = 0
        for m in migrations[1:]:
            if status(m).get("phase") == "Succeeded":
                break
            if meta(m).get("deletionTimestamp"):
                continue
            if status(m).get("phase") == "Failed":
                backoff = 20 if backoff == 0 else backoff * 2
        if not backoff:
            return 0
        failed_at = None
        for stamp in status(migrations[1]).get("phaseTransitionTimestamps") or []:
            if stamp.get("phase") == "Failed":
                failed_at = parse_time(stamp.get("phaseTransitionTimestamp"))
        if failed_at is None:
            return 0
        return max(0, failed_at + backoff - time.time())

    def migration_pending(self, vmim, vmi, pod):
        ns, name = meta(vmim)["namespace"], meta(vmim)["name"]
        key = ("vmim", ns, name)
        if pod is not None:
            self.vmim_transition(vmim, "Scheduling", why=f"target pod {meta(pod)['name']}")
            return
        if status(vmi).get("phase") != "Running":
            return  # KubeVirt creates the target pod only for a running VMI
        wait = self.evacuation_backoff(vmim, vmi)
        if wait > 0:
            self.note_once(("backoff", ns, name), f"vmim {ns}/{name}: evacuation backoff, {wait:.0f}s left")
            self.queue.add_after(key, wait)
            return
        source = self.current_pod(vmi, self.vmi_pods(vmi))
        if source is None or pod_is_down(source):
            return
        if not (status(vmim).get("migrationState") or {}).get("sourcePod"):
            vmim = self.patch_vmim_status(vmim, {"migrationState": {"sourcePod": meta(source)["name"]}})
        with self.start_lock:
            active_pods = [p for p in self.vmi_pods(vmi) if (p.get("spec") or {}).get("nodeName")
                           and not pod_is_down(p)]
            if len(active_pods) > 1:
                self.note_once(("wait", ns, name), f"vmim {ns}/{name}: waiting, VMI {vmi['metadata']['name']} "
                                                   f"has {len(active_pods)} active pods")
                self.queue.add_after(key, 1)
                return
            config = self.config()
            running = self.running_migrations()
            if len(running) >= config.parallel_per_cluster:
                self.note_once(("wait", ns, name), f"vmim {ns}/{name}: waiting, {len(running)} migrations running "
                                                   f"(parallelMigrationsPerCluster {config.parallel_per_cluster})")
                self.queue.add_after(key, 5)
                return
            node = status(vmi).get("nodeName")
            outbound = self.outbound_migrations(node, running)
            if outbound >= config.parallel_outbound_per_node:
                self.note_once(("wait", ns, name), f"vmim {ns}/{name}: waiting, {outbound} outbound migrations "
                                                   f"from {node} (parallelOutboundMigrationsPerNode "
                                                   f"{config.parallel_outbound_per_node})")
                self.queue.add_after(key, 5)
                return
            target = render_target_pod(vmi, vmim, config.launcher_image, config.cpu_allocation_ratio,
                                       config.node_selectors)
            try:
                created = self.create_pod(target)
            except ApiError as exc:
                if namespace_terminating(exc):
                    return
                if exc.status in (400, 403, 422):
                    self.record_event(vmi, "Warning", "FailedCreate", f"Error creating pod: {exc.message}")
                    self.note_once(("create", ns, name), f"vmim {ns}/{name}: target pod rejected: {exc.message}",
                                   logging.WARNING)
                    self.queue.add_after(key, 5)
                    return
                raise
        self.noted.pop(("wait", ns, name), None)
        log.info("vmim %s/%s: created target pod %s (nodeSelector %s)", ns, name, meta(created)["name"],
                 created["spec"].get("nodeSelector"))
        self.record_event(vmim, "Normal", "SuccessfulCreate", f"Created migration target pod {meta(created)['name']}")
        self.vmim_transition(vmim, "Scheduling", why=f"target pod {meta(created)['name']}")

    def handle_pending_target(self, vmim, vmi, pod):
        """handlePendingPodTimeout: delete a target pod stuck Unschedulable (or Pending) too long."""
        ns, name = meta(vmim)["namespace"], meta(vmim)["name"]
        key = ("vmim", ns, name)
        if status(pod).get("phase") != "Pending" or meta(pod).get("deletionTimestamp"):
            return
        created = parse_time(meta(pod).get("creationTimestamp")) or time.time()
        spent = max(0, int(time.time() - created))
        unschedulable_timeout = self._timeout(vmim, c.UNSCHEDULABLE_TIMEOUT_ANNOTATION, c.DEFAULT_UNSCHEDULABLE_TIMEOUT)
        pending_timeout = self._timeout(vmim, c.PENDING_TIMEOUT_ANNOTATION, c.DEFAULT_PENDING_TIMEOUT)
        unschedulable, message = pod_unschedulable(pod)
        if unschedulable:
            if self.noted.get(("unsched", ns, name)) is None:
                self.note_once(("unsched", ns, name), f"vmim {ns}/{name}: target pod {meta(pod)['name']} "
                                                      f"unschedulable: {message}")
                self.record_event(vmim, "Warning", "migrationTargetPodUnschedulable",
                                  f"Migration target pod for VMI [{ns}/{vmim['spec']['vmiName']}] is currently "
                                  f"unschedulable.")
            if spent >= unschedulable_timeout:
                self.delete_pod(pod, f"unschedulable pod {ns}/{meta(pod)['name']} timeout period exceeded")
                self.record_event(vmim, "Normal", "SuccessfulDelete",
                                  f"unschedulable pod {ns}/{meta(pod)['name']} timeout period exceeded")
                return
            self.queue.add_after(key, unschedulable_timeout - spent + 0.2)
        if spent >= pending_timeout:
            self.delete_pod(pod, f"pending pod {ns}/{meta(pod)['name']} timeout period exceeded")
            return
        self.queue.add_after(key, min(pending_timeout - spent + 0.2, 30))

    def hand_off(self, vmim, vmi, pod):
        """handleTargetPodHandoff: the VMI learns source and target; virt-handlers take over."""
        target_node = pod["spec"]["nodeName"]
        source_pod = (status(vmim).get("migrationState") or {}).get("sourcePod")
        if not source_pod:
            current = self.current_pod(vmi, self.vmi_pods(vmi))
            source_pod = meta(current)["name"] if current else None
        config = self.config()
        new_state = {
            "migrationUid": meta(vmim)["uid"],
            "targetNode": target_node,
            "sourceNode": status(vmi).get("nodeName"),
            "targetPod": meta(pod)["name"],
            "sourcePod": source_pod,
            "migrationConfiguration": {
                "parallelMigrationsPerCluster": config.parallel_per_cluster,
                "parallelOutboundMigrationsPerNode": config.parallel_outbound_per_node,
                "nodeDrainTaintKey": config.node_drain_taint_key,
                "allowPostCopy": False, "allowAutoConverge": False, "completionTimeoutPerGiB": 150,
                "progressTimeout": 150, "bandwidthPerMigration": "0Mi", "unsafeMigrationOverride": False,
            },
        }
        patch = {"migrationState": map_patch(status(vmi).get("migrationState"), {
            k: v for k, v in new_state.items() if v is not None})}
        self.patch_vmi(vmi, patch, labels={c.MIGRATION_TARGET_NODE_LABEL: target_node})
        log.info("vmim %s/%s: handed off to virt-handler (%s -> %s)", meta(vmim)["namespace"], meta(vmim)["name"],
                 new_state["sourceNode"], target_node)
        self.record_event(vmim, "Normal", "PreparingTarget",
                          "Migration target pod is ready for preparation by virt-handler.")

    def mark_vmi_migration_failed(self, vmi, reason, abort=False):
        now = now_iso()
        mstate = status(vmi).get("migrationState") or {}
        patch = {"failed": True, "completed": True, "endTimestamp": now, "failureReason": reason}
        if not mstate.get("startTimestamp"):
            patch["startTimestamp"] = now
        if abort:
            patch.update({"abortRequested": True, "abortStatus": "Succeeded"})
        return self.patch_vmi(vmi, {"migrationState": patch}, labels={c.MIGRATION_TARGET_NODE_LABEL: None})

    def migration_running(self, vmim, vmi, pod, mstate):
        ns, name = meta(vmim)["namespace"], meta(vmim)["name"]
        started = self.started.get(meta(vmim)["uid"]) or parse_time(mstate.get("startTimestamp")) or time.time()
        duration = self.migration_duration(vmim, vmi)
        left = started + duration - time.time()
        if mstate.get("completed"):
            self.vmim_transition(vmim, "Succeeded", why=f"{mstate.get('sourceNode')} -> {mstate.get('targetNode')}",
                                 vmi=vmi)
            self.record_event(vmim, "Normal", "SuccessfulMigration", "Source node reported migration succeeded")
            return
        if left > 0:
            self.queue.add_after(("vmim", ns, name), left + 0.05)
            return
        fail = self.migration_fail_reason(vmim, vmi)
        if fail:
            vmi = self.mark_vmi_migration_failed(vmi, fail)
            self.delete_pod(pod, f"migration {ns}/{name} failed: {fail}")
            self.fail_migration(vmim, f"source node reported migration failed: {fail}", vmi=vmi)
            return
        # virt-handler: the domain now runs on the target; the source launcher exits.
        target_node = mstate.get("targetNode") or pod["spec"]["nodeName"]
        source = [p for p in self.vmi_pods(vmi) if meta(p)["name"] == mstate.get("sourcePod")]
        now = now_iso()
        active = {meta(pod)["uid"]: target_node}
        status_patch = {
            "nodeName": target_node,
            "migrationState": {"completed": True, "endTimestamp": now, "targetNodeDomainReadyTimestamp": now,
                               "targetNodeDomainDetected": True},
            "activePods": map_patch(status(vmi).get("activePods"), active),
        }
        if status(vmi).get("evacuationNodeName"):
            status_patch["evacuationNodeName"] = None
        self.patch_vmi(vmi, status_patch, labels={c.NODE_NAME_LABEL: target_node,
                                                  c.MIGRATION_TARGET_NODE_LABEL: None})
        log.info("vmi %s/%s: migrated %s -> %s", ns, vmim["spec"]["vmiName"], mstate.get("sourceNode"), target_node)
        for src in source:
            self.delete_pod(src, f"migration {ns}/{name} completed")
        vmim = self.vmims.get(f"{ns}/{name}") or vmim
        self.vmim_transition(vmim, "Succeeded", why=f"{mstate.get('sourceNode')} -> {target_node}")
        self.record_event(vmim, "Normal", "SuccessfulMigration", "Source node reported migration succeeded")

    def abort_migration(self, vmim, vmi, pod, handed_off):
        """A VMIM deleted before it finished: cancel (pre-handoff) or abort (virt-handler) the migration."""
        ns, name = meta(vmim)["namespace"], meta(vmim)["name"]
        conds = list(status(vmim).get("conditions") or [])
        if not any(cd.get("type") == "migrationAbortRequested" for cd in conds):
            conds.append({"type": "migrationAbortRequested", "status": "True", "lastProbeTime": now_iso(),
                          "lastTransitionTime": None})
        if handed_off:
            mstate = status(vmi).get("migrationState") or {}
            if not mstate.get("completed"):
                self.mark_vmi_migration_failed(vmi, "Live migration aborted ", abort=True)
                log.info("vmi %s/%s: migration aborted (abortStatus Succeeded)", ns, vmim["spec"]["vmiName"])
        if pod is not None and not pod_is_down(pod):
            self.delete_pod(pod, f"migration {ns}/{name} canceled")
        self.record_event(vmim, "Warning", "FailedMigration", "Migration failed due to being canceled")
        self.vmim_transition(vmim, "Failed", {"conditions": conds}, why="canceled: the VMIM was deleted")

    def garbage_collect_migrations(self, vmi):
        migrations = self.vmims.by_index("vmi", f"{meta(vmi)['namespace']}/{meta(vmi)['name']}")
        final = sorted((m for m in migrations if status(m).get("phase") in c.VMIM_FINAL_PHASES
                        and not meta(m).get("deletionTimestamp")),
                       key=lambda m: meta(m).get("creationTimestamp", ""))
        for m in final[:max(0, len(final) - c.FINALIZED_MIGRATIONS_KEPT)]:
            try:
                self.kube.delete("virtualmachineinstancemigrations", meta(m)["namespace"], meta(m)["name"],
                                 uid=meta(m)["uid"])
                log.info("vmim %s/%s: garbage collected (more than %d finalized migrations for VMI %s)",
                         meta(m)["namespace"], meta(m)["name"], c.FINALIZED_MIGRATIONS_KEPT, meta(vmi)["name"])
            except ApiError as exc:
                if not (exc.not_found or exc.conflict):
                    raise

    # Evacuation ----------------------------------------------------------------------------

    def sync_evacuation(self, node):
        """The evacuation controller: VMIs marked by the eviction webhook get a migration."""
        config = self.config()
        vmis_on_node = self.vmis.by_index("node", node)
        unfinished = [m for m in self.vmims.list() if status(m).get("phase") not in c.VMIM_FINAL_PHASES]
        has_migration = {f"{meta(m)['namespace']}/{m['spec'].get('vmiName')}" for m in unfinished}
        candidates = []
        for vmi in vmis_on_node:
            st = status(vmi)
            if st.get("evacuationNodeName") != node or st.get("nodeName") != node:
                continue
            mstate = st.get("migrationState") or {}
            if mstate and not mstate.get("completed"):
                continue
            if st.get("phase") in c.VMI_FINAL_PHASES or meta(vmi).get("deletionTimestamp"):
                continue
            if eviction_strategy(vmi, config) not in ("LiveMigrate", "LiveMigrateIfPossible"):
                continue
            if not is_migratable(vmi):
                continue
            if f"{meta(vmi)['namespace']}/{meta(vmi)['name']}" in has_migration:
                continue
            active = [p for p in self.vmi_pods(vmi) if (p.get("spec") or {}).get("nodeName") and not pod_is_down(p)]
            if len(active) > 1:
                continue
            candidates.append(vmi)
        if not candidates:
            return
        running = [m for m in unfinished if status(m).get("phase") in RUNNING_MIGRATION_PHASES]
        on_node = {meta(v)["name"] for v in vmis_on_node}
        from_node = sum(1 for m in running if m["spec"].get("vmiName") in on_node)
        free = min(config.parallel_per_cluster - len(running), config.parallel_outbound_per_node - from_node)
        if free <= 0:
            self.queue.add_after(("evac", node), 5)
            return
        for vmi in candidates[:free]:
            body = {
                "apiVersion": c.API_VERSION, "kind": "VirtualMachineInstanceMigration",
                "metadata": {"generateName": "kubevirt-evacuation-", "namespace": meta(vmi)["namespace"],
                             "annotations": {c.EVACUATION_ANNOTATION: node}},
                "spec": {"vmiName": meta(vmi)["name"]},
            }
            try:
                created = self.kube.create("virtualmachineinstancemigrations", meta(vmi)["namespace"], body)
            except ApiError as exc:
                log.warning("evacuation of %s/%s from %s: creating a migration failed: %s",
                            meta(vmi)["namespace"], meta(vmi)["name"], node, exc.message)
                self.record_event(vmi, "Warning", "FailedCreate", f"Error creating a Migration: {exc.message}")
                self.queue.add_after(("evac", node), 5)
                continue
            self.vmims.upsert(created)
            log.info("evacuation: created migration %s/%s for VMI %s (node %s)", meta(created)["namespace"],
                     meta(created)["name"], meta(vmi)["name"], node)
            self.record_event(vmi, "Normal", "SuccessfulCreate", f"Created Migration {meta(created)['name']}")
        if len(candidates) > free:
            self.queue.add_after(("evac", node), 5)


__all__ = ["Simulator", "KubeVirtConfig", "eviction_strategy", "is_migratable"]
