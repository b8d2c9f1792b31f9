# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vmsched.kubevirt.vm_rebalance against the local control plane and its real KubeVirt.

A skewed start in the test's own namespace: twelve VMs of mixed sizes on node01 and node03, none on node02 and
node04. All four nodes are schedulable; node01 and node03 are Skylake, so their host-model VMs may go to any of the
four (Cascade Lake takes Skylake VMs). The scope is the test's namespace and those four nodes; the load (memory
requested) counts every pod on them, so the test first waits for earlier tests' pods there to be gone.
"""
from __future__ import annotations

import datetime

from . import ansible_module
from .playbook import ROOT, run_playbook
from .test_vmi_evacuation import max_overlap, prefer
from .test_vmi_migration import audit_entries
from .vms import (  # noqa: F401  pylint: disable=unused-import
    VMIMS,
    VMIS,
    kubevirt,
    kv,
    running_vmi,
    vm_manifest,
)

MODULE = "vmsched.kubevirt.vm_rebalance"
USER_AGENT = "vmsched.kubevirt/vm_rebalance"
RUN_LABEL = "vmsched.kubevirt.io/rebalance-run"
OPT_OUT = "vmsched.kubevirt.io/rebalance"
NODES = ["node01", "node02", "node03", "node04"]
SOURCES = ["node01", "node03"]
EMPTY = ["node02", "node04"]
SIZES = [1, 2, 3, 1, 2, 3]          # GiB of guest memory, per source node
GI = 2 ** 30
THRESHOLD = 0.1


def run_module(kubeconfig, args, check=False):
    return ansible_module.run_module(MODULE, kubeconfig, args, check=check)


def settle(kv, ns, wait):
    """No pod of an earlier test still terminating on the four nodes, nor in a namespace being deleted (the namespace
    controller marks its pods later): its requests would leave the load between two reads of this test."""
    def terminating():
        going = {n.metadata.name for n in kv.core.list_namespace().items if n.metadata.deletion_timestamp}
        return [f"{p.metadata.namespace}/{p.metadata.name}" for node in NODES
                for p in kv.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
                if p.metadata.namespace != ns and (p.metadata.deletion_timestamp or p.metadata.namespace in going)]
    wait(lambda: not terminating(), "earlier tests' pods gone from node01-node04", timeout=120)


def start_skewed(kv, ns, wait):
    """Six VMs on each source node (1, 2 and 3 GiB, twice), the scheduler led there by a preferred affinity (a
    migration may leave it). The first 3 GiB VM of node01 opts out of rebalancing."""
    names = {}
    for node in SOURCES:
        for index, size in enumerate(SIZES):
            name = f"{node}-vm{index}"
            annotations = {OPT_OUT: "false"} if name == "node01-vm2" else None
            kv.create("virtualmachines", ns, vm_manifest(name, spec_extra={"affinity": prefer(node)},
                                                         annotations=annotations, memory=f"{size}Gi"))
            names[name] = (node, size)
    placed = {name: running_vmi(kv, ns, name, wait)["status"]["nodeName"] for name in names}
    assert placed == {name: node for name, (node, _size) in names.items()}, \
        f"the scheduler did not follow the preferred affinity: {placed}"
    return names


def writes_since(since):
    return [(e["verb"], e["requestURI"]) for e in audit_entries(since, USER_AGENT)
            if e["verb"] not in ("get", "list", "watch")]


def wait_for_reads(since, ns, runs, wait):
    """The audit log has caught up with `runs` runs of the module (each lists the namespace's VMIs)."""
    def seen():
        found = [e for e in audit_entries(since, USER_AGENT) if (e.get("objectRef") or {}).get("namespace") == ns
                 and e["verb"] == "list" and (e.get("objectRef") or {}).get("resource") == VMIS]
        return len(found) >= runs
    wait(seen, "the module's requests in the audit log", timeout=20)


def test_a_skewed_cluster_is_planned_applied_as_planned_and_then_left_alone(kv, kubeconfig, namespace, wait):
    settle(kv, namespace, wait)
    names = start_skewed(kv, namespace, wait)
    args = {"namespaces": [namespace], "nodes": NODES, "objective": "memory", "threshold": THRESHOLD}

    # 1. The plan, in check mode: nothing written.
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    rc, proposal = run_module(kubeconfig, args, check=True)
    assert rc == 0 and proposal["changed"] is True, proposal.get("msg")
    before, predicted = proposal["spread"]["before"], proposal["spread"]["after"]
    assert sorted(before["per_node"]) == NODES
    # One definition of spread: scheduling_info reports the same memory per node (balance.spread).
    rc, info = ansible_module.run_module("vmsched.kubevirt.scheduling_info", kubeconfig, {})
    assert rc == 0, info.get("msg")
    assert dict((n, info["balance"]["spread"]["memory"]["per_node"][n]) for n in NODES) == before["per_node"]
    assert min(before["per_node"][n] for n in SOURCES) > max(before["per_node"][n] for n in EMPTY), before
    assert before["cv"] > THRESHOLD >= predicted["cv"], proposal["spread"]
    assert proposal["stopped"] == "the spread is at or below the threshold"
    plan = proposal["plan"]
    assert plan and len(plan) <= 10, plan
    assert len({m["name"] for m in plan}) == len(plan), "a VM moves twice"
    pairs = {(m["source"], m["target"]) for m in plan}
    assert not [p for p in pairs if (p[1], p[0]) in pairs], pairs
    for move in plan:
        node, size = names[move["name"]]
        assert move["namespace"] == namespace and move["source"] == node and move["target"] in EMPTY, move
        assert move["memory"] == size * GI and move["wave"] >= 1, move
    assert "node01-vm2" not in {m["name"] for m in plan}
    assert {"namespace": namespace, "name": "node01-vm2", "reason": "opted out of rebalancing"} in proposal["skipped_vms"]
    assert len(proposal["fingerprint"]) == 64 and [m["status"] for m in proposal["moves"]] == ["planned"] * len(plan)
    assert kv.list(VMIMS, namespace) == []
    wait_for_reads(since, namespace, 1, wait)
    assert writes_since(since) == []

    # 2. Exactly that plan, applied: every VM lands on its planned node.
    rc, applied = run_module(kubeconfig, dict(args, plan=proposal))
    assert rc == 0, applied.get("msg")
    assert applied["changed"] is True and applied["fingerprint"] == proposal["fingerprint"]
    assert [(m["name"], m["target"]) for m in applied["plan"]] == [(m["name"], m["target"]) for m in plan]
    for move in applied["moves"]:
        now = kv.get(VMIS, namespace, move["name"])["status"]["nodeName"]
        assert move["status"] == "migrated" and move["target_node"] == move["target"] == now, move
    vmims = kv.list(VMIMS, namespace)
    assert sorted((m["spec"]["vmiName"], m["spec"]["addedNodeSelector"]) for m in vmims) == \
        sorted((m["name"], {"kubernetes.io/hostname": m["target"]}) for m in plan)
    assert all(m["status"]["phase"] == "Succeeded" for m in vmims)
    assert {f"{RUN_LABEL}={m['metadata']['labels'][RUN_LABEL]}" for m in vmims} == {applied["summary"]["run_label"]}
    assert max_overlap(vmims) <= 4        # 2 outbound per node (KubeVirt's default), two source nodes
    measured = applied["spread"]["after"]
    assert measured["cv"] < applied["spread"]["before"]["cv"] and measured["cv"] <= THRESHOLD, applied["spread"]
    summary = applied["summary"]
    assert (summary["planned"], summary["migrated"], summary["failed"], summary["skipped"]) == \
        (len(plan), len(plan), 0, 0), summary

    # 3. Again, without the cooldown hiding anything: balanced, nothing to do. The source launcher pods hold their
    # requests until they are gone (the scheduler counts them too): wait for one launcher pod per moved VM.
    def one_launcher_each():
        return all([p.spec.node_name for p in kv.pods(namespace, kv.get(VMIS, namespace, m["name"]))] == [m["target"]]
                   for m in plan)
    wait(one_launcher_each, "the moved VMs' source launcher pods gone", timeout=120)
    rc, again = run_module(kubeconfig, dict(args, cooldown=0))
    assert rc == 0 and again["changed"] is False, again.get("msg")
    assert again["plan"] == [] and again["stopped"] == "the spread is at or below the threshold", again
    assert again["spread"]["before"]["cv"] <= THRESHOLD
    # With the default cooldown the VMs that just moved stay put, whatever the threshold (migrationState.endTimestamp).
    rc, cooling = run_module(kubeconfig, dict(args, threshold=0.0), check=True)
    assert rc == 0, cooling.get("msg")
    reasons = {s["name"]: s["reason"] for s in cooling["skipped_vms"]}
    assert all(reasons.get(m["name"], "").startswith("cooldown: migrated ") for m in plan), reasons
    assert not {m["name"] for m in cooling["plan"]} & {m["name"] for m in plan}
    assert len(kv.list(VMIMS, namespace)) == len(plan)

    # 4. The first plan again: the cluster moved on since it was made, so it is refused before any write.
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    rc, stale = run_module(kubeconfig, dict(args, plan=proposal))
    assert rc != 0 and stale["changed"] is False, stale
    assert stale["msg"].startswith("the plan was made on another state of the cluster"), stale["msg"]
    assert "nothing was changed" in stale["msg"] and stale["fingerprint"] != proposal["fingerprint"]
    assert len(kv.list(VMIMS, namespace)) == len(plan)
    wait_for_reads(since, namespace, 1, wait)
    assert writes_since(since) == []


def test_bad_input_is_refused_before_any_request(kubeconfig, namespace):
    """An unknown objective, a negative threshold, a Prometheus result of the wrong shape: each named, nothing
    read or written (the module stops before it makes a client)."""
    # No second of slack here, as the other tests allow: the requests of a test that ended just before would count.
    since = datetime.datetime.now(datetime.timezone.utc)
    cases = [
        ({"objective": "happiness"}, "value of objective must be one of: vms, memory, cpu, usage, got: happiness"),
        ({"threshold": -0.5}, "threshold is -0.5; the least allowed is 0"),
        ({"objective": "usage", "usage": {"status": "success", "data": {"resultType": "matrix", "result": []}}},
         "usage is a Prometheus matrix result"),
        ({"objective": "usage", "usage": [{"metric": {"node": "node01"}, "value": [1, "1"]},
                                          {"metric": {"node": "node01"}, "value": [1, "2"]}]},
         "usage has more than one series for node node01"),
        ({"plan": {"plan": []}}, "plan has no fingerprint"),
    ]
    for extra, message in cases:
        rc, res = run_module(kubeconfig, dict({"namespaces": [namespace]}, **extra))
        assert rc != 0 and message in res["msg"], (extra, res.get("msg"))
    assert audit_entries(since, USER_AGENT) == []


def test_the_playbook_plans_in_check_mode_and_applies_the_published_plan(kv, kubeconfig, namespace, wait):
    """playbooks/rebalance.yml as an AWX workflow runs it: a check job that publishes the plan (set_stats), then a
    run given that artifact as rebalance_plan (survey answers as AWX sends them: strings and integers)."""
    settle(kv, namespace, wait)
    for index in range(4):
        kv.create("virtualmachines", namespace, vm_manifest(f"web{index}", spec_extra={"affinity": prefer("node01")}))
    assert {running_vmi(kv, namespace, f"web{i}", wait)["status"]["nodeName"] for i in range(4)} == {"node01"}
    answers = {"rebalance_namespaces": namespace, "rebalance_nodes": "node01, node02", "rebalance_objective": "vms",
               "rebalance_threshold_percent": 10, "rebalance_cooldown": 0}
    stats = {"ANSIBLE_SHOW_CUSTOM_STATS": "1"}

    check = run_playbook(ROOT / "playbooks" / "rebalance.yml", answers, kubeconfig, check=True, env=stats)
    assert not check.failed, check.stdout + check.stderr
    planned = check.result("Plan the moves, or apply the plan given")
    assert [(m["source"], m["target"]) for m in planned["plan"]] == [("node01", "node02")] * 2, planned["plan"]
    artifact = check.data["global_custom_stats"]["rebalance_plan"]
    assert isinstance(artifact, str) and kv.list(VMIMS, namespace) == []

    run = run_playbook(ROOT / "playbooks" / "rebalance.yml", dict(answers, rebalance_plan=artifact), kubeconfig)
    assert not run.failed, run.stdout + run.stderr
    applied = run.result("Plan the moves, or apply the plan given")
    assert applied["fingerprint"] == planned["fingerprint"] and applied["changed"] is True
    for move in planned["plan"]:
        assert kv.get(VMIS, namespace, move["name"])["status"]["nodeName"] == "node02", move
    landed = sorted(v["status"]["nodeName"] for v in kv.list(VMIS, namespace))
    assert landed == ["node01", "node01", "node02", "node02"]
