# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmsched.kubevirt.vm_placement against the local control plane.

The bulk VMs are created with raw API calls, runStrategy Halted (no VMI, no pods);
one VM runs on the local KubeVirt to check what the module says about running VMIs.
Every test has its own namespace; the audit log is read from the offset where the
test's module run started, filtered by the module's user agent.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from . import ansible_module
from .vms import (  # noqa: F401  pylint: disable=unused-import
    GROUP,
    VERSION,
    VMIMS,
    VMIS,
    VMS,
    kv,
    kubevirt,
    phase,
    running_vmi,
    start_vm,
    vm_manifest,
    wait_migration,
)

MODULE = "vmsched.kubevirt.vm_placement"
from .audit import AUDIT_LOG  # noqa: E402  pylint: disable=wrong-import-position
USER_AGENT = "vmsched.kubevirt/vm_placement"
PREVIOUS = "vmsched.kubevirt.io/placement-previous"
EVICT = "descheduler.alpha.kubernetes.io/evict"
# More than one page of VMs (the module lists in pages of 500). Each VM is reconciled by the real
# virt-controller, which takes a while per VM on a 2-core machine; bench/placement.py measures 2,000.
BULK = int(os.environ.get("VMSCHED_PLACEMENT_VMS", "510"))
SETTINGS = {"scheduler_name": "vm-scheduler", "descheduler_evict": True, "node_selector": {"cpu": "fast"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}


def run_module(kubeconfig, args, check=False, diff=False):
    return ansible_module.run_module(MODULE, kubeconfig, args, check=check, diff=diff)


def audit_writes(offset, namespace):
    """The module's non-read requests logged after `offset` bytes, in `namespace` or cluster-scoped."""
    writes = []
    with open(AUDIT_LOG, "rb") as handle:
        handle.seek(offset)
        for line in handle:
            if USER_AGENT.encode() not in line:
                continue
            entry = json.loads(line)
            if (entry.get("userAgent", "").startswith(USER_AGENT) and entry["verb"] not in ("get", "list", "watch")
                    and (entry.get("objectRef") or {}).get("namespace") in (namespace, None)):
                writes.append((entry["verb"], entry["requestURI"]))
    return writes


def audit_verbs(offset, namespace):
    verbs = {}
    with open(AUDIT_LOG, "rb") as handle:
        handle.seek(offset)
        for line in handle:
            if USER_AGENT.encode() not in line:
                continue
            entry = json.loads(line)
            if entry.get("userAgent", "").startswith(USER_AGENT) and \
                    (entry.get("objectRef") or {}).get("namespace") == namespace:
                verbs[entry["verb"]] = verbs.get(entry["verb"], 0) + 1
                if (entry.get("responseStatus") or {}).get("code") == 409:
                    verbs["conflicts"] = verbs.get("conflicts", 0) + 1
    return verbs


def templates(kv, namespace):
    """name -> (spec.template, metadata.annotations) of every VM in the namespace."""
    items = kv.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, VMS)["items"]
    return {vm["metadata"]["name"]: (vm["spec"]["template"], vm["metadata"].get("annotations") or {}) for vm in items}


def settled_templates(kv, namespace, count, wait):
    """templates() once virt-controller has reconciled every VM (its status and its API-version annotations
    written, nothing changing between two reads): it adds annotations to a new VM by itself."""
    def settled():
        items = kv.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, VMS)["items"]
        if len(items) != count or not all((vm.get("status") or {}).get("printableStatus") and "kubevirt.io/latest-"
                                          "observed-api-version" in (vm["metadata"].get("annotations") or {})
                                          for vm in items):
            return None
        first = templates(kv, namespace)
        return first if templates(kv, namespace) == first else None
    return wait(settled, f"virt-controller done with the {count} new VMs", timeout=600, interval=2)


def bulk_vm(index):
    vm = vm_manifest(f"bulk-{index:04d}", run_strategy="Halted", labels={"bulk": "yes"})
    vm["metadata"]["labels"] = {"bulk": "yes"}
    if index % 10 == 0:  # some VMs come with settings of their own, which `absent` must bring back
        vm["spec"]["template"]["spec"]["schedulerName"] = "old-scheduler"
        vm["spec"]["template"]["spec"]["nodeSelector"] = {"cpu": "slow", "keep": "me"}
        vm["spec"]["template"]["spec"]["tolerations"] = [{"key": "x", "operator": "Exists"}]
    return vm


@pytest.fixture
def bulk_cleanup(kv, namespace, wait):
    """Deletes the bulk VMs and waits until virt-controller has let them go (it removes its finalizer from
    each), so that the next tests' VMs do not queue behind them."""
    yield
    kv.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, VMS, label_selector="bulk=yes")
    wait(lambda: not kv.list(VMS, namespace), "virt-controller done with the bulk VMs", timeout=600, interval=2)


