# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The secondary_scheduler role against the local control plane.

KWOK makes the role's Deployment pods Ready without running anything, so the
configuration and the RBAC are proven by starting the real kube-scheduler binary
of the control plane's version here, with the configuration read back from the
applied ConfigMap and a token of the role's ServiceAccount (not admin).

A configuration holding the metric provider's token goes into a Secret instead, and the
token is printed nowhere, not even at -vvv with --diff (issue 31).

Every test uses its own namespace; cluster-scoped objects the role creates carry
the namespace in their names, so parallel runs do not collide.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from .audit import Audit
from .conftest import delete_labelled
# real_scheduler is a fixture: imported so that pytest finds it for this module's tests.
from .local_scheduler import real_scheduler, token_kubeconfig  # noqa: F401  pylint: disable=unused-import
from .playbook import BIN, run_playbook

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "secondary_scheduler.yml"
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import build  # noqa: E402  pylint: disable=wrong-import-position

K8S = build.read_versions()["KUBERNETES_VERSION"]
IMAGE = f"registry.k8s.io/kube-scheduler:{K8S}"  # any image works under KWOK
MANAGED_BY = "app.kubernetes.io/managed-by=vmsched.kubevirt.secondary_scheduler"

# (api_version, kind, namespace: None = cluster-scoped, "" = the test namespace)
KINDS = [
    ("apps/v1", "Deployment", ""),
    ("policy/v1", "PodDisruptionBudget", ""),
    ("v1", "ConfigMap", ""),
    ("v1", "Secret", ""),
    ("v1", "ServiceAccount", ""),
    ("rbac.authorization.k8s.io/v1", "Role", ""),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", ""),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "kube-system"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", None),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None),
]


@pytest.fixture
def run(kubeconfig, namespace):
    """run(replicas=2, ...) runs the role in the test namespace with secondary_scheduler_<key> variables."""

    def _run(check=False, diff=False, env=None, **variables):
        values = {"namespace": namespace, "image": IMAGE, "rollout_timeout": 60}
        values.update(variables)  # namespace=None: the role's default
        values = {key: value for key, value in values.items() if value is not None}
        return run_playbook(PLAYBOOK, {f"secondary_scheduler_{k}": v for k, v in values.items()}, kubeconfig,
                            check=check, diff=diff, env=env)

    return _run


@pytest.fixture
def cleanup(dyn, namespace):
    """Make sure the objects outside the test namespace go even when a test fails half-way."""
    names = []
    yield names
    for name in names or ["kubevirt-scheduler"]:
        delete_labelled(dyn, owner_selector(namespace, name), [(a, k, ns) for a, k, ns in KINDS if ns != ""])


def owner_selector(namespace, name="kubevirt-scheduler"):
    """The labels of every object of this scheduler."""
    return f"{MANAGED_BY},app.kubernetes.io/instance={name},vmsched.kubevirt.io/scheduler-namespace={namespace}"


def owned(dyn, namespace, name="kubevirt-scheduler"):
    """Every object carrying this scheduler's labels, as (kind, namespace, name)."""
    selector, found = owner_selector(namespace, name), set()
    for api_version, kind, ns in KINDS:
        resource = dyn.resources.get(api_version=api_version, kind=kind)
        where = namespace if ns == "" else ns
        items = resource.get(namespace=where, label_selector=selector).items if where else \
            resource.get(label_selector=selector).items
        found.update((kind, item.metadata.namespace, item.metadata.name) for item in items)
    return found


def resource_versions(dyn, namespace, name="kubevirt-scheduler"):
    """resourceVersion of every object the role owns: unchanged means nothing was written."""
    result = {}
    for kind, ns, obj_name in owned(dyn, namespace, name):
        api_version = next(a for a, k, _n in KINDS if k == kind)
        resource = dyn.resources.get(api_version=api_version, kind=kind)
        obj = resource.get(name=obj_name, namespace=ns) if ns else resource.get(name=obj_name)
        result[(kind, ns, obj_name)] = obj.metadata.resourceVersion
    return result


def deployment(dyn, namespace, name="kubevirt-scheduler"):
    return dyn.resources.get(api_version="apps/v1", kind="Deployment").get(name=name, namespace=namespace).to_dict()


