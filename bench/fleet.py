# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml over a fleet against each of its clusters alone (issue 15).

The clusters: the local control plane and make matrix's other three Kubernetes releases, which
`tests/cluster/fleet.py up v1.37.2 v1.35.4 v1.34.4+map-beta` starts (this script starts them when they are not up,
and stops what it started). Each run installs into
namespaces of its own with `--vms` halted VMs to opt in (site.yml's variables as bench/site.py uses them): first
site.yml against each cluster alone, as a single-cluster admin runs it (localhost, KUBECONFIG), then once over all
of them through an inventory (one host per cluster, forks = clusters), then that fleet run again (nothing to
change). teardown.yml removes each install afterwards (not timed).

Writes bench/results/fleet.json and bench/results/fleet.md.
Usage: .venv/bin/python bench/fleet.py [--vms 10] [--kubeconfigs K1 K2 ...]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from pathlib import Path

import yaml
from common import KUBECONFIG, OUTPUT, RESULTS, ROOT, machine, run_playbook, versions
from kubernetes import client, config

SITE = ROOT / "playbooks" / "site.yml"
TEARDOWN = ROOT / "playbooks" / "teardown.yml"
G, V = "kubevirt.io", "v1"
FLEET = ["v1.37.2", "v1.35.4", "v1.34.4+map-beta"]


def site_vars(ns):
    return {"site_image_lookup": False, "site_scheduler_name": f"{ns}-scheduler", "site_scheduler_namespace": ns,
            "site_scheduler_rollout_timeout": 120, "site_vm_defaults_name": f"{ns}-vm-defaults",
            "site_vm_defaults_namespaces": ns, "site_descheduler_name": f"{ns}-descheduler",
            "site_descheduler_namespace": ns, "site_descheduler_rollout_timeout": 120, "site_vms_namespace": ns,
            "site_descheduler_dry_run_preview": False}


def vm(name):
    return {"apiVersion": f"{G}/{V}", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "256Mi"},
                           "devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                "networks": [{"name": "default", "pod": {}}]}}}}


class Cluster:
    def __init__(self, kubeconfig):
        self.kubeconfig = Path(kubeconfig)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.version = client.VersionApi(api).get_code().git_version
        self.name = "k8s-" + ".".join(self.version.lstrip("v").split(".")[:2])

    def namespace(self, vms, ns=None):
        ns = ns or "bench-" + uuid.uuid4().hex[:8]
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        for i in range(vms):
            self.custom.create_namespaced_custom_object(G, V, ns, "virtualmachines", vm(f"vm-{i:03d}"))
        return ns

    def drop(self, ns):
        run_playbook(TEARDOWN, f"fleet-teardown-{self.name}", site_vars(ns), kubeconfig=self.kubeconfig)
        self.core.delete_namespace(ns)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10)
    parser.add_argument("--kubeconfigs", nargs="*", help="the other clusters' kubeconfigs (default: fleet.py's)")
    args = parser.parse_args()
    fleet_py = [sys.executable, str(ROOT / "tests" / "cluster" / "fleet.py")]
    others = args.kubeconfigs or subprocess.run([*fleet_py, "kubeconfigs", *FLEET], capture_output=True, text=True,
                                                check=True).stdout.split()
    started = []
    if not args.kubeconfigs:
        started = [spec for spec, kubeconfig in zip(FLEET, others) if not Path(kubeconfig).exists()]
        if started:
            subprocess.run([*fleet_py, "up", *started], check=True)
    try:
        measure(args, others)
    finally:
        if started:
            subprocess.run([*fleet_py, "down", *started], check=False)


def measure(args, others):
    missing = [k for k in others if not Path(k).exists()]
    if missing:
        raise SystemExit(f"no control plane behind {missing}: run tests/cluster/fleet.py up {' '.join(FLEET)}")
    clusters = [Cluster(KUBECONFIG)] + [Cluster(k) for k in others]
    before = machine()
    single = {}
    for c in clusters:
        ns = c.namespace(args.vms)
        single[c.name] = run_playbook(SITE, f"fleet-single-{c.name}", site_vars(ns), kubeconfig=c.kubeconfig).seconds
        print(f"{c.name} ({c.version}) alone: {single[c.name]:.1f}s", flush=True)
        c.drop(ns)
    # One namespace name on every cluster, so the same variables serve the whole fleet.
    ns = "bench-" + uuid.uuid4().hex[:8]
    for c in clusters:
        c.namespace(args.vms, ns)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    inventory = OUTPUT / "fleet-inventory.yml"
    inventory.write_text(yaml.safe_dump({"kubevirt_clusters": {"hosts": {
        c.name: {"kubeconfig": str(c.kubeconfig)} for c in clusters}}}))
    forks = {"ANSIBLE_FORKS": str(len(clusters))}
    fleet = run_playbook(SITE, "fleet-all", site_vars(ns), inventory=inventory, env=forks, json_output=True)
    print(f"all {len(clusters)} in one run: {fleet.seconds:.1f}s", flush=True)
    again = run_playbook(SITE, "fleet-all-again", site_vars(ns), inventory=inventory, env=forks, json_output=True)
    changed = {c.name: again.data["stats"][c.name]["changed"] for c in clusters}
    print(f"again: {again.seconds:.1f}s, changed {changed}", flush=True)
    for c in clusters:
        c.drop(ns)
    slowest = max(single.values())
    result = {
        "clusters": {c.name: c.version for c in clusters}, "vms_per_cluster": args.vms,
        "single_seconds": single, "fleet_seconds": fleet.seconds, "fleet_rerun_seconds": again.seconds,
        "fleet_rerun_changed": changed, "ratio_to_slowest_single": round(fleet.seconds / slowest, 2),
        "machine": before, "versions": versions(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fleet.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# playbooks/site.yml over a fleet", "",
             f"{len(clusters)} clusters ({', '.join(f'{n} {v}' for n, v in result['clusters'].items())}), "
             f"{args.vms} halted VMs each to opt in, on one machine of {before['cores']} cores that runs all of them. "
             "Written by `bench/fleet.py`.", "",
             "| run | seconds |", "|---|---|"]
    lines += [f"| {name} alone | {seconds:.1f} |" for name, seconds in single.items()]
    lines += [f"| all {len(clusters)} in one run (forks {len(clusters)}) | {fleet.seconds:.1f} |",
              f"| the same again (changed: {sum(changed.values())}) | {again.seconds:.1f} |", "",
              f"Fleet run / slowest single run: {result['ratio_to_slowest_single']}×.", ""]
    (RESULTS / "fleet.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
