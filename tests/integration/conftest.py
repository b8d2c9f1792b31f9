# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for tests against the local control plane (`make cluster-up`)."""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config, dynamic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import workers  # noqa: E402  pylint: disable=wrong-import-position

# The CPU each test costs, printed at the end (its hooks, registered by being names of this conftest).
from .cpu_report import (  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
    close_forked_cpu_log, open_forked_cpu_log, pytest_runtest_logreport, pytest_runtest_makereport,
    pytest_runtest_protocol, pytest_terminal_summary)

# The costliest files first, for pytest-xdist's workers to end together.
from .schedule import costliest_first  # noqa: E402  pylint: disable=wrong-import-position

# Under pytest-xdist each worker has a control plane of its own (tests/cluster/workers.py, started by
# `make integration`): before anything below, or any test module, reads the cluster's variables.
workers.use_worker_cluster()
KUBECONFIG = workers.cluster_dir() / "kubeconfig"


def pytest_configure(config):
    open_forked_cpu_log()
    config.addinivalue_line("markers", "kubevirt15: needs a cluster with KubeVirt 1.5 (make integration-kubevirt)")
    config.addinivalue_line("markers", "differential: test_target_pod_differential.py's shapes (issue 29)")
    config.addinivalue_line("markers", "kubevirt_differs: a shape the KubeVirt releases render differently (read at "
                            "their tags): make integration-kubevirt runs it on 1.6.6 and 1.5.3 too")
    config.addinivalue_line("markers", "fleet: needs a second control plane of another Kubernetes minor (make fleet)")


def pytest_unconfigure(config):  # pylint: disable=unused-argument
    close_forked_cpu_log()


def pytest_collection_modifyitems(items):
    items[:] = costliest_first(items)


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    if not KUBECONFIG.exists():
        pytest.fail(f"no local control plane: {KUBECONFIG} is missing; run `make cluster-up` "
                    "(or `make integration`, which starts it)", pytrace=False)
    return KUBECONFIG


@pytest.fixture(scope="session")
def api_client(kubeconfig) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture(scope="session")
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def dyn(api_client) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(api_client)


@pytest.fixture
def namespace(core):
    """A fresh namespace per test, deleted afterwards."""
    name = "t-" + uuid.uuid4().hex[:10]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # The namespace's default ServiceAccount must exist before pods can be created.
    wait_for(lambda: core.read_namespaced_service_account("default", name), f"default ServiceAccount in {name}",
             exceptions=(client.ApiException,))
    yield name
    core.delete_namespace(name)


def delete_labelled(dyn, selector, kinds):
    """Delete what a role's state=absent run deletes outside the test namespace (which the namespace fixture
    deletes), straight through the API: the objects matching `selector` of each (api_version, kind, namespace:
    None for cluster-scoped). A cleanup fixture's way, a tenth of a second against the role run's 8 CPU-seconds;
    the tests of state=absent run the role."""
    for api_version, kind, where in kinds:
        resource = dyn.resources.get(api_version=api_version, kind=kind)
        for item in resource.get(namespace=where, label_selector=selector).items:
            try:
                resource.delete(name=item.metadata.name, namespace=item.metadata.namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


def delete_site_installs(dyn, namespace):
    """Remove what a site.yml run that put the scheduler and the descheduler into `namespace` left outside it: their
    ClusterRoles, ClusterRoleBindings and the scheduler's RoleBinding in kube-system, found by the label naming that
    namespace (the namespace fixture deletes the rest). A cleanup's way, instead of a teardown.yml run of about 20
    CPU-seconds; teardown.yml's own tests run it."""
    rbac = "rbac.authorization.k8s.io/v1"
    for component in ("scheduler", "descheduler"):
        delete_labelled(dyn, f"vmsched.kubevirt.io/{component}-namespace={namespace}",
                        [(rbac, "ClusterRole", None), (rbac, "ClusterRoleBinding", None),
                         (rbac, "RoleBinding", "kube-system")])


@pytest.fixture(scope="session")
def wait():
    """The polling helper, as a fixture so tests need not import conftest."""
    return wait_for


def wait_for(predicate, what, timeout=60.0, interval=0.1, exceptions=()):
    """Poll predicate until it returns a truthy value; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except exceptions as exc:  # not there yet
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}", pytrace=False)