def test_bulk_converge_idempotent_check_mode_and_restore(kv, kubeconfig, namespace, wait, bulk_cleanup):
    start_vm(kv, namespace, "running", wait, labels={"bulk": "yes"})
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda i: kv.create(VMS, namespace, bulk_vm(i)), range(BULK)))
    kv.patch(VMS, namespace, "running", {"metadata": {"labels": {"bulk": "yes"}}})
    original = settled_templates(kv, namespace, BULK + 1, wait)
    assert len(original) == BULK + 1
    args = dict(SETTINGS, namespace=namespace, label_selectors=["bulk=yes"])

    # Check mode first: everything would change, nothing is written.
    offset = AUDIT_LOG.stat().st_size
    rc, res = run_module(kubeconfig, args, check=True)
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["counts"] == {"selected": BULK + 1, "changed": BULK + 1, "unchanged": 0, "failed": 0}
    wait(lambda: audit_verbs(offset, namespace).get("list"), "the check-mode run's list in the audit log", timeout=20)
    assert audit_writes(offset, namespace) == []
    assert templates(kv, namespace) == original

    # One task converges them all.
    offset = AUDIT_LOG.stat().st_size
    rc, res = run_module(kubeconfig, args)
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["counts"] == {"selected": BULK + 1, "changed": BULK + 1, "unchanged": 0, "failed": 0}
    assert res["restart_required"] == [f"{namespace}/running"]
    assert res["live_migration_required"] == []
    assert len(res["vms"]) == BULK + 1
    assert {v["takes_effect"] for v in res["vms"] if v["name"] != "running"} == {"next_start"}
    after = templates(kv, namespace)
    for name, (template, annotations) in after.items():
        spec = template["spec"]
        assert spec["schedulerName"] == "vm-scheduler", name
        assert template["metadata"]["annotations"][EVICT] == "true", name
        assert spec["nodeSelector"]["cpu"] == "fast", name
        assert SETTINGS["tolerations"][0] in spec["tolerations"], name
        assert PREVIOUS in annotations, name
        # nothing else of the template changed
        assert spec["domain"] == original[name][0]["spec"]["domain"], name
        assert template["metadata"]["labels"] == original[name][0]["metadata"]["labels"], name
    kept = after["bulk-0000"][0]["spec"]
    assert kept["nodeSelector"] == {"cpu": "fast", "keep": "me"}
    assert kept["tolerations"] == [{"key": "x", "operator": "Exists"}] + SETTINGS["tolerations"]
    verbs = wait(lambda: (v := audit_verbs(offset, namespace)).get("patch", 0) >= BULK + 1 and v,
                 "the patches in the audit log", timeout=30)
    # Lists: the VMs in pages of 500, and the VMIs once (the KubeVirt CR is cluster-scoped, not counted here).
    assert verbs["list"] == -(-(BULK + 1) // 500) + 1, verbs
    # One patch per VM; virt-controller updates VMs meanwhile, and a patch that meets such an update (409, the
    # patch carries the resourceVersion read) is retried after one GET of that VM.
    assert verbs["patch"] - verbs.get("conflicts", 0) == BULK + 1, verbs
    assert verbs.get("get", 0) == verbs.get("conflicts", 0), verbs

    # A second run changes nothing and writes nothing.
    offset = AUDIT_LOG.stat().st_size
    rc, res = run_module(kubeconfig, args)
    assert rc == 0 and res["changed"] is False, res.get("msg")
    assert res["counts"] == {"selected": BULK + 1, "changed": 0, "unchanged": BULK + 1, "failed": 0}
    wait(lambda: audit_verbs(offset, namespace).get("list"), "the second run's list in the audit log", timeout=20)
    assert audit_writes(offset, namespace) == []

    # Diff mode (check mode too) shows per-VM diffs of the managed fields.
    rc, res = run_module(kubeconfig, dict(args, scheduler_name="other", names=["bulk-0001", "bulk-0010"]),
                         check=True, diff=True)
    assert rc == 0 and res["changed"] is True
    assert sorted(d["before_header"] for d in res["diff"]) == [f"{namespace}/bulk-0001", f"{namespace}/bulk-0010"]
    assert all(d["before"] == {"schedulerName": "vm-scheduler"} and d["after"] == {"schedulerName": "other"}
               for d in res["diff"])

    # state=absent restores every VM's template exactly as it was and drops the record.
    rc, res = run_module(kubeconfig, dict(args, state="absent"))
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["counts"]["changed"] == BULK + 1
    restored = templates(kv, namespace)
    for name, (template, annotations) in restored.items():
        assert template == original[name][0], name
        assert PREVIOUS not in annotations, name
    rc, res = run_module(kubeconfig, dict(args, state="absent"))
    assert rc == 0 and res["changed"] is False


@pytest.mark.parametrize("bad, fragment", [
    ({"node_selector": {"cpu": "fast!"}}, "node_selector cpu='fast!'"),
    ({"scheduler_name": "Not_A_Name"}, "scheduler_name 'Not_A_Name'"),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}, "operator Exists takes no value"),
    ({"affinity": {"nodeAfinity": {}}}, "affinity: unknown field(s) nodeAfinity"),
    ({"scheduler_name": "ok", "label_selectors": ["a in (b"]}, "invalid label_selectors"),
    ({}, "state=present needs at least one of"),
])
def test_bad_input_fails_before_any_write(kv, kubeconfig, namespace, wait, bad, fragment):
    kv.create(VMS, namespace, vm_manifest("vm", run_strategy="Halted"))
    before = settled_templates(kv, namespace, 1, wait)
    offset = AUDIT_LOG.stat().st_size
    rc, res = run_module(kubeconfig, dict(bad, namespace=namespace))
    assert rc != 0 and fragment in res["msg"], res.get("msg")
    assert templates(kv, namespace) == before
    assert audit_writes(offset, namespace) == []


