# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A control plane per pytest-xdist worker, so that the integration suite runs on two workers.

    workers.py up N [--first] [cluster.py up's options]   start the clusters of workers gw1 .. gw(N-1) at once
                                                          (--first: gw0's too)
    workers.py down N [--first]                           stop them
    workers.py dir N | offset N                           worker gwN's VMSCHED_CLUSTER_DIR, VMSCHED_PORT_OFFSET

Worker gw0 uses the cluster the suite was started for (VMSCHED_CLUSTER_DIR, default .cluster/); worker gwN
(N > 0) a cluster of its own in <that directory>-gwN, its ports moved by N * PORT_STEP more. Tests change
cluster-wide state (cordons, taints, the KubeVirt CR, the secondary scheduler in kube-system, an API server
restart, KubeVirt's per-cluster migration caps), so two workers never share a control plane: a second one costs
about 30 s to start and no test needs to know it runs beside another.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# Above the widest spread of one cluster's ports and of the fleet's offsets (cluster.py, fleet.py).
PORT_STEP = 1000


def cluster_dir(env=None) -> Path:
    """The cluster the tests run against: VMSCHED_TEST_KUBECONFIG's directory, else VMSCHED_CLUSTER_DIR, else .cluster/."""
    env = os.environ if env is None else env
    if env.get("VMSCHED_TEST_KUBECONFIG"):
        return Path(env["VMSCHED_TEST_KUBECONFIG"]).resolve().parent
    return Path(env.get("VMSCHED_CLUSTER_DIR") or ROOT / ".cluster").resolve()


def worker_index(worker: str | None) -> int:
    """0 for gw0 or no xdist at all, N for gwN."""
    return int(worker[2:]) if worker and worker.startswith("gw") else 0


def worker_env(index: int, env=None) -> dict:
    """The environment cluster.py and the tests read, for worker `index`'s cluster."""
    env = dict(os.environ if env is None else env)
    if index == 0:
        return env
    base = Path(env.get("VMSCHED_CLUSTER_DIR") or ROOT / ".cluster").resolve()
    state = base.parent / f"{base.name}-gw{index}"
    env.update(VMSCHED_CLUSTER_DIR=str(state),
               VMSCHED_PORT_OFFSET=str(int(env.get("VMSCHED_PORT_OFFSET", "0")) + index * PORT_STEP),
               VMSCHED_TEST_KUBECONFIG=str(state / "kubeconfig"), KUBECONFIG=str(state / "kubeconfig"))
    return env


def use_worker_cluster():
    """Point this process (a pytest-xdist worker) at its own cluster; called before anything reads the variables."""
    index = worker_index(os.environ.get("PYTEST_XDIST_WORKER"))
    if index:
        os.environ.update(worker_env(index))


def run_all(workers: range, args: list[str]) -> int:
    """cluster.py with `args` for every worker's cluster at once; the worst exit status."""
    procs = [subprocess.Popen([sys.executable, str(HERE / "cluster.py"), *args], env=worker_env(i)) for i in workers]
    return max([p.wait() for p in procs], default=0)


def main():
    args = sys.argv[1:]
    if len(args) < 2 or args[0] not in ("up", "down", "dir", "offset") or not args[1].isdigit():
        sys.exit(__doc__)
    command, count, rest = args[0], int(args[1]), args[2:]
    if command in ("dir", "offset"):
        env = worker_env(count)
        print(cluster_dir(env) if command == "dir" else env.get("VMSCHED_PORT_OFFSET", "0"))
        return
    first = 1
    if rest[:1] == ["--first"]:
        first, rest = 0, rest[1:]
    sys.exit(run_all(range(first, count), [command, *rest]))


if __name__ == "__main__":
    main()