def config_volume(dep):
    return [v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"][0]


def config_maps(core, namespace):
    return sorted(cm.metadata.name for cm in core.list_namespaced_config_map(namespace, label_selector=MANAGED_BY).items)


def may(api_client, user, verb, resource, namespace, name=None, group=""):
    """What the API server's authorizer says the user may do (a SubjectAccessReview)."""
    review = client.AuthorizationV1Api(api_client).create_subject_access_review(client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(user=user, groups=["system:serviceaccounts"],
                                              resource_attributes=client.V1ResourceAttributes(
                                                  verb=verb, resource=resource, group=group, namespace=namespace,
                                                  name=name))))
    return review.status.allowed


def test_converge_idempotent_check_mode_and_absent(run, api_client, dyn, core, namespace, cleanup):
    # What earlier releases left: the ServiceAccount bound to system:kube-scheduler itself.
    rbac = client.RbacAuthorizationV1Api(api_client)
    earlier = f"vmsched:{namespace}:kubevirt-scheduler:kube-scheduler"
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=earlier),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                  name="system:kube-scheduler"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="kubevirt-scheduler", namespace=namespace)]))
    first = run(replicas=2)
    assert not first.failed, first.failure
    assert first.changed > 0
    objects = owned(dyn, namespace)
    kinds = sorted(kind for kind, _ns, _name in objects)
    assert kinds == sorted(["ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding",
                            "ConfigMap", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "RoleBinding",
                            "ServiceAccount"]), objects

    dep = deployment(dyn, namespace)
    cm = core.read_namespaced_config_map(config_volume(dep), namespace)
    config = yaml.safe_load(cm.data["config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["leaderElection"] == {"leaderElect": True, "resourceLock": "leases",
                                        "resourceName": "kubevirt-scheduler", "resourceNamespace": namespace}
    assert config["profiles"] == [{"schedulerName": "kubevirt-scheduler",
                                   "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}}}]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert dep["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    lease_role = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="Role").get(
        name="kubevirt-scheduler-leader-election", namespace=namespace).to_dict()
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kubevirt-scheduler"],
            "verbs": ["get", "list", "watch", "update"]} in lease_role["rules"]
    cluster_role = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole").get(
        name=f"vmsched:{namespace}:kubevirt-scheduler").to_dict()
    groups = [group for rule in cluster_role["rules"] for group in rule["apiGroups"]]
    assert "metrics.k8s.io" not in groups
    # The cluster's own system:kube-scheduler rules (storageclasses added), without its leader-election grants.
    upstream = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole").get(
        name="system:kube-scheduler").to_dict()["rules"]
    kept = [rule for rule in upstream if "coordination.k8s.io" not in rule["apiGroups"]]
    assert [rule for rule in cluster_role["rules"] if rule in kept] == kept
    assert "coordination.k8s.io" not in groups and {"storage.k8s.io"} <= set(groups)
    # Its own lease only: not the default scheduler's (which system:kube-scheduler lets any holder take over).
    assert earlier not in [b.metadata.name for b in rbac.list_cluster_role_binding().items]
    sa = f"system:serviceaccount:{namespace}:kubevirt-scheduler"
    assert may(api_client, sa, "update", "leases", "kube-system", "kube-scheduler", group="coordination.k8s.io") is False
    assert may(api_client, sa, "create", "leases", "kube-system", group="coordination.k8s.io") is False
    assert may(api_client, sa, "update", "leases", namespace, "kubevirt-scheduler", group="coordination.k8s.io")
    assert may(api_client, sa, "create", "bindings", "default")

    # Server-side apply sends its (no-op) patches again: nothing may change on the server.
    versions = resource_versions(dyn, namespace)
    second = run(replicas=2)
    assert not second.failed, second.failure
    assert second.changed == 0, [name for name, result in second.results if result.get("changed")]
    assert resource_versions(dyn, namespace) == versions

    # Check mode with real changes to make (a new configuration, one replica): nothing is written.
    audit = Audit(namespace)
    check = run(check=True, replicas=1, verbosity=4,
                plugin_config=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}])
    assert not check.failed, check.failure
    assert check.changed > 0
    assert audit.writes() == []
    assert owned(dyn, namespace) == objects
    assert deployment(dyn, namespace)["metadata"]["generation"] == dep["metadata"]["generation"]

    # absent removes what the role made and nothing else, even look-alikes.
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name="kubevirt-scheduler-config-mine", labels={"app.kubernetes.io/instance": "kubevirt-scheduler"})))
    gone = run(state="absent")
    assert not gone.failed, gone.failure
    assert owned(dyn, namespace) == set()
    assert core.read_namespaced_config_map("kubevirt-scheduler-config-mine", namespace)
    assert core.read_namespaced_service_account("default", namespace)
    again = run(state="absent")
    assert not again.failed and again.changed == 0