def test_absent_restores_after_settings_change_between_runs(kv, kubeconfig, namespace, wait):
    vm = vm_manifest("vm", run_strategy="Halted", spec_extra={"schedulerName": "mine"})
    kv.create(VMS, namespace, vm)
    original = settled_templates(kv, namespace, 1, wait)["vm"][0]
    for name in ("first", "second"):
        rc, res = run_module(kubeconfig, {"namespace": namespace, "scheduler_name": name,
                                          "node_selector": {"zone": name}, "node_selector_mode": "replace"})
        assert rc == 0 and res["changed"] is True, res.get("msg")
    template = templates(kv, namespace)["vm"][0]
    assert template["spec"]["schedulerName"] == "second" and template["spec"]["nodeSelector"] == {"zone": "second"}
    rc, res = run_module(kubeconfig, {"namespace": namespace, "state": "absent"})
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["vms"][0]["changes"]["schedulerName"] == {"before": "second", "after": "mine"}
    assert templates(kv, namespace)["vm"][0] == original


def vm_condition(kv, namespace, name, ctype):
    for cond in (kv.get(VMS, namespace, name).get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return cond
    return None


def test_takes_effect_agrees_with_kubevirts_restart_required(kv, kubeconfig, namespace, wait):
    """Defect 4: under KubeVirt's default rollout strategy (LiveUpdate from 1.6) a nodeSelector reaches the running
    VMI without a restart, and the evict annotation too; schedulerName makes KubeVirt set RestartRequired. What the
    module says must agree with what KubeVirt does to the VM."""
    start_vm(kv, namespace, "vm", wait)
    rc, res = run_module(kubeconfig, {"namespace": namespace, "node_selector": {"tier": "web"},
                                      "descheduler_evict": True})
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert {"nodeSelector", "affinity", "tolerations", "evict"} <= set(res["live_updated_fields"])
    assert res["vms"][0]["takes_effect"] == "live_migration" and res["restart_required"] == [], res
    wait(lambda: (kv.get("virtualmachineinstances", namespace, "vm")["spec"].get("nodeSelector") or {})
         .get("tier") == "web", "KubeVirt copying the nodeSelector to the VMI")
    wait(lambda: (kv.get("virtualmachineinstances", namespace, "vm")["metadata"].get("annotations") or {})
         .get(EVICT) == "true", "KubeVirt copying the evict annotation to the VMI")
    assert vm_condition(kv, namespace, "vm", "RestartRequired") is None

    rc, res = run_module(kubeconfig, {"namespace": namespace, "scheduler_name": "vm-scheduler"})
    assert rc == 0 and res["vms"][0]["takes_effect"] == "restart", res
    assert res["restart_required"] == [f"{namespace}/vm"]
    wait(lambda: (vm_condition(kv, namespace, "vm", "RestartRequired") or {}).get("status") == "True",
         "KubeVirt's RestartRequired condition on the VM")
    # From now on KubeVirt makes no live update until the VM restarts: a nodeSelector needs the restart too.
    rc, res = run_module(kubeconfig, {"namespace": namespace, "node_selector": {"tier": "db"}})
    assert rc == 0 and res["vms"][0]["takes_effect"] == "restart", res


# Evicted means migrated -------------------------------------------------------------------------------------


def evict(core, namespace, pod):
    core.create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)))


