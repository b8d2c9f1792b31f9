# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ImageLocality balance experiment (seed 004, issues 4 and 14).

On the local control plane with its real KubeVirt (virt-api and virt-controller; virt-handler simulated) and at
least 20 KWOK nodes (`VMSCHED_NODES=24 make cluster-up`), VMs of mixed sizes arrive on an empty cluster, one after
the other, as users write them (masquerade on the pod network, a containerDisk). Each repetition first gives every
node the images it holds: the system and KubeVirt images (the virt-launcher image at the size a kubelet reported for
it) and a random draw of workload images of realistic sizes; it writes each node's `status.images` the kubelet's way
(largest first, cut at nodeStatusMaxImages), so whether a node lists the launcher follows from what else it holds.
Then the same VMs arrive three times, one arm each:

- default:  the cluster's kube-scheduler, default profile (ImageLocality on), status.images cut at 50;
- kubevirt: a local kube-scheduler of the same version running the secondary_scheduler role's `kubevirt` profile
            (ImageLocality off, rendered by plugins/module_utils/scheduler_config.py), same status.images;
- uncapped: the default profile again, status.images with nodeStatusMaxImages -1 (every node lists the launcher).

Per arm and repetition: VMs and requested memory per node that can take VMs, their coefficients of variation, the
max/min ratio, the share of VMs on nodes listing the launcher, where the first N VMs went, and the ImageLocality
score difference scheduling_info predicts for the run's launcher pods. Medians and ranges over the repetitions go to
bench/results/balance.json and balance.md. The nodes' status.images is restored to the fixture's at the end.

Usage: .venv/bin/python bench/balance.py [--vms 128] [--reps 5] [--seed 14] [--images-per-node 120-330]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml
from common import OUTPUT, RESULTS, ROOT, wait_for
from kubernetes import client, config
from kubernetes.utils import parse_quantity

sys.path.insert(0, str(ROOT / ".build" / "collections"))
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
sys.path.insert(0, str(ROOT))
import build  # noqa: E402  pylint: disable=wrong-import-position
import cluster  # noqa: E402  pylint: disable=wrong-import-position
import node_images  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.vmsched.kubevirt.plugins.module_utils import scheduling_report  # noqa: E402
from ansible_collections.vmsched.kubevirt.plugins.module_utils.scheduler_config import render_config  # noqa: E402
from tests.integration.vms import vm_manifest  # noqa: E402  pylint: disable=wrong-import-position

GROUP, VERSION = "kubevirt.io", "v1"
ARMS = ("default", "kubevirt", "uncapped")
# VM sizes (cores, guest memory) and how often they arrive.
VM_SIZES = ((1, "1Gi", 0.4), (2, "4Gi", 0.3), (4, "8Gi", 0.2), (8, "16Gi", 0.1))
# Workload images in the world the nodes draw from: sizes log-normal around a median, in MB (10^6 bytes). An
# assumption, stated in the report: the median and spread of application images, uncompressed.
CATALOG_IMAGES = 600
CATALOG_MEDIAN_MB = 200
CATALOG_SIGMA = 1.1
CATALOG_BOUNDS_MB = (5, 8000)


def catalog(seed):
    rng = random.Random(seed)
    images = []
    for k in range(CATALOG_IMAGES):
        size = min(max(rng.lognormvariate(0, CATALOG_SIGMA) * CATALOG_MEDIAN_MB, CATALOG_BOUNDS_MB[0]),
                   CATALOG_BOUNDS_MB[1])
        images.append(node_images.held(f"registry.example/workload/app-{k:03d}:v1", size * node_images.MB))
    return images


def holdings(nodes, world, images_per_node, kubevirt_version, launcher_size, rng):
    """What each node's runtime holds this repetition: system and KubeVirt images, and a draw of workload images."""
    low, high = images_per_node
    return {name: node_images.system_images() + node_images.kubevirt_images(kubevirt_version, launcher_size)
            + rng.sample(world, rng.randint(low, high)) for name in nodes}


