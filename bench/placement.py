# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vm_placement at scale beside the alternatives (issue 7).

On the local control plane, in a fresh namespace, creates N VirtualMachines
(default 2,000; runStrategy Halted, so no VMI and no pod) and sets their
spec.template.spec.schedulerName three ways, each to a new value so every VM
really changes:

  a. one `vmsched.kubevirt.vm_placement` task over all N VMs (ansible-playbook);
  b. a `kubernetes.core.k8s` task (state: patched, merge patch) looping over a
     subset of K VMs (default 100), scaled linearly to N (said so in the report);
  c. the limit: raw concurrent merge PATCH requests with the Python client
     (16 threads, no reads, no diffing), over all N VMs.

Then times `scheduling_info` twice: the module against the cluster as it is,
and its summarizing step in-process over 5,000 synthetic VMIs and launcher
pods on 100 nodes (creating 5,000 real VMIs would flood the shared cluster's
scheduler with pods: not done).

Writes bench/results/placement.md and bench/results/placement.json.
Usage: .venv/bin/python bench/placement.py [--vms 2000] [--loop-subset 100]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from common import run_playbook
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".build" / "collections"
sys.path.insert(0, str(COLLECTIONS))
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import Capabilities  # noqa: E402
from ansible_collections.vmsched.kubevirt.plugins.module_utils import scheduling_report  # noqa: E402

RESULTS = ROOT / "bench" / "results"
OUTPUT = ROOT / "bench" / "output"
GROUP, VERSION, VMS = "kubevirt.io", "v1", "virtualmachines"


