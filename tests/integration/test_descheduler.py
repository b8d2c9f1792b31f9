# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The descheduler role against the local control plane.

KWOK makes the role's Deployment pod Ready without running anything: most tests prove
what the role writes (and what it does not write). The real descheduler, built from its
Go module, runs here with the role's arguments and policy in the last two tests: once for
real (evictions become migrations) and once as the dry-run preview's Job would run it, since
under KWOK that Job's pod neither runs nor serves a log.

Every test uses its own namespace; cluster-scoped objects the role creates carry the
namespace in their names (vmsched:<namespace>:<name>), so parallel runs do not collide.

registry.k8s.io is not reachable from here and KWOK pulls no image: the tests run the role with
descheduler_image_lookup=false (the tag computed from the server version), except the one that
looks the image up, and mirrors it, in local registries.
"""
from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ansible_collections.vmsched.kubevirt.plugins.filter.descheduler_policy import FilterModule

from .playbook import run_playbook
from .registry import Buildah, LocalRegistry, skopeo_digest
from .releases import DESCHEDULER
from .ports import free_port
from .audit import Audit
from .conftest import delete_labelled
from .local_scheduler import token_kubeconfig
from .vms import kubevirt  # noqa: F401  pylint: disable=unused-import

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "descheduler.yml"
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import build  # noqa: E402  pylint: disable=wrong-import-position

K8S = build.read_versions()["KUBERNETES_VERSION"]
MINOR = int(K8S.lstrip("v").split(".")[1])
MANAGED_BY = "app.kubernetes.io/managed-by=vmsched.kubevirt.descheduler"
NAME = "kubevirt-descheduler"

# (api_version, kind, cluster-scoped)
KINDS = [
    ("apps/v1", "Deployment", False),
    ("batch/v1", "CronJob", False),
    ("v1", "ConfigMap", False),
    ("v1", "ServiceAccount", False),
    ("rbac.authorization.k8s.io/v1", "Role", False),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", True),
]


@pytest.fixture
def run(kubeconfig, namespace):
    """run(mode='cronjob', ...) runs the role in the test namespace with descheduler_<key> variables (and the
    variables of `extra` as they are), without a registry lookup unless image_lookup=True."""

    def _run(check=False, extra=None, **variables):
        values = {"namespace": namespace, "rollout_timeout": 60, "image_lookup": False}
        values.update(variables)  # namespace=None: the role's default
        values = {key: value for key, value in values.items() if value is not None}
        return run_playbook(PLAYBOOK, dict({f"descheduler_{k}": v for k, v in values.items()}, **(extra or {})),
                            kubeconfig, check=check)

    return _run


@pytest.fixture
def cleanup(dyn, namespace):
    """Make sure the cluster-scoped objects go even when a test fails half-way."""
    yield
    delete_labelled(dyn, owner_selector(namespace), [(a, k, None) for a, k, cluster in KINDS if cluster])


def owner_selector(namespace, name=NAME):
    """The labels of every object of this descheduler."""
    return f"{MANAGED_BY},app.kubernetes.io/instance={name},vmsched.kubevirt.io/descheduler-namespace={namespace}"


def owned(dyn, namespace, name=NAME):
    """Every object carrying this descheduler's labels, as (kind, namespace, name)."""
    selector, found = owner_selector(namespace, name), set()
    for api_version, kind, cluster in KINDS:
        resource = dyn.resources.get(api_version=api_version, kind=kind)
        items = (resource.get(label_selector=selector) if cluster
                 else resource.get(namespace=namespace, label_selector=selector)).items
        found.update((kind, item.metadata.namespace, item.metadata.name) for item in items)
    return found


def resource_versions(dyn, namespace):
    result = {}
    for kind, ns, obj_name in owned(dyn, namespace):
        api_version = next(a for a, k, _c in KINDS if k == kind)
        resource = dyn.resources.get(api_version=api_version, kind=kind)
        obj = resource.get(name=obj_name, namespace=ns) if ns else resource.get(name=obj_name)
        result[(kind, ns, obj_name)] = obj.metadata.resourceVersion
    return result


def workload(dyn, namespace, kind="Deployment", name=NAME):
    api_version = "apps/v1" if kind == "Deployment" else "batch/v1"
    return dyn.resources.get(api_version=api_version, kind=kind).get(name=name, namespace=namespace).to_dict()


def policy(core, namespace):
    return yaml.safe_load(core.read_namespaced_config_map(f"{NAME}-policy", namespace).data["policy.yaml"])


