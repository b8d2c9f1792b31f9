# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated virt-handler: one process playing KubeVirt's node agent on every KWOK node.

Each node's part runs under that node's own identity: a token of ServiceAccount
kubevirt/kubevirt-handler bound to the virt-handler DaemonSet pod on the node (as the kubelet
mounts it into the pod), so KubeVirt's node restriction (virt-api's VMI update admitter and the
kubevirt-node-restriction ValidatingAdmissionPolicy) applies exactly as on a real cluster.
What the kubelet would do on a node with a running virt-handler and virt-launcher is done with
the admin's credentials and said so: device-plugin resources in the node status, a launcher pod
that ends once its domain has left, the pod of a lost node disappearing, and the TokenRequest itself.

Reads: VMIs through the handler's own list/watch (its RBAC); pods, nodes, the KubeVirt CR (the cluster
config: feature gates, obsoleteCPUModels, network bindings) and VMIMs (only for the tests' fault annotations,
faults.py) through the admin, as node-local facts.
"""
from __future__ import annotations

import calendar
import logging
import threading
import time

from . import faults
from . import migration as mig
from . import node as nodes
from . import vmi as vmis
from .informer import Informer, WorkQueue, obj_key
from .kube import ApiError, path
from .versions import release as release_of

log = logging.getLogger("virt-handler")

NAMESPACE = "kubevirt"
HANDLER_SA = "kubevirt-handler"
HANDLER_LABEL = "kubevirt.io=virt-handler"
LAUNCHER_LABEL = "kubevirt.io=virt-launcher"
CREATED_BY = "kubevirt.io/created-by"
HEARTBEAT_SECONDS = 60           # vm.go NewVirtualMachineController heartBeatInterval (heartbeat.go: JitterUntil)
LABELLER_SECONDS = 180           # node_labeller.go Run: every 3 minutes (ksm.go: ksmLoopIntervalMinutes, the same)
TOKEN_SECONDS = 24 * 3600


def _pod_ready(pod):
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _pod_down(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _parse(stamp):
    try:
        return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


class NodeHandler:
    """virt-handler's identity and periodic work on one node."""

    def __init__(self, agent, name, pod):
        self.agent = agent
        self.name = name
        self.pod = pod
        self.kube = None
        self.token_until = 0.0
        self.labelled_at = 0.0

    def client(self):
        if self.kube is None or time.monotonic() > self.token_until:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": TOKEN_SECONDS,
                             "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                                "name": self.pod["metadata"]["name"],
                                                "uid": self.pod["metadata"]["uid"]}}}
            token = self.agent.admin.create("serviceaccounts", NAMESPACE, body, subresource="token",
                                            name=HANDLER_SA)["status"]["token"]
            self.kube = self.agent.admin.with_token(token, f"virt-handler/{self.agent.version} (simulated; {self.name})")
            self.token_until = time.monotonic() + TOKEN_SECONDS * 0.8
        return self.kube

    def cpu(self):
        return nodes.cpu_of(self.agent.nodes.get(self.name))

    def start(self):
        """cmd/virt-handler: unschedulable first; the kubelet registers the device plugins; the labeller; heartbeat."""
        self.agent.nodes.upsert(self.client().strategic_patch("nodes", None, self.name, nodes.unschedulable_patch()))
        self.sync(force_labels=True)

    def sync(self, force_labels=False, heartbeat=True):
        node = self.agent.nodes.get(self.name)
        if node is None:
            return
        config = self.agent.config()
        devices = nodes.device_resources(node)
        if devices:   # the kubelet's part, after virt-handler's device plugins registered
            node = self.agent.admin.merge_patch("nodes", None, self.name, devices, subresource="status")
            self.agent.nodes.upsert(node)
        if force_labels or time.monotonic() - self.labelled_at > LABELLER_SECONDS:
            patch = nodes.labeller_update(node, self.cpu(), self.agent.release, config)
            if patch:   # a 422 (the test op failed: labels changed meanwhile) is retried from the queue
                node = self.client().json_patch("nodes", None, self.name, patch)
                self.agent.nodes.upsert(node)
            if not self.agent.release.ksm_in_heartbeat:      # 1.6+: ksm.go Handler, at start and every 3 minutes
                self.agent.nodes.upsert(self.client().merge_patch("nodes", None, self.name, nodes.ksm_patch()))
            self.labelled_at = time.monotonic()
        if heartbeat:
            self.agent.nodes.upsert(self.client().strategic_patch("nodes", None, self.name, nodes.heartbeat_patch(
                self.agent.release, cpu_manager=nodes.cpu_manager_enabled(node, config))))

    def stop(self):
        try:
            self.client().strategic_patch("nodes", None, self.name, nodes.unschedulable_patch())
        except Exception:  # pylint: disable=broad-except
            log.warning("%s: could not mark the node unschedulable on exit", self.name)


