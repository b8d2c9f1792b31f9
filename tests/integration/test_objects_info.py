# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""objects_info on the local control plane: each of its queries returns what kubernetes.core.k8s_info returns for
the same read, in one module run, and it writes nothing."""
from __future__ import annotations

from kubernetes import client

from .ansible_module import run_module
from .audit import Audit

LABEL = "vmsched.kubevirt.io/test=objects-info"


def names(resources):
    return sorted((obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
                  for obj in resources)


def test_each_query_reads_what_k8s_info_reads(kubeconfig, core, namespace):
    for name, labelled in (("a", True), ("b", True), ("c", False)):
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels={"vmsched.kubevirt.io/test": "objects-info"}
                                         if labelled else None), data={"secret": name}))
    queries = [
        {"api_version": "v1", "kind": "Namespace", "name": namespace},
        {"api_version": "v1", "kind": "ConfigMap", "namespace": namespace, "label_selectors": [LABEL],
         "hidden_fields": ["data"]},
        {"api_version": "v1", "kind": "ConfigMap", "label_selectors": [LABEL]},  # every namespace
        {"api_version": "v1", "kind": "ConfigMap", "name": "gone", "namespace": namespace},
        {"api_version": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "system:kube-scheduler",
         "namespace": namespace},  # a cluster-scoped kind: the namespace is ignored, as k8s_info ignores it
        {"api_version": "example.io/v1", "kind": "Widget"},
    ]
    audit = Audit(namespace)
    rc, result = run_module("vmsched.kubevirt.objects_info", kubeconfig, {"queries": queries})
    assert rc == 0, result
    assert result["changed"] is False
    assert audit.writes() == []
    assert len(result["results"]) == len(queries)
    for query, got in zip(queries, result["results"]):
        args = {key: value for key, value in query.items() if key != "hidden_fields"}
        rc, expected = run_module("kubernetes.core.k8s_info", kubeconfig, dict(args, **(
            {"hidden_fields": query["hidden_fields"]} if "hidden_fields" in query else {})))
        assert rc == 0, expected
        assert got["api_found"] == expected["api_found"], query
        assert names(got["resources"]) == names(expected["resources"]), query
        for obj, other in zip(sorted(got["resources"], key=lambda o: o["metadata"]["name"]),
                              sorted(expected["resources"], key=lambda o: o["metadata"]["name"])):
            assert obj.keys() == other.keys(), query
            assert obj.get("data") == other.get("data"), query
    assert names(result["results"][1]["resources"]) == [("v1", "ConfigMap", namespace, "a"),
                                                        ("v1", "ConfigMap", namespace, "b")]
    assert "data" not in result["results"][1]["resources"][0]
    assert result["results"][2]["resources"][0]["data"] == {"secret": "a"}
    assert result["results"][3]["resources"] == []
    assert result["results"][5] == {"api_found": False, "resources": []}