def test_converge_idempotent_check_mode_mode_switch_and_absent(run, dyn, core, namespace, cleanup):
    first = run()
    assert not first.failed, first.failure
    assert first.changed > 0
    objects = owned(dyn, namespace)
    assert sorted(kind for kind, _ns, _n in objects) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "ServiceAccount"], objects

    pol = policy(core, namespace)
    assert pol["apiVersion"] == "descheduler/v1alpha2" and pol["kind"] == "DeschedulerPolicy"
    assert pol["nodeSelector"] == "kubevirt.io/schedulable=true"
    # The KubeVirt CR of the local cluster leaves the migration limits at their defaults.
    assert (pol["maxNoOfPodsToEvictPerNode"], pol["maxNoOfPodsToEvictTotal"]) == (2, 5)
    [prof] = pol["profiles"]
    assert prof["plugins"] == {"balance": {"enabled": ["LowNodeUtilization"]}}
    evictor = [c["args"] for c in prof["pluginConfig"] if c["name"] == "DefaultEvictor"][0]
    assert evictor == {"labelSelector": {"matchLabels": {"kubevirt.io": "virt-launcher"}}}  # opted-in VMs only

    dep = workload(dyn, namespace)
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod_spec = dep["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert container["image"] == f"registry.k8s.io/descheduler/descheduler:{DESCHEDULER[MINOR]}"
    assert any(m.startswith(f"descheduler_image_lookup=false: deploying {container['image']}")
               for m in first.debug_messages), first.debug_messages
    assert container["args"] == [
        "--policy-config-file=/policy-dir/policy.yaml", "--descheduling-interval=5m", "--bind-address=0.0.0.0",
        "--secure-port=10258", "--feature-gates=EvictionsInBackground=true", "--v=3"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 10258, "scheme": "HTTPS"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod_spec["serviceAccountName"] == NAME
    cluster_role = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole").get(
        name=f"vmsched:{namespace}:{NAME}").to_dict()
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in cluster_role["rules"]}
    assert rules[("", "pods/eviction")] == ["create"]
    assert ("metrics.k8s.io", "nodes") not in rules  # requests need no metrics API
    assert not any("secrets" in r["resources"] for r in cluster_role["rules"])

    versions = resource_versions(dyn, namespace)
    second = run()
    assert not second.failed, second.failure
    assert second.changed == 0, [name for name, result in second.results if result.get("changed")]
    assert resource_versions(dyn, namespace) == versions

    # Check mode with real changes to make (another mode, dry run, other thresholds): nothing is written.
    audit = Audit(namespace)
    check = run(check=True, mode="cronjob", dry_run=True, thresholds={"cpu": 10}, target_thresholds={"cpu": 30})
    assert not check.failed, check.failure
    assert check.changed > 0
    assert audit.writes() == []
    assert resource_versions(dyn, namespace) == versions

    # Switching to a CronJob replaces the Deployment; the pod template is the same, plus --dry-run.
    switched = run(mode="cronjob", dry_run=True, dry_run_preview=False, schedule="*/10 * * * *")
    assert not switched.failed, switched.failure
    kinds = sorted(kind for kind, _ns, _n in owned(dyn, namespace))
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CronJob", "ServiceAccount"], kinds
    cron = workload(dyn, namespace, "CronJob")
    assert cron["spec"]["schedule"] == "*/10 * * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dry-run" in args and not any(a.startswith("--descheduling-interval") for a in args)

    # absent removes what the role made and nothing else, even look-alikes.
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name=f"{NAME}-mine", labels={"app.kubernetes.io/instance": NAME})))
    gone = run(state="absent")
    assert not gone.failed, gone.failure
    assert owned(dyn, namespace) == set()
    assert core.read_namespaced_config_map(f"{NAME}-mine", namespace)
    again = run(state="absent")
    assert not again.failed and again.changed == 0


IMAGE = f"descheduler/descheduler:{DESCHEDULER[MINOR]}"  # the release the role picks for this cluster
PLAIN_HTTP = {"scheduler_image_source_tls_verify": False, "scheduler_image_target_tls_verify": False}


@pytest.fixture(scope="module")
def registries(tmp_path_factory):
    """A source registry holding a stand-in for the descheduler release of this cluster's minor, where
    registry.k8s.io has it, and an empty target registry."""
    work = tmp_path_factory.mktemp("descheduler-registries")
    source, target = LocalRegistry(work / "source"), LocalRegistry(work / "target")
    fake = work / "descheduler"
    fake.write_text(f"#!/bin/sh\necho 'not a descheduler: a stand-in for {IMAGE}'\n")
    Buildah(work / "buildah").push_file_image(fake, f"{source.host}/{IMAGE}")
    yield source, target
    source.stop()
    target.stop()


