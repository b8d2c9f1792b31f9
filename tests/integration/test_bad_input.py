# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input against the local control plane and its real KubeVirt (issue 26, item 3): every option is checked
before the first write.

Each class of bad input (a negative timeout, an unknown target node, a kubeconfig file or a context that does not
exist) is given to the modules as Ansible runs them; the error must name the option or the name, and the API
server's audit log must show no create, update, patch or delete by the module's user after the call. The modules
run as a ServiceAccount of the test's own namespace bound to cluster-admin (so nothing but the input stops them),
through a kubeconfig holding its token: the audit log tells its requests apart by username.
"""
from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from . import ansible_module
from .audit import Audit
from .vms import (  # noqa: F401  pylint: disable=unused-import
    FAST_NODES,
    VMIMS,
    kv,
    kubevirt,
    start_vm,
)

MIGRATION = "vmsched.kubevirt.vmi_migration"
EVACUATION = "vmsched.kubevirt.vmi_evacuation"
PREFLIGHT = "vmsched.kubevirt.preflight"
SA = "bad-input"
# The preflight module with a spec of one harmless variable: only its connection is under test here.
PREFLIGHT_ARGS = {"spec": {"argument_specs": {"main": {"options": {"bad_input_x": {"type": "str", "default": ""}}}}}}


@pytest.fixture
def as_user(api_client, core, namespace, tmp_path):
    """(a kubeconfig authenticating as ServiceAccount bad-input of the test's namespace, bound to cluster-admin;
    its audit log username)."""
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SA)))
    rbac = client.RbacAuthorizationV1Api(api_client)
    binding = f"vmsched:{namespace}:{SA}"
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=binding),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=SA, namespace=namespace)]))
    token = core.create_namespaced_service_account_token(SA, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    conf = api_client.configuration
    cluster = {"server": conf.host}
    if conf.ssl_ca_cert:
        cluster["certificate-authority-data"] = base64.b64encode(Path(conf.ssl_ca_cert).read_bytes()).decode()
    path = tmp_path / "bad-input.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": SA,
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [{"name": SA, "context": {"cluster": "local", "user": SA, "namespace": namespace}}],
    }))
    yield path, f"system:serviceaccount:{namespace}:{SA}"
    rbac.delete_cluster_role_binding(binding)


def run(module, kubeconfig, args):
    return ansible_module.run_module(module, kubeconfig, args, timeout=300)


def refused_without_writes(module, kubeconfig, args, user, *fragments):
    """Run the module, which must fail with every fragment in its message and write nothing as `user`; the
    result and the audit mark."""
    audit = Audit(user=user)
    rc, res = run(module, kubeconfig, args)
    assert rc != 0 and res.get("failed"), res
    for fragment in fragments:
        assert fragment in res["msg"], (fragment, res["msg"])
    assert audit.writes() == [], f"{module} wrote before it refused its input: {res['msg']}"
    return res, audit


def reads_seen(audit, user, resource, name):
    """Whether the audit log holds a get of resource/name by `user` after the mark (the log does record the
    module's requests: an empty list of writes is no accident)."""
    return any(event.get("verb") == "get" and (event.get("user") or {}).get("username") == user
               and (event.get("objectRef") or {}).get("resource") == resource
               and (event.get("objectRef") or {}).get("name") == name for event in audit.events())


def fast_vm(kv, namespace, wait):
    """A running VM on one of the two fast nodes; (its node, the other fast node), where it can migrate."""
    vmi = start_vm(kv, namespace, "vm", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    source = vmi["status"]["nodeName"]
    return source, (FAST_NODES - {source}).pop()


# --- negative (or zero) numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, message", [
    ({"wait_timeout": -5}, "wait_timeout is -5; the least allowed is 1"),
    ({"unschedulable_timeout": -1}, "unschedulable_timeout is -1; the least allowed is 0"),
], ids=["wait_timeout", "unschedulable_timeout"])
def test_vmi_migration_refuses_a_negative_timeout_before_any_write(kv, as_user, namespace, wait, bad, message):
    kubeconfig, user = as_user
    _source, target = fast_vm(kv, namespace, wait)
    refused_without_writes(MIGRATION, kubeconfig, dict({"name": "vm", "namespace": namespace,
                                                        "target_node": target}, **bad), user, message)
    assert kv.list(VMIMS, namespace) == []


