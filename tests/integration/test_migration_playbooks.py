# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/migrate_vm.yml and playbooks/evacuate_node.yml, once each, as an AWX survey would call them
(string, integer and boolean extra vars). Confined to the test's namespace; no shared node is cordoned."""
from __future__ import annotations

from .playbook import ROOT, run_playbook
from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMIMS,
    VMIS,
    kv,
    running_vmi,
    kubevirt,
    start_vm,
    vm_manifest,
)
from .test_vmi_evacuation import prefer


def test_migrate_vm_playbook(kv, kubeconfig, namespace, wait):
    vmi = start_vm(kv, namespace, "db01", wait, spec_extra={"nodeSelector": {"cpu": "fast"}})
    target = ({"node02", "node04"} - {vmi["status"]["nodeName"]}).pop()
    run = run_playbook(ROOT / "playbooks" / "migrate_vm.yml",
                       {"migrate_vm_name": "db01", "migrate_vm_namespace": namespace,
                        "migrate_vm_target_node": target, "migrate_vm_node_selector": "cpu=fast",
                        "migrate_vm_wait_timeout": "120", "migrate_vm_cancel_on_timeout": "true"}, kubeconfig)
    assert not run.failed, run.stdout + run.stderr
    result = run.result("Migrate the VM")
    assert result["changed"] is True and result["target_node"] == target
    assert kv.get(VMIS, namespace, "db01")["status"]["nodeName"] == target
    assert any(f"-> {target}" in m for m in run.debug_messages), run.debug_messages


def test_evacuate_node_playbook(kv, kubeconfig, namespace, wait):
    for name in ("web01", "web02", "web03"):
        kv.create("virtualmachines", namespace, vm_manifest(name, spec_extra={"affinity": prefer("node03")}))
    assert {running_vmi(kv, namespace, n, wait)["status"]["nodeName"] for n in ("web01", "web02", "web03")} == \
        {"node03"}
    run = run_playbook(ROOT / "playbooks" / "evacuate_node.yml",
                       {"evacuate_node_name": "node03", "evacuate_node_cordon": False,
                        "evacuate_node_namespace": namespace, "evacuate_node_target_nodes": "node02, node04",
                        "evacuate_node_max_parallel": 1}, kubeconfig)
    assert not run.failed, run.stdout + run.stderr
    result = run.result("Migrate the VMs away")
    assert result["summary"]["migrated"] == 3 and result["summary"]["peak_in_flight"] == 1
    # The report gives the drain plan: one migration at a time (max_parallel 1) is three waves.
    report = " ".join(run.result("Report the result")["msg"])  # printed as lines that fit the terminal
    assert "Drain plan: 3 placed in 3 wave(s)" in report and "0 no node can take, 0 cannot migrate" in report, report
    shown = [" ".join(item["msg"]) for item in run.result("Show each VM")["results"]]
    planned = dict((v["name"], v) for v in result["plan"]["vmis"])
    assert sorted(shown) == sorted(f"{namespace}/{n}: migrated node03 -> {e['target_node']} (planned: "
                                   f"{planned[n]['target']}, wave {planned[n]['wave']})"
                                   for n, e in ((e["name"], e) for e in result["vmis"])), shown
    assert result["cordoned"] is False
    assert {v["status"]["nodeName"] for v in kv.list(VMIS, namespace)} <= {"node02", "node04"}
    assert not kv.core.read_node("node03").spec.unschedulable