def test_a_vm_an_eviction_would_restart_is_refused_then_made_safe(kv, core, kubeconfig, namespace, wait):
    """On KubeVirt's default configuration (evictionStrategy None; the local KubeVirt CR sets none, and virt-api
    writes None into every new VMI) an eviction of a VM's launcher pod restarts the VM. The opt-in refuses such a VM before any write; set_live_migrate sets
    LiveMigrate, lets the annotation wait while the VMI still runs with None, and after the restart the VM is
    opted in and an eviction migrates it: the same VMI (UID), on another node."""
    vmi = start_vm(kv, namespace, "plain", wait, eviction_strategy=None,
                   annotations={"sim.vmsched.kubevirt.io/migration-seconds": "2"})
    # virt-api writes the cluster's strategy (KubeVirt's default: None) into the new VMI.
    assert vmi["spec"]["evictionStrategy"] == "None"
    offset = AUDIT_LOG.stat().st_size
    rc, res = run_module(kubeconfig, {"namespace": namespace, "descheduler_evict": True})
    assert rc != 0 and f"{namespace}/plain: evictionStrategy None (the running VMI's" in res["msg"], res.get("msg")
    assert "set_live_migrate" in res["msg"]
    assert audit_writes(offset, namespace) == []

    rc, res = run_module(kubeconfig, {"namespace": namespace, "descheduler_evict": True,
                                      "unsafe_eviction": "set_live_migrate"})
    assert rc == 0 and res["changed"] is True, res.get("msg")
    assert res["restart_required"] == [f"{namespace}/plain"] and res["eviction"][0]["deferred"] is True, res
    template = kv.get(VMS, namespace, "plain")["spec"]["template"]
    assert template["spec"]["evictionStrategy"] == "LiveMigrate"
    assert EVICT not in (template["metadata"].get("annotations") or {})
    wait(lambda: (vm_condition(kv, namespace, "plain", "RestartRequired") or {}).get("status") == "True",
         "KubeVirt's RestartRequired condition: the running VMI keeps evictionStrategy None")
    rc, res = run_module(kubeconfig, {"namespace": namespace, "descheduler_evict": True,
                                      "unsafe_eviction": "set_live_migrate"})
    assert rc == 0 and res["changed"] is False, res

    # The admin restarts the VM (runStrategy Always starts a new VMI), which now runs with LiveMigrate.
    kv.delete(VMIS, namespace, "plain")
    wait(lambda: (v := kv.get(VMIS, namespace, "plain")) and v["metadata"]["uid"] != vmi["metadata"]["uid"],
         "a new VMI after the restart")
    restarted = running_vmi(kv, namespace, "plain", wait)
    assert restarted["spec"]["evictionStrategy"] == "LiveMigrate"
    rc, res = run_module(kubeconfig, {"namespace": namespace, "descheduler_evict": True,
                                      "unsafe_eviction": "set_live_migrate"})
    assert rc == 0 and res["changed"] is True and res["eviction"][0]["opted_in"] is True, res
    assert res["eviction"][0]["outcome"] == "migrate"
    wait(lambda: EVICT in ((kv.get(VMIS, namespace, "plain")["metadata"].get("annotations")) or {}),
         "KubeVirt copying the evict annotation to the VMI")

    # What the descheduler does: an eviction, which KubeVirt answers with a live migration.
    source = restarted["status"]["nodeName"]
    [pod] = kv.pods(namespace, restarted)
    with pytest.raises(client.ApiException) as info:
        evict(core, namespace, pod)
    assert info.value.status == 429 and "Eviction triggered evacuation" in info.value.body
    evacuation = wait(lambda: [m for m in kv.list(VMIMS, namespace)
                               if m["metadata"]["name"].startswith("kubevirt-evacuation-")], "an evacuation VMIM")[0]
    wait_migration(kv, namespace, evacuation["metadata"]["name"], wait)
    moved = kv.get(VMIS, namespace, "plain")
    assert moved["metadata"]["uid"] == restarted["metadata"]["uid"] and moved["status"]["nodeName"] != source
    assert phase(moved) == "Running"

    # state=absent gives the VM back what it had: no evictionStrategy, no annotation.
    rc, res = run_module(kubeconfig, {"namespace": namespace, "state": "absent"})
    assert rc == 0 and res["changed"] is True, res
    template = kv.get(VMS, namespace, "plain")["spec"]["template"]
    assert "evictionStrategy" not in template["spec"] and EVICT not in (template["metadata"].get("annotations") or {})