def test_its_own_namespace_is_made_and_a_second_scheduler_of_the_name_is_refused(run, dyn, core, namespace):
    own = "vmsched-scheduler"  # the default: a namespace of the scheduler's own, not kube-system
    name = "kubevirt-scheduler-" + namespace[2:]  # a schedulerName is cluster-wide: one of this test's own
    try:
        # Check mode on a cluster without it: nothing written, and said what a run would do.
        audit = Audit(own)
        check = run(check=True, namespace=None, name=name)
        assert not check.failed, check.failure
        assert check.changed > 0
        assert any(f"namespace {own} would be created" in m for m in check.debug_messages), check.debug_messages
        assert audit.writes() == []
        assert own not in [n.metadata.name for n in core.list_namespace().items]

        first = run(namespace=None, name=name)
        assert not first.failed, first.failure
        made = core.read_namespace(own)
        assert made.metadata.labels["app.kubernetes.io/managed-by"] == "vmsched.kubevirt"
        assert deployment(dyn, own, name)["spec"]["replicas"] == 1
        assert not [m for m in first.debug_messages if m.startswith("WARNING") and "ServiceAccount" in m]
        again = run(namespace=None, name=name)
        assert not again.failed and again.changed == 0, again.failure

        # Two schedulers of one name would both bind its pods: a second one elsewhere is refused before any write.
        audit = Audit(namespace)
        elsewhere = run(namespace=namespace, name=name)
        assert elsewhere.failed
        assert f"{name} already runs in namespace {own}" in elsewhere.failure, elsewhere.failure
        assert audit.writes() == []
        assert owned(dyn, namespace, name) == set()
    finally:
        run(state="absent", namespace=None, name=name)
        # The role leaves the namespace (other things may live there by now); the test removes its own.
        if own in [n.metadata.name for n in core.list_namespace().items]:
            core.delete_namespace(own)
    assert owned(dyn, own, name) == set()


def test_a_namespace_that_holds_other_workloads_is_warned_about(run, core, namespace, cleanup):
    def warnings(result):
        return [m for m in result.debug_messages if m.startswith("WARNING") and "ServiceAccount" in m]

    alone = run()
    assert not alone.failed, alone.failure
    assert warnings(alone) == []
    # Whoever may create pods in the namespace may run them as the scheduler's ServiceAccount.
    core.create_namespaced_pod(namespace, pod("other-app", "no-such-scheduler"))
    shared = run()
    assert not shared.failed, shared.failure
    assert shared.changed == 0
    [warning] = warnings(shared)
    assert f"namespace {namespace} also runs pods of others (other-app)" in warning, warning
    assert "bind any pod" in warning


def test_a_new_configuration_keeps_the_previous_one_and_a_rerun_changes_nothing(run, dyn, core, namespace, cleanup):
    first = run()
    assert not first.failed, first.failure
    old_config = config_volume(deployment(dyn, namespace))
    most = [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}]
    new = run(plugin_config=most)
    assert not new.failed and new.changed > 0, new.failure
    new_config = config_volume(deployment(dyn, namespace))
    assert config_maps(core, namespace) == sorted([old_config, new_config])  # the rollback ReplicaSet's stays

    versions = resource_versions(dyn, namespace)
    again = run(plugin_config=most)
    assert not again.failed, again.failure
    assert again.changed == 0, [name for name, result in again.results if result.get("changed")]
    assert config_maps(core, namespace) == sorted([old_config, new_config])
    assert resource_versions(dyn, namespace) == versions

    # A third configuration: the one before the previous goes.
    third = run(plugin_config=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "LeastAllocated"}}}])
    assert not third.failed, third.failure
    third_config = config_volume(deployment(dyn, namespace))
    assert third_config not in (old_config, new_config)
    assert config_maps(core, namespace) == sorted([new_config, third_config])