def vm(name):
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": {"bench": "placement"}},
            "spec": {"runStrategy": "Halted", "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "256Mi"},
                           "devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                "networks": [{"name": "default", "pod": {}}]}}}}


def playbook(kubeconfig, path, tasks):
    path.write_text(yaml.safe_dump([{"name": "Bench " + path.stem, "hosts": "localhost", "connection": "local",
                                     "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return run_playbook(path, path.stem, kubeconfig=kubeconfig).seconds


def scheduler_names(custom, namespace):
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, VMS)["items"]
    return {vm_["metadata"]["name"]: vm_["spec"]["template"]["spec"].get("schedulerName") for vm_ in items}


def synthetic_report(vmis=5000, nodes=100):
    node_objs = [{"metadata": {"name": f"n{i:03d}", "labels": {"kubevirt.io/schedulable": "true"}}, "spec": {},
                  "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}, "images": [{"names": [f"img{j}"]}
                                                                                         for j in range(50)]}}
                 for i in range(nodes)]
    pods, vmi_objs = [], []
    for i in range(vmis):
        node = f"n{i % nodes:03d}"
        pods.append({"metadata": {"name": f"virt-launcher-vm{i}", "namespace": "ns",
                                  "labels": {"kubevirt.io": "virt-launcher"}},
                     "spec": {"nodeName": node, "containers": [
                         {"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.6.6",
                          "resources": {"requests": {"cpu": "100m", "memory": "1290Mi"}}}]},
                     "status": {"phase": "Running"}})
        vmi_objs.append({"metadata": {"name": f"vm{i}", "namespace": "ns"}, "spec": {},
                         "status": {"phase": "Running", "nodeName": node}})
    started = time.monotonic()
    scheduling_report.report("v1.36.3", Capabilities(version="v1.6.6"), node_objs, pods, vmi_objs, [], None, [])
    return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=2000)
    parser.add_argument("--loop-subset", type=int, default=100)
    parser.add_argument("--kubeconfig", default=str(ROOT / ".cluster" / "kubeconfig"))
    args = parser.parse_args()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    api = config.new_client_from_config(config_file=args.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = "bench-placement-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": namespace}})
    names = [f"vm-{i:05d}" for i in range(args.vms)]
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(lambda n: custom.create_namespaced_custom_object(GROUP, VERSION, namespace, VMS, vm(n)),
                          names))
        create_seconds = time.monotonic() - started
        print(f"created {args.vms} VMs in {create_seconds:.1f}s", flush=True)

        # a. one vm_placement task
        seconds_a = playbook(args.kubeconfig, OUTPUT / "placement-module.yml", [{
            "name": "Place every VM", "vmsched.kubevirt.vm_placement": {
                "namespace": namespace, "scheduler_name": "bench-a", "descheduler_evict": True}}])
        assert set(scheduler_names(custom, namespace).values()) == {"bench-a"}
        seconds_a2 = playbook(args.kubeconfig, OUTPUT / "placement-module-again.yml", [{
            "name": "Place every VM again (no change)", "vmsched.kubevirt.vm_placement": {
                "namespace": namespace, "scheduler_name": "bench-a", "descheduler_evict": True}}])
        print(f"a. vm_placement: {seconds_a:.1f}s, unchanged rerun {seconds_a2:.1f}s", flush=True)

        # b. kubernetes.core.k8s in a loop, on a subset
        subset = names[:args.loop_subset]
        seconds_b = playbook(args.kubeconfig, OUTPUT / "placement-k8s-loop.yml", [{
            "name": "Patch each VM", "kubernetes.core.k8s": {
                "state": "patched", "api_version": f"{GROUP}/{VERSION}", "kind": "VirtualMachine",
                "namespace": namespace, "name": "{{ item }}", "merge_type": "merge",
                "definition": {"spec": {"template": {"spec": {"schedulerName": "bench-b"}}}}},
            "loop": subset}])
        current = scheduler_names(custom, namespace)
        assert all(current[n] == "bench-b" for n in subset)
        print(f"b. k8s loop on {len(subset)}: {seconds_b:.1f}s", flush=True)

        # c. raw concurrent PATCHes
        body = {"spec": {"template": {"spec": {"schedulerName": "bench-c"}}}}
        started = time.monotonic()

        def patch(name):
            return custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, VMS, name, body,
                                                         _preload_content=False)
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(patch, names))
        seconds_c = time.monotonic() - started
        assert set(scheduler_names(custom, namespace).values()) == {"bench-c"}
        print(f"c. raw PATCH x16 threads: {seconds_c:.1f}s", flush=True)

        # scheduling_info
        seconds_info = playbook(args.kubeconfig, OUTPUT / "scheduling-info.yml", [{
            "name": "Read the report", "vmsched.kubevirt.scheduling_info": {}}])
        vmi_count = len(custom.list_cluster_custom_object(GROUP, VERSION, "virtualmachineinstances")["items"])
        seconds_synthetic = synthetic_report()
    finally:
        core.delete_namespace(namespace)

    scaled_b = seconds_b / len(subset) * args.vms
    result = {"vms": args.vms, "create_seconds": round(create_seconds, 2),
              "vm_placement_seconds": round(seconds_a, 2), "vm_placement_unchanged_seconds": round(seconds_a2, 2),
              "k8s_loop_subset": len(subset), "k8s_loop_seconds": round(seconds_b, 2),
              "k8s_loop_scaled_seconds": round(scaled_b, 1), "raw_patch_seconds": round(seconds_c, 2),
              "scheduling_info_seconds": round(seconds_info, 2), "scheduling_info_cluster_vmis": vmi_count,
              "scheduling_info_summary_5000_vmis_seconds": round(seconds_synthetic, 3)}
    (RESULTS / "placement.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# vm_placement at scale",
        "",
        f"{args.vms} VirtualMachines (runStrategy Halted) in one namespace of the local control plane; each way "
        "sets `spec.template.spec.schedulerName` to a new value on every VM. Wall-clock seconds of the whole "
        "`ansible-playbook` run (start-up included) or of the Python loop. Written by `bench/placement.py`.",
        "",
        "| way | VMs | seconds | per VM (ms) | vs vm_placement |",
        "|---|---|---|---|---|",
        f"| a. `vm_placement`, one task | {args.vms} | {seconds_a:.1f} | {seconds_a / args.vms * 1000:.1f} | 1.0 |",
        f"| a'. the same task again (nothing to change) | {args.vms} | {seconds_a2:.1f} | "
        f"{seconds_a2 / args.vms * 1000:.1f} | {seconds_a2 / seconds_a:.2f} |",
        f"| b. `kubernetes.core.k8s` loop, measured | {len(subset)} | {seconds_b:.1f} | "
        f"{seconds_b / len(subset) * 1000:.1f} | |",
        f"| b. the same, scaled linearly to {args.vms} | {args.vms} | {scaled_b:.0f} | "
        f"{seconds_b / len(subset) * 1000:.1f} | {scaled_b / seconds_a:.1f} |",
        f"| c. raw merge PATCH, 16 threads | {args.vms} | {seconds_c:.1f} | {seconds_c / args.vms * 1000:.1f} | "
        f"{seconds_c / seconds_a:.2f} |",
        "",
        "The k8s loop was run on a subset and scaled linearly (each iteration is a module start-up plus a GET and "
        "a PATCH, independent of the others). The local control plane is shared with other tests, so absolute "
        "times are noisy; compare ratios from the same run.",
        "",
        "## scheduling_info",
        "",
        f"- The module against the cluster as it was ({vmi_count} VMIs): {seconds_info:.1f}s for the whole "
        "`ansible-playbook` run.",
        f"- Its summarizing step over 5,000 synthetic VMIs and launcher pods on 100 nodes, in-process: "
        f"{seconds_synthetic * 1000:.0f} ms. 5,000 real VMIs were not created (their launcher pods would flood "
        "the shared local cluster); list and JSON decoding time for them is not measured here.",
        "",
    ]
    (RESULTS / "placement.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
