# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/cluster/workers.py: which control plane each pytest-xdist worker, and each stage of make test, uses."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import workers  # noqa: E402  pylint: disable=wrong-import-position

ROOT = Path(__file__).resolve().parents[3]


def test_the_first_worker_and_a_run_without_xdist_use_the_cluster_they_were_given():
    env = {"VMSCHED_CLUSTER_DIR": "/x/.cluster-v1.6.6", "VMSCHED_PORT_OFFSET": "200"}
    assert workers.worker_index(None) == workers.worker_index("gw0") == 0
    assert workers.worker_env(0, env) == env
    assert workers.cluster_dir({}) == ROOT / ".cluster"


def test_another_worker_gets_a_directory_and_ports_of_its_own_beside_the_first():
    first = {"VMSCHED_CLUSTER_DIR": "/x/.cluster-v1.6.6", "VMSCHED_PORT_OFFSET": "200", "KUBECONFIG": "/x/k"}
    env = workers.worker_env(workers.worker_index("gw2"), first)
    assert env["VMSCHED_CLUSTER_DIR"] == "/x/.cluster-v1.6.6-gw2"
    assert env["VMSCHED_PORT_OFFSET"] == str(200 + 2 * workers.PORT_STEP)
    # The tests, the audit log and cluster.py all read the worker's cluster, never the first one's.
    assert env["KUBECONFIG"] == env["VMSCHED_TEST_KUBECONFIG"] == "/x/.cluster-v1.6.6-gw2/kubeconfig"
    assert workers.cluster_dir(env) == Path("/x/.cluster-v1.6.6-gw2")


def test_the_default_cluster_of_a_second_worker_is_beside_dot_cluster():
    env = workers.worker_env(1, {})
    assert env["VMSCHED_CLUSTER_DIR"] == str(ROOT / ".cluster-gw1")
    assert env["VMSCHED_PORT_OFFSET"] == str(workers.PORT_STEP)


def test_a_test_kubeconfig_names_the_cluster_before_the_state_directory():
    env = {"VMSCHED_TEST_KUBECONFIG": "/y/.cluster-k8s-v1.34.4/kubeconfig", "VMSCHED_CLUSTER_DIR": "/x/.cluster"}
    assert workers.cluster_dir(env) == Path("/y/.cluster-k8s-v1.34.4")
