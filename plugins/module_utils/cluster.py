# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one cluster object of this collection's modules: every request an engine makes to the API server goes
through Cluster, reads, lists, watches and writes alike. It reads VMs, VMIs, VMIMs, the KubeVirt CR, nodes,
namespaces, pods, events, Deployments and the server version, watches KubeVirt's objects, and makes the engines'
writes: a VMIM created or deleted, a VM patched, a node patched.

Private to this collection. Engines get it from module_runner.run_engine() and never touch a client of the
kubernetes package themselves. Objects come back as the API's JSON (plain dicts, camelCase keys), decoded
straight from the response (no model objects: 5,000 pods stay cheap); a GET of something that does not
exist returns None. Kubernetes' own kinds are read by path through the DynamicClient: the typed CoreV1Api and
AppsV1Api would import every model class they name, 0.7 s of CPU in each module run with kubernetes 37. Lists
are paged (``limit`` and ``continue``, PAGE_SIZE items a page) unless the object is made with
``page_size=None``, which reads each list in one call. Errors propagate as ApiException;
module_utils/api_errors.py says what a module makes of them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from urllib.parse import quote

try:
    from kubernetes import client as k8s_client
    from kubernetes import watch as k8s_watch
    from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError
except ImportError:  # reported by AnsibleK8SModule's requirement check
    k8s_client = k8s_watch = None
    ResourceNotFoundError = ResourceNotUniqueError = LookupError

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import ApiException, is_status
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    GROUP,
    KUBEVIRTS,
    VERSION,
    VMIMS,
    VMIS,
    VMS,
)