def deployed_image(dyn, namespace):
    return workload(dyn, namespace)["spec"]["template"]["spec"]["containers"][0]["image"]


def test_the_image_is_looked_up_pinned_to_its_digest_or_mirrored(run, dyn, namespace, registries, cleanup):
    source, target = registries
    digest = skopeo_digest(f"{source.host}/{IMAGE}")
    lookup = {"image_lookup": True, "extra": PLAIN_HTTP}

    # Not in the registry named: fails with scheduler_image's reason, before anything is written.
    audit = Audit(namespace)
    missing = run(registry=target.host, **lookup)
    assert missing.failed
    assert f"{target.host}/{IMAGE} does not exist" in missing.failure, missing.failure
    assert audit.writes() == [] and owned(dyn, namespace) == set()

    resolved = run(registry=source.host, **lookup)
    assert not resolved.failed, resolved.failure
    assert deployed_image(dyn, namespace) == f"{source.host}/{IMAGE}@{digest}"
    again = run(registry=source.host, **lookup)
    assert not again.failed and again.changed == 0, [n for n, r in again.results if r.get("changed")]

    # Mirrored into the registry the cluster pulls from: the copy, same digest, is what runs.
    mirrored = run(registry=source.host, image_mode="mirror", image_target_registry=target.host, **lookup)
    assert not mirrored.failed, mirrored.failure
    assert target.contents() == {"descheduler/descheduler": [DESCHEDULER[MINOR]]}
    assert deployed_image(dyn, namespace) == f"{target.host}/{IMAGE}@{digest}"

    # An image given is used as it is: the registry named is not even asked (nothing listens there).
    given = f"{target.host}/{IMAGE}"
    as_given = run(image=given, registry=f"127.0.0.1:{free_port()}", **lookup)
    assert not as_given.failed, as_given.failure
    assert deployed_image(dyn, namespace) == given


def test_mirror_without_the_lookup_is_refused_first(run, dyn, namespace):
    audit = Audit(namespace)
    refused = run(image_mode="mirror", image_target_registry="registry.example.com:5000")
    assert refused.failed
    assert "descheduler_image_lookup=false works only with descheduler_image_mode=resolve" in refused.failure
    assert audit.writes() == [] and owned(dyn, namespace) == set()


@pytest.mark.parametrize("variables, message", [
    ({"thresholds": {"cpu": 60, "memory": 20}, "target_thresholds": {"cpu": 50, "memory": 50}},
     "thresholds.cpu (60) is above targetThresholds.cpu (50)"),
    ({"thresholds": {"cpu": 20}, "target_thresholds": {"cpu": 50, "memory": 50}},
     "thresholds and targetThresholds must name the same resources"),
    ({"thresholds": {"cpu": -1}, "target_thresholds": {"cpu": 120}}, "percentages must be numbers from 0 to 100"),
    ({"metrics_source": "prometheus", "prometheus_query": "up"}, "the Prometheus metrics source needs a URL"),
    ({"metrics_source": "prometheus", "prometheus_url": "http://prometheus:9090", "prometheus_query": "up",
      "thresholds": {"cpu": 20}, "target_thresholds": {"cpu": 50}}, "exactly one resource, MetricResource"),
    ({"strategies": ["HighNodeUtilization"]}, "enable one of them"),
    ({"strategy_args": {"RemoveDuplicates": {}}}, "strategy arguments for 'RemoveDuplicates'"),
])
def test_bad_policy_fails_before_anything_is_written(run, dyn, namespace, variables, message):
    audit = Audit(namespace)
    bad = run(**variables)
    assert bad.failed
    assert "invalid descheduler policy" in bad.failure and message in bad.failure, bad.failure
    assert audit.writes() == []
    assert owned(dyn, namespace) == set()


def test_unknown_strategy_is_refused_by_the_argument_spec(run, dyn, namespace):
    bad = run(strategies=["RemovePodsHavingTooManyRestartz"])
    assert bad.failed and "RemovePodsHavingTooManyRestartz" in bad.failure, bad.failure
    assert owned(dyn, namespace) == set()


