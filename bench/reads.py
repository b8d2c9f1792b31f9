# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' reads: the ten kinds the secondary_scheduler role's absent path looks for, read by one objects_info
task, against the obvious alternative, a kubernetes.core.k8s_info loop over the kinds; each arm a playbook run of
its own, repeated. Prints the median wall and CPU seconds of each arm and their ratio; writes nothing.

    .venv/bin/python bench/reads.py [--reps 5] [--kubeconfig F]   # default: the local control plane (make cluster-up)
"""
from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
from pathlib import Path

import yaml

from common import KUBECONFIG, ROOT, machine, run_playbook

SELECTOR = "app.kubernetes.io/managed-by=vmsched.kubevirt.secondary_scheduler"


def kinds():
    """The role's own list (vars/main.yml), its namespace made concrete."""
    variables = yaml.safe_load((ROOT / "roles" / "secondary_scheduler" / "vars" / "main.yml").read_text())
    return [{key: ("kube-system" if key == "namespace" else value) for key, value in kind.items()}
            for kind in variables["secondary_scheduler__kinds"]]


def playbook(tasks):
    return [{"name": "reads", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]


ARMS = {
    "objects_info (one task)": [{"vmsched.kubevirt.objects_info": {
        "queries": [dict(kind, label_selectors=[SELECTOR]) for kind in kinds()]}}],
    "k8s_info loop": [{"kubernetes.core.k8s_info": {
        "api_version": "{{ item.api_version }}", "kind": "{{ item.kind }}",
        "namespace": "{{ item.namespace | default(omit) }}", "label_selectors": [SELECTOR]},
        "loop": kinds()}],
}


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--kubeconfig", type=Path, default=KUBECONFIG)
    args = parser.parse_args()
    if not args.kubeconfig.exists():
        raise SystemExit(f"no control plane ({args.kubeconfig}): make cluster-up")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm, tasks in ARMS.items():
            path = Path(tmp) / "reads.yml"
            path.write_text(yaml.safe_dump(playbook(tasks)))
            walls, cpus = [], []
            for rep in range(args.reps):
                before = children_cpu()
                run = run_playbook(path, f"reads-{rep}", kubeconfig=args.kubeconfig)
                walls.append(run.seconds)
                cpus.append(children_cpu() - before)
            figures[arm] = (statistics.median(walls), statistics.median(cpus))
    print(f"{len(kinds())} kinds, {args.reps} runs of each arm, {machine()}")
    for arm, (wall, cpu) in figures.items():
        print(f"  {arm:26} median {wall:5.2f} s wall, {cpu:5.2f} s CPU")
    (one, one_cpu), (loop, loop_cpu) = figures["objects_info (one task)"], figures["k8s_info loop"]
    print(f"  k8s_info loop / objects_info: {loop / one:.1f}x wall, {loop_cpu / one_cpu:.1f}x CPU")


if __name__ == "__main__":
    main()
