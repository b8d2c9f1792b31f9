# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Creating, watching and cancelling VirtualMachineInstanceMigrations.

Private to this collection. Waiting is event-driven: a watch on the one VMIM
(fieldSelector metadata.name) resumed from the last resourceVersion seen. A
closed stream (server timeout, load balancer, API server restart) is resumed;
a 410 Gone (history compacted, or a restarted API server that lost its watch
cache) or a connection error is answered by a fresh GET, which is the re-list of
a single object, after a short backoff. The deadline is on the monotonic clock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

try:
    from kubernetes import watch as k8s_watch
    from kubernetes.client.rest import ApiException
except ImportError:  # reported by AnsibleK8SModule's requirement check
    k8s_watch = None

    class ApiException(Exception):
        status = None

try:
    from urllib3.exceptions import HTTPError as Urllib3HTTPError
except ImportError:
    class Urllib3HTTPError(Exception):
        pass

from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    GROUP,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    UNSCHEDULABLE_TIMEOUT_ANNOTATION,
    VERSION,
    VMIMS,
    api_error_message,
    is_final,
    phase,
)

# Errors after which a watch is re-established from a fresh GET.
TRANSIENT_ERRORS = (Urllib3HTTPError, OSError)  # ConnectionError is an OSError
WATCH_WINDOW_SECONDS = 60   # a server-side watch timeout; the watch is renewed after it


class WaitTimeout(Exception):
    def __init__(self, last):
        super(WaitTimeout, self).__init__("timed out")
        self.last = last


def vmim_manifest(vmi_name, added_node_selector=None, unschedulable_timeout=None, name=None, labels=None):
    metadata = {"labels": dict({MANAGED_BY_LABEL: MANAGED_BY}, **(labels or {}))}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = "%s-migration-" % vmi_name[:40]
    if unschedulable_timeout is not None:
        metadata["annotations"] = {UNSCHEDULABLE_TIMEOUT_ANNOTATION: str(int(unschedulable_timeout))}
    spec = {"vmiName": vmi_name}
    if added_node_selector:
        spec["addedNodeSelector"] = dict(added_node_selector)
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "VirtualMachineInstanceMigration",
            "metadata": metadata, "spec": spec}


def create_vmim(custom, namespace, body):
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, VMIMS, body)


def cancel_vmim(custom, namespace, name):
    """Delete the VMIM: KubeVirt cancels (or aborts) the migration before its finalizer goes. False if gone."""
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, VMIMS, name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


