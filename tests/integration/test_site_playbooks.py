# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml's survey checks and its read-only report step, its image step looking the scheduler and
descheduler images up (and mirroring them) in local registries, and teardown.yml leaving every VM schedulable.
The full flow (converge, idempotence, check mode, teardown) is proven by the Molecule scenarios of
extensions/molecule/; a first run with the defaults by test_first_run.py."""
from __future__ import annotations

import pytest
from kubernetes import client

from .conftest import delete_site_installs
from .playbook import ROOT, run_playbook
from .registry import Buildah, LocalRegistry, skopeo_digest
from .releases import DESCHEDULER
from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMIS,
    VMS,
    kubevirt,
    kv,
    phase,
    running_vmi,
    start_vm,
    vm_manifest,
    vmim_manifest,
    wait_migration,
)

SITE = ROOT / "playbooks" / "site.yml"
TEARDOWN = ROOT / "playbooks" / "teardown.yml"
REPORT_ONLY = {"site_image": False, "site_scheduler": False, "site_vm_defaults": False,
               "site_descheduler": False, "site_vms": False}


@pytest.mark.parametrize("answers, message", [
    ({"site_image_mode": "pull"}, "value of site_image_mode must be one of: resolve, mirror, build, got: pull"),
    ({"site_image_mode": "mirror", "site_image_lookup": "false"},
     "site_image_lookup=false works only with site_image_mode=resolve"),
    ({"site_scheduler_profile": "fast"}, "value of site_scheduler_profile must be one of: kubevirt, load_aware"),
    ({"site_scheduler_replicas": "0"}, "site_scheduler_replicas is 0; the least allowed is 1"),
    ({"site_descheduler_mode": "daemonset"}, "value of site_descheduler_mode must be one of: deployment, cronjob"),
    ({"site_scheduler_rollout_timeout": -1}, "site_scheduler_rollout_timeout is -1; the least allowed is 1"),
    ({"site_scheduler_namespace": "no-such-namespace"},
     "namespace no-such-namespace (site_scheduler_namespace) does not exist"),
    ({"site_vms_all_namespaces": "true", "site_vms_namespace": "default"},
     "site_vms_all_namespaces=true chooses the VMs of every namespace; leave site_vms_namespace empty"),
    ({"site_vm_defaults_all_namespaces": True, "site_vm_defaults_namespaces": "a, b"},
     "site_vm_defaults_all_namespaces=true gives the defaults to new VMs of every namespace"),
])
def test_bad_survey_answers_fail_before_anything_runs(kubeconfig, answers, message):
    run = run_playbook(SITE, answers, kubeconfig)
    assert run.failed
    assert [name for name, _result in run.results] == ["Check the survey answers"], run.results
    assert message in run.failure, run.failure


def test_report_only_reads(kubeconfig):
    run = run_playbook(SITE, REPORT_ONLY, kubeconfig)
    assert not run.failed, run.stdout + run.stderr
    assert run.changed == 0
    table = run.result("Show the per-node placement table")["msg"]
    # A row per node under the header (the fixture's names fit their column), then the legend.
    rows = table[1:1 + len(run.result("Read the placement report")["nodes"])]
    assert table[0].split()[:2] == ["NODE", "VMIS"] and table[0].split()[-2:] == ["IMAGES", "IMAGELOCALITY"]
    assert any(row.split()[0] == "node01" for row in rows), table
    # The fixture nodes list the launcher image on node01 and node03 only, each at the cap of 50 images.
    assert all(row.split()[-2] == "50" for row in rows), table
    exposure = run.result("Show whether ImageLocality favours some nodes (seed 004)")["msg"]
    assert exposure["nodes_listing_the_launcher"] == ["node01", "node03"], exposure
    assert exposure["nodes_not_listing_it"] == ["node02", "node04", "node05"], exposure
    advice = " ".join(exposure["advice"])  # printed as lines that fit the terminal
    assert "kubevirt profile" in advice and "nodeStatusMaxImages" in advice, exposure
    ran = {name for name, result in run.results if not result.get("skipped")}
    assert not ran & {"Deploy the secondary scheduler", "Deploy the descheduler", "Opt the selected VMs in",
                      "Default new VMs to the secondary scheduler"}, ran


# --- the image step ----------------------------------------------------------------------------------------------

def test_the_image_step_pins_both_images_and_mirrors_them(api_client, dyn, kubeconfig, namespace, tmp_path):
    """site_image_lookup=true (the default) against a local registry standing in for registry.k8s.io: the scheduler
    and the descheduler run their version-matched images pinned to their digests, and site_image_mode=mirror copies
    both into the target registry (build mode mirrors the descheduler the same way: it has no build). The steps
    that use no image (the VM defaults, the opt-in) are off: nothing here looks at them."""
    server = client.VersionApi(api_client).get_code().git_version
    images = {"scheduler": f"kube-scheduler:{server}",
              "descheduler": f"descheduler/descheduler:{DESCHEDULER[int(server.split('.')[1])]}"}
    source, target = LocalRegistry(tmp_path / "source"), LocalRegistry(tmp_path / "target")
    scheduler = "s-" + namespace[2:]
    answers = dict(scoped(namespace, scheduler), site_image_lookup=True, site_image_source_registry=source.host,
                   site_image_source_tls_verify=False, site_vm_defaults=False, site_vms=False)
    apps = client.AppsV1Api(api_client)
    try:
        seeder = Buildah(tmp_path / "buildah")
        for what, image in images.items():  # stand-ins: KWOK pulls no image
            fake = tmp_path / what
            fake.write_text(f"#!/bin/sh\necho 'a stand-in for {image}'\n")
            seeder.push_file_image(fake, f"{source.host}/{image}")
        digests = {what: skopeo_digest(f"{source.host}/{image}") for what, image in images.items()}

        def deployed():
            return {what: apps.read_namespaced_deployment(name, namespace).spec.template.spec.containers[0].image
                    for what, name in (("scheduler", scheduler), ("descheduler", "kubevirt-descheduler"))}

        def shown(run):
            summary = run.clusters()["localhost"]
            return summary["scheduler image"], summary["descheduler image"]

        resolved = run_playbook(SITE, answers, kubeconfig)
        assert not resolved.failed, resolved.failure or resolved.stdout[-3000:]
        pinned = {what: f"{source.host}/{image}@{digests[what]}" for what, image in images.items()}
        assert deployed() == pinned
        assert shown(resolved) == (pinned["scheduler"], pinned["descheduler"]), shown(resolved)

        mirror = dict(answers, site_image_mode="mirror", site_image_target_registry=target.host,
                      site_image_target_tls_verify=False)
        mirrored = run_playbook(SITE, mirror, kubeconfig)
        assert not mirrored.failed, mirrored.failure or mirrored.stdout[-3000:]
        assert target.contents() == {"kube-scheduler": [server], "descheduler/descheduler": [images["descheduler"]
                                                                                             .split(":")[1]]}
        copies = {what: f"{target.host}/{image}@{digests[what]}" for what, image in images.items()}
        assert deployed() == copies
        assert shown(mirrored) == (copies["scheduler"], copies["descheduler"]), shown(mirrored)
        again = run_playbook(SITE, mirror, kubeconfig)
        assert not again.failed and again.changed == 0, [n for n, r in again.results if r.get("changed")]
    finally:
        delete_site_installs(dyn, namespace)
        source.stop()
        target.stop()


# --- teardown.yml leaves every VM schedulable ----------------------------------------------------------------

def scoped(namespace, scheduler):
    """site.yml confined to one namespace, with a scheduler name of its own: a schedulerName is cluster-wide, and
    other runs on this control plane use the default one (KWOK pulls no image, and its pods log nothing for the
    descheduler's preview)."""
    return {"site_image_lookup": False, "site_scheduler_name": scheduler, "site_scheduler_namespace": namespace,
            "site_scheduler_rollout_timeout": 120, "site_descheduler_namespace": namespace,
            "site_descheduler_rollout_timeout": 120, "site_descheduler_dry_run_preview": False,
            "site_vms_namespace": namespace, "site_vm_defaults_name": namespace,
            "site_vm_defaults_namespaces": namespace, "site_report": False}


def scheduler_of(vm):
    return vm["spec"]["template"]["spec"].get("schedulerName")


def restart(kv, namespace, name, wait):
    """Stop the VM (its VMI goes), then start it: a new VMI from the VM's template."""
    kv.patch(VMS, namespace, name, {"spec": {"runStrategy": "Halted"}})
    wait(lambda: kv.get(VMIS, namespace, name) is None, f"VMI {namespace}/{name} gone", timeout=90)
    kv.patch(VMS, namespace, name, {"spec": {"runStrategy": "Always"}})
    return running_vmi(kv, namespace, name, wait, timeout=90)


def migrate(kv, namespace, name, wait):
    vmi = running_vmi(kv, namespace, name, wait)
    kv.create("virtualmachineinstancemigrations", namespace, vmim_manifest(f"move-{name}", name))
    wait_migration(kv, namespace, f"move-{name}", wait, timeout=120)
    return vmi["status"]["nodeName"], kv.get(VMIS, namespace, name)["status"]["nodeName"]


def test_teardown_refuses_while_vms_name_the_scheduler_and_leaves_every_vm_schedulable(kv, kubeconfig, namespace,
                                                                                       wait):
    scheduler = "s-" + namespace[2:]
    answers = scoped(namespace, scheduler)
    apps = client.AppsV1Api(kv.core.api_client)
    start_vm(kv, namespace, "running", wait)          # runs on the default scheduler before site.yml
    kv.create(VMS, namespace, vm_manifest("halted", run_strategy="Halted"))
    torn_down = False
    try:
        site = run_playbook(SITE, answers, kubeconfig)
        assert not site.failed, site.failure or site.stdout[-3000:]
        assert {scheduler_of(kv.get(VMS, namespace, n)) for n in ("running", "halted")} == {scheduler}
        # A run that takes no step shows what the cluster runs in its summary, not "off" (issue 30).
        report = run_playbook(SITE, dict(answers, site_report=True, **REPORT_ONLY), kubeconfig)
        assert not report.failed and report.changed == 0, report.failure or report.stdout[-3000:]
        row = report.clusters()["localhost"]
        deployed = apps.read_namespaced_deployment(scheduler, namespace).spec.template.spec.containers[0].image
        assert row["scheduler image"] == deployed and row["scheduler config"] == "as installed", row
        assert row["descheduler"].split()[-1] == "dry-run", row
        assert row["VM defaults"].split()[0] == "MutatingAdmissionPolicy", row
        assert "off" not in " ".join(row.values()).split(), row
        # A VM created now gets the scheduler from the VM defaults policy, which records nothing to restore. (The API
        # server enforces the policy a moment after its write: probed with dry-run creates.)
        wait(lambda: scheduler_of(kv.custom.create_namespaced_custom_object(
            "kubevirt.io", "v1", namespace, VMS, vm_manifest("probe", run_strategy="Halted"), dry_run="All")) == scheduler,
            "new VMs defaulted by the policy", timeout=30)
        fresh_name = "fresh"
        assert scheduler_of(kv.create(VMS, namespace, vm_manifest(fresh_name, run_strategy="Halted"))) == scheduler
        # The halted VM starts on the secondary scheduler: its VMI names it (its launcher pod waits for it here).
        kv.patch(VMS, namespace, "halted", {"spec": {"runStrategy": "Always"}})
        vmi = wait(lambda: kv.get(VMIS, namespace, "halted"), f"VMI {namespace}/halted", timeout=60)
        assert vmi["spec"]["schedulerName"] == scheduler

        refused = run_playbook(TEARDOWN, answers, kubeconfig)
        assert refused.failed
        assert [n for n, r in refused.results if r.get("failed")] == ["Refuse to remove the scheduler while VMs still name it"]
        message = refused.failure
        assert f"Not removing the secondary scheduler {namespace}/{scheduler}" in message, message
        vms_part, _sep, vmis_part = message.partition("Running VMIs that started with it")
        assert f"{namespace}/{fresh_name}" in vms_part, message          # defaulted, no record: still named
        assert f"{namespace}/halted" in vmis_part and f"{namespace}/running" not in vmis_part, message
        assert "site_scheduler_remove_in_use=true" in message, message
        # Nothing of the scheduler was removed; what comes before it was: the VMs vm_placement recorded restored.
        assert apps.read_namespaced_deployment(scheduler, namespace)
        assert {scheduler_of(kv.get(VMS, namespace, n)) for n in ("running", "halted")} == {None}

        # What the message says to do: the scheduler out of the templates that name it, the VMIs restarted.
        for vm in kv.list(VMS, namespace):
            if scheduler_of(vm) == scheduler:  # a merge patch with null removes the field
                kv.patch(VMS, namespace, vm["metadata"]["name"], {"spec": {"template": {"spec": {"schedulerName": None}}}})
        assert restart(kv, namespace, "halted", wait)["spec"].get("schedulerName") in (None, "default-scheduler")

        done = run_playbook(TEARDOWN, answers, kubeconfig)
        assert not done.failed, done.failure or done.stdout[-3000:]
        assert done.result("Refuse to remove the scheduler").get("skipped"), done.result("Refuse to remove")
        with pytest.raises(client.ApiException) as gone:
            apps.read_namespaced_deployment(scheduler, namespace)
        assert gone.value.status == 404
        torn_down = True

        # Every VM can move and start without the secondary scheduler: the default one places their pods.
        for name in ("running", "halted"):
            source, target = migrate(kv, namespace, name, wait)
            assert source != target, name
        kv.patch(VMS, namespace, fresh_name, {"spec": {"runStrategy": "Always"}})
        assert running_vmi(kv, namespace, fresh_name, wait, timeout=90)["status"]["nodeName"]
    finally:
        # Whatever happened above: nothing of site.yml left (the namespace goes with the fixture). After the
        # teardown above passed, a second one would only repeat it.
        if not torn_down:
            run_playbook(TEARDOWN, dict(answers, site_scheduler_remove_in_use=True), kubeconfig)
