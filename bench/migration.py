# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Migration latency and evacuation makespan (issue 6), module vs. a kubernetes.core until-loop playbook.

Against the local control plane and KubeVirt (real virt-controller and virt-api; the simulated node agent takes 1 s to transfer a VM's memory):

1. Latency: one VM migrated `--reps` times by each of
   - `vmsched.kubevirt.vmi_migration` (one watch on the VMIM), and
   - `kubernetes.core.k8s` (create the VMIM) + `kubernetes.core.k8s_info` with `until` on the phase
     (`--delay` seconds between retries, the usual idiom).
   This script watches the VMIM itself and notes (wall clock, this machine) when it reaches a terminal phase;
   latency = ansible-playbook's exit - that moment. Both include the same process teardown.
2. Makespan: `--vms` VMs on one node evacuated by each of
   - `vmsched.kubevirt.vmi_evacuation` (bounded by parallelOutboundMigrationsPerNode, one watch), and
   - `kubernetes.core.k8s` creating one VMIM per VMI at once (KubeVirt queues beyond its limits) +
     `kubernetes.core.k8s_info` until all are terminal.
   ideal = vms x (median single-migration time, creation to terminal as observed here) / per-node limit.

Writes bench/results/migration.json and bench/results/migration.md.
Usage: .venv/bin/python bench/migration.py [--reps 5] [--vms 10] [--delay 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from common import wait_for
from kubernetes import client, config, watch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
G, V = "kubevirt.io", "v1"


def vm(name, node, migration_seconds=None):
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": "Always", "template": {"metadata": {
                "labels": {"bench": "migration"},
                "annotations": {"sim.vmsched.kubevirt.io/migration-seconds": str(migration_seconds)}
                if migration_seconds else {}}, "spec": {
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "256Mi"},
                           "devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                "networks": [{"name": "default", "pod": {}}],
                "affinity": affinity}}}}


class Observer(threading.Thread):
    """Watches the namespace's VMIMs; records wall-clock creation and terminal time per VMIM."""

    def __init__(self, custom, ns):
        super().__init__(daemon=True)
        self.custom, self.ns = custom, ns
        self.created, self.final = {}, {}
        self.stopping = False

    def run(self):
        while not self.stopping:
            for event in watch.Watch().stream(self.custom.list_namespaced_custom_object, G, V, self.ns,
                                              "virtualmachineinstancemigrations", timeout_seconds=5):
                obj = event["object"]
                name = obj["metadata"]["name"]
                now = time.time()
                self.created.setdefault(name, now)
                if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    self.final.setdefault(name, now)


PLAY_HEAD = """- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
"""

MODULE_MIGRATE = PLAY_HEAD + """    - vmsched.kubevirt.vmi_migration:
        name: "{{ vm }}"
        namespace: "{{ ns }}"
        target_node: "{{ target }}"
"""

LOOP_MIGRATE = PLAY_HEAD + """    - kubernetes.core.k8s:
        definition:
          apiVersion: kubevirt.io/v1
          kind: VirtualMachineInstanceMigration
          metadata: {generateName: "{{ vm }}-loop-", namespace: "{{ ns }}"}
          spec: {vmiName: "{{ vm }}", addedNodeSelector: {kubernetes.io/hostname: "{{ target }}"}}
      register: created
    - kubernetes.core.k8s_info:
        api_version: kubevirt.io/v1
        kind: VirtualMachineInstanceMigration
        namespace: "{{ ns }}"
        name: "{{ created.result.metadata.name }}"
      register: vmim
      until: vmim.resources[0].status.phase | default('') in ['Succeeded', 'Failed']
      retries: 600
      delay: {{ delay }}
"""

MODULE_EVACUATE = PLAY_HEAD + """    - vmsched.kubevirt.vmi_evacuation:
        node: "{{ node }}"
        namespace: "{{ ns }}"
"""

