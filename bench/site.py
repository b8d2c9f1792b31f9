# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml: first converge and no-op re-run times on the local control plane (issue 9).

In a fresh namespace, creates `--vms` VirtualMachines (`--running` of them running through the KubeVirt
local KubeVirt, the rest Halted), then times `ansible-playbook playbooks/site.yml` twice with the same
variables: the first run converges (scheduler image reference, secondary scheduler, defaults for new
VMs, descheduler, VM opt-in, report), the second must change nothing; the tasks it reports changed are counted. Finally
playbooks/teardown.yml removes what site.yml installed (timed too) and the namespace goes.

The variables fit the local control plane: the scheduler and descheduler go into the benchmark's own
namespace under names of their own, the defaults policy (cluster-wide) is named after that namespace and
covers only it; the scheduler image reference is computed from the server version
without a registry lookup (`site_image_lookup=false`: KWOK runs no containers, and registry.k8s.io is
not reachable from here); only the benchmark's VMs are opted in.

Writes bench/results/site.json and bench/results/site.md.
Usage: .venv/bin/python bench/site.py [--vms 50] [--running 10]
"""
from __future__ import annotations

import argparse
import json
import uuid

from common import KUBECONFIG, RESULTS, ROOT, run_playbook, wait_for
from kubernetes import client, config

SITE = ROOT / "playbooks" / "site.yml"
TEARDOWN = ROOT / "playbooks" / "teardown.yml"
G, V = "kubevirt.io", "v1"


def vm(name, running):
    return {"apiVersion": f"{G}/{V}", "kind": "VirtualMachine", "metadata": {"name": name, "labels": {"bench": "site"}},
            "spec": {"runStrategy": "Always" if running else "Halted", "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "domain": {"cpu": {"cores": 1}, "memory": {"guest": "256Mi"},
                               "devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                    "networks": [{"name": "default", "pod": {}}]}}}}


def site_variables(namespace):
    return {"site_image_lookup": False, "site_scheduler_name": f"{namespace}-scheduler",
            "site_scheduler_namespace": namespace, "site_scheduler_rollout_timeout": 120,
            "site_vm_defaults_name": f"{namespace}-vm-defaults",
            "site_descheduler_name": f"{namespace}-descheduler", "site_descheduler_namespace": namespace,
            "site_descheduler_rollout_timeout": 120, "site_vms_namespace": namespace,
            "site_descheduler_dry_run_preview": False}


def running_vmis(custom, namespace):
    items = custom.list_namespaced_custom_object(G, V, namespace, "virtualmachineinstances")["items"]
    return [i for i in items if (i.get("status") or {}).get("phase") == "Running"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=50)
    parser.add_argument("--running", type=int, default=10, help="how many of the VMs run (the rest are Halted)")
    args = parser.parse_args()
    api = config.new_client_from_config(config_file=str(KUBECONFIG))
    core, custom, apps = client.CoreV1Api(api), client.CustomObjectsApi(api), client.AppsV1Api(api)
    namespace = "bench-site-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": namespace}})
    variables = site_variables(namespace)
    teardown = None
    try:
        for i in range(args.vms):
            custom.create_namespaced_custom_object(G, V, namespace, "virtualmachines",
                                                   vm(f"vm-{i:03d}", i < args.running))
        wait_for(lambda: len(running_vmis(custom, namespace)) >= args.running, f"{args.running} VMIs Running")
        converge = run_playbook(SITE, "site-converge", variables, json_output=True)
        print(f"converge: {converge.seconds:.1f}s, {converge.stats.get('changed')} changed", flush=True)
        deployments = sorted(d.metadata.name for d in apps.list_namespaced_deployment(namespace).items)
        opted_in = sum(1 for item in custom.list_namespaced_custom_object(G, V, namespace, "virtualmachines")["items"]
                       if item["spec"]["template"]["spec"].get("schedulerName") == variables["site_scheduler_name"])
        rerun = run_playbook(SITE, "site-rerun", variables, json_output=True)
        print(f"re-run: {rerun.seconds:.1f}s, {rerun.stats.get('changed')} changed", flush=True)
    finally:
        if TEARDOWN.exists():
            try:
                teardown = run_playbook(TEARDOWN, "site-teardown", variables, json_output=True)
            except SystemExit as exc:
                print(f"teardown failed: {exc}", flush=True)
        core.delete_namespace(namespace)

    result = {"vms": args.vms, "running_vms": args.running, "variables": variables,
              "converge_seconds": round(converge.seconds, 2), "converge_changed": converge.stats.get("changed"),
              "converge_tasks": converge.stats.get("ok", 0) + converge.stats.get("changed", 0),
              "rerun_seconds": round(rerun.seconds, 2), "rerun_changed": rerun.stats.get("changed"),
              "rerun_changed_tasks": rerun.changed_tasks(),
              "teardown_seconds": round(teardown.seconds, 2) if teardown else None,
              "teardown_changed": teardown.stats.get("changed") if teardown else None,
              "deployments": deployments, "vms_opted_in": opted_in}
    result["description"] = (
        f"`ansible-playbook playbooks/site.yml` twice with the same variables, against the local control plane "
        f"with {args.vms} VMs in the benchmark's namespace ({args.running} running): scheduler image reference "
        "(computed from the server version, no registry lookup: `site_image_lookup=false`), secondary scheduler "
        "and descheduler deployed into the benchmark's namespace (KWOK marks their pods Ready; no container runs), "
        "the MutatingAdmissionPolicy defaulting new VMs of that namespace to the secondary scheduler, "
        f"the VMs opted in, the report. After the converge: Deployments {', '.join(deployments).replace(namespace, '<ns>') or 'none'}; "
        f"{opted_in} of {args.vms} VMs on the secondary scheduler. Variables (`<ns>`: the benchmark's namespace): "
        f"`{json.dumps(variables).replace(namespace, '<ns>')}`.")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "site.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# playbooks/site.yml: converge and re-run",
        "",
        result["description"] + " Written by `bench/site.py`.",
        "",
        "| run | seconds | tasks changed |",
        "|---|---|---|",
        f"| first converge | {converge.seconds:.1f} | {result['converge_changed']} |",
        f"| second run | {rerun.seconds:.1f} | {result['rerun_changed']} |",
        f"| playbooks/teardown.yml | {result['teardown_seconds']} | {result['teardown_changed']} |",
        "",
    ]
    if result["rerun_changed_tasks"]:
        lines += ["Changed in the re-run (must be none): " + ", ".join(result["rerun_changed_tasks"]), ""]
    (RESULTS / "site.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
