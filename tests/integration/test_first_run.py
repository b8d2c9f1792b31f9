# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A first run of playbooks/site.yml on a cluster treated as a user's own (issue 31, "Safe by default"): no
variable chooses VMs, every default as it ships. First with --check, as the README's real-cluster section starts,
then for real: it writes nothing to any VM, VMI or admission policy (the API server's audit log, by the user the
playbook runs as), says what to set to choose VMs, and the descheduler it deploys only logs what it would evict.

Three things are set, none of which chooses VMs: the namespace the scheduler and the descheduler go to (this test's
own, so that the run stays apart from the others on this control plane; on a real cluster kube-system), the VM
defaults policy's name (the same reason: if the run wrote one, teardown would remove that one), and two settings
the local control plane needs: no registry lookup (`make demo`'s `-e site_image_lookup=false`: KWOK pulls no image)
and no dry-run preview Job (KWOK's pods log nothing for it to read).
"""
from __future__ import annotations

import pytest
from kubernetes import client

from .audit import Audit
from .conftest import delete_site_installs
from .local_scheduler import token_kubeconfig
from .playbook import ROOT, run_playbook
from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMS,
    kubevirt,
    kv,
    start_vm,
    vm_manifest,
)

SITE = ROOT / "playbooks" / "site.yml"
EVICT = "descheduler.alpha.kubernetes.io/evict"
# Nothing site.yml may write on a first run: VMs and what runs them, evictions (pods/eviction), the VM defaults.
NEVER_WRITTEN = {"virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations", "pods",
                 "mutatingadmissionpolicies", "mutatingadmissionpolicybindings"}


def install_here(namespace):
    return {"site_scheduler_namespace": namespace, "site_descheduler_namespace": namespace,
            "site_vm_defaults_name": namespace}


LOCAL_CONTROL_PLANE = {"site_image_lookup": False, "site_descheduler_dry_run_preview": False}


@pytest.fixture
def user(api_client, core, namespace, tmp_path):
    """The admin running the playbook: a ServiceAccount bound to cluster-admin (site.yml creates ClusterRoles), its
    token in a kubeconfig of its own, and its audit log username (every write of the run, anywhere, is its)."""
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="admin")))
    rbac = client.RbacAuthorizationV1Api(api_client)
    binding = f"vmsched-first-run-{namespace}"
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=binding),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="admin", namespace=namespace)]))
    kubeconfig = token_kubeconfig(api_client, core, namespace, "admin", tmp_path / "admin.kubeconfig")
    yield kubeconfig, f"system:serviceaccount:{namespace}:admin"
    rbac.delete_cluster_role_binding(binding)


def untouched(vm):
    template = vm["spec"]["template"]
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return "schedulerName" not in template["spec"] and EVICT not in annotations


def test_a_first_run_with_the_defaults_writes_no_vm_and_evicts_nothing(kv, dyn, namespace, user, wait):
    admin_kubeconfig, username = user
    start_vm(kv, namespace, "web", wait)
    kv.create(VMS, namespace, vm_manifest("db", run_strategy="Halted"))
    # A VM's spec changes bump its generation (KubeVirt's own status writes do not).
    before = {vm["metadata"]["name"]: vm["metadata"]["generation"] for vm in kv.list(VMS, namespace)}
    variables = dict(install_here(namespace), **LOCAL_CONTROL_PLANE)
    apps = client.AppsV1Api(kv.core.api_client)
    try:
        # 1. --check: what would change, nothing written at all.
        audit = Audit(user=username)
        check = run_playbook(SITE, variables, admin_kubeconfig, check=True)
        assert not check.failed, check.failure or check.stdout[-3000:]
        writes, dry_runs = audit.read()
        assert writes == [], writes
        assert dry_runs > 0, "check mode did not reach the API server"

        # 2. The run: the scheduler and the descheduler installed, no VM written, the steps that would write VMs
        # skipped with a message naming what to set.
        audit = Audit(user=username)
        run = run_playbook(SITE, variables, admin_kubeconfig)
        assert not run.failed, run.failure or run.stdout[-3000:]
        writes = audit.writes()
        assert writes, "the run installed nothing"
        assert not [w for w in writes if w[1] in NEVER_WRITTEN], writes
        # Its own objects, the scheduler's RoleBinding in kube-system, and cluster-scoped RBAC named after them.
        assert {w[2] for w in writes} <= {namespace, "kube-system", None}, writes
        assert all(w[3].startswith(f"vmsched:{namespace}:") for w in writes if w[2] is None), writes

        for result in (check, run):
            ran = {name for name, r in result.results if not r.get("skipped")}
            assert not ran & {"Opt the selected VMs in", "Default new VMs to the secondary scheduler"}, ran
            opt_in = " ".join(result.result("Report that the opt-in has no VMs chosen")["msg"])  # lines, joined
            wanted = ("site_vms_namespace", "site_vms_label_selector", "site_vms_names", "site_vms_all_namespaces=true")
            assert all(v in opt_in for v in wanted), opt_in
            defaults = " ".join(result.result("Report that the defaults for new VMs have no namespace")["msg"])
            assert "site_vm_defaults_namespaces" in defaults and "site_vm_defaults_all_namespaces=true" in defaults
        row = run.clusters()["localhost"]
        assert "skipped (no namespace chosen)" in row["VM defaults"], row

        vms = {vm["metadata"]["name"]: vm for vm in kv.list(VMS, namespace)}
        assert {name: vm["metadata"]["generation"] for name, vm in vms.items()} == before
        assert all(untouched(vm) for vm in vms.values()), vms

        # The descheduler only logs what it would evict.
        container = apps.read_namespaced_deployment("kubevirt-descheduler", namespace).spec.template.spec.containers[0]
        assert "--dry-run" in container.args, container.args
        assert apps.read_namespaced_deployment("kubevirt-scheduler", namespace).spec.replicas == 1
    finally:
        delete_site_installs(dyn, namespace)