PAGE_SIZE = 500
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class Cluster:
    """Every API access of an engine. Kubernetes' own kinds go through kubernetes.core's DynamicClient, KubeVirt's
    through a CustomObjectsApi over the same ApiClient, watch streams through `watch_factory` (kubernetes.watch's
    Watch; tests give their own); all three are private."""

    def __init__(self, dynamic_client, page_size=PAGE_SIZE, watch_factory=None):
        self._dynamic = dynamic_client
        self._custom = k8s_client.CustomObjectsApi(dynamic_client.client)
        self._watch_factory = watch_factory or k8s_watch.Watch
        self.page_size = page_size

    # --- the ways of calling ------------------------------------------------------------------------------------

    @staticmethod
    def _call(call, *args, **kwargs):
        """The JSON a call answers, decoded as it is (no model objects)."""
        return json.loads(call(*args, _preload_content=False, **kwargs).data)

    def _get(self, call, *args):
        try:
            return self._call(call, *args)
        except ApiException as exc:
            if is_status(exc, 404):
                return None
            raise

    def _pages(self, call, *args, **kwargs):
        """(every item of a list call, page by page; the list's resourceVersion: that of its first page, from which
        the API server serves the following pages too)."""
        items, token, version = [], None, None
        while True:
            page = dict(kwargs)
            if self.page_size:
                page["limit"] = self.page_size
            if token:
                page["_continue"] = token
            data = self._call(call, *args, **page)
            items.extend(data.get("items") or [])
            metadata = data.get("metadata") or {}
            version = version or metadata.get("resourceVersion")
            token = metadata.get("continue")
            if not token or not self.page_size:
                return items, version

    def _list(self, call, *args, **kwargs):
        """Every item of a list call, page by page."""
        return self._pages(call, *args, **kwargs)[0]

    def _path(self, *parts):
        """A GET of an API path (names quoted), called as the typed API's calls are by _get and _list."""
        path = parts[0] + "".join("/" + quote(part, safe="") for part in parts[1:])

        def call(**params):
            params.pop("_preload_content", None)
            return self._dynamic.request("GET", path, serialize=False, **params)
        return call

    def _kubevirt_list_call(self, plural, namespace=None):
        """(the CustomObjectsApi call that lists kubevirt.io/v1 `plural` in `namespace`, or in all namespaces, its
        positional arguments)."""
        if namespace:
            return self._custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, plural)
        return self._custom.list_cluster_custom_object, (GROUP, VERSION, plural)

    @staticmethod
    def _selectors(label_selector=None, field_selector=None):
        selectors = {"label_selector": label_selector, "field_selector": field_selector}
        return dict((key, value) for key, value in selectors.items() if value)

    # --- KubeVirt -----------------------------------------------------------------------------------------

    def get_kubevirt(self, plural, namespace, name):
        """One kubevirt.io/v1 object of kind `plural` (kubevirt.VMS, VMIS, VMIMS), None when it does not exist."""
        return self._get(self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace, plural, name)

    def snapshot_kubevirt(self, plural, namespace=None, label_selector=None, field_selector=None):
        """(the list's resourceVersion, its items): kubevirt.io/v1 objects of kind `plural` in `namespace` (None: all
        namespaces), what a watch from that resourceVersion follows (watch.ResumableWatch)."""
        call, args = self._kubevirt_list_call(plural, namespace)
        items, version = self._pages(call, *args, **self._selectors(label_selector, field_selector))
        return version, items

    def watch_kubevirt(self, plural, namespace, resource_version, window, label_selector=None, field_selector=None):
        """One watch stream on kubevirt.io/v1 objects of kind `plural` in `namespace` (None: all namespaces) from
        `resource_version`, bookmarks asked for, which the API server ends after `window` seconds: yields its events
        as kubernetes.watch gives them (type, raw_object, object). A watch the API server refuses raises ApiException
        (410 Gone when the history since resource_version is compacted). Closing the generator ends the stream."""
        call, args = self._kubevirt_list_call(plural, namespace)
        stream = self._watch_factory()
        events = stream.stream(call, *args, resource_version=resource_version, allow_watch_bookmarks=True,
                               timeout_seconds=window, _request_timeout=(10, window + 15),
                               **self._selectors(label_selector, field_selector))
        try:
            yield from events
        finally:
            stream.stop()
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def get_vm(self, namespace, name):
        return self.get_kubevirt(VMS, namespace, name)

    def get_vmi(self, namespace, name):
        return self.get_kubevirt(VMIS, namespace, name)

    def get_vmim(self, namespace, name):
        return self.get_kubevirt(VMIMS, namespace, name)

    def list_vms(self, namespace=None, label_selector=None):
        """VMs of a namespace, or of all namespaces (namespace None)."""
        return self.snapshot_kubevirt(VMS, namespace, label_selector)[1]

    def list_vmis(self, namespace=None, label_selector=None):
        return self.snapshot_kubevirt(VMIS, namespace, label_selector)[1]

    def list_vmims(self, namespace=None, vmi_name=None):
        """VMIMs, oldest first; of one VMI by spec.vmiName (the label is only set by virt-api's mutator)."""
        items = self.snapshot_kubevirt(VMIMS, namespace)[1]
        if vmi_name is not None:
            items = [m for m in items if (m.get("spec") or {}).get("vmiName") == vmi_name]
        items.sort(key=lambda m: ((m.get("metadata") or {}).get("creationTimestamp") or ""))
        return items

    def kubevirt_cr(self):
        """The KubeVirt CR (the first one found in any namespace), or None when there is none."""
        items = self.snapshot_kubevirt(KUBEVIRTS)[1]
        return items[0] if items else None

    def openapi_has_added_node_selector(self):
        """Whether the served VMIM schema knows spec.addedNodeSelector (OpenAPI v3; readable by any user)."""
        data = self._get(self._path("/openapi/v3/apis/kubevirt.io/v1")) or {}
        schemas = ((data.get("components") or {}).get("schemas")) or {}
        for key, schema in schemas.items():
            if key.endswith("VirtualMachineInstanceMigration"):
                spec = ((schema.get("properties") or {}).get("spec")) or {}
                return "addedNodeSelector" in (spec.get("properties") or {})
        return None

    # --- Kubernetes -----------------------------------------------------------------------------------------

    def server_version(self):
        return self._get(self._path("/version"))["gitVersion"]

    def nodes(self):
        return self._list(self._path("/api/v1/nodes"))

    def node(self, name):
        return self._get(self._path("/api/v1/nodes", name))

    def namespace(self, name):
        return self._get(self._path("/api/v1/namespaces", name))

    def active_pods(self, node=None):
        """Pods of all namespaces that are neither Succeeded nor Failed (bound to `node` when given)."""
        selector = ACTIVE_PODS + (",spec.nodeName=%s" % node if node else "")
        return self._list(self._path("/api/v1/pods"), field_selector=selector)

    def node_metrics(self):
        """metrics.k8s.io's NodeMetrics (what metrics-server measured: usage.cpu, usage.memory), None when the
        API server does not serve metrics.k8s.io."""
        try:
            return self._list(self._path("/apis/metrics.k8s.io/v1beta1/nodes"))
        except ApiException as exc:
            if is_status(exc, 404, 503):    # not registered, or registered with metrics-server down
                return None
            raise

    def deployments(self):
        return self._list(self._path("/apis/apps/v1/deployments"))

    def cronjobs(self):
        return self._list(self._path("/apis/batch/v1/cronjobs"))

    def mutating_admission_policies(self):
        """(version, items) of the newest MutatingAdmissionPolicy version the server serves, (None, []) when it
        serves none (beta and alpha are off by default before Kubernetes 1.36)."""
        for version in ("v1", "v1beta1", "v1alpha1"):
            try:
                return version, self._list(self._path(
                    "/apis/admissionregistration.k8s.io/%s/mutatingadmissionpolicies" % version))
            except ApiException as exc:
                if not is_status(exc, 404):
                    raise
        return None, []

    def events_for(self, namespace, kind, name, uid=None):
        """Events about one object, oldest first."""
        selector = "involvedObject.kind=%s,involvedObject.name=%s" % (kind, name)
        events = self._list(self._path("/api/v1/namespaces", namespace, "events"), field_selector=selector)
        if uid:
            events = [e for e in events if ((e.get("involvedObject") or {}).get("uid") in (None, uid))]
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or
                    (e.get("metadata") or {}).get("creationTimestamp") or "")
        return events

    def objects(self, api_version, kind, namespace=None, name=None, label_selector=None):
        """Objects of any kind the server serves, found through discovery (kubernetes.core caches it): the one
        named `name`, or those matching `label_selector`, in `namespace` (None: all namespaces, or a cluster-scoped
        kind). [] when there is none; None when the server does not serve the kind. Listed objects carry their
        apiVersion and kind, as kubernetes.core's k8s_info returns them."""
        try:
            resource = self._dynamic.resources.get(api_version=api_version, kind=kind)
        except (ResourceNotFoundError, ResourceNotUniqueError):
            return None
        namespace = quote(namespace, safe="") if namespace and resource.namespaced else None
        if name:
            found = self._get(self._path(resource.path(namespace=namespace), name))
            return [found] if found is not None else []
        items = self._list(self._path(resource.path(namespace=namespace)), **self._selectors(label_selector))
        for item in items:
            item.setdefault("apiVersion", resource.group_version)
            item.setdefault("kind", resource.kind)
        return items

    # --- writes ---------------------------------------------------------------------------------------------

    def create_vmim(self, namespace, body):
        """Create a VirtualMachineInstanceMigration; the object as the API server stored it."""
        return self._call(self._custom.create_namespaced_custom_object, GROUP, VERSION, namespace, VMIMS, body)

    def delete_vmim(self, namespace, name):
        """Delete a VMIM: KubeVirt cancels (or aborts) its migration before its finalizer lets it go. False when it
        was gone already."""
        try:
            self._custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, VMIMS, name)
        except ApiException as exc:
            if is_status(exc, 404):
                return False
            raise
        return True

    def patch_vm(self, namespace, name, patch, field_manager=None):
        """A JSON merge patch (RFC 7386: None removes a key) of a VirtualMachine, as `field_manager` when given; the
        VM as patched."""
        kwargs = {"field_manager": field_manager} if field_manager else {}
        return self._call(self._custom.patch_namespaced_custom_object, GROUP, VERSION, namespace, VMS, name, patch,
                          **kwargs)

    def patch_node(self, name, patch):
        """A strategic merge patch of a node (the evacuation's cordon)."""
        self._dynamic.request("PATCH", "/api/v1/nodes/" + quote(name, safe=""), body=patch, serialize=False,
                              content_type="application/strategic-merge-patch+json")