@pytest.mark.parametrize("bad, message", [
    ({"wait_timeout": -5}, "wait_timeout is -5; the least allowed is 1"),
    ({"max_parallel": 0}, "max_parallel is 0; the least allowed is 1"),
    ({"unschedulable_timeout": -1}, "unschedulable_timeout is -1; the least allowed is 0"),
], ids=["wait_timeout", "max_parallel", "unschedulable_timeout"])
def test_vmi_evacuation_refuses_a_negative_timeout_before_any_write(kv, as_user, namespace, wait, bad, message):
    kubeconfig, user = as_user
    source, _target = fast_vm(kv, namespace, wait)
    refused_without_writes(EVACUATION, kubeconfig, dict({"node": source, "namespace": namespace}, **bad),
                           user, message)
    assert kv.list(VMIMS, namespace) == []


# --- names that do not exist ------------------------------------------------------------------------------------


def test_an_unknown_target_node_is_named_before_any_write(kv, as_user, namespace, wait):
    kubeconfig, user = as_user
    source, _target = fast_vm(kv, namespace, wait)
    _res, audit = refused_without_writes(MIGRATION, kubeconfig, {"name": "vm", "namespace": namespace,
                                                                 "target_node": "node99"},
                                         user, "target node 'node99' does not exist")
    assert reads_seen(audit, user, "nodes", "node99"), "the audit log shows no lookup of node99"

    _res, audit = refused_without_writes(EVACUATION, kubeconfig, {"node": source, "namespace": namespace,
                                                                  "target_nodes": ["node99"]},
                                         user, "target node 'node99' (target_nodes) does not exist")
    assert reads_seen(audit, user, "nodes", "node99"), "the audit log shows no lookup of node99"
    assert kv.list(VMIMS, namespace) == []


@pytest.mark.parametrize("module, args", [
    (MIGRATION, {"name": "vm", "namespace": "default", "target_node": "node02"}),
    (EVACUATION, {"node": "node02", "namespace": "default"}),
    (PREFLIGHT, PREFLIGHT_ARGS),
], ids=["vmi_migration", "vmi_evacuation", "preflight"])
def test_a_kubeconfig_file_that_does_not_exist_is_named(as_user, tmp_path, module, args):
    kubeconfig, user = as_user
    missing = str(tmp_path / "nowhere" / "kubeconfig")
    # As the kubeconfig option (kubernetes.core declares it no_log: the path must not come out as ********) ...
    refused_without_writes(module, kubeconfig, dict(args, kubeconfig=missing), user,
                           f"kubeconfig file '{missing}' does not exist")
    # ... and as KUBECONFIG.
    refused_without_writes(module, missing, args, user, f"kubeconfig file '{missing}' does not exist")


@pytest.mark.parametrize("module, args", [
    (MIGRATION, {"name": "vm", "namespace": "default", "target_node": "node02"}),
    (EVACUATION, {"node": "node02", "namespace": "default"}),
    (PREFLIGHT, PREFLIGHT_ARGS),
], ids=["vmi_migration", "vmi_evacuation", "preflight"])
def test_a_context_that_is_not_in_the_kubeconfig_is_named(as_user, module, args):
    kubeconfig, user = as_user
    expected = f"context 'nosuch' is not in kubeconfig '{kubeconfig}' (its contexts: {SA})"
    refused_without_writes(module, kubeconfig, dict(args, kubeconfig=str(kubeconfig), context="nosuch"), user,
                           expected)
    refused_without_writes(module, kubeconfig, dict(args, context="nosuch"), user, expected)
