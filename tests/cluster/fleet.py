# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Local control planes of other Kubernetes releases, beside the default one: a fleet for site.yml.

    fleet.py up v1.36.3 v1.35.4 v1.34.4+map-beta     start (or reuse) one control plane per release
    fleet.py kubeconfigs v1.36.3 v1.34.4+map-beta    print their kubeconfigs, space-separated
    fleet.py down v1.36.3 v1.35.4 v1.34.4+map-beta   stop them

A release is one of versions.env's KUBERNETES_VERSIONS; `+map-beta` serves MutatingAdmissionPolicy's beta API
(1.34, 1.35). Each runs through cluster.py with its state in .cluster-k8s-<release>/ and its ports moved by an
offset of its own (on top of VMSCHED_PORT_OFFSET), KubeVirt's default release on each.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import build  # noqa: E402  pylint: disable=wrong-import-position

BETA = "+map-beta"
# Port offsets per slot in KUBERNETES_VERSIONS order; 200 and 300 are integration-kubevirt's older KubeVirt releases.
FIRST_OFFSET, OFFSET_STEP = 400, 100


def parse(spec):
    release, beta = (spec[:-len(BETA)], True) if spec.endswith(BETA) else (spec, False)
    known = build.read_versions()["KUBERNETES_VERSIONS"].split()
    if release not in known:
        sys.exit(f"fleet.py: {release} is not one of the control plane's Kubernetes releases ({', '.join(known)})")
    return release, beta, known.index(release)


def state_dir(release):
    return ROOT / f".cluster-k8s-{release}"


def cluster(spec, *args):
    release, beta, slot = parse(spec)
    env = dict(os.environ, VMSCHED_CLUSTER_DIR=str(state_dir(release)), VMSCHED_KUBERNETES=release,
               VMSCHED_PORT_OFFSET=str(int(os.environ.get("VMSCHED_PORT_OFFSET", "0")) + FIRST_OFFSET
                                       + OFFSET_STEP * slot))
    if args[0] == "up" and beta:
        args += ("--mutating-admission-policy-beta",)
    subprocess.run([sys.executable, str(HERE / "cluster.py"), *args], env=env, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "kubeconfigs"))
    parser.add_argument("releases", nargs="+", help="e.g. v1.37.2 v1.34.4+map-beta")
    args = parser.parse_args()
    if args.command == "kubeconfigs":
        print(" ".join(str(state_dir(parse(spec)[0]) / "kubeconfig") for spec in args.releases))
        return
    for spec in args.releases:
        try:
            cluster(spec, args.command)
        except subprocess.CalledProcessError as exc:
            sys.exit(f"fleet.py: {args.command} of Kubernetes {spec} failed (exit {exc.returncode})")


if __name__ == "__main__":
    main()
