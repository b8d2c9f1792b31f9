# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ImageLocality balance experiment (seed 004, issue 4).

Starts N VMs (default 200) through the KubeVirt simulator on the local control
plane twice: once placed by the cluster's default scheduler (default profile,
ImageLocality on), once by a local kube-scheduler process of the same version
running the secondary_scheduler role's `kubevirt` profile (ImageLocality score
off, rendered by plugins/module_utils/scheduler_config.py). Only some fixture
nodes (node01, node03, node06) list the virt-launcher image among their 50
reported images; node05 is tainted and node06 cordoned, so node01..node04 take VMs.

Writes bench/results/balance.json and bench/results/balance.md: VM count per
node and the coefficient of variation (population stdev / mean) over the nodes
that can take VMs. Usage: .venv/bin/python bench/balance.py [--vms 200]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import yaml
from common import wait_for
from kubernetes import client, config, dynamic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import build  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.vmsched.kubevirt.plugins.module_utils.scheduler_config import (  # noqa: E402
    render_config,
)

RESULTS = ROOT / "bench" / "results"
OUTPUT = ROOT / "bench" / "output"
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.6.6"


def vm(name, scheduler_name=None):
    spec = {"domain": {"cpu": {"cores": 1}, "memory": {"guest": "256Mi"}, "devices": {}}}
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"app": "balance"}}, "spec": spec}}}


def background(core, namespace):
    """Pods of others (the cluster is shared with other tests) on each node when a run starts."""
    counts = {}
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.metadata.namespace != namespace and pod.spec.node_name and pod.status.phase in ("Pending", "Running"):
            counts[pod.spec.node_name] = counts.get(pod.spec.node_name, 0) + 1
    return counts


def run_once(core, vms_api, namespace, count, scheduler_name=None):
    others = background(core, namespace)
    for i in range(count):
        vms_api.create(body=vm(f"vm-{i:03d}", scheduler_name), namespace=namespace)

    def placed():
        pods = core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items
        bound = [p for p in pods if p.spec.node_name]
        print(f"  {len(bound)}/{count} launcher pods bound", end="\r", flush=True)
        return bound if len(bound) >= count else None

    pods = wait_for(placed, f"{count} launcher pods bound", timeout=600, interval=1)
    print()
    images = {p.spec.containers[0].image for p in pods}
    # Launcher pods (virt-launcher-vm-000-<random>, ...) in the order their VMs were created.
    first = [p.spec.node_name for p in sorted(pods, key=lambda p: p.metadata.name)]
    counts = {}
    for p in pods:
        counts[p.spec.node_name] = counts.get(p.spec.node_name, 0) + 1
    for i in range(count):
        vms_api.delete(name=f"vm-{i:03d}", namespace=namespace)
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items,
             "launcher pods gone", timeout=600, interval=1)
    return counts, sorted(images), first, others


def summary(counts, nodes, first, with_image, first_n, others):
    values = [counts.get(n, 0) for n in nodes]
    mean = statistics.mean(values)
    return {"per_node": {n: counts.get(n, 0) for n in nodes},
            "other_pods_at_start": {n: others.get(n, 0) for n in nodes},
            f"first_{first_n}_on_image_nodes": sum(1 for n in first[:first_n] if n in with_image),
            "mean": round(mean, 2), "stdev": round(statistics.pstdev(values), 3),
            "cv": round(statistics.pstdev(values) / mean, 4) if mean else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=200)
    parser.add_argument("--first", type=int, default=20, help="count where the first N VMs went")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", str(ROOT / ".cluster" / "kubeconfig")))
    args = parser.parse_args()

    api = config.new_client_from_config(config_file=args.kubeconfig)
    core = client.CoreV1Api(api)
    dyn = dynamic.DynamicClient(api)
    vms_api = dyn.resources.get(api_version="kubevirt.io/v1", kind="VirtualMachine")
    server = client.VersionApi(api).get_code().git_version

    nodes = core.list_node().items
    with_image = sorted(n.metadata.name for n in nodes
                        if any(LAUNCHER_IMAGE in (i.names or []) for i in (n.status.images or [])))
    usable = sorted(n.metadata.name for n in nodes if not n.spec.unschedulable and not n.spec.taints)
    all_nodes = sorted(n.metadata.name for n in nodes)
    print(f"server {server}; nodes listing {LAUNCHER_IMAGE}: {with_image}; nodes taking VMs: {usable}")

    suffix = uuid.uuid4().hex[:6]
    namespace = f"bench-balance-{suffix}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    OUTPUT.mkdir(parents=True, exist_ok=True)
    scheduler_name = f"kubevirt-bench-{suffix}"
    rendered = render_config(server, scheduler_name=scheduler_name)
    conf = dict(rendered["config"], clientConnection={"kubeconfig": str(Path(args.kubeconfig).resolve())})
    config_path = OUTPUT / "balance-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(conf))
    proc = None
    try:
        print(f"run 1: {args.vms} VMs, default scheduler (default profile)")
        default_counts, images, default_first, default_others = run_once(core, vms_api, namespace, args.vms)
        print(f"run 2: {args.vms} VMs, local kube-scheduler with the kubevirt profile ({scheduler_name})")
        log = (OUTPUT / "balance-scheduler.log").open("w")
        proc = subprocess.Popen([str(build.bin_dir() / "kube-scheduler"), f"--config={config_path}",  # noqa: SIM115
                                 "--bind-address=127.0.0.1", "--secure-port=0"], stdout=log, stderr=subprocess.STDOUT)
        kubevirt_counts, images2, kubevirt_first, kubevirt_others = run_once(core, vms_api, namespace, args.vms, scheduler_name)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
        core.delete_namespace(namespace)

    result = {
        "server_version": server,
        "vms": args.vms,
        "first": args.first,
        "launcher_images": sorted(set(images) | set(images2)),
        "nodes_listing_launcher_image": with_image,
        "nodes_taking_vms": usable,
        "default_scheduler": dict(summary(default_counts, usable, default_first, with_image, args.first, default_others),
                                  all_nodes={n: default_counts.get(n, 0) for n in all_nodes}),
        "kubevirt_profile": dict(summary(kubevirt_counts, usable, kubevirt_first, with_image, args.first, kubevirt_others),
                                 all_nodes={n: kubevirt_counts.get(n, 0) for n in all_nodes}),
        "kubevirt_profile_config": rendered["config"]["profiles"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "balance.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# ImageLocality balance experiment",
        "",
        f"{args.vms} VMs (1 vCPU, 256Mi guest) started through the KubeVirt simulator on the local control plane "
        f"(Kubernetes {server}). Launcher image {', '.join(result['launcher_images'])}, listed in `status.images` of "
        f"{', '.join(with_image)} only. Nodes that can take VMs: {', '.join(usable)}. Written by `bench/balance.py`.",
        "",
        "| node | lists launcher image | default scheduler | kubevirt profile |",
        "|---|---|---|---|",
    ]
    for n in usable:
        lines.append(f"| {n} | {'yes' if n in with_image else 'no'} | {default_counts.get(n, 0)} | "
                     f"{kubevirt_counts.get(n, 0)} |")
    first_key = f"first_{args.first}_on_image_nodes"
    lines += [
        f"| **coefficient of variation** | | **{result['default_scheduler']['cv']}** | "
        f"**{result['kubevirt_profile']['cv']}** |",
        f"| first {args.first} VMs on nodes listing the image | | {result['default_scheduler'][first_key]} | "
        f"{result['kubevirt_profile'][first_key]} |",
        "",
    ]
    (RESULTS / "balance.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
