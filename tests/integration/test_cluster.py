# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules' cluster object (plugins/module_utils/cluster.py) against the real API server and KubeVirt: every
read answers as the typed client does, through the client the installed kubernetes package has."""
from __future__ import annotations

import os
import subprocess
import sys

from kubernetes import client, dynamic

from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import Cluster


def reader(api_client, page_size=2):
    return Cluster(dynamic.DynamicClient(api_client), page_size=page_size)


def names(items):
    return sorted(i["metadata"]["name"] for i in items)


def test_reads_equal_the_typed_clients(api_client, core, namespace):
    read = reader(api_client)
    assert names(read.nodes()) == sorted(n.metadata.name for n in core.list_node().items)  # 6 nodes: 3 pages
    first = core.list_node().items[0].metadata.name
    assert read.node(first)["metadata"]["name"] == first and read.node("no-such-node") is None
    assert read.namespace(namespace)["metadata"]["name"] == namespace and read.namespace("no-such-ns") is None
    assert read.server_version() == client.VersionApi(api_client).get_code().git_version
    pods = core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items
    assert names(reader(api_client, page_size=None).active_pods()) == sorted(p.metadata.name for p in pods)
    deployments = client.AppsV1Api(api_client).list_deployment_for_all_namespaces().items
    assert names(read.deployments()) == sorted(d.metadata.name for d in deployments)

    core.create_namespaced_config_map(namespace, {"metadata": {"name": "reader"}})
    core.create_namespaced_event(namespace, {
        "metadata": {"name": "reader.1"}, "involvedObject": {"kind": "ConfigMap", "name": "reader",
                                                             "namespace": namespace},
        "reason": "Test", "message": "seen by the reader", "type": "Normal"})
    assert [e["message"] for e in read.events_for(namespace, "ConfigMap", "reader")] == ["seen by the reader"]


def test_kubevirts_served_schema_knows_added_node_selector(api_client):
    # KubeVirt 1.9.0 serves VirtualMachineInstanceMigration.spec.addedNodeSelector (1.6.0 and later).
    assert reader(api_client).openapi_has_added_node_selector() is True


def test_patch_node_is_a_strategic_merge_patch(api_client, core):
    node = core.list_node().items[-1].metadata.name
    label = "vmsched.kubevirt.io/reader-test"
    try:
        reader(api_client).patch_node(node, {"metadata": {"labels": {label: "yes"}}})
        labels = core.read_node(node).metadata.labels
        assert labels[label] == "yes" and "kubernetes.io/hostname" in labels  # merged, not replaced
    finally:
        core.patch_node(node, {"metadata": {"labels": {label: None}}})


def test_the_reader_imports_no_typed_core_api(kubeconfig):
    # CoreV1Api and AppsV1Api import every model class they name: 0.7 s of CPU per module run with kubernetes 37.
    probe = ("import sys\n"
             "from kubernetes import config, dynamic\n"
             "from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import Cluster\n"
             "read = Cluster(dynamic.DynamicClient(config.new_client_from_config(sys.argv[1])))\n"
             "assert read.nodes() and read.namespace('default')\n"
             "read.active_pods(), read.deployments()  # a fresh cluster may have none of these\n"
             "print(sorted(m for m in sys.modules if m.endswith(('core_v1_api', 'apps_v1_api'))))\n")
    env = dict(os.environ, PYTHONPATH=os.environ["ANSIBLE_COLLECTIONS_PATH"])
    out = subprocess.run([sys.executable, "-c", probe, str(kubeconfig)], capture_output=True, text=True, env=env,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
