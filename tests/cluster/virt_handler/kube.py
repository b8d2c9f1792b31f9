# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small JSON REST client for the simulated node agent.

The kubernetes client loads the kubeconfig (TLS, client certificates, tokens) and
builds the urllib3 pool; requests and watches go through that pool as plain JSON,
so every object is a dict shaped exactly like the API server's JSON. That keeps
custom resources and core objects alike, and watch events cheap to decode.
A client may also carry a ServiceAccount token instead of the kubeconfig's
credentials (Kube.with_token): virt-handler's identity on one node.
"""
from __future__ import annotations

import json
import urllib.parse

import kubernetes.client
import kubernetes.config
from kubernetes.client.rest import RESTClientObject
import urllib3

GROUP = "kubevirt.io"
VERSION = "v1"

# resource -> (path prefix, namespaced)
RESOURCES = {
    "pods": ("/api/v1", True),
    "serviceaccounts": ("/api/v1", True),
    "events": ("/api/v1", True),
    "nodes": ("/api/v1", False),
    "namespaces": ("/api/v1", False),
    "virtualmachines": (f"/apis/{GROUP}/{VERSION}", True),
    "virtualmachineinstances": (f"/apis/{GROUP}/{VERSION}", True),
    "virtualmachineinstancemigrations": (f"/apis/{GROUP}/{VERSION}", True),
    "kubevirts": (f"/apis/{GROUP}/{VERSION}", True),
    "validatingwebhookconfigurations": ("/apis/admissionregistration.k8s.io/v1", False),
    "mutatingwebhookconfigurations": ("/apis/admissionregistration.k8s.io/v1", False),
    "poddisruptionbudgets": ("/apis/policy/v1", True),
}

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status fields."""

    def __init__(self, status, body):
        self.status = status
        self.body = body
        try:
            doc = json.loads(body)
        except (ValueError, TypeError):
            doc = {}
        self.reason = doc.get("reason", "")
        self.message = doc.get("message", body if isinstance(body, str) else "")
        super().__init__(f"HTTP {status} {self.reason}: {self.message}")

    @property
    def not_found(self):
        return self.status == 404

    @property
    def conflict(self):
        return self.status == 409

    @property
    def gone(self):
        return self.status == 410


def path(resource, namespace=None, name=None, subresource=None):
    prefix, namespaced = RESOURCES[resource]
    parts = [prefix]
    if namespaced and namespace:
        parts += ["namespaces", namespace]
    parts.append(resource)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class Kube:
    """JSON requests against the API server named in a kubeconfig."""

    def __init__(self, kubeconfig=None, timeout=30.0, pool_size=16, config=None,
                 user_agent="vmsched-kubevirt-node-agent"):
        cfg = config
        if cfg is None:
            cfg = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self.host = cfg.host.rstrip("/")
        self.config = cfg
        self.timeout = timeout
        # The client's own pool settings (kubernetes 31 took them as arguments, 37 only from the configuration).
        cfg.connection_pool_maxsize = pool_size
        self.pool = RESTClientObject(cfg).pool_manager
        self.user_agent = user_agent

    def with_token(self, token, user_agent):
        """A client for the same API server and CA that authenticates with a bearer token only."""
        cfg = kubernetes.client.Configuration()
        cfg.host = self.config.host
        cfg.ssl_ca_cert = self.config.ssl_ca_cert
        cfg.verify_ssl = self.config.verify_ssl
        cfg.api_key = {"authorization": "Bearer " + token}
        return Kube(config=cfg, timeout=self.timeout, user_agent=user_agent)

    def _headers(self, content_type=None):
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        for setting in self.config.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def url(self, api_path, query=None):
        query = {k: v for k, v in (query or {}).items() if v is not None}
        return self.host + api_path + ("?" + urllib.parse.urlencode(query) if query else "")

    def request(self, method, api_path, query=None, body=None, content_type="application/json", timeout=None):
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        resp = self.pool.request(method, self.url(api_path, query), body=data,
                                 headers=self._headers(content_type if body is not None else None),
                                 timeout=urllib3.Timeout(connect=10.0, read=timeout or self.timeout),
                                 retries=False, preload_content=True)
        text = resp.data.decode("utf-8", "replace")
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, text)
        return json.loads(text) if text else {}

    # Convenience verbs --------------------------------------------------------

    def get(self, resource, namespace=None, name=None, subresource=None):
        return self.request("GET", path(resource, namespace, name, subresource))

    def list(self, resource, namespace=None, **query):
        return self.request("GET", path(resource, namespace), query=query)

    def create(self, resource, namespace, obj, subresource=None, name=None):
        return self.request("POST", path(resource, namespace, name, subresource), body=obj)

    def merge_patch(self, resource, namespace, name, patch, subresource=None):
        return self.request("PATCH", path(resource, namespace, name, subresource), body=patch,
                            content_type=MERGE_PATCH)

    def json_patch(self, resource, namespace, name, ops, subresource=None):
        return self.request("PATCH", path(resource, namespace, name, subresource), body=ops,
                            content_type=JSON_PATCH)

    def update(self, resource, namespace, obj):
        return self.request("PUT", path(resource, namespace, obj["metadata"]["name"]), body=obj)

    def strategic_patch(self, resource, namespace, name, patch, subresource=None):
        return self.request("PATCH", path(resource, namespace, name, subresource), body=patch,
                            content_type=STRATEGIC_PATCH)

    def apply(self, resource, namespace, obj, manager="vmsched-kubevirt-node-agent"):
        name = obj["metadata"]["name"]
        return self.request("PATCH", path(resource, namespace, name), body=obj, content_type=APPLY_PATCH,
                            query={"fieldManager": manager, "force": "true"})

    def delete(self, resource, namespace, name, uid=None, propagation=None):
        body = None
        if uid or propagation:
            body = {"apiVersion": "v1", "kind": "DeleteOptions"}
            if uid:
                body["preconditions"] = {"uid": uid}
            if propagation:
                body["propagationPolicy"] = propagation
        return self.request("DELETE", path(resource, namespace, name), body=body)

    def watch(self, api_path, resource_version, label_selector=None, timeout_seconds=240):
        """Yield (type, object) watch events until the server ends the stream."""
        query = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_seconds), "labelSelector": label_selector}
        resp = self.pool.request("GET", self.url(api_path, query), headers=self._headers(),
                                 timeout=urllib3.Timeout(connect=10.0, read=timeout_seconds + 30),
                                 retries=False, preload_content=False)
        try:
            if resp.status != 200:
                raise ApiError(resp.status, resp.read().decode("utf-8", "replace"))
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield event.get("type"), event.get("object") or {}
        finally:
            resp.release_conn()