class ObjectWatcher:
    """Follows one kubevirt.io/v1 object (a VMIM by default) to a predicate through a resumable watch."""

    def __init__(self, custom, namespace, name, plural=VMIMS, watch_factory=None, sleep=time.sleep,
                 clock=time.monotonic):
        self.custom = custom
        self.namespace = namespace
        self.name = name
        self.plural = plural
        self.watch_factory = watch_factory or k8s_watch.Watch
        self.sleep = sleep
        self.clock = clock
        self.last = None
        self.deleted = False
        self.reconnects = 0      # how often the watch had to be re-established after an error
        self.events = 0

    def _get(self):
        try:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, self.plural, self.name)
        except ApiException as exc:
            if exc.status == 404:
                self.deleted = True
                return None
            raise
        self.last = obj
        return obj

    def wait(self, timeout, predicate=is_final):
        """Return the object once predicate(obj) is true, or None when it is deleted; WaitTimeout after timeout."""
        deadline = self.clock() + timeout
        backoff = 0.2
        obj = None
        need_get = True
        resource_version = None
        while True:
            remaining = deadline - self.clock()
            if need_get:
                try:
                    obj = self._get()
                except (Urllib3HTTPError, OSError, ApiException) as exc:
                    if isinstance(exc, ApiException) and exc.status not in (None, 0, 429, 500, 502, 503, 504):
                        raise
                    self.reconnects += 1
                    if remaining <= 0:
                        raise WaitTimeout(self.last)
                    self.sleep(min(backoff, max(remaining, 0)))
                    backoff = min(backoff * 2, 5.0)
                    continue
                if obj is None:
                    return None
                if predicate(obj):
                    return obj
                resource_version = obj["metadata"].get("resourceVersion")
                need_get = False
            if remaining <= 0:
                raise WaitTimeout(self.last)
            stream = self.watch_factory()
            window = max(1, min(int(remaining) + 1, WATCH_WINDOW_SECONDS))
            try:
                for event in stream.stream(
                        self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, self.plural,
                        field_selector="metadata.name=%s" % self.name, resource_version=resource_version,
                        allow_watch_bookmarks=True, timeout_seconds=window,
                        _request_timeout=(10, window + 15)):
                    self.events += 1
                    etype = event.get("type")
                    raw = event.get("raw_object") or event.get("object")
                    if etype == "ERROR":
                        # A Status object: 410 Gone ends the resumable history; GET again.
                        need_get = True
                        break
                    if not isinstance(raw, dict):
                        continue
                    resource_version = (raw.get("metadata") or {}).get("resourceVersion") or resource_version
                    if etype == "BOOKMARK":
                        continue
                    if etype == "DELETED":
                        self.deleted = True
                        self.last = raw
                        return None
                    self.last = raw
                    backoff = 0.2
                    if predicate(raw):
                        stream.stop()
                        return raw
                    if self.clock() >= deadline:
                        stream.stop()
                        raise WaitTimeout(self.last)
            except ApiException as exc:
                if exc.status == 410:
                    need_get = True
                    continue
                if exc.status not in (429, 500, 502, 503, 504):
                    raise
                self.reconnects += 1
                need_get = True
                self.sleep(min(backoff, max(deadline - self.clock(), 0)))
                backoff = min(backoff * 2, 5.0)
            except (Urllib3HTTPError, OSError):
                self.reconnects += 1
                need_get = True
                self.sleep(min(backoff, max(deadline - self.clock(), 0)))
                backoff = min(backoff * 2, 5.0)
            # A stream that ended normally (server-side timeout) is resumed from resource_version.


def phase_timestamps(vmim):
    return [{"phase": p.get("phase"), "timestamp": p.get("phaseTransitionTimestamp")}
            for p in ((vmim or {}).get("status") or {}).get("phaseTransitionTimestamps") or []]


def _parse_time(value):
    import datetime
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


def duration_seconds(vmim):
    """Server-side time from creation to the terminal phase (None until terminal)."""
    if not is_final(vmim):
        return None
    start = _parse_time((vmim.get("metadata") or {}).get("creationTimestamp"))
    end = None
    for stamp in phase_timestamps(vmim):
        if stamp["phase"] in ("Succeeded", "Failed"):
            end = _parse_time(stamp["timestamp"])
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def summarize(vmim):
    if not vmim:
        return None
    meta = vmim.get("metadata") or {}
    state = (vmim.get("status") or {}).get("migrationState") or {}
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "phase": phase(vmim),
        "phase_timestamps": phase_timestamps(vmim),
        "added_node_selector": (vmim.get("spec") or {}).get("addedNodeSelector") or {},
        "source_node": state.get("sourceNode"),
        "target_node": state.get("targetNode"),
        "labels": meta.get("labels") or {},
    }


def failure_reason(vmim, reader=None):
    """migrationState.failureReason, else the VMIM's latest Warning events (KubeVirt puts
    target-pod scheduling failures only there), else the phase."""
    state = ((vmim or {}).get("status") or {}).get("migrationState") or {}
    if state.get("failureReason"):
        return state["failureReason"]
    if reader is not None and vmim:
        meta = vmim.get("metadata") or {}
        try:
            events = reader.events_for(meta.get("namespace"), "VirtualMachineInstanceMigration",
                                       meta.get("name"), meta.get("uid"))
        except ApiException as exc:
            events = []
            if exc.status not in (401, 403):
                return "failed; events unreadable: %s" % api_error_message(exc)
        warnings = [e for e in events if e.get("type") == "Warning"]
        if warnings:
            seen = []
            for event in warnings[-3:]:
                text = "%s: %s" % (event.get("reason"), event.get("message"))
                if text not in seen:
                    seen.append(text)
            return "; ".join(seen)
    if state.get("abortStatus"):
        return "aborted (abortStatus %s)" % state["abortStatus"]
    return None