def vm_sizes(count, rng):
    return rng.choices([(cores, memory) for cores, memory, _weight in VM_SIZES],
                       weights=[weight for *_size, weight in VM_SIZES], k=count)


def set_images(core, statuses):
    for name, images in statuses.items():
        core.patch_node_status(name, {"status": {"images": images}})
    # The schedulers' node informers see the change within a moment; give them a few.
    time.sleep(5)


def vm(name, cores, memory, scheduler_name=None):
    body = vm_manifest(name, memory=memory, labels={"bench": "balance"},
                       spec_extra={"schedulerName": scheduler_name} if scheduler_name else None)
    body["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = cores
    return body


def memory_request(pod):
    return int(sum(parse_quantity((c.resources.requests or {}).get("memory", "0")) for c in pod.spec.containers))


def run_arm(core, custom, namespace, sizes, scheduler_name=None):
    """Creates the VMs one after the other, waits until every launcher pod is bound, returns (VM index -> node,
    VM index -> requested memory, one launcher pod as a dict), then deletes them."""
    t0 = time.monotonic()
    for index, (cores, memory) in enumerate(sizes):
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines",
                                               vm(f"vm-{index:03d}", cores, memory, scheduler_name))
    created = time.monotonic()

    def bound():
        pods = core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items
        placed = [p for p in pods if p.spec.node_name and p.metadata.deletion_timestamp is None]
        print(f"  {len(placed)}/{len(sizes)} launcher pods bound", end="\r", flush=True)
        return placed if len(placed) >= len(sizes) else None

    pods = wait_for(bound, f"{len(sizes)} launcher pods bound", timeout=900, interval=1)
    placed = time.monotonic()
    print()
    by_vm = {int(p.metadata.labels["vm.kubevirt.io/name"].rsplit("-", 1)[1]): p for p in pods}
    placement = {i: by_vm[i].spec.node_name for i in by_vm}
    memory = {i: memory_request(by_vm[i]) for i in by_vm}
    sample = core.api_client.sanitize_for_serialization(by_vm[0])
    for index in range(len(sizes)):
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachines", f"vm-{index:03d}")
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items,
             "launcher pods gone", timeout=900, interval=1)
    phases = {"create": round(created - t0, 1), "bind": round(placed - created, 1),
              "delete": round(time.monotonic() - placed, 1)}
    return placement, memory, sample, phases


def cv(values):
    mean = statistics.mean(values)
    return round(statistics.pstdev(values) / mean, 4) if mean else None


def arm_figures(placement, memory, usable, listing, first_n, exposure):
    counts = {n: 0 for n in usable}
    requested = {n: 0 for n in usable}
    for index, node in placement.items():
        counts[node] += 1
        requested[node] += memory[index]
    values = list(counts.values())
    first = [placement[i] for i in sorted(placement)[:first_n]]
    return {
        "per_node": counts,
        "memory_gib_per_node": {n: round(requested[n] / 2 ** 30, 1) for n in usable},
        "cv": cv(values),
        "memory_cv": cv(list(requested.values())),
        "max_min_ratio": round(max(values) / min(values), 2) if min(values) else None,
        "empty_nodes": sum(1 for v in values if v == 0),
        "share_on_listing_nodes": round(sum(counts[n] for n in listing) / len(placement), 3),
        "first_n_on_listing_nodes": sum(1 for n in first if n in listing),
        "first_n_distinct_nodes": len(set(first)),
        "predicted_score_difference": exposure["score_difference"],
        "predicted_score_on_listing_nodes": exposure["score_on_listing_nodes"],
    }


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "min": min(values), "max": max(values), "n": len(values)}


METRICS = ("cv", "memory_cv", "max_min_ratio", "empty_nodes", "share_on_listing_nodes", "first_n_on_listing_nodes",
           "first_n_distinct_nodes", "predicted_score_difference")