def test_prometheus_with_token_secret(run, api_client, dyn, core, namespace, descheduler_binary, tmp_path, cleanup):
    query = "avg by (instance) (rate(node_pressure_cpu_waiting_seconds_total[1m]))"
    variables = {"metrics_source": "prometheus", "prometheus_url": "https://prometheus.monitoring.svc:9091",
                 "prometheus_query": query, "prometheus_token_secret": "prom-token",
                 "thresholds": {"MetricResource": 10}, "target_thresholds": {"MetricResource": 30}}
    audit = Audit(namespace)
    missing = run(**variables)
    assert missing.failed, missing
    assert f"The Prometheus token Secret {namespace}/prom-token does not exist" in missing.failure, missing.failure
    assert audit.writes() == []

    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="prom-token"), data={
        "prometheusAuthToken": base64.b64encode(b"not-a-real-token").decode()}))
    result = run(**variables)
    assert not result.failed, result.failure
    assert "not-a-real-token" not in result.stdout  # the token exists now: no output shows it
    pol = policy(core, namespace)
    assert pol["metricsProviders"] == [{"source": "Prometheus", "prometheus": {
        "url": "https://prometheus.monitoring.svc:9091",
        "authToken": {"secretReference": {"name": "prom-token", "namespace": namespace}}}}]
    lnu = [c["args"] for c in pol["profiles"][0]["pluginConfig"] if c["name"] == "LowNodeUtilization"][0]
    assert lnu["metricsUtilization"] == {"source": "Prometheus", "prometheus": {"query": query}}
    role = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="Role").get(
        name=f"{NAME}-prometheus-token", namespace=namespace).to_dict()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]
    # Its informer lists every Secret of the namespace: the namespace holds its token alone, and no other.
    sa = f"system:serviceaccount:{namespace}:{NAME}"
    assert may(dyn.client, sa, "list", "secrets", namespace)
    assert not may(dyn.client, sa, "list", "secrets", "kube-system")
    assert not may(dyn.client, sa, "get", "secrets", "default", "any")
    assert [s.metadata.name for s in core.list_namespaced_secret(namespace).items] == ["prom-token"]
    assert not [m for m in result.debug_messages if "may read them all" in m]
    # The real descheduler, as the ServiceAccount, reads its token through that access (and nothing is forbidden).
    args = workload(dyn, namespace)["spec"]["template"]["spec"]["containers"][0]["args"]
    policy_text = core.read_namespaced_config_map(f"{NAME}-policy", namespace).data["policy.yaml"]
    kubeconfig = token_kubeconfig(api_client, core, namespace, NAME, tmp_path / "sa.kubeconfig")
    cmd = descheduler_command(descheduler_binary, args, policy_text, kubeconfig, tmp_path, keep_interval=True)
    log = run_descheduler_loop(cmd, tmp_path, lambda text: "authentication secret token updated" in text, timeout=90)
    assert "forbidden" not in log.lower(), log[-4000:]
    # Another Secret there is one the descheduler may read: said, naming it.
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="app-credentials"),
                                                             string_data={"password": "not-a-real-password"}))
    shared = run(**variables)
    assert not shared.failed and shared.changed == 0, shared.failure
    [warning] = [m for m in shared.debug_messages if "may read them all" in m]
    assert f"namespace {namespace}, which also holds app-credentials" in warning, warning
    assert "not-a-real-password" not in shared.stdout

    # Back to requests: the Secret access goes.
    plain = run()
    assert not plain.failed, plain.failure
    assert ("Role", namespace, f"{NAME}-prometheus-token") not in owned(dyn, namespace)


def may(api_client, user, verb, resource, namespace, name=None):
    """What the API server's authorizer says the user may do (a SubjectAccessReview)."""
    review = client.AuthorizationV1Api(api_client).create_subject_access_review(client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(user=user, groups=["system:serviceaccounts"],
                                              resource_attributes=client.V1ResourceAttributes(
                                                  verb=verb, resource=resource, namespace=namespace, name=name))))
    return review.status.allowed


def test_its_own_namespace_is_made_and_a_second_descheduler_of_the_name_is_refused(run, dyn, core, namespace):
    own = "vmsched-descheduler"  # the default: a namespace of the descheduler's own, not kube-system
    name = "kubevirt-descheduler-" + namespace[2:]
    try:
        audit = Audit(own)
        check = run(check=True, namespace=None, name=name, dry_run=True, dry_run_preview=False)
        assert not check.failed, check.failure
        assert any(f"namespace {own} would be created" in m for m in check.debug_messages), check.debug_messages
        assert audit.writes() == []
        assert own not in [n.metadata.name for n in core.list_namespace().items]

        first = run(namespace=None, name=name, dry_run=True, dry_run_preview=False)
        assert not first.failed, first.failure
        assert core.read_namespace(own).metadata.labels["app.kubernetes.io/managed-by"] == "vmsched.kubevirt"
        assert workload(dyn, own, name=name)["metadata"]["name"] == name
        again = run(namespace=None, name=name, dry_run=True, dry_run_preview=False)
        assert not again.failed and again.changed == 0, again.failure

        # Two deschedulers of one name would each evict up to its own limits: a second one is refused first.
        audit = Audit(namespace)
        elsewhere = run(name=name, dry_run=True, dry_run_preview=False)
        assert elsewhere.failed
        assert f"{name} already runs in namespace {own}" in elsewhere.failure, elsewhere.failure
        assert audit.writes() == []
    finally:
        run(state="absent", namespace=None, name=name)
        if own in [n.metadata.name for n in core.list_namespace().items]:
            core.delete_namespace(own)
    assert owned(dyn, own, name) == set()