class BatchError(Exception):
    """A job that could not start (the create callback raises it with a message for the user)."""


class MigrationBatch:
    """Runs many migrations with bounded concurrency, following all of them through ONE watch.

    At most `limit` VMIMs of this batch are in flight at any time, and at most `per_node` from one source node
    (KubeVirt's parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode, or lower). A VMIM is in flight
    from its creation until the batch sees it Succeeded, Failed or deleted. Every VMIM the batch creates must carry
    the label `label_selector` names (a per-run label): the watch is a list+watch on that selector, resumed from
    the last resourceVersion, re-listed after 410 Gone or a connection error. A migration still in flight after
    `timeout` seconds (from its creation) is cancelled (its VMIM deleted) and counted as failed.

    jobs: dicts with at least "namespace" and "source_node"; the batch adds "vmim" (last seen), "outcome"
    (Succeeded, Failed, Deleted, TimedOut, NotCreated, NotStarted), "error", "started" and "ended" (monotonic).
    create(job) -> the created VMIM; it raises BatchError or ApiException when the VMIM cannot be created.
    """

    def __init__(self, custom, label_selector, limit, per_node, timeout, namespace=None, stop_on_failure=False,
                 watch_factory=None, sleep=time.sleep, clock=time.monotonic):
        self.custom = custom
        self.label_selector = label_selector
        self.limit = max(1, int(limit))
        self.per_node = max(1, int(per_node))
        self.timeout = timeout
        self.namespace = namespace
        self.stop_on_failure = stop_on_failure
        self.watch_factory = watch_factory or k8s_watch.Watch
        self.sleep = sleep
        self.clock = clock
        self.peak = 0
        self.watches = 0          # watch streams opened (one at a time; renewed after a window or an error)
        self.relists = 0
        self.reconnects = 0
        self.stopped = False      # stop_on_failure tripped
        self._inflight = {}
        self._on_node = {}
        self._queue = []

    # --- listing and watching the run's VMIMs ---------------------------------------------------------------

    def _list_call(self):
        if self.namespace:
            return self.custom.list_namespaced_custom_object, (GROUP, VERSION, self.namespace, VMIMS)
        return self.custom.list_cluster_custom_object, (GROUP, VERSION, VMIMS)

    def _relist(self):
        """LIST the run's VMIMs: settle the in-flight ones that ended meanwhile; the resourceVersion to watch from."""
        self.relists += 1
        func, args = self._list_call()
        result = func(*args, label_selector=self.label_selector)
        seen = {}
        for item in result.get("items") or []:
            meta = item.get("metadata") or {}
            seen[(meta.get("namespace"), meta.get("name"))] = item
        for key in list(self._inflight):
            item = seen.get(key)
            if item is None:
                self._finish(key, None, "Deleted")
            else:
                self._observe(key, item)
        return (result.get("metadata") or {}).get("resourceVersion")

    def _observe(self, key, obj):
        job = self._inflight.get(key)
        if job is None:
            return
        job["vmim"] = obj
        if is_final(obj):
            self._finish(key, obj, phase(obj))

    # --- bookkeeping ------------------------------------------------------------------------------------------

    def _finish(self, key, obj, outcome, error=None):
        job = self._inflight.pop(key)
        self._on_node[job["source_node"]] -= 1
        if obj is not None:
            job["vmim"] = obj
        job["outcome"] = outcome
        job["error"] = error
        job["ended"] = self.clock()
        if outcome != "Succeeded" and self.stop_on_failure:
            self.stopped = True

    def _next_job(self):
        for job in self._queue:
            if self._on_node.get(job["source_node"], 0) < self.per_node:
                return job
        return None

    def _fill(self, create):
        while self._queue and not self.stopped and len(self._inflight) < self.limit:
            job = self._next_job()
            if job is None:
                return
            self._queue.remove(job)
            job["started"] = self.clock()
            try:
                vmim = create(job)
            except (BatchError, ApiException) as exc:
                job["outcome"] = "NotCreated"
                job["error"] = str(exc) if isinstance(exc, BatchError) else api_error_message(exc)
                job["ended"] = self.clock()
                if self.stop_on_failure:
                    self.stopped = True
                continue
            meta = vmim.get("metadata") or {}
            key = (meta.get("namespace") or job["namespace"], meta.get("name"))
            job["vmim"] = vmim
            job["deadline"] = job["started"] + self.timeout
            self._inflight[key] = job
            self._on_node[job["source_node"]] = self._on_node.get(job["source_node"], 0) + 1
            self.peak = max(self.peak, len(self._inflight))

    def _expire(self):
        now = self.clock()
        for key, job in list(self._inflight.items()):
            if now >= job["deadline"]:
                try:
                    cancel_vmim(self.custom, key[0], key[1])
                    error = "did not finish within %ss; the VMIM was deleted (KubeVirt aborts the migration)" \
                        % self.timeout
                except ApiException as exc:
                    error = "did not finish within %ss; deleting the VMIM failed: %s" \
                        % (self.timeout, api_error_message(exc))
                self._finish(key, None, "TimedOut", error)

    # --- the loop ---------------------------------------------------------------------------------------------

    def run(self, jobs, create):
        self._queue = list(jobs)
        for job in jobs:
            job.setdefault("outcome", "NotStarted")
            job.setdefault("error", None)
        resource_version = self._relist()     # before the first create: the watch then sees every change
        self._fill(create)
        backoff = 0.2
        while self._inflight:
            self._expire()
            self._fill(create)
            if not self._inflight:
                break
            remaining = min(job["deadline"] for job in self._inflight.values()) - self.clock()
            window = max(1, min(int(remaining) + 1, WATCH_WINDOW_SECONDS))
            func, args = self._list_call()
            need_list = False
            stream = self.watch_factory()
            self.watches += 1
            try:
                for event in stream.stream(func, *args, label_selector=self.label_selector,
                                           resource_version=resource_version, allow_watch_bookmarks=True,
                                           timeout_seconds=window, _request_timeout=(10, window + 15)):
                    etype = event.get("type")
                    raw = event.get("raw_object") or event.get("object")
                    if etype == "ERROR":
                        need_list = True     # a Status, 410 Gone: history compacted
                        break
                    if not isinstance(raw, dict):
                        continue
                    meta = raw.get("metadata") or {}
                    resource_version = meta.get("resourceVersion") or resource_version
                    if etype == "BOOKMARK":
                        continue
                    key = (meta.get("namespace"), meta.get("name"))
                    if etype == "DELETED":
                        if key in self._inflight:
                            self._finish(key, raw, "Deleted")
                    else:
                        self._observe(key, raw)
                    backoff = 0.2
                    self._fill(create)
                    if not self._inflight or any(self.clock() >= j["deadline"] for j in self._inflight.values()):
                        stream.stop()
                        break
            except ApiException as exc:
                if exc.status != 410 and exc.status not in (429, 500, 502, 503, 504):
                    raise
                if exc.status != 410:
                    self.reconnects += 1
                    self.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                need_list = True
            except (Urllib3HTTPError, OSError):
                self.reconnects += 1
                self.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                need_list = True
            if need_list and self._inflight:
                try:
                    resource_version = self._relist()
                except (Urllib3HTTPError, OSError):
                    self.reconnects += 1
                    self.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                except ApiException as exc:
                    if exc.status not in (429, 500, 502, 503, 504):
                        raise
                    self.reconnects += 1
                    self.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
        return jobs