def test_the_disruption_budget_follows_the_replicas(run, dyn, namespace, cleanup):
    def budgets():
        return sorted(name for kind, _ns, name in owned(dyn, namespace) if kind == "PodDisruptionBudget")
    two = run(replicas=2)
    assert not two.failed, two.failure
    assert budgets() == ["kubevirt-scheduler"]
    one = run(replicas=1)  # minAvailable 1 on one replica would block every drain of its node
    assert not one.failed and one.changed > 0, one.failure
    assert budgets() == []
    again = run(replicas=1)
    assert not again.failed and again.changed == 0, again.failure
    back = run(replicas=3)
    assert not back.failed, back.failure
    assert budgets() == ["kubevirt-scheduler"]


# --- the real kube-scheduler ---------------------------------------------------------


def pod(name, scheduler_name):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(scheduler_name=scheduler_name, containers=[client.V1Container(
            name="c", image="quay.io/kubevirt/virt-launcher:v1.6.6",
            resources=client.V1ResourceRequirements(requests={"cpu": "100m", "memory": "128Mi"}))]))


def test_real_scheduler_runs_the_applied_config_as_the_service_account(
        run, api_client, core, dyn, namespace, wait, real_scheduler, tmp_path, cleanup):
    # A scheduler name of its own: a schedulerName is cluster-wide, and other runs may use the default.
    name = "kubevirt-scheduler-" + namespace[2:]
    cleanup.append(name)
    result = run(name=name, replicas=2)
    assert not result.failed, result.failure
    dep = deployment(dyn, namespace, name)
    config = yaml.safe_load(core.read_namespaced_config_map(config_volume(dep), namespace).data["config.yaml"])
    assert config["leaderElection"]["leaderElect"] is True

    kubeconfig = token_kubeconfig(api_client, core, namespace, name, tmp_path / "sa.kubeconfig")
    sched = real_scheduler(config, kubeconfig)
    wait(sched.healthy, "the real kube-scheduler's /healthz", timeout=60)
    # Leader election on its own lease, allowed by the role's Role.
    lease = wait(lambda: client.CoordinationV1Api(api_client).read_namespaced_lease(name, namespace),
                 f"lease {namespace}/{name}", timeout=60, exceptions=(client.ApiException,))
    assert lease.spec.holder_identity

    core.create_namespaced_pod(namespace, pod("unknown", "no-such-scheduler"))
    core.create_namespaced_pod(namespace, pod("mine", name))
    bound = wait(lambda: core.read_namespaced_pod("mine", namespace).spec.node_name, "pod bound by the scheduler",
                 timeout=60)
    assert bound in {"node01", "node02", "node03", "node04"}  # node05 tainted, node06 cordoned
    # kube-scheduler reports as its profile's schedulerName: this scheduler bound it.
    scheduled = wait(lambda: [e for e in client.EventsV1Api(api_client).list_namespaced_event(
        namespace, field_selector="regarding.name=mine").items if e.reason == "Scheduled"],
        "the Scheduled event of pod mine", timeout=30)
    assert scheduled[0].reporting_controller == name, scheduled[0]
    time.sleep(3)
    unknown = core.read_namespaced_pod("unknown", namespace)
    assert unknown.spec.node_name is None and unknown.status.phase == "Pending"
    # The service account, not admin, did the work: no forbidden errors in its log.
    assert "forbidden" not in sched.tail().lower(), sched.tail()


# --- broken configurations and failed rollouts ----------------------------------------