class Agent:
    def __init__(self, admin, version, state_dir, migration_seconds=1.0, abort_seconds=1.0, workers=4,
                 shutdown_seconds=0.0):
        self.admin = admin
        self.version = version
        self.release = release_of(version)
        self.state_dir = state_dir
        self.migration_seconds = migration_seconds
        self.abort_seconds = abort_seconds
        self.shutdown_seconds = shutdown_seconds
        self.aborts = {}              # migrationUid -> monotonic time virt-controller's abort request was seen
        self.shutdowns = {}           # VMI uid -> epoch seconds the guest got its ACPI shutdown signal
        self.queue = WorkQueue()
        self.handlers = {}
        self.transfers = {}           # migrationUid -> monotonic start of the (simulated) memory transfer
        self.lost_targets = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.workers = workers
        self.nodes = Informer(admin, "nodes", path("nodes"), self._on_node)
        self.kubevirts = Informer(admin, "kubevirt", "/apis/kubevirt.io/v1/kubevirts", self._on_kubevirt)
        self.handler_pods = Informer(admin, "virt-handler-pods", path("pods", NAMESPACE), self._on_handler_pod,
                                     label_selector=HANDLER_LABEL)
        self.pods = Informer(admin, "launcher-pods", "/api/v1/pods", self._on_launcher_pod,
                             label_selector=LAUNCHER_LABEL,
                             indexers={"vmi": lambda p: [((p.get("metadata") or {}).get("labels") or {})
                                                         .get(CREATED_BY)]})
        self.vmims = Informer(admin, "migrations", "/apis/kubevirt.io/v1/virtualmachineinstancemigrations",
                              self._on_vmim, indexers={"uid": lambda m: [m["metadata"].get("uid")]})
        self.vmis = None              # list/watch as virt-handler, once a handler token exists

    def config(self):
        """virt-config GetConfigFromKubeVirtCR: the spec.configuration of the KubeVirt CR that virt-operator has
        deployed (status.phase set) and that is not being deleted."""
        for cr in self.kubevirts.list():
            if not cr["metadata"].get("deletionTimestamp") and (cr.get("status") or {}).get("phase"):
                return (cr.get("spec") or {}).get("configuration") or {}
        return {}

    # --- events -----------------------------------------------------------------------------------------

    def _on_kubevirt(self, old, new):
        """clusterConfig.SetConfigModifiedCallback: the node labeller (and 1.6+'s KSM handler) runs again at once."""
        configuration = [((o or {}).get("spec") or {}).get("configuration") for o in (old, new)]
        if configuration[0] != configuration[1]:
            for name in list(self.handlers):
                self.queue.add(("labels", name))

    def _on_node(self, old, new):
        """A changed Node: the kubelet's part (device-plugin resources) and, when due, the labeller. Not the
        heartbeat, which runs on its own timer (a heartbeat is itself a change of the Node)."""
        if new is None:                      # a deleted node: its virt-handler is gone with it
            self.handlers.pop(old["metadata"]["name"], None)
        elif new["metadata"]["name"] in self.handlers:
            self.queue.add(("node", new["metadata"]["name"]))

    def _on_handler_pod(self, _old, new):
        if new is not None and _pod_ready(new) and self.vmis is not None:
            self.queue.add(("handler-pod", obj_key(new)))

    def _on_launcher_pod(self, old, new):
        pod = new or old
        uid = ((pod.get("metadata") or {}).get("labels") or {}).get(CREATED_BY)
        if uid and self.vmis is not None:
            for vmi in self.vmis.by_index("uid", uid):
                self.queue.add(("vmi", obj_key(vmi)))

    def _on_vmim(self, _old, new):
        if new is not None and self.vmis is not None:
            vmi_key = f"{new['metadata']['namespace']}/{(new.get('spec') or {}).get('vmiName')}"
            self.queue.add(("vmi", vmi_key))

    def _on_vmi(self, _old, new):
        if new is not None:
            self.queue.add(("vmi", obj_key(new)))

    # --- start and stop -----------------------------------------------------------------------------------

    def start(self, timeout=90.0):
        for informer in (self.nodes, self.handler_pods, self.kubevirts):
            informer.start()
        if not self.kubevirts.synced.wait(timeout):
            raise RuntimeError(f"{self.kubevirts.name}: not synced after {timeout:.0f}s")
        deadline = time.monotonic() + timeout
        while True:
            ready = {p["spec"].get("nodeName"): p for p in self.handler_pods.list()
                     if _pod_ready(p) and p["spec"].get("nodeName")}
            node_names = {n["metadata"]["name"] for n in self.nodes.list()}
            if self.nodes.synced.is_set() and node_names and node_names <= set(ready):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"virt-handler pods not Running on {sorted(node_names - set(ready))} "
                                   f"after {timeout:.0f}s (is the DaemonSet applied, are the nodes Ready?)")
            time.sleep(0.3)
        for name, pod in sorted(ready.items()):
            handler = self.handlers[name] = NodeHandler(self, name, pod)
            handler.start()
            log.info("%s: virt-handler up (pod %s): labelled, heartbeat", name, pod["metadata"]["name"])
        any_handler = next(iter(self.handlers.values()))
        self.vmis = Informer(any_handler.client(), "vmis", "/apis/kubevirt.io/v1/virtualmachineinstances",
                             self._on_vmi, indexers={"uid": lambda v: [v["metadata"].get("uid")]})
        for informer in (self.pods, self.vmims, self.vmis):
            informer.start()
        for informer in (self.pods, self.vmims, self.vmis):
            if not informer.synced.wait(timeout):
                raise RuntimeError(f"{informer.name}: not synced after {timeout:.0f}s")
        for name in self.handlers:
            self.queue.add_after(("heartbeat", name), HEARTBEAT_SECONDS)
        for i in range(self.workers):
            threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True).start()

    def stop(self):
        self.stopping.set()
        self.queue.shutdown()
        for handler in self.handlers.values():
            handler.stop()
        for informer in (self.nodes, self.handler_pods, self.kubevirts, self.pods, self.vmims, self.vmis):
            if informer is not None:
                informer.stop()

    # --- the work queue ------------------------------------------------------------------------------------

    def _worker(self):
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self._dispatch(key)
            except ApiError as exc:
                level = logging.DEBUG if exc.conflict else logging.WARNING
                log.log(level, "%s: %s; retrying", key, exc)
                self.queue.add_after(key, 0.2 if exc.conflict else 1.0)
            except Exception:  # pylint: disable=broad-except
                log.exception("%s: sync failed; retrying", key)
                self.queue.add_after(key, 2.0)
            finally:
                self.queue.done(key)

    def _dispatch(self, key):
        kind, name = key
        if kind == "node":
            handler = self.handlers.get(name)
            if handler is not None:
                handler.sync(heartbeat=False)
        elif kind == "heartbeat":
            handler = self.handlers.get(name)
            if handler is not None:
                handler.sync(heartbeat=True)
                self.queue.add_after(key, HEARTBEAT_SECONDS)
        elif kind == "labels":
            handler = self.handlers.get(name)
            if handler is not None:
                handler.sync(force_labels=True, heartbeat=False)
        elif kind == "handler-pod":
            pod = self.handler_pods.get(name)
            node = (pod or {}).get("spec", {}).get("nodeName")
            if pod is None or not _pod_ready(pod) or self.nodes.get(node) is None:
                return
            handler = self.handlers.get(node)
            if handler is None:              # the DaemonSet reached a node added later: virt-handler starts there
                handler = NodeHandler(self, node, pod)
                handler.start()
                self.handlers[node] = handler
                self.queue.add_after(("heartbeat", node), HEARTBEAT_SECONDS)
                log.info("%s: virt-handler up (pod %s): labelled, heartbeat", node, pod["metadata"]["name"])
            elif pod["metadata"]["uid"] != handler.pod["metadata"]["uid"]:
                handler.pod, handler.kube = pod, None     # a new pod: a token bound to it
        elif kind == "vmi":
            self.sync_vmi(name)

    # --- VMIs ----------------------------------------------------------------------------------------------

    def launcher_pod(self, vmi, node):
        for pod in self.pods.by_index("vmi", vmi["metadata"].get("uid")):
            if pod["spec"].get("nodeName") == node and not _pod_down(pod):
                return pod
        return None

    def put_vmi(self, node, new):
        handler = self.handlers[node]
        try:
            stored = handler.client().update("virtualmachineinstances", new["metadata"]["namespace"], new)
        except ApiError as exc:
            if exc.status == 401:
                handler.kube = None
            raise
        self.vmis.upsert(stored)
        return stored

    def sync_vmi(self, key):
        vmi = self.vmis.get(key)
        if vmi is None or vmis.is_final(vmi):    # updateVMIStatus never writes a final VMI
            return
        if self.sync_migration(key, vmi):
            return
        node = vmis.status(vmi).get("nodeName")
        if node not in self.handlers:
            return
        pod = self.launcher_pod(vmi, node)
        meta = vmi.get("metadata") or {}
        if meta.get("deletionTimestamp") or (pod is not None and pod["metadata"].get("deletionTimestamp")):
            if vmis.status(vmi).get("phase") in ("Scheduled", "Running"):
                self.shut_down(key, node, vmi)
            return
        if vmis.status(vmi).get("phase") not in ("Scheduled", "Running") or pod is None:
            return
        new = vmis.node_status(vmi, self.release, self.handlers[node].cpu(), (pod.get("status") or {}).get("podIP"),
                               config=self.config())
        if new.get("status") != vmi.get("status"):
            stored = self.put_vmi(node, new)
            if vmis.status(vmi).get("phase") != "Running":
                log.info("%s: Running on %s (LiveMigratable=%s)", key, node, next(
                    (c["status"] for c in vmis.status(stored).get("conditions") or []
                     if c["type"] == vmis.LIVE_MIGRATABLE), None))

    def shut_down(self, key, node, vmi):
        """vm.go processVmShutdown: the guest gets its ACPI signal (on deletion of the VMI, or of its launcher pod:
        virt-launcher marks the domain for a graceful shutdown), powers off after its own time (faults.py
        shutdown-seconds) or is killed once the grace period is over."""
        uid = vmi["metadata"].get("uid")
        with self.lock:
            signalled = self.shutdowns.setdefault(uid, time.time())
        outcome, left = vmis.shutdown_outcome(vmi, signalled, faults.shutdown_seconds(vmi, self.shutdown_seconds),
                                              time.time())
        if outcome == "wait":
            self.queue.add_after(("vmi", key), left)
            return
        stored = self.put_vmi(node, vmis.shut_down(vmi, outcome))
        with self.lock:
            self.shutdowns.pop(uid, None)
        log.info("%s: %s on %s (%s)", key, "powered off" if outcome == "off" else "killed after the grace period",
                 node, vmis.status(stored).get("phase"))

    # --- migrations ----------------------------------------------------------------------------------------

    def transfer(self, vmi, vmim):
        """(ended, failure reason) of the simulated memory transfer that S1 started."""
        ms = mig.state(vmi)
        if not ms.get("startTimestamp"):
            return False, None
        uid = ms["migrationUid"]
        with self.lock:
            started = self.transfers.get(uid)
        if started is None:      # started before this process: count from the server's timestamp
            started = time.monotonic() - max(0.0, time.time() - (_parse(ms["startTimestamp"]) or time.time()))
        remaining = started + faults.transfer_seconds(vmi, vmim, self.migration_seconds) - time.monotonic()
        if remaining > 0:
            self.queue.add_after(("vmi", obj_key(vmi)), remaining + 0.05)
            return False, None
        if uid in self.lost_targets:
            # libvirt's migration to a peer that went away fails on the source; virt-launcher reports libvirt's error
            # in its release's words (live-migration-source.go; mig.lost_target_reason). 1.9's virt-controller marks
            # the VMI first (Target pod is down); 1.6's leaves a started migration to this.
            return True, mig.lost_target_reason(self.release)
        return True, faults.knob(vmi, vmim, faults.MIGRATION_FAIL)

    def sync_migration(self, key, vmi):
        """The handler steps of the VMI's migration; True while it is in progress (no other status write)."""
        ms = mig.state(vmi)
        if not ms.get("migrationUid") or not ms.get("targetNode"):
            return False
        found = self.vmims.by_index("uid", ms["migrationUid"])
        vmim = found[0] if found else None
        done, fail_reason = self.transfer(vmi, vmim)
        step = mig.next_step(vmi, self.release, done, fail_reason)
        if step is None:
            self.end_launcher_pods(vmi)
            return bool(ms.get("startTimestamp") and not ms.get("endTimestamp"))
        role, name = step
        if name == "aborted" and not self.abort_done(key, vmi, vmim):
            return True
        node = ms["targetNode"] if role == "target" else ms.get("sourceNode")
        if node not in self.handlers or (role == "target" and ms["migrationUid"] in self.lost_targets):
            return True
        target_ip = None
        if name == "listen":
            if faults.flag(vmi, vmim, faults.TARGET_NEVER_READY):
                return True
            target_pod = self.pods.get(f"{vmi['metadata']['namespace']}/{ms.get('targetPod')}")
            if target_pod is None or not _pod_ready(target_pod):
                return True
            # the target handler's own migration IP: its pod's IP (not the launcher pod's)
            handler_pod = self.handlers[node].pod
            target_ip = mig.migration_ip(self.handler_pods.get(obj_key(handler_pod)) or handler_pod)
            if not target_ip:
                return True
        self.put_vmi(node, mig.apply_step(vmi, name, self.release, target_ip=target_ip, fail_reason=fail_reason))
        log.info("%s: migration %s: %s %s on %s", key, ms["migrationUid"][:8], role, name, node)
        if name == "start":
            with self.lock:
                self.transfers[ms["migrationUid"]] = time.monotonic()
            self.queue.add_after(("vmi", key), faults.transfer_seconds(vmi, vmim, self.migration_seconds))
            if faults.flag(vmi, vmim, faults.LOSE_TARGET_NODE):
                self.lose_target(vmi, ms)
        return True

    def abort_done(self, key, vmi, vmim):
        """Whether libvirt has finished aborting the migration (it takes abort-seconds from the request)."""
        uid = mig.state(vmi)["migrationUid"]
        with self.lock:
            asked = self.aborts.setdefault(uid, time.monotonic())
        remaining = asked + faults.transfer_seconds(vmi, vmim, self.abort_seconds, faults.ABORT_SECONDS) - \
            time.monotonic()
        if remaining > 0:
            self.queue.add_after(("vmi", key), remaining + 0.05)
            return False
        return True

    def lose_target(self, vmi, ms):
        """The target node fails during the transfer: its handler says nothing more about this migration, and
        the target launcher pod is gone (as the node's pods are once it is evicted), which is what virt-controller
        sees of it. The node itself stays in service for the other tests sharing the cluster."""
        log.info("%s: target node %s lost during the migration (fault)", obj_key(vmi), ms["targetNode"])
        with self.lock:
            self.lost_targets.add(ms["migrationUid"])
        target_pod = ms.get("targetPod")
        if target_pod:
            try:
                self.admin.request("DELETE", path("pods", vmi["metadata"]["namespace"], target_pod),
                                   body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
            except ApiError as exc:
                if not exc.not_found:
                    raise

    def end_launcher_pods(self, vmi):
        """The kubelet's part once a domain has left a pod: virt-launcher exits, the pod Succeeded.
        After a migration that succeeded the source pod ends; after a failure the target pod."""
        ms = mig.state(vmi)
        if not mig.finished(ms) or not ms.get("endTimestamp"):
            return
        # Only this migration's pods, by name (virt-controller's handoff sets both): the VMI keeps the last
        # migration's state while a new one's target pod starts, and that pod must not end.
        ended = ms.get("targetPod") if ms.get("failed") else ms.get("sourcePod") if ms.get("completed") else None
        pod = self.pods.get(f"{vmi['metadata']['namespace']}/{ended}") if ended else None
        if pod is None or _pod_down(pod) or pod["metadata"].get("deletionTimestamp"):
            return
        self.admin.merge_patch("pods", pod["metadata"]["namespace"], ended, {"status": {"phase": "Succeeded"}},
                               subresource="status")
        log.info("%s: launcher pod %s ended", obj_key(vmi), ended)
