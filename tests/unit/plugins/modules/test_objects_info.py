# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""objects_info: each query read through Cluster.objects (discovery, then one GET or one list), in order;
tests/integration/test_objects_info.py compares it with kubernetes.core.k8s_info on the local control plane."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import yaml
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import Cluster
from ansible_collections.vmsched.kubevirt.plugins.modules import objects_info


class Resource:
    """What discovery returns, as far as the cluster object uses it (kubernetes.dynamic.Resource)."""

    def __init__(self, api_version, kind, plural, namespaced):
        self.group_version, self.kind, self.plural, self.namespaced = api_version, kind, plural, namespaced

    def path(self, name=None, namespace=None):
        prefix = "/api/v1" if self.group_version == "v1" else "/apis/" + self.group_version
        return prefix + ("/namespaces/%s" % namespace if self.namespaced and namespace else "") + "/" + self.plural


class Response:
    def __init__(self, data):
        self.data = json.dumps(data).encode()


class FakeDynamic:
    """Serves `objects` {path: object or list of items}; records each request's path and parameters."""

    KINDS = {("v1", "Pod"): Resource("v1", "Pod", "pods", True),
             ("v1", "Namespace"): Resource("v1", "Namespace", "namespaces", False),
             ("apps/v1", "Deployment"): Resource("apps/v1", "Deployment", "deployments", True)}

    def __init__(self, objects):
        self.objects = objects
        self.requests = []
        self.resources = self
        self.client = None

    def get(self, api_version, kind):
        if (api_version, kind) not in self.KINDS:
            raise ResourceNotFoundError("No matches found for {'api_version': %r, 'kind': %r}" % (api_version, kind))
        return self.KINDS[(api_version, kind)]

    def request(self, method, path, serialize=True, **params):
        assert method == "GET" and serialize is False
        self.requests.append((path, params))
        if path not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        found = self.objects[path]
        return Response({"items": found} if isinstance(found, list) else found)


def cluster(objects):
    instance = Cluster.__new__(Cluster)
    instance._dynamic = FakeDynamic(objects)
    instance.page_size = None
    return instance


def run(objects, *queries):
    engine = objects_info.ObjectsInfo(cluster(objects), {"queries": list(queries)})
    engine.run()
    return engine.result, engine.cluster._dynamic.requests


def query(api_version, kind, **more):
    return dict({"api_version": api_version, "kind": kind, "name": None, "namespace": None, "label_selectors": [],
                 "hidden_fields": []}, **more)


def test_each_query_in_order_one_request_each():
    pod = {"metadata": {"name": "p", "namespace": "a"}, "spec": {}}
    result, requests = run({"/api/v1/namespaces/a/pods": [pod], "/api/v1/namespaces/a": {"metadata": {"name": "a"}},
                            "/apis/apps/v1/deployments": []},
                           query("v1", "Pod", namespace="a", label_selectors=["x=1", "y!=2"]),
                           query("v1", "Namespace", name="a"),
                           query("apps/v1", "Deployment"))
    assert result["changed"] is False
    # Listed objects carry their apiVersion and kind, as k8s_info returns them (a list's items do not).
    assert result["results"] == [
        {"api_found": True, "resources": [dict(pod, apiVersion="v1", kind="Pod")]},
        {"api_found": True, "resources": [{"metadata": {"name": "a"}}]},
        {"api_found": True, "resources": []}]
    assert requests == [("/api/v1/namespaces/a/pods", {"label_selector": "x=1,y!=2"}),
                        ("/api/v1/namespaces/a", {}),
                        ("/apis/apps/v1/deployments", {})]


def test_a_missing_object_is_no_resource_and_a_kind_not_served_is_not_found():
    result, requests = run({}, query("apps/v1", "Deployment", name="gone", namespace="a"),
                           query("example.io/v1", "Widget", namespace="a"))
    assert result["results"] == [{"api_found": True, "resources": []}, {"api_found": False, "resources": []}]
    assert [path for path, _params in requests] == ["/apis/apps/v1/namespaces/a/deployments/gone"]


def test_namespace_is_ignored_for_a_cluster_scoped_kind_and_quoted_for_a_namespaced_one():
    _result, requests = run({"/api/v1/namespaces": [], "/api/v1/namespaces/a%2Fb/pods": []},
                            query("v1", "Namespace", namespace="a"),
                            query("v1", "Pod", namespace="a/b"))
    assert [path for path, _params in requests] == ["/api/v1/namespaces", "/api/v1/namespaces/a%2Fb/pods"]


def test_hidden_fields_are_left_out():
    secret = {"metadata": {"name": "s", "managedFields": []}, "data": {"token": "c2VjcmV0"}, "type": "Opaque",
              "spec": "not a mapping"}
    result, _requests = run({"/api/v1/namespaces/a/pods": [secret]},
                            query("v1", "Pod", namespace="a",
                                  hidden_fields=["data", "metadata.managedFields", "spec.x", "status.y.z", "none"]))
    assert result["results"][0]["resources"] == [{"metadata": {"name": "s"}, "type": "Opaque", "apiVersion": "v1",
                                                  "kind": "Pod", "spec": "not a mapping"}]


def test_the_documented_options_are_the_argument_spec():
    documented = yaml.safe_load(objects_info.DOCUMENTATION)["options"]["queries"]["suboptions"]
    assert set(documented) == set(objects_info.QUERY_SPEC)
    for name, spec in objects_info.QUERY_SPEC.items():
        assert documented[name]["type"] == spec["type"], name
        assert bool(documented[name].get("required")) == bool(spec.get("required")), name
        assert documented[name].get("default") == spec.get("default"), name