def test_broken_config_fails_before_any_write(run, dyn, core, namespace, cleanup):
    good = run()
    assert not good.failed, good.failure
    before = deployment(dyn, namespace)
    cms = config_maps(core, namespace)

    audit = Audit(namespace)
    bad = run(profiles=[{"schedulerName": "extra", "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}])
    assert bad.failed
    assert "unknown plugin 'NoSuchPlugin'" in bad.failure, bad.failure
    wrong_api = run(config_api_version="kubescheduler.config.k8s.io/v1beta3")
    assert wrong_api.failed
    assert "v1beta3" in wrong_api.failure and "not accepted" in wrong_api.failure, wrong_api.failure
    bad_point = run(profiles=[{"schedulerName": "extra", "plugins": {"scoring": {"enabled": [{"name": "NodeAffinity"}]}}}])
    assert bad_point.failed and "unknown extension point 'scoring'" in bad_point.failure, bad_point.failure
    load_aware = run(profile="load_aware")
    assert load_aware.failed and "scheduler-plugins" in load_aware.failure, load_aware.failure
    assert audit.writes() == []

    after = deployment(dyn, namespace)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert config_volume(after) == config_volume(before)
    assert config_maps(core, namespace) == cms


def test_rollout_that_never_gets_ready_restores_the_previous_scheduler(run, dyn, core, namespace, wait, cleanup):
    good = run(replicas=2)
    assert not good.failed, good.failure
    before = deployment(dyn, namespace)
    old_config = config_volume(before)

    # A valid new configuration, on pods that cannot be scheduled: they never become ready.
    bad = run(replicas=2, rollout_timeout=8, node_selector={"vmsched.kubevirt.io/no-such-node": "true"},
              plugin_config=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}])
    assert bad.failed
    assert "was restored" in bad.failure, bad.failure
    assert "didn't match Pod's node affinity/selector" in bad.failure, bad.failure  # the pod's own error

    after = deployment(dyn, namespace)
    assert config_volume(after) == old_config
    assert "nodeSelector" not in after["spec"]["template"]["spec"]
    assert config_maps(core, namespace) == [old_config]
    wait(lambda: (d := deployment(dyn, namespace))["status"].get("readyReplicas") == 2
         and d["status"].get("updatedReplicas") == 2 and d["status"].get("replicas") == 2,
         "the previous scheduler back at two ready replicas", timeout=60)
    again = run(replicas=2)
    assert not again.failed and again.changed == 0, again.failure


def test_load_aware_needs_and_gets_metrics_access(run, dyn, core, namespace, cleanup):
    result = run(profile="load_aware", flavor="scheduler-plugins",
                 load_aware_plugin="LoadVariationRiskBalancing", load_aware_args={"safeVarianceMargin": 2})
    assert not result.failed, result.failure
    dep = deployment(dyn, namespace)
    assert dep["spec"]["template"]["spec"]["containers"][0]["command"] == ["/bin/kube-scheduler"]
    config = yaml.safe_load(core.read_namespaced_config_map(config_volume(dep), namespace).data["config.yaml"])
    profile = config["profiles"][0]
    assert profile["plugins"]["score"]["enabled"] == [{"name": "LoadVariationRiskBalancing"}]
    args = profile["pluginConfig"][0]["args"]
    assert args["safeVarianceMargin"] == 2 and args["metricProvider"] == {"type": "KubernetesMetricsServer"}
    cluster_role = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole").get(
        name=f"vmsched:{namespace}:kubevirt-scheduler").to_dict()
    assert {"apiGroups": ["metrics.k8s.io"], "resources": ["nodes", "pods"],
            "verbs": ["get", "list", "watch"]} in cluster_role["rules"]


# --- the metric provider's token (issue 31: secrets stay secret) ----------------------------------------------------

# -vvv with the JSON callback: verbose lines go to stderr, so the JSON on stdout stays parseable; both are searched.
VVV = {"ANSIBLE_VERBOSITY": "3", "ANSIBLE_VERBOSE_TO_STDERR": "1"}


def token_variables(token):
    """The load-aware profile with a Prometheus provider that needs a token (KWOK runs no scheduler: any address)."""
    return {"profile": "load_aware", "flavor": "scheduler-plugins",
            "metric_provider": {"type": "Prometheus", "address": "http://prometheus.monitoring.svc:9090",
                                "token": token}}