def test_evict_all_vms_is_refused_while_an_eviction_restarts_vms(run, namespace):
    """The local KubeVirt CR sets no evictionStrategy: KubeVirt's default, None, restarts an evicted VM. A
    descheduler that may evict every VM is refused before any write, naming the setting that fixes it."""
    audit = Audit(namespace)
    refused = run(metrics_source="kubernetes_metrics", evict_all_vms=True)
    assert refused.failed and "descheduler_evict_all_vms=true" in refused.failure, refused.failure
    assert "evictionStrategy is None" in refused.failure and "LiveMigrate" in refused.failure
    assert audit.writes() == []


def test_metrics_server_source_grants_metrics_access(run, dyn, core, namespace, cleanup):
    # evict_all_vms on a cluster whose evictions restart VMs: accepted only with unsafe_eviction=allow.
    result = run(metrics_source="kubernetes_metrics", evict_all_vms=True, unsafe_eviction="allow")
    assert not result.failed, result.failure
    pol = policy(core, namespace)
    assert pol["metricsProviders"] == [{"source": "KubernetesMetrics"}]
    evictor = [c["args"] for c in pol["profiles"][0]["pluginConfig"] if c["name"] == "DefaultEvictor"][0]
    assert evictor["podProtections"] == {"defaultDisabled": ["PodsWithLocalStorage"]}
    cluster_role = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole").get(
        name=f"vmsched:{namespace}:{NAME}").to_dict()
    assert {"apiGroups": ["metrics.k8s.io"], "resources": ["nodes", "pods"], "verbs": ["get", "list"]} \
        in cluster_role["rules"]


def user_annotations(metadata):
    """Annotations other than KubeVirt's own (virt-api's VM mutator adds kubevirt.io/pci-topology-version)."""
    return {k: v for k, v in (metadata.get("annotations") or {}).items() if not k.startswith("kubevirt.io/")}


def test_opt_in_vms(run, api_client, namespace, cleanup):
    custom = client.CustomObjectsApi(api_client)
    for name, tier in (("web", "web"), ("db", "db"), ("cache", "web")):
        custom.create_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name, "labels": {"tier": tier}},
            "spec": {"runStrategy": "Halted", "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "evictionStrategy": "LiveMigrate",
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"}, "devices": {}}}}}})
    audit = Audit(namespace)
    missing = run(opt_in_vms=[{"name": "web", "namespace": namespace}, {"name": "nope", "namespace": namespace}])
    assert missing.failed
    assert f"VMs to opt in to eviction do not exist: {namespace}/nope" == missing.failure, missing.failure
    # Checked before anything is applied. (virt-controller writes the VM's status: not ours.)
    assert [w for w in audit.writes() if w[1] != "virtualmachines"] == []
    vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", "web")
    assert not user_annotations(vm["spec"]["template"]["metadata"])
    assert sorted(vm["metadata"]["name"] for vm in custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachines")["items"]) == ["cache", "db", "web"]  # none for the typo

    def template(name):
        return custom.get_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", name)[
            "spec"]["template"]["metadata"]

    # By name and by label selector, through vm_placement.
    opt_in = {"opt_in_vms": [{"name": "web", "namespace": namespace}],
              "opt_in_vm_selectors": [{"namespace": namespace, "label_selectors": ["tier=db"]}]}
    result = run(**opt_in)
    assert not result.failed, result.failure
    for name in ("web", "db"):
        assert user_annotations(template(name)) == {"descheduler.alpha.kubernetes.io/evict": "true"}, name
        assert template(name)["labels"] == {"app": name}
    assert not user_annotations(template("cache"))
    again = run(**opt_in)
    assert not again.failed and again.changed == 0, [n for n, r in again.results if r.get("changed")]

    # A VM written without an eviction strategy would restart when evicted (KubeVirt's default, None): refused,
    # naming it, before the role writes anything.
    custom.create_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "legacy"},
        "spec": {"runStrategy": "Halted", "template": {"metadata": {"labels": {"app": "legacy"}}, "spec": {
            "domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"}, "devices": {}}}}}})
    audit = Audit(namespace)
    unsafe = run(opt_in_vms=[{"name": "legacy", "namespace": namespace}])
    assert unsafe.failed and f"{namespace}/legacy: evictionStrategy None" in unsafe.failure, unsafe.failure
    assert audit.writes() == []
    assert not user_annotations(template("legacy"))

    audit = Audit(namespace)
    bad = run(opt_in_vm_selectors=[{"namespace": namespace, "label_selectors": ["tier in (db"]}], thresholds={
        "cpu": 10, "memory": 10, "pods": 10})
    assert bad.failed and "tier in (db" in bad.failure, bad.failure
    assert [w for w in audit.writes() if w[1] != "virtualmachines"] == []  # not even the new policy