LOOP_EVACUATE = PLAY_HEAD + """    - kubernetes.core.k8s_info:
        api_version: kubevirt.io/v1
        kind: VirtualMachineInstance
        namespace: "{{ ns }}"
      register: vmis
    - kubernetes.core.k8s:
        definition:
          apiVersion: kubevirt.io/v1
          kind: VirtualMachineInstanceMigration
          metadata: {generateName: "{{ item.metadata.name }}-loop-", namespace: "{{ ns }}", labels: {run: loop}}
          spec: {vmiName: "{{ item.metadata.name }}"}
      loop: "{{ vmis.resources | selectattr('status.nodeName', 'equalto', node) }}"
      loop_control: {label: "{{ item.metadata.name }}"}
    - kubernetes.core.k8s_info:
        api_version: kubevirt.io/v1
        kind: VirtualMachineInstanceMigration
        namespace: "{{ ns }}"
        label_selectors: [run=loop]
      register: vmims
      until: vmims.resources | rejectattr('status.phase', 'defined') | list | length == 0 and
             vmims.resources | map(attribute='status.phase') | reject('in', ['Succeeded', 'Failed']) | list | length == 0
      retries: 600
      delay: {{ delay }}
"""


def play(text, variables, delay):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        handle.write(text.replace("{{ delay }}", str(delay)))
    env = dict(os.environ, KUBECONFIG=str(KUBECONFIG),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    started = time.time()
    proc = subprocess.run([str(BIN / "ansible-playbook"), handle.name, "-e", json.dumps(variables)],
                          env=env, capture_output=True, text=True, check=False)
    ended = time.time()
    os.unlink(handle.name)
    if proc.returncode:
        raise SystemExit(f"playbook failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return started, ended


def node_of(custom, ns, name):
    """The VMI's node once it is Running, else None (also while it does not exist yet)."""
    try:
        vmi = custom.get_namespaced_custom_object(G, V, ns, "virtualmachineinstances", name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    status = vmi.get("status") or {}
    return status.get("nodeName") if status.get("phase") == "Running" else None


def latency(custom, observer, ns, reps, delay):
    out = {"module": [], "until_loop": [], "migration_seconds": []}
    for rep in range(reps):
        for kind, text in (("module", MODULE_MIGRATE), ("until_loop", LOOP_MIGRATE)):
            source = node_of(custom, ns, "solo")
            target = "node03" if source != "node03" else "node01"
            before = set(observer.final)
            _started, ended = play(text, {"vm": "solo", "ns": ns, "target": target}, delay)
            new = wait_for(lambda: set(observer.final) - before, "the VMIM's terminal phase seen")
            name = new.pop()
            out[kind].append(round(ended - observer.final[name], 3))
            out["migration_seconds"].append(round(observer.final[name] - observer.created[name], 3))
            wait_for(lambda: node_of(custom, ns, "solo") == target, "the VMI on its target")
        print(f"latency rep {rep + 1}/{reps}: module {out['module'][-1]} s, until-loop {out['until_loop'][-1]} s",
              flush=True)
    return out


def singles(custom, observer, ns, count):
    """Creation -> terminal of lone 1 s migrations (no queueing), the unit of the ideal makespan."""
    custom.create_namespaced_custom_object(G, V, ns, "virtualmachines", vm("one", "node01"))
    wait_for(lambda: node_of(custom, ns, "one"), "one Running")
    out = []
    for i in range(count):
        body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": f"one-{i}"}, "spec": {"vmiName": "one"}}
        custom.create_namespaced_custom_object(G, V, ns, "virtualmachineinstancemigrations", body)
        wait_for(lambda: f"one-{i}" in observer.final, "lone migration done")
        out.append(round(observer.final[f"one-{i}"] - observer.created[f"one-{i}"], 3))
        wait_for(lambda: node_of(custom, ns, "one"), "one Running again")
    custom.delete_namespaced_custom_object(G, V, ns, "virtualmachines", "one")
    wait_for(lambda: node_of(custom, ns, "one") is None, "one gone")
    return out


def makespan(custom, observer, ns, vms, delay, kind):
    names = [f"{kind[:3]}{i:02d}" for i in range(vms)]
    for name in names:
        custom.create_namespaced_custom_object(G, V, ns, "virtualmachines", vm(name, "node01"))
    wait_for(lambda: all(node_of(custom, ns, n) == "node01" for n in names), f"{vms} VMIs Running on node01")
    before = set(observer.created)
    started, ended = play(MODULE_EVACUATE if kind == "module" else LOOP_EVACUATE,
                          {"node": "node01", "ns": ns}, delay)
    ours = wait_for(lambda: len(set(observer.final) - before) >= vms and set(observer.final) - before, "all final")
    first = min(observer.created[n] for n in ours)
    last = max(observer.final[n] for n in ours)
    for name in names:
        custom.delete_namespaced_custom_object(G, V, ns, "virtualmachines", name)
    wait_for(lambda: all(node_of(custom, ns, n) is None for n in names), "the VMs gone")
    return {"playbook_seconds": round(ended - started, 3), "first_create_to_last_final": round(last - first, 3),
            "return_after_last_final": round(ended - last, 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--vms", type=int, default=10)
    parser.add_argument("--delay", type=int, default=5, help="until-loop delay between retries (s)")
    parser.add_argument("--migration-seconds", type=int, default=8,
                        help="Running phase of the latency VM's migrations (longer than a task's start-up)")
    args = parser.parse_args()
    api = config.new_client_from_config(config_file=str(KUBECONFIG))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = "bench-mig-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: core.list_namespaced_service_account(ns).items, "default ServiceAccount")
    observer = Observer(custom, ns)
    observer.start()
    try:
        custom.create_namespaced_custom_object(G, V, ns, "virtualmachines", vm("solo", "node01", args.migration_seconds))
        wait_for(lambda: node_of(custom, ns, "solo"), "solo Running")
        lat = latency(custom, observer, ns, args.reps, args.delay)
        custom.delete_namespaced_custom_object(G, V, ns, "virtualmachines", "solo")
        wait_for(lambda: node_of(custom, ns, "solo") is None, "solo gone")
        spans = {"single_migration_seconds": singles(custom, observer, ns, 3)}
        spans.update({kind: makespan(custom, observer, ns, args.vms, args.delay, kind) for kind in ("module", "loop")})
        print(json.dumps(spans), flush=True)
        single = statistics.median(spans["single_migration_seconds"])
        ideal = round(args.vms * single / 2, 3)
    finally:
        observer.stopping = True
        core.delete_namespace(ns)
    data = {"reps": args.reps, "vms": args.vms, "until_delay_seconds": args.delay,
            "latency_migration_seconds": args.migration_seconds, "latency": lat,
            "single_migration_median_seconds": single, "ideal_makespan_seconds": ideal, "makespan": spans}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "migration.json").write_text(json.dumps(data, indent=2) + "\n")
    med = statistics.median
    lines = [
        "# Migration latency and evacuation makespan",
        "",
        "Written by `bench/migration.py` against the local control plane and its KubeVirt (the node agent simulated) "
        "(a migration's Running phase lasts 1 s; KubeVirt defaults: 5 per cluster, 2 outbound per node).",
        "",
        f"## Latency: VMIM terminal phase -> ansible-playbook exit ({args.reps} runs each)",
        "",
        f"The VM's migrations run {args.migration_seconds} s, longer than a task's start-up, so the until loop "
        "really waits (with 1 s migrations its first k8s_info attempt already sees the end).",
        "",
        "| approach | median s | min s | max s |",
        "|---|---|---|---|",
        f"| vmsched.kubevirt.vmi_migration (watch) | {med(lat['module'])} | {min(lat['module'])} | {max(lat['module'])} |",
        f"| kubernetes.core.k8s + k8s_info until, delay {args.delay} s | {med(lat['until_loop'])} | "
        f"{min(lat['until_loop'])} | {max(lat['until_loop'])} |",
        "",
        "Both include the same ansible-playbook teardown; the difference is the wait.",
        "",
        f"## Evacuation of {args.vms} VMs from one node",
        "",
        f"Ideal makespan = {args.vms} x {single} s (median lone 1 s migration, creation to terminal) / 2 "
        f"(parallelOutboundMigrationsPerNode) = {ideal} s.",
        "",
        "| approach | first VMIM created -> last terminal, s | x ideal | playbook wall time, s | "
        "return after last terminal, s |",
        "|---|---|---|---|---|",
    ]
    for kind, label in (("module", "vmsched.kubevirt.vmi_evacuation"),
                        ("loop", f"k8s loop (all VMIMs at once) + k8s_info until, delay {args.delay} s")):
        s = spans[kind]
        lines.append(f"| {label} | {s['first_create_to_last_final']} | "
                     f"{round(s['first_create_to_last_final'] / ideal, 2) if ideal else '-'} | "
                     f"{s['playbook_seconds']} | {s['return_after_last_final']} |")
    lines += ["", "Raw numbers: `bench/results/migration.json`.", ""]
    (RESULTS / "migration.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
