# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading KubeVirt objects (VM, VMI, VMIM, KubeVirt CR) and what the cluster can do.

Private to this collection. The ApiClient comes from kubernetes.core's client
factory (``get_api_client(module).client.client``), so authentication, proxies and
impersonation behave as in every kubernetes.core module. Objects are returned as
the API's JSON (plain dicts, camelCase keys).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

try:
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
except ImportError:  # reported by AnsibleK8SModule's requirement check
    k8s_client = None

    class ApiException(Exception):
        status = None
        reason = None
        body = None

from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    KUBEVIRT_FEATURES,
    VersionError,
    kubevirt_supports,
    parse_kubevirt_version,
)

GROUP = "kubevirt.io"
VERSION = "v1"
VMS = "virtualmachines"
VMIS = "virtualmachineinstances"
VMIMS = "virtualmachineinstancemigrations"
KUBEVIRTS = "kubevirts"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "vmsched.kubevirt"
VMI_NAME_LABEL = "kubevirt.io/vmi-name"
CREATED_BY_LABEL = "kubevirt.io/created-by"
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
UNSCHEDULABLE_TIMEOUT_ANNOTATION = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
FINAL_PHASES = ("Succeeded", "Failed")
DEFAULT_PARALLEL_PER_CLUSTER = 5
DEFAULT_PARALLEL_OUTBOUND_PER_NODE = 2


class KubeVirtError(Exception):
    """A failure with a message meant for the user."""


def module_api_client(module, user_agent):
    """kubernetes.core's client for a module, with the module's own user agent so that the
    API server's audit log tells its requests apart."""
    api_client = get_api_client(module=module).client.client
    api_client.user_agent = user_agent
    return api_client


def error_message(exc):
    """What a module reports for an error: the API server's own message for API errors."""
    if isinstance(exc, ApiException):
        return "Kubernetes API error: %s" % api_error_message(exc)
    return str(exc)


