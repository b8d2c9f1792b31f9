# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml's survey checks and its read-only report step. The full flow (converge,
idempotence, check mode, teardown) is proven by the Molecule scenarios of extensions/molecule/."""
from __future__ import annotations

import pytest

from .playbook import ROOT, run_playbook

SITE = ROOT / "playbooks" / "site.yml"
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
    assert table[0].split()[:2] == ["NODE", "VMIS"] and table[0].split()[-2:] == ["IMAGES", "IMAGELOCALITY"]
    assert any(row.split()[0] == "node01" for row in table[1:]), table
    # The fixture nodes list the launcher image on node01 and node03 only, each at the cap of 50 images.
    assert all(row.split()[-2] == "50" for row in table[1:]), table
    exposure = run.result("Show whether ImageLocality favours some nodes (seed 004)")["msg"]
    assert exposure["nodes_listing_the_launcher"] == ["node01", "node03"], exposure
    assert exposure["nodes_not_listing_it"] == ["node02", "node04", "node05"], exposure
    assert "kubevirt profile" in exposure["advice"] and "nodeStatusMaxImages" in exposure["advice"], exposure
    ran = {name for name, result in run.results if not result.get("skipped")}
    assert not ran & {"Deploy the secondary scheduler", "Deploy the descheduler", "Opt the selected VMs in",
                      "Default new VMs to the secondary scheduler"}, ran