def run_as_shown(kubeconfig, namespace, **variables) -> subprocess.CompletedProcess:
    """ansible-playbook as a user looking closely runs it: `-vvv --diff` with the default callback (readable
    results, the diffs of changes, module arguments at -vvv). Everything it prints is in stdout and stderr."""
    values = {"namespace": namespace, "image": IMAGE, "rollout_timeout": 60}
    values.update(variables)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as extra:
        json.dump({f"secondary_scheduler_{k}": v for k, v in values.items()}, extra)
    collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(ROOT / ".build" / "collections")
    env = dict(os.environ, KUBECONFIG=str(kubeconfig.resolve()), ANSIBLE_COLLECTIONS_PATH=collections,
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    try:
        return subprocess.run([str(BIN / "ansible-playbook"), str(PLAYBOOK), "-e", f"@{extra.name}", "-vvv", "--diff"],
                              cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    finally:
        os.unlink(extra.name)


def config_source(dep):
    """The config volume's source: ("ConfigMap" or "Secret", name)."""
    volume = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"][0]
    if "secret" in volume:
        assert "configMap" not in volume, volume
        return "Secret", volume["secret"]["secretName"]
    return "ConfigMap", volume["configMap"]["name"]


def config_secrets(core, namespace):
    return sorted(s.metadata.name for s in core.list_namespaced_secret(namespace, label_selector=MANAGED_BY).items)


def config_maps_holding(core, text):
    """Every ConfigMap of the cluster, in any namespace, whose data, binary data or metadata contains the text."""
    found = []
    for cm in core.list_config_map_for_all_namespaces().items:
        content = json.dumps([cm.data, {k: base64.b64decode(v).decode(errors="replace")
                                        for k, v in (cm.binary_data or {}).items()},
                              cm.metadata.annotations, cm.metadata.labels], default=str)
        if text in content:
            found.append(f"{cm.metadata.namespace}/{cm.metadata.name}")
    return found


def plant_an_old_copy(core, namespace, token, name="kubevirt-scheduler-config-0ldc0py"):
    """A ConfigMap holding a configuration with the token, labelled as this scheduler's: what the role wrote for a
    configuration with a token before such configurations went into Secrets (or its rollback ReplicaSet kept)."""
    config = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
              "profiles": [{"schedulerName": "kubevirt-scheduler", "pluginConfig": [{"name": "TargetLoadPacking",
                            "args": {"metricProvider": {"type": "Prometheus", "token": token,
                                                        "address": "http://prometheus.monitoring.svc:9090"}}}]}]}
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels={
            "app.kubernetes.io/managed-by": "vmsched.kubevirt.secondary_scheduler",
            "app.kubernetes.io/instance": "kubevirt-scheduler",
            "vmsched.kubevirt.io/scheduler-namespace": namespace,
            "vmsched.kubevirt.io/config-hash": "0ldc0py"}),
        immutable=True, data={"config.yaml": yaml.safe_dump(config)}))
    return name