# --- the real descheduler ------------------------------------------------------------
# Built from its Go module at the release the role picks for this cluster (through the
# collection's gobuild.py, cached by version like the control plane's binaries) and run
# here with the policy and the arguments the role applied, as the role's ServiceAccount.

DESCHEDULER_VERSION = DESCHEDULER[MINOR]
TEST_LABEL = "vmsched.kubevirt.io/test-descheduler"
EVICT = "descheduler.alpha.kubernetes.io/evict"


@pytest.fixture(scope="session")
def descheduler_binary():
    return build.build_descheduler(DESCHEDULER_VERSION)


@pytest.fixture
def vm_nodes(core, namespace, wait):
    """Three fake nodes of this test only (8 CPUs each), tainted so that no other test's pod lands there.

    All but the first start cordoned, so that the VMs start on the first one.
    """
    names = [f"dsch-{namespace[2:]}-{x}" for x in "abc"]
    capacity = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    for name in names:
        core.create_node(client.V1Node(
            metadata=client.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"}, labels={
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
                "kubevirt.io/schedulable": "true", TEST_LABEL: namespace}),
            spec=client.V1NodeSpec(unschedulable=name != names[0],
                                   taints=[client.V1Taint(key=TEST_LABEL, value=namespace, effect="NoSchedule")]),
            status=client.V1NodeStatus(capacity=capacity, allocatable=capacity)))
    wait(lambda: all(any(c.type == "Ready" and c.status == "True" for c in core.read_node(n).status.conditions or [])
                     for n in names), "the test's nodes Ready", timeout=60)
    yield names
    for name in names:
        core.delete_node(name)


