# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Smoke tests: the local control plane is the real thing, at the pinned version."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

CLUSTER = Path(__file__).resolve().parents[1] / "cluster"
sys.path.insert(0, str(CLUSTER))
import build  # noqa: E402  pylint: disable=wrong-import-position

FIXTURE = yaml.safe_load((CLUSTER / "nodes.yaml").read_text())


def test_server_reports_pinned_version(api_client):
    version = client.VersionApi(api_client).get_code()
    assert version.git_version == build.read_versions()["KUBERNETES_VERSION"]


def test_fixture_nodes_are_ready_with_their_quirks(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    launcher_nodes = set()
    for spec in FIXTURE["nodes"]:
        node = nodes[spec["name"]]
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        assert ready == ["True"], f"{spec['name']} not Ready: {node.status.conditions}"
        assert node.metadata.labels["topology.kubernetes.io/zone"] == spec["zone"]
        assert bool(node.spec.unschedulable) == bool(spec.get("unschedulable"))
        # The real node lifecycle controller adds its own taint to cordoned nodes.
        expected_taints = [t["key"] for t in spec.get("taints", [])]
        if spec.get("unschedulable"):
            expected_taints.append("node.kubernetes.io/unschedulable")
        assert sorted(t.key for t in node.spec.taints or []) == sorted(expected_taints)
        assert len(node.status.images) == 50  # the kubelet's cap
        if any("virt-launcher" in name for img in node.status.images for name in img.names):
            launcher_nodes.add(spec["name"])
    expected = {s["name"] for s in FIXTURE["nodes"] if s.get("virt_launcher_image")}
    assert launcher_nodes == expected and 0 < len(expected) < len(FIXTURE["nodes"])


def test_real_scheduler_binds_pod_to_schedulable_node(core, namespace, wait):
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="smoke"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="c", image="registry.example/smoke:v1",
            resources=client.V1ResourceRequirements(requests={"cpu": "2", "memory": "1Gi"}))]))
    core.create_namespaced_pod(namespace, pod)
    running = wait(lambda: (p := core.read_namespaced_pod("smoke", namespace)).status.phase == "Running" and p,
                   "pod smoke Running")
    # node05 is tainted and node06 cordoned in the fixture: the scheduler must avoid both.
    assert running.spec.node_name in {"node01", "node02", "node03", "node04"}
    events = wait(lambda: [e for e in core.list_namespaced_event(namespace).items if e.reason == "Scheduled"],
                  "Scheduled event")
    assert events[0].reporting_component == "default-scheduler" or events[0].source.component == "default-scheduler"


def test_rbac_denies_what_the_role_does_not_grant(api_client, core, namespace, wait):
    rbac = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader")))
    rbac.create_namespaced_role(namespace, client.V1Role(
        metadata=client.V1ObjectMeta(name="pod-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])]))
    rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="reader"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)]))
    token = core.create_namespaced_service_account_token("reader", namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))).status.token

    conf = client.Configuration()
    conf.host = api_client.configuration.host
    conf.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    conf.api_key = {"authorization": "Bearer " + token}
    as_reader = client.CoreV1Api(client.ApiClient(conf))

    # The API server authorizes from its informers' copy of the RoleBinding, a moment behind the write (a cold run with
    # both cores busy saw a 403 here): the grant is waited for, the denials below are not.
    granted = wait(lambda: as_reader.list_namespaced_pod(namespace), "the RoleBinding to take effect", timeout=30,
                   exceptions=(client.ApiException,))
    assert granted.items == []
    for denied in (as_reader.list_node,
                   lambda: as_reader.create_namespaced_config_map(namespace, client.V1ConfigMap(
                       metadata=client.V1ObjectMeta(name="x"))),
                   lambda: as_reader.list_namespaced_pod("kube-system")):
        with pytest.raises(client.ApiException) as err:
            denied()
        assert err.value.status == 403, err.value.body


def test_audit_log_records_writes(core, namespace, kubeconfig):
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="audited")))
    audit = kubeconfig.parent / "audit.log"
    entries = [json.loads(line) for line in audit.read_text().splitlines() if '"audited"' in line]
    assert any(e["verb"] == "create" and e["objectRef"]["namespace"] == namespace for e in entries)