def test_a_token_lives_only_in_a_secret_and_no_output_shows_it(run, kubeconfig, dyn, core, namespace, cleanup):
    token = f"vmsched-31-{uuid.uuid4().hex}"
    # An installation without a token, and an old copy of a configuration with the token in a ConfigMap.
    first = run()
    assert not first.failed, first.failure
    tokenless = config_source(deployment(dyn, namespace))
    assert tokenless[0] == "ConfigMap"
    old_copy = plant_an_old_copy(core, namespace, token)

    # Check mode at -vvv --diff: nothing written, nothing shown.
    audit = Audit(namespace)
    check = run(check=True, diff=True, env=VVV, **token_variables(token))
    assert not check.failed, check.failure
    assert "ESTABLISH LOCAL CONNECTION" in check.stderr  # -vvv took effect
    assert token not in check.stdout and token not in check.stderr
    assert "diff" in check.result("Apply the Deployment"), check.result("Apply the Deployment")  # --diff took effect
    assert "censored" in check.result("Apply the scheduler configuration")
    assert audit.writes() == []

    # The run itself, as a user reads it: -vvv --diff, the default callback.
    shown = run_as_shown(kubeconfig, namespace, **token_variables(token))
    output = shown.stdout + shown.stderr
    assert shown.returncode == 0, output[-5000:]
    assert "ESTABLISH LOCAL CONNECTION" in output and "failed=0" in output, output[-3000:]
    assert token not in output

    # The Deployment mounts a Secret that holds the configuration, token included.
    dep = deployment(dyn, namespace)
    kind, name = config_source(dep)
    assert kind == "Secret" and name.startswith("kubevirt-scheduler-config-"), (kind, name)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "config", "mountPath": "/etc/vmsched/scheduler", "readOnly": True} in container["volumeMounts"]
    assert "--config=/etc/vmsched/scheduler/config.yaml" in container["args"]
    assert token not in json.dumps(dep)  # nor in the applied-manifest annotation
    secret = core.read_namespaced_secret(name, namespace)
    assert secret.type == "Opaque" and secret.immutable is True
    assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "vmsched.kubevirt.secondary_scheduler"
    assert set(secret.data) == {"config.yaml"}
    stored = yaml.safe_load(base64.b64decode(secret.data["config.yaml"]))
    args = stored["profiles"][0]["pluginConfig"][0]["args"]
    assert args["metricProvider"] == {"type": "Prometheus", "address": "http://prometheus.monitoring.svc:9090",
                                      "token": token}
    assert secret.data["config.yaml"] not in output  # nor the Secret's data as it is stored
    assert config_secrets(core, namespace) == [name]

    # No ConfigMap anywhere holds the token; the old copy went, and so did the tokenless configuration (the other kind).
    assert config_maps_holding(core, token) == []
    assert config_maps(core, namespace) == []
    assert old_copy not in {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}

    # A rerun with another old copy planted: that ConfigMap goes, nothing else changes.
    versions = resource_versions(dyn, namespace)
    plant_an_old_copy(core, namespace, token)
    again = run(diff=True, env=VVV, **token_variables(token))
    assert not again.failed, again.failure
    assert token not in again.stdout and token not in again.stderr
    assert secret.data["config.yaml"] not in again.stdout + again.stderr
    assert [n for n, result in again.results if result.get("changed")] == [
        "Delete the configurations no ReplicaSet uses any more, and every ConfigMap holding a token"], again.results
    assert config_maps_holding(core, token) == []
    assert resource_versions(dyn, namespace) == versions

    # absent removes the Secret too.
    gone = run(state="absent")
    assert not gone.failed, gone.failure
    assert owned(dyn, namespace) == set()
    assert config_secrets(core, namespace) == []


def test_taking_the_token_away_removes_its_secrets(run, dyn, core, namespace, cleanup):
    token = f"vmsched-31-{uuid.uuid4().hex}"
    with_token = run(**token_variables(token))
    assert not with_token.failed, with_token.failure
    kind, secret = config_source(deployment(dyn, namespace))
    assert kind == "Secret" and config_secrets(core, namespace) == [secret]
    assert config_maps(core, namespace) == []

    # A new token: a new Secret; the previous one stays for the rollback ReplicaSet, as a previous ConfigMap does.
    rotated = run(**token_variables(token + "-rotated"))
    assert not rotated.failed, rotated.failure
    kind, newer = config_source(deployment(dyn, namespace))
    assert kind == "Secret" and newer != secret
    assert config_secrets(core, namespace) == sorted([secret, newer])

    # No token: back to a ConfigMap, and every Secret of this scheduler goes, the rollback's included.
    without = run(profile="load_aware", flavor="scheduler-plugins",
                  metric_provider={"type": "Prometheus", "address": "http://prometheus.monitoring.svc:9090"})
    assert not without.failed, without.failure
    kind, config_map = config_source(deployment(dyn, namespace))
    assert kind == "ConfigMap" and config_maps(core, namespace) == [config_map]
    assert config_secrets(core, namespace) == []
    for found in core.list_namespaced_secret(namespace).items:
        assert not any(token in base64.b64decode(v).decode(errors="replace") for v in (found.data or {}).values())
    stored = yaml.safe_load(core.read_namespaced_config_map(config_map, namespace).data["config.yaml"])
    assert "token" not in stored["profiles"][0]["pluginConfig"][0]["args"]["metricProvider"]
    assert config_maps_holding(core, token) == []