def vm(name, nodes, namespace, opted_in):
    annotations = {"sim.vmsched.kubevirt.io/migration-seconds": "1"}
    if opted_in:
        annotations[EVICT] = "true"
    terms = [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
        "spec": {"runStrategy": "Always", "template": {
            "metadata": {"labels": {"app": name}, "annotations": annotations},
            "spec": {
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"},
                           "devices": {"interfaces": [{"name": "default", "masquerade": {}}]},
                           "resources": {"requests": {"cpu": "1"}}},
                "networks": [{"name": "default", "pod": {}}],
                "evictionStrategy": "LiveMigrate",
                "tolerations": [{"key": TEST_LABEL, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": terms}]}}}}}}}


def vmi_node(custom, namespace, name):
    try:
        vmi = custom.get_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachineinstances", name)
    except client.ApiException:
        return None
    status = vmi.get("status") or {}
    return status.get("nodeName") if status.get("phase") == "Running" else None


def descheduler_command(binary, args, policy_text, kubeconfig, workdir, keep_interval=False):
    """The role's arguments, with the policy in workdir, a kubeconfig and a free local port."""
    (workdir / "policy.yaml").write_text(policy_text)
    replaced = ("--policy-config-file", "--bind-address", "--secure-port") + (
        () if keep_interval else ("--descheduling-interval",))
    keep = [a for a in args if not a.startswith(replaced)]
    return [str(binary), f"--policy-config-file={workdir / 'policy.yaml'}", f"--kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", *keep]


def run_descheduler(binary, args, policy_text, kubeconfig, workdir):
    """One descheduling pass (no --descheduling-interval) with the role's arguments, on a free local port."""
    cmd = descheduler_command(binary, args, policy_text, kubeconfig, workdir)
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=120, check=False)
    log = proc.stdout + proc.stderr
    (workdir / f"descheduler-{len(list(workdir.glob('descheduler-*.log')))}.log").write_text(log)
    assert proc.returncode == 0, f"descheduler exited with {proc.returncode}:\n{log[-4000:]}"
    assert "forbidden" not in log.lower(), log[-4000:]
    return log


OPTED, KEPT = ["opt-a", "opt-b", "opt-c"], ["keep-a", "keep-b"]
# Only the test's nodes: the first at 5/8 CPUs requested, the other two empty.
LEVELS = {"thresholds": {"cpu": 10, "memory": 10, "pods": 10},
          "target_thresholds": {"cpu": 20, "memory": 20, "pods": 20}}


def overloaded_node(custom, core, namespace, wait, vm_nodes):
    """Five running VMs (three opted in) on the first of the test's nodes, the other two empty and schedulable.

    Returns the names of their launcher pods.
    """
    for name in OPTED + KEPT:
        custom.create_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines",
                                               vm(name, vm_nodes, namespace, name in OPTED))
    placed = wait(lambda: (p := {n: vmi_node(custom, namespace, n) for n in OPTED + KEPT}) and all(p.values()) and p,
                  "the five VMs running", timeout=90)
    assert set(placed.values()) == {vm_nodes[0]}, f"premise: all VMs on {vm_nodes[0]}, got {placed}"
    for name in vm_nodes[1:]:
        core.patch_node(name, {"spec": {"unschedulable": False}})
    return {p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items}


@pytest.mark.usefixtures("kubevirt", "cleanup")
def test_real_descheduler_migrates_only_opted_in_vms_off_the_overloaded_node(
        run, api_client, core, dyn, namespace, wait, vm_nodes, descheduler_binary, tmp_path):
    custom = client.CustomObjectsApi(api_client)
    opted, kept = OPTED, KEPT
    launchers = overloaded_node(custom, core, namespace, wait, vm_nodes)

    # Three opted-in VMs could go, the per-node limit (KubeVirt's parallelOutboundMigrationsPerNode, 2) lets two.
    selector = f"{TEST_LABEL}={namespace}"

    # The opted-in VMs are evicted, KubeVirt's eviction webhook answers 429 and migrates them.
    real = run(node_selector=selector, **LEVELS)
    assert not real.failed, real.failure
    kubeconfig = token_kubeconfig(api_client, core, namespace, NAME, tmp_path / "sa.kubeconfig")
    dep = workload(dyn, namespace)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--feature-gates=EvictionsInBackground=true" in args and "--dry-run" not in args
    log = run_descheduler(descheduler_binary, args, core.read_namespaced_config_map(
        f"{NAME}-policy", namespace).data["policy.yaml"], kubeconfig, tmp_path)
    assumed = sorted(line.split('pod="', 1)[1].split('"', 1)[0] for line in log.splitlines()
                     if "Eviction in background assumed" in line)
    assert len(assumed) == 2 and all(f"{namespace}/virt-launcher-opt-" in pod for pod in assumed), (
        assumed, log[-4000:])
    migrations = wait(lambda: (m := custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstancemigrations")["items"]) and len(m) >= 2
        and all((x.get("status") or {}).get("phase") == "Succeeded" for x in m) and m,
        "two evacuation migrations Succeeded", timeout=90)
    migrated = sorted(m["spec"]["vmiName"] for m in migrations)
    assert len(migrated) == 2 and set(migrated) < set(opted), migrated
    for name in migrated:
        assert vmi_node(custom, namespace, name) in vm_nodes[1:]
    # The rest never moved: same node, same launcher pods.
    assert {n: vmi_node(custom, namespace, n) for n in opted + kept if n not in migrated} == {
        n: vm_nodes[0] for n in opted + kept if n not in migrated}
    now = {p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector="kubevirt.io=virt-launcher").items}
    assert {p for p in launchers if not any(f"-{m}-" in p for m in migrated)} <= now


def run_descheduler_loop(cmd, workdir, enough, timeout=120):
    """Run a looping descheduler until enough(log) holds; stop it and return the log."""
    log_path = workdir / f"descheduler-{len(list(workdir.glob('descheduler-*.log')))}.log"
    with log_path.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + timeout
            while not enough(log_path.read_text()):
                assert proc.poll() is None, f"descheduler exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
                assert time.monotonic() < deadline, f"not enough after {timeout}s:\n{log_path.read_text()[-4000:]}"
                time.sleep(0.5)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return log_path.read_text()


class JobWatch(threading.Thread):
    """Remembers the first version seen of a Job that exists only while the role runs."""

    def __init__(self, api_client, namespace, name):
        super().__init__(daemon=True)
        self.batch = client.BatchV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.job = None
        self.stop = threading.Event()

    def run(self):
        while self.job is None and not self.stop.is_set():
            try:
                self.job = self.batch.read_namespaced_job(self.name, self.namespace).to_dict()
            except client.ApiException:
                time.sleep(0.2)


@pytest.mark.usefixtures("kubevirt", "cleanup")
def test_dry_run_preview_predicts_the_evictions_of_the_opted_in_vms_and_makes_none(
        run, api_client, core, dyn, namespace, wait, vm_nodes, descheduler_binary, tmp_path):
    custom = client.CustomObjectsApi(api_client)
    launchers = overloaded_node(custom, core, namespace, wait, vm_nodes)
    # A per-node limit of 3 lets every opted-in VM go: the prediction must name exactly those three.
    variables = dict(LEVELS, node_selector=f"{TEST_LABEL}={namespace}", max_evictions_per_node=3, dry_run=True,
                     dry_run_timeout=8)

    # The role starts its preview Job. Under KWOK the Job's pod never runs nor serves a log: the role
    # waits dry_run_timeout, fails saying so, and removes the Job.
    watch = JobWatch(api_client, namespace, f"{NAME}-preview")
    watch.start()
    result = run(**variables)
    watch.stop.set()
    watch.join(5)
    assert result.failed
    assert (f"The dry-run preview Job {namespace}/{NAME}-preview did not log two descheduling cycles within 8s"
            in result.failure), result.failure
    assert watch.job is not None, "the role started no preview Job"
    with pytest.raises(client.ApiException) as gone:
        client.BatchV1Api(api_client).read_namespaced_job(f"{NAME}-preview", namespace)
    assert gone.value.status == 404
    job_spec = watch.job["spec"]
    assert job_spec["backoff_limit"] == 0 and job_spec["active_deadline_seconds"] == 68
    args = job_spec["template"]["spec"]["containers"][0]["args"]
    assert "--dry-run" in args and "--descheduling-interval=10s" in args, args
    deployment_args = workload(dyn, namespace)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dry-run" in deployment_args

    # The Job's pod, run here: the real descheduler with the Job's arguments, the policy read back from
    # the ConfigMap and the role's ServiceAccount, until two cycles have ended.
    filters = FilterModule().filters()
    kubeconfig = token_kubeconfig(api_client, core, namespace, NAME, tmp_path / "sa.kubeconfig")
    cmd = descheduler_command(descheduler_binary, args, core.read_namespaced_config_map(
        f"{NAME}-policy", namespace).data["policy.yaml"], kubeconfig, tmp_path, keep_interval=True)
    log = run_descheduler_loop(cmd, tmp_path, lambda text: len(filters["descheduler_dry_run_cycles"](text)) >= 2)
    assert "forbidden" not in log.lower(), log[-4000:]
    assert "failed to convert Descheduler minor version" not in log  # the binary is stamped like upstream's

    cycles = filters["descheduler_dry_run_cycles"](log)
    last = cycles[-1]
    assert not last["skipped"] and last["limited"] == 0, (last, log[-4000:])
    evictions = filters["descheduler_dry_run_evictions"](log)
    assert sorted((e["namespace"], e["vm"], e["node"], e["strategy"]) for e in evictions) == [
        (namespace, name, vm_nodes[0], "LowNodeUtilization") for name in OPTED], (evictions, log[-4000:])
    assert {e["pod"] for e in evictions} == {p for p in launchers if p.startswith("virt-launcher-opt-")}
    assert last["total_evicted"] == 3

    # The role's report of the preview (its tasks after reading the Job's log), on this log.
    report = run(test_tasks_from="preview_report", _preview_log={"log": log})
    assert not report.failed, report.failure
    fact = report.result("Keep the evictions of the last cycle")["ansible_facts"]["descheduler_preview"]
    assert fact == dict(last, cycles=len(cycles))
    message = report.result("Show the evictions the descheduler would make")["msg"]
    assert message.startswith("The descheduler would evict 3 pod(s): "), message
    for e in evictions:
        assert f"{namespace}/{e['pod']} on {vm_nodes[0]} (LowNodeUtilization, VM {e['vm']})" in message, message

    # Nothing was evicted for real: no migration, every VM where it was, the same launcher pods.
    assert custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachineinstancemigrations")["items"] == []
    assert {n: vmi_node(custom, namespace, n) for n in OPTED + KEPT} == {n: vm_nodes[0] for n in OPTED + KEPT}
    assert {p.metadata.name for p in core.list_namespaced_pod(
        namespace, label_selector="kubevirt.io=virt-launcher").items} == launchers
