# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CPU time of the planners alone (module_utils/plan.py, pure: no cluster): a rebalance plan and a drain plan over
a synthetic cluster built as vm_rebalance and vmi_evacuation build their input (target_pod constraints, the
launcher pods' requests). Issue 28's goal: a rebalance of 2,000 VMs on 100 nodes plans in 2 s of CPU or less.

    .venv/bin/python bench/plan.py [--vms 2000] [--nodes 100] [--reps 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".build" / "collections"))
# pylint: disable=wrong-import-position
from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, plan, target_pod  # noqa: E402

GI = 2 ** 30
SIZES = (2, 4, 8)       # GiB of memory, in turn


def cluster(vm_count, node_count):
    """A skewed cluster: a fifth of the nodes hold half the VMs; one VM in five is bound to its node's zone."""
    nodes = [{"metadata": {"name": "node%03d" % i, "uid": "uid-%d" % i,
                           "labels": {"kubernetes.io/hostname": "node%03d" % i, "kubevirt.io/schedulable": "true",
                                      "zone": "z%d" % (i % 2)}},
              "spec": {}, "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "250"}}}
             for i in range(node_count)]
    busy = max(1, node_count // 5)
    pods, vms = [], []
    for number in range(vm_count):
        index = number % busy if number < vm_count // 2 else busy + number % (node_count - busy or 1)
        host = nodes[min(index, node_count - 1)]
        name, size = "vm%05d" % number, SIZES[number % len(SIZES)]
        pod = {"metadata": {"name": "virt-launcher-" + name, "namespace": "vms"},
               "spec": {"nodeName": node_fit.node_name(host), "containers": [
                   {"name": "compute", "resources": {"requests": {"cpu": "1", "memory": "%dGi" % size}}}]},
               "status": {"phase": "Running"}}
        pods.append(pod)
        selector = {"zone": host["metadata"]["labels"]["zone"]} if number % 5 == 0 else {}
        vmi = {"metadata": {"namespace": "vms", "name": name, "uid": "uid-" + name},
               "spec": {"domain": {"cpu": {"model": "host-passthrough"}}, "nodeSelector": selector},
               "status": {"phase": "Running", "nodeName": node_fit.node_name(host)}}
        vms.append({"namespace": "vms", "name": name, "node": node_fit.node_name(host),
                    "constraints": target_pod.target_constraints(vmi, pod, host),
                    "requests": node_fit.pod_requests(pod), "memory": size * GI, "value": size * GI,
                    "not_migratable": None, "opted_out": False, "seconds_since_migration": None})
    return nodes, pods, vms


def cpu_seconds(function, reps):
    times, result = [], None
    for _rep in range(reps):
        start = time.process_time()
        result = function()
        times.append(time.process_time() - start)
    return statistics.median(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    nodes, pods, vms = cluster(args.vms, args.nodes)
    load = {}
    for vm in vms:
        load[vm["node"]] = load.get(vm["node"], 0) + vm["value"]

    seconds, result = cpu_seconds(lambda: plan.rebalance_plan(vms, nodes, pods, load, threshold=0.1,
                                                              max_migrations=args.vms), args.reps)
    print("rebalance plan, %d VMs on %d nodes (memory): %.3f s CPU (median of %d); %d moves, CV %.3f -> %.3f (%s)"
          % (args.vms, args.nodes, seconds, args.reps, len(result["plan"]), result["spread"]["before"]["cv"],
             result["spread"]["after"]["cv"], result["stopped"]))
    source = vms[0]["node"]
    on_source = [vm for vm in vms if vm["node"] == source]
    seconds, result = cpu_seconds(lambda: plan.drain_plan(on_source, nodes, pods, source), args.reps)
    print("drain plan of %s (%d VMs) over %d nodes: %.3f s CPU (median of %d); %d placed, %d unplaceable, %d waves"
          % (source, len(on_source), args.nodes, seconds, args.reps, len(result["vmis"]), len(result["unplaceable"]),
             result["waves"]))


if __name__ == "__main__":
    main()
