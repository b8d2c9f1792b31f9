# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""site.yml, migrate_vm.yml and evacuate_node.yml as AWX runs them: ansible-runner over an AWX-shaped private
data directory (tests/integration/awx_job.py), survey answers as AWX sends them, a ServiceAccount token injected
as AWX's Kubernetes credential type injects it, and AWX's "check" job type. Assertions are on the job events
(ok / changed / failed per task); "writes nothing" is read from the API server's audit log, by the token's user."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from .audit import Audit
from .awx_job import Credential, run_job
from .test_vmi_evacuation import prefer
from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMIS,
    kv,
    kubevirt,
    running_vmi,
    start_vm,
    vm_manifest,
)

CHECK = "Check the survey answers"


@pytest.fixture(scope="module")
def job_user(core, kubeconfig):
    """A ServiceAccount bound to cluster-admin (site.yml creates ClusterRoles), its token as an AWX credential of
    type "OpenShift or Kubernetes API Bearer Token" (host, token, CA, verify_ssl), and its audit log username."""
    ns = "vmsched-awx-" + uuid.uuid4().hex[:6]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="awx")))
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    binding = f"{ns}-cluster-admin"
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=binding),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="awx", namespace=ns)]))
    token = core.create_namespaced_service_account_token("awx", ns, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    credential = Credential(host=cfg.host, bearer_token=token, ssl_ca_cert=Path(cfg.ssl_ca_cert).read_text())
    yield credential, f"system:serviceaccount:{ns}:awx"
    rbac.delete_cluster_role_binding(binding)
    core.delete_namespace(ns)


def only_the_check_ran(job):
    """The job failed in its first task and ran no other."""
    assert job.status == "failed", job
    assert job.started_tasks == [CHECK], job.tasks
    assert job.tasks == [(CHECK, "failed", False)], job.tasks
    return job.result(CHECK)["msg"]


# --- migrate_vm.yml -----------------------------------------------------------------------------------

def test_migrate_vm_job(kv, namespace, wait, job_user, tmp_path):
    credential, user = job_user
    vmi = start_vm(kv, namespace, "db01", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    target = ({"node02", "node04"} - {vmi["status"]["nodeName"]}).pop()
    answers = {"migrate_vm_name": "db01", "migrate_vm_namespace": namespace, "migrate_vm_target_node": target,
               "migrate_vm_wait_timeout": 120, "migrate_vm_cancel_on_timeout": "true"}

    audit = Audit(user=user)
    check = run_job("migrate_vm", answers, credential, job_type="check", tmp_path=tmp_path)
    assert check.status == "successful", check.failures
    assert check.tasks == [(CHECK, "ok", False), ("Migrate the VM", "ok", True),
                           ("Report where the VM runs", "ok", False)]
    assert check.result("Migrate the VM")["candidates"] == [target]
    assert audit.writes() == [], "a check job wrote"
    assert kv.get(VMIS, namespace, "db01")["status"]["nodeName"] == vmi["status"]["nodeName"]

    job = run_job("migrate_vm", answers, credential, tmp_path=tmp_path)
    assert job.status == "successful" and job.rc == 0, job.failures
    assert job.tasks == [(CHECK, "ok", False), ("Migrate the VM", "ok", True),
                         ("Report where the VM runs", "ok", False)]
    assert job.result(CHECK)["variables"]["migrate_vm_cancel_on_timeout"] is True
    assert job.result("Migrate the VM")["target_node"] == target
    assert kv.get(VMIS, namespace, "db01")["status"]["nodeName"] == target
    assert job.stats["changed"] == {"localhost": 1}


@pytest.mark.parametrize("answers, message", [
    ({"migrate_vm_target_node": "node99"}, "node node99 (migrate_vm_target_node) does not exist"),
    ({"migrate_vm_namespace": "no-such-namespace"}, "namespace no-such-namespace (migrate_vm_namespace) does not exist"),
    ({"migrate_vm_wait_timeout": -5}, "migrate_vm_wait_timeout is -5; the least allowed is 1"),
], ids=["unknown node", "missing namespace", "negative timeout"])
def test_migrate_vm_bad_answer_fails_first_and_writes_nothing(kv, namespace, wait, job_user, tmp_path, answers,
                                                              message):
    credential, user = job_user
    start_vm(kv, namespace, "db01", wait)
    answers = dict({"migrate_vm_name": "db01", "migrate_vm_namespace": namespace, "migrate_vm_target_node": "node04"},
                   **answers)
    if "migrate_vm_wait_timeout" in answers:
        # AWX itself refuses this launch (the survey's minimum); sent through the API as extra vars, it reaches
        # the playbook, which must refuse it too.
        assert run_job("migrate_vm", answers, credential, tmp_path=tmp_path).refused == \
            ["migrate_vm_wait_timeout: -5 is below 1"]
    audit = Audit(user=user)
    job = run_job("migrate_vm", answers, credential, check_survey=False, tmp_path=tmp_path)
    assert message in only_the_check_ran(job)
    writes, dry_runs = audit.read()
    assert (writes, dry_runs) == ([], 0)
    assert not kv.list("virtualmachineinstancemigrations", namespace)


# --- evacuate_node.yml ----------------------------------------------------------------------------------

def test_evacuate_node_job(kv, namespace, wait, job_user, tmp_path):
    credential, user = job_user
    for name in ("web01", "web02"):
        kv.create("virtualmachines", namespace, vm_manifest(name, spec_extra={"affinity": prefer("node03")}))
    assert {running_vmi(kv, namespace, n, wait)["status"]["nodeName"] for n in ("web01", "web02")} == {"node03"}
    answers = {"evacuate_node_name": "node03", "evacuate_node_cordon": "false", "evacuate_node_namespace": namespace,
               "evacuate_node_target_nodes": "node02, node04", "evacuate_node_max_parallel": 1}

    audit = Audit(user=user)
    check = run_job("evacuate_node", answers, credential, job_type="check", tmp_path=tmp_path)
    assert check.status == "successful", check.failures
    assert [(name, outcome) for name, outcome, _changed in check.tasks] == [
        (CHECK, "ok"), ("Migrate the VMs away", "ok"), ("Report the result", "ok"), ("Show each VM", "ok")]
    assert len([e for e in check.events if e.get("event") == "runner_item_on_ok"]) == 2  # one per VM
    assert check.outcome("Migrate the VMs away") == [("ok", True)]
    assert audit.writes() == [], "a check job wrote"

    job = run_job("evacuate_node", answers, credential, tmp_path=tmp_path)
    assert job.status == "successful", job.failures
    assert job.outcome(CHECK) == [("ok", False)] and job.outcome("Migrate the VMs away") == [("ok", True)]
    result = job.result("Migrate the VMs away")
    assert result["summary"]["migrated"] == 2 and result["cordoned"] is False
    assert {v["status"]["nodeName"] for v in kv.list(VMIS, namespace)} <= {"node02", "node04"}
    assert not kv.core.read_node("node03").spec.unschedulable


def test_evacuate_node_unknown_node_fails_first_and_writes_nothing(job_user, tmp_path):
    credential, user = job_user
    audit = Audit(user=user)
    job = run_job("evacuate_node", {"evacuate_node_name": "node42", "evacuate_node_target_nodes": "node02,node77"},
                  credential, tmp_path=tmp_path)
    message = only_the_check_ran(job)
    assert "node node42 (evacuate_node_name) does not exist" in message
    assert "node node77 (evacuate_node_target_nodes) does not exist" in message
    assert audit.read() == ([], 0)


# --- site.yml -------------------------------------------------------------------------------------------

def site_answers(ns):
    """site.yml confined to one namespace, as the Molecule scenarios run it (KWOK pulls no image)."""
    return {"site_image_lookup": "false", "site_scheduler_namespace": ns, "site_scheduler_rollout_timeout": 120,
            "site_descheduler_namespace": ns, "site_descheduler_rollout_timeout": 120, "site_vms_namespace": ns,
            "site_vm_defaults_name": ns, "site_vm_defaults_namespaces": ns,
            # KWOK's pods never log: no preview Job of the descheduler's dry run (site.yml's default).
            "site_descheduler_dry_run_preview": "false"}


def test_site_job_converges_then_checks_clean(kv, namespace, wait, job_user, tmp_path):
    credential, user = job_user
    start_vm(kv, namespace, "app01", wait)
    answers = site_answers(namespace)
    try:
        job = run_job("site", answers, credential, tmp_path=tmp_path)
        assert job.status == "successful", job.failures
        assert job.outcome(CHECK) == [("ok", False)]
        assert not [t for t in job.tasks if t[1] == "failed"]
        changed = {name for name, _outcome, was_changed in job.tasks if was_changed}
        assert "Opt the selected VMs in" in changed, changed
        vm = kv.get("virtualmachines", namespace, "app01")
        assert vm["spec"]["template"]["spec"]["schedulerName"] == "kubevirt-scheduler"

        # A check job after the converge: nothing would change, and nothing is written.
        audit = Audit(user=user)
        check = run_job("site", answers, credential, job_type="check", tmp_path=tmp_path)
        assert check.status == "successful", check.failures
        assert [t for t in check.tasks if t[2]] == [], "a check job after the converge would change something"
        assert audit.writes() == []
    finally:
        teardown_vars = {"site_scheduler_namespace", "site_descheduler_namespace", "site_vms_namespace",
                         "site_vm_defaults_name"}
        teardown = run_job("teardown", {k: v for k, v in answers.items() if k in teardown_vars}, credential,
                           tmp_path=tmp_path)
        assert teardown.status == "successful", teardown.failures


def test_site_missing_namespace_fails_first_and_writes_nothing(job_user, tmp_path):
    credential, user = job_user
    audit = Audit(user=user)
    job = run_job("site", dict(site_answers("no-such-namespace"), site_vms_namespace=""), credential,
                  tmp_path=tmp_path)
    message = only_the_check_ran(job)
    assert "namespace no-such-namespace (site_scheduler_namespace) does not exist" in message
    assert "namespace no-such-namespace (site_descheduler_namespace) does not exist" in message
    assert audit.read() == ([], 0)