def api_error_message(exc):
    """The API server's message from an ApiException body (Status JSON), else its reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return data["message"]
        except (TypeError, ValueError):
            return str(body)[:500]
    return "%s %s" % (getattr(exc, "status", ""), getattr(exc, "reason", "") or "")


def is_status(exc, *codes):
    return isinstance(exc, ApiException) and getattr(exc, "status", None) in codes


def phase(obj):
    return ((obj or {}).get("status") or {}).get("phase")


def condition(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_final(vmim):
    return phase(vmim) in FINAL_PHASES


def in_flight(vmims):
    """VMIMs that are neither Succeeded nor Failed nor being deleted (KubeVirt allows one per VMI)."""
    return [m for m in vmims if not is_final(m) and not (m.get("metadata") or {}).get("deletionTimestamp")]


class KubeVirtReader:
    """Reads through one ApiClient; every method returns dicts or None for 404."""

    def __init__(self, api_client):
        self.api = api_client
        self.custom = k8s_client.CustomObjectsApi(api_client)
        self.core = k8s_client.CoreV1Api(api_client)

    def _plain(self, obj):
        return self.api.sanitize_for_serialization(obj)

    def _get_custom(self, plural, namespace, name):
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_vmi(self, namespace, name):
        return self._get_custom(VMIS, namespace, name)

    def get_vm(self, namespace, name):
        return self._get_custom(VMS, namespace, name)

    def get_vmim(self, namespace, name):
        return self._get_custom(VMIMS, namespace, name)

    def list_vmims(self, namespace, vmi_name=None):
        """VMIMs of a namespace, or of one VMI (spec.vmiName; the label is only set by virt-api's mutator)."""
        result = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, VMIMS)
        items = result.get("items") or []
        if vmi_name is not None:
            items = [m for m in items if (m.get("spec") or {}).get("vmiName") == vmi_name]
        items.sort(key=lambda m: ((m.get("metadata") or {}).get("creationTimestamp") or ""))
        return items

    def list_vmis(self, namespace=None, label_selector=None):
        kwargs = {"label_selector": label_selector} if label_selector else {}
        if namespace:
            result = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, VMIS, **kwargs)
        else:
            result = self.custom.list_cluster_custom_object(GROUP, VERSION, VMIS, **kwargs)
        return result.get("items") or []

    def kubevirt_cr(self):
        """The KubeVirt CR (the first one found in any namespace), or None when there is none."""
        result = self.custom.list_cluster_custom_object(GROUP, VERSION, KUBEVIRTS)
        items = result.get("items") or []
        return items[0] if items else None

    def launcher_pods(self, vmi):
        namespace = vmi["metadata"]["namespace"]
        pods = self.core.list_namespaced_pod(
            namespace, label_selector="%s=%s" % (CREATED_BY_LABEL, vmi["metadata"]["uid"]))
        return [self._plain(p) for p in pods.items]

    def source_pod(self, vmi):
        """The launcher pod the VMI runs in now (status.activePods on its node, not a migration target)."""
        node = (vmi.get("status") or {}).get("nodeName")
        pods = [p for p in self.launcher_pods(vmi)
                if (p.get("spec") or {}).get("nodeName") == node
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        return pods[0] if pods else None

    def nodes(self):
        return [self._plain(n) for n in self.core.list_node().items]

    def node(self, name):
        try:
            return self._plain(self.core.read_node(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def active_pods(self):
        pods = self.core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed")
        return [self._plain(p) for p in pods.items]

    def events_for(self, namespace, kind, name, uid=None):
        selector = "involvedObject.kind=%s,involvedObject.name=%s" % (kind, name)
        events = self.core.list_namespaced_event(namespace, field_selector=selector).items
        plain = [self._plain(e) for e in events]
        if uid:
            plain = [e for e in plain if ((e.get("involvedObject") or {}).get("uid") in (None, uid))]
        plain.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or
                   (e.get("metadata") or {}).get("creationTimestamp") or "")
        return plain

    def openapi_has_added_node_selector(self):
        """Whether the served VMIM schema knows spec.addedNodeSelector (OpenAPI v3; readable by any user)."""
        response = self.api.call_api("/openapi/v3/apis/kubevirt.io/v1", "GET", auth_settings=["BearerToken"],
                                     _preload_content=False, _return_http_data_only=True)
        data = json.loads(response.data)
        schemas = ((data.get("components") or {}).get("schemas")) or {}
        for key, schema in schemas.items():
            if key.endswith("VirtualMachineInstanceMigration"):
                spec = ((schema.get("properties") or {}).get("spec")) or {}
                return "addedNodeSelector" in (spec.get("properties") or {})
        return None


class Capabilities:
    """What the cluster's KubeVirt supports, and how we know it."""

    def __init__(self, version=None, source=None, added_node_selector=None, parallel_per_cluster=None,
                 parallel_outbound_per_node=None, node_selectors=None, warnings=None):
        self.version = version
        self.node_selectors = dict(node_selectors or {})
        self.source = source
        self.added_node_selector = added_node_selector
        self.parallel_per_cluster = parallel_per_cluster or DEFAULT_PARALLEL_PER_CLUSTER
        self.parallel_outbound_per_node = parallel_outbound_per_node or DEFAULT_PARALLEL_OUTBOUND_PER_NODE
        self.warnings = warnings or []

    def as_dict(self):
        return {
            "kubevirt_version": self.version,
            "detected_from": self.source,
            "added_node_selector": self.added_node_selector,
            "parallel_migrations_per_cluster": self.parallel_per_cluster,
            "parallel_outbound_migrations_per_node": self.parallel_outbound_per_node,
        }


def detect_capabilities(reader):
    """KubeVirt version from the KubeVirt CR (status.observedKubeVirtVersion) -> versions.py.

    A user who may not read the CR (e.g. bound only to kubevirt.io:migrate) gets the
    answer from the served OpenAPI schema instead, which is what the API server will
    actually keep of a VMIM; the migration limits then stay at KubeVirt's defaults.
    """
    warnings = []
    try:
        cr = reader.kubevirt_cr()
    except ApiException as exc:
        if exc.status not in (401, 403):
            raise
        cr = None
        warnings.append("cannot read the KubeVirt CR (%s); KubeVirt's version is unknown and the migration "
                        "limits are assumed to be the defaults" % api_error_message(exc))
    else:
        if cr is None:
            warnings.append("no KubeVirt CR found; is KubeVirt deployed?")
    if cr is not None:
        configuration = (cr.get("spec") or {}).get("configuration") or {}
        migrations = configuration.get("migrations") or {}
        node_selectors = (configuration.get("developerConfiguration") or {}).get("nodeSelectors")
        observed = (cr.get("status") or {}).get("observedKubeVirtVersion")
        try:
            version = str(parse_kubevirt_version(observed))
            supported = kubevirt_supports(observed, "added_node_selector")
        except VersionError as exc:
            version, supported = observed, None
            warnings.append(str(exc))
        return Capabilities(version=version, source="KubeVirt CR status.observedKubeVirtVersion",
                            added_node_selector=supported,
                            parallel_per_cluster=migrations.get("parallelMigrationsPerCluster"),
                            parallel_outbound_per_node=migrations.get("parallelOutboundMigrationsPerNode"),
                            node_selectors=node_selectors, warnings=warnings)
    try:
        supported = reader.openapi_has_added_node_selector()
        source = "the served OpenAPI schema of VirtualMachineInstanceMigration"
    except (ApiException, ValueError) as exc:
        supported, source = None, None
        warnings.append("cannot read the OpenAPI schema of kubevirt.io/v1 either: %s" % exc)
    return Capabilities(source=source, added_node_selector=supported, warnings=warnings)


def launcher_scheduling(vmi, extra_node_selectors=None):
    """The constraints KubeVirt puts on a (target) launcher pod: the VMI's nodeSelector plus the KubeVirt CR's
    developerConfiguration.nodeSelectors and kubevirt.io/schedulable=true, its affinity and tolerations.

    Built from the VMI rather than copied from the running launcher pod: after a migration with
    addedNodeSelector, that pod carries the one-off selector, which the next migration does not.
    """
    spec = (vmi or {}).get("spec") or {}
    node_selector = dict(spec.get("nodeSelector") or {})
    node_selector[SCHEDULABLE_LABEL] = "true"
    node_selector.update(extra_node_selectors or {})
    return {"nodeSelector": node_selector, "affinity": spec.get("affinity"),
            "tolerations": spec.get("tolerations") or []}


def added_node_selector_minimum():
    return KUBEVIRT_FEATURES["added_node_selector"]["min_version"]