def start_kubevirt_scheduler(server, kubeconfig, scheduler_name):
    rendered = render_config(server, scheduler_name=scheduler_name)
    conf = dict(rendered["config"], clientConnection={"kubeconfig": str(Path(kubeconfig).resolve())},
                leaderElection={"leaderElect": False})
    config_path = OUTPUT / "balance-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(conf))
    log = (OUTPUT / "balance-scheduler.log").open("w")  # pylint: disable=consider-using-with
    proc = subprocess.Popen([str(build.bin_dir() / "kube-scheduler"), f"--config={config_path}",  # noqa: SIM115
                             "--bind-address=127.0.0.1", "--secure-port=0"], stdout=log, stderr=subprocess.STDOUT)
    return proc, rendered["config"]["profiles"]


def markdown(result):
    arms = result["arms"]
    lines = [
        "# ImageLocality balance experiment",
        "",
        f"{result['vms']} VMs of mixed sizes, {result['reps']} repetitions, {result['nodes']} nodes "
        f"({len(result['nodes_taking_vms'])} take VMs), Kubernetes {result['server_version']}, KubeVirt "
        f"{result['kubevirt_version']}. Launcher image {result['launcher_image']} at {result['launcher_size_bytes']:,} "
        "bytes. Written by `bench/balance.py`; medians over the repetitions, [min–max] in brackets.",
        "",
        "| metric | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for metric in METRICS:
        cells = []
        for arm in arms:
            s = result["summary"][arm][metric]
            cells.append("–" if s is None else f"{s['median']} [{s['min']}–{s['max']}]"
                         + ("" if s["n"] == result["reps"] else f" ({result['reps'] - s['n']} undefined)"))
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    lines += ["", "Nodes listing the launcher per repetition (status.images cut at 50): "
              + ", ".join(f"{len(r['nodes_listing'])}/{result['nodes']}" for r in result["repetitions"]), ""]
    return "\n".join(lines)


def main():  # pylint: disable=too-many-locals,too-many-statements
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--first", type=int, default=0, help="where the first N VMs went (default: the nodes taking VMs)")
    parser.add_argument("--images-per-node", default="120-330", help="workload images a node holds, LOW-HIGH")
    parser.add_argument("--launcher-size", type=int, default=node_images.LAUNCHER_SIZE, help="bytes")
    parser.add_argument("--min-nodes", type=int, default=20)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", str(ROOT / ".cluster" / "kubeconfig")))
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if set(arms) - set(ARMS):
        parser.error(f"arms are {', '.join(ARMS)}")
    images_per_node = tuple(int(v) for v in args.images_per_node.split("-"))

    api = config.new_client_from_config(config_file=args.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    server = client.VersionApi(api).get_code().git_version
    kv = custom.list_cluster_custom_object(GROUP, VERSION, "kubevirts")["items"][0]["status"]
    kubevirt_version = kv["observedKubeVirtVersion"]
    launcher = node_images.launcher_reference(kubevirt_version, kv.get("observedKubeVirtRegistry") or "quay.io/kubevirt")
    nodes = core.list_node().items
    names = sorted(n.metadata.name for n in nodes)
    if len(names) < args.min_nodes:
        raise SystemExit(f"balance.py: {len(names)} nodes; this experiment wants at least {args.min_nodes}: "
                         f"`make cluster-down` then `VMSCHED_NODES=24 make cluster-up`")
    usable = sorted(n.metadata.name for n in nodes if not n.spec.unschedulable and not n.spec.taints)
    first_n = args.first or len(usable)
    print(f"server {server}, KubeVirt {kubevirt_version}, {len(names)} nodes, {len(usable)} take VMs; "
          f"launcher {launcher} at {args.launcher_size:,} bytes")

    suffix = uuid.uuid4().hex[:6]
    namespace = f"bench-balance-{suffix}"
    scheduler_name = f"kubevirt-bench-{suffix}"
    OUTPUT.mkdir(parents=True, exist_ok=True)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_for(lambda: core.list_namespaced_service_account(namespace).items, "the namespace's ServiceAccount")
    world = catalog(args.seed)
    proc, profiles = start_kubevirt_scheduler(server, args.kubeconfig, scheduler_name) if "kubevirt" in arms else (
        None, None)
    repetitions = []
    started = time.monotonic()
    try:
        for rep in range(args.reps):
            rng = random.Random(args.seed * 1000 + rep)
            held = holdings(names, world, images_per_node, kubevirt_version, args.launcher_size, rng)
            capped = {n: node_images.kubelet_image_list(held[n]) for n in names}
            uncapped = {n: node_images.kubelet_image_list(held[n], -1) for n in names}
            listing = sorted(n for n in names if node_images.lists(capped[n], launcher))
            larger = {n: sum(1 for i in held[n] if i["size"] > args.launcher_size) for n in names}
            sizes = vm_sizes(args.vms, rng)
            order = arms[rep % len(arms):] + arms[:rep % len(arms)]   # each arm goes first in some repetition
            print(f"repetition {rep + 1}/{args.reps}: {len(listing)}/{len(names)} nodes list the launcher "
                  f"({sum(1 for n in usable if n in listing)}/{len(usable)} of those taking VMs); arms {order}")
            record = {"nodes_listing": listing, "images_held": {n: len(held[n]) for n in names},
                      "images_larger_than_launcher": larger, "vm_sizes": [f"{c}c/{m}" for c, m in sizes], "arms": {}}
            for arm in order:
                statuses = uncapped if arm == "uncapped" else capped
                set_images(core, statuses)
                # Every arm is measured against the nodes that list the launcher under the cap of 50.
                arm_listing = [n for n in usable if n in listing]
                t0 = time.monotonic()
                print(f"  {arm}: {args.vms} VMs")
                placement, memory, sample, phases = run_arm(core, custom, namespace, sizes,
                                                            scheduler_name if arm == "kubevirt" else None)
                node_dicts = [{"metadata": {"name": n}, "status": {"images": statuses[n]}} for n in names]
                exposure, _scores = scheduling_report.image_locality_exposure(node_dicts, [sample], {launcher}, usable)
                figures = arm_figures(placement, memory, usable, arm_listing, first_n, exposure)
                figures["seconds"] = round(time.monotonic() - t0, 1)
                figures["phase_seconds"] = phases
                record["arms"][arm] = figures
                print(f"    CV {figures['cv']}, share on listing nodes {figures['share_on_listing_nodes']}, "
                      f"first {first_n}: {figures['first_n_on_listing_nodes']} on listing nodes, "
                      f"predicted difference {figures['predicted_score_difference']} ({figures['seconds']} s: {phases})")
            repetitions.append(record)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
        fixture = {n["metadata"]["name"]: n["status"]["images"] for n in cluster.node_objects(kubevirt_version, len(names))}
        set_images(core, {n: fixture[n] for n in names if n in fixture})
        core.delete_namespace(namespace)

    result = {
        "server_version": server, "kubevirt_version": kubevirt_version, "launcher_image": launcher,
        "launcher_size_bytes": args.launcher_size, "vms": args.vms, "reps": args.reps, "seed": args.seed,
        "first_n": first_n, "nodes": len(names), "nodes_taking_vms": usable, "arms": arms,
        "images_per_node": list(images_per_node),
        "catalog": {"images": CATALOG_IMAGES, "median_mb": CATALOG_MEDIAN_MB, "sigma": CATALOG_SIGMA,
                    "bounds_mb": list(CATALOG_BOUNDS_MB)},
        "vm_sizes": [{"cores": c, "memory": m, "weight": w} for c, m, w in VM_SIZES],
        "kubevirt_profile_config": profiles,
        "summary": {arm: {m: spread([r["arms"][arm][m] for r in repetitions]) for m in METRICS} for arm in arms},
        "repetitions": repetitions,
        "seconds": round(time.monotonic() - started, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "balance.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (RESULTS / "balance.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
