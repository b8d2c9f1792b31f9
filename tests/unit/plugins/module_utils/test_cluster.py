# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the cluster object (plugins/module_utils/cluster.py), the 401/403 rule (api_errors.py) and
capability detection (kubevirt.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.vmsched.kubevirt.plugins.module_utils import kubevirt as kv
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    error_message,
    is_forbidden,
    unless_forbidden,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import Cluster

from .kubevirt_fakes import FakeCluster, kubevirt_cr, launcher, vmi


class Response:
    def __init__(self, data):
        self.data = json.dumps(data).encode()


class PagedApi:
    """A list call that serves `items` in pages, honouring limit and _continue as the API server does."""

    def __init__(self, items):
        self.items = items
        self.calls = []

    def list(self, *args, **kwargs):
        self.calls.append(kwargs)
        assert kwargs["_preload_content"] is False
        start = int(kwargs.get("_continue") or 0)
        limit = kwargs.get("limit") or len(self.items)
        page = self.items[start:start + limit]
        token = str(start + limit) if start + limit < len(self.items) else None
        return Response({"metadata": {"continue": token}, "items": page})


def cluster(page_size=2):
    instance = Cluster.__new__(Cluster)
    instance.page_size = page_size
    return instance


def test_lists_are_paged_until_the_continue_token_ends():
    api = PagedApi([{"n": i} for i in range(5)])
    assert cluster()._list(api.list, "kubevirt.io", label_selector="a=b") == [{"n": i} for i in range(5)]
    assert [c.get("_continue") for c in api.calls] == [None, "2", "4"]
    assert all(c["limit"] == 2 and c["label_selector"] == "a=b" for c in api.calls)


def test_page_size_none_reads_a_list_in_one_call():
    api = PagedApi([{"n": i} for i in range(5)])
    assert len(cluster(None)._list(api.list)) == 5 and len(api.calls) == 1 and "limit" not in api.calls[0]


def test_a_missing_object_is_none_and_other_errors_propagate():
    def missing(*args, **kwargs):
        raise ApiException(status=404)

    def broken(*args, **kwargs):
        raise ApiException(status=500)
    assert cluster()._get(missing, "x") is None
    with pytest.raises(ApiException):
        cluster()._get(broken, "x")


def test_unless_forbidden_skips_with_the_api_servers_message():
    said = []

    def forbidden():
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = json.dumps({"message": "nodes is forbidden: User \"bob\" cannot list resource \"nodes\""})
        raise exc
    assert unless_forbidden(forbidden, said.append, default="skipped") == "skipped"
    assert said == ["nodes is forbidden: User \"bob\" cannot list resource \"nodes\""]
    assert unless_forbidden(lambda: 42, said.append) == 42

    def broken():
        raise ApiException(status=500)
    with pytest.raises(ApiException):
        unless_forbidden(broken, said.append)
    assert is_forbidden(ApiException(status=401)) and not is_forbidden(ValueError())
    assert error_message(ApiException(status=500, reason="Boom")) == "Kubernetes API error: 500 Boom"


# --- capability detection -------------------------------------------------------------------------------------


def test_capabilities_from_the_kubevirt_cr():
    caps = kv.detect_capabilities(FakeCluster(cr=kubevirt_cr("v1.6.6", per_cluster=8)))
    assert (caps.version, caps.added_node_selector, caps.parallel_per_cluster, caps.parallel_outbound_per_node) \
        == ("v1.6.6", True, 8, 2)
    assert caps.kubevirt_cr["status"]["observedKubeVirtVersion"] == "v1.6.6" and caps.warnings == []
    old = kv.detect_capabilities(FakeCluster(cr=kubevirt_cr("v1.5.3")))
    assert old.added_node_selector is False and old.as_dict()["kubevirt_version"] == "v1.5.3"


def test_an_unreadable_cr_falls_back_to_the_openapi_schema():
    caps = kv.detect_capabilities(FakeCluster(cr=kubevirt_cr(), forbidden={"kubevirt_cr"}, openapi=True))
    assert caps.added_node_selector is True and "OpenAPI" in caps.source and caps.kubevirt_cr is None
    assert caps.warnings[0].startswith("cannot read the KubeVirt CR (403 Forbidden")
    assert "migration limits are assumed to be the defaults" in caps.warnings[0]
    none = kv.detect_capabilities(FakeCluster(cr=None))
    assert none.warnings == ["no KubeVirt CR found; is KubeVirt deployed?"]


@pytest.mark.parametrize("cr, forbidden, fields, warned", [
    (kubevirt_cr(rollout="LiveUpdate"), (), ["nodeSelector", "affinity", "tolerations", "evict"], False),
    (kubevirt_cr(rollout="Stage"), (), ["evict"], False),
    (kubevirt_cr(), (), ["nodeSelector", "affinity", "tolerations", "evict"], False),      # 1.6: LiveUpdate by default
    (kubevirt_cr("v1.9.0"), (), ["nodeSelector", "affinity", "tolerations", "evict"], False),
    (kubevirt_cr("v1.5.3"), (), [], False),                                               # 1.5: Stage, no sync
    (kubevirt_cr("v1.5.3", rollout="LiveUpdate"), (), ["nodeSelector", "affinity", "tolerations"], False),
    (None, (), [], False),
    (kubevirt_cr(rollout="LiveUpdate"), ("kubevirt_cr",), [], True),
])
def test_live_updated_fields_from_the_rollout_strategy(cr, forbidden, fields, warned):
    said = []
    assert kv.detect_live_updated_fields(FakeCluster(cr=cr, forbidden=forbidden), said.append) == fields
    assert bool(said) is warned and all("assuming every change needs a restart" in w for w in said)


def test_the_source_pod_is_the_launcher_on_the_vmis_node():
    running = vmi("web", "n1")
    target = launcher(vmi("web", "n2"))
    gone = dict(launcher(running), status={"phase": "Failed"})
    other = launcher(vmi("other", "n1"))
    assert kv.source_pod(running, [target, gone, other, launcher(running)]) == launcher(running)
    assert kv.source_pod(running, [target, gone]) is None and kv.source_pod(running, None) is None


class Dynamic:
    """The DynamicClient's request as the cluster object calls it: GET of a path, answered from `answers` (path ->
    items, or an ApiException to raise)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def request(self, method, path, serialize=False, **params):
        self.calls.append((method, path, params))
        answer = self.answers[path]
        if isinstance(answer, ApiException):
            raise answer
        return Response({"metadata": {}, "items": answer})


def test_pods_of_one_node_and_node_metrics():
    dynamic = Dynamic({"/api/v1/pods": [], "/apis/metrics.k8s.io/v1beta1/nodes": [{"metadata": {"name": "n1"}}]})
    instance = cluster(None)
    instance._dynamic = dynamic
    assert instance.active_pods(node="n1") == [] and instance.active_pods() == []
    assert [c[2]["field_selector"] for c in dynamic.calls] == [
        "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName=n1", "status.phase!=Succeeded,status.phase!=Failed"]
    assert instance.node_metrics() == [{"metadata": {"name": "n1"}}]
    for status in (404, 503):
        dynamic.answers["/apis/metrics.k8s.io/v1beta1/nodes"] = ApiException(status=status)
        assert instance.node_metrics() is None
    dynamic.answers["/apis/metrics.k8s.io/v1beta1/nodes"] = ApiException(status=403)
    with pytest.raises(ApiException):
        instance.node_metrics()
