# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the secondary scheduler's configuration lives (issue 31, "Secrets stay secret").

Trimaran's args take the metric provider's token only inline (scheduler-plugins' TrimaranSpec.MetricProvider.Token,
handed to load-watcher as it is), so a configuration that holds a token goes whole into a Secret; one without stays
in a ConfigMap exactly as before. The role's own expressions (roles/secondary_scheduler/vars/main.yml) are evaluated
here as its tasks evaluate them, with configurations the collection's filter renders: the object applied, the
Deployment's volume, the configurations deleted after a rollout, and the tasks that must not show any of it.
"""
from __future__ import annotations

import base64
import json

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.vmsched.kubevirt.plugins.module_utils.scheduler_config import render_config

from .test_role_templates import ROLES, manifests, role_variables

ROLE = "secondary_scheduler"
SERVER = "v1.36.3"
TOKEN = "not-a-real-token-31"
PROMETHEUS = {"type": "Prometheus", "address": "http://prometheus.monitoring:9090", "token": TOKEN}
LOAD_AWARE = {"preset": "load_aware", "flavor": "scheduler-plugins"}


def rendered(**kwargs):
    """The filter's result, as "Keep the scheduler configuration" keeps it."""
    return render_config(SERVER, **kwargs)


def evaluate(expression, **overrides):
    """A variable of the role as a task sees it, with the role's defaults, vars, facts and these values."""
    loader, variables = role_variables(ROLE, **overrides)
    return Templar(loader=loader, variables=variables).template(trust_as_template("{{ %s }}" % expression))


def plain(value):
    """Templar results as plain JSON data (lists, dicts, str, bool)."""
    return json.loads(json.dumps(value))


# --- which kind -------------------------------------------------------------------------------------------------

TOKENLESS = {
    "the kubevirt preset": {},
    "the metrics server": dict(LOAD_AWARE),
    "Prometheus without a token": dict(LOAD_AWARE, metric_provider={
        "type": "Prometheus", "address": PROMETHEUS["address"]}),
    "a scheduler named token": {"scheduler_name": "token"},
    "a token in a value": dict(LOAD_AWARE, metric_provider={"type": "Prometheus",
                                                            "address": "http://token:9090/token"}),
}
WITH_TOKEN = {
    "the load_aware preset's provider": dict(LOAD_AWARE, metric_provider=PROMETHEUS),
    "SignalFx": dict(LOAD_AWARE, load_aware_plugin="LoadVariationRiskBalancing",
                     metric_provider={"type": "SignalFx", "address": "https://api.signalfx.com", "token": TOKEN}),
    "a pluginConfig entry": dict(LOAD_AWARE, plugin_config=[{"name": "TargetLoadPacking", "args": {
        "metricProvider": PROMETHEUS}}]),
    "another profile": {"flavor": "scheduler-plugins", "profiles": [{
        "schedulerName": "load-aware", "plugins": {"score": {"enabled": [{"name": "TargetLoadPacking"}]}},
        "pluginConfig": [{"name": "TargetLoadPacking", "args": {"metricProvider": PROMETHEUS}}]}]},
    "a key in another case": dict(LOAD_AWARE, plugin_config=[{"name": "TargetLoadPacking", "args": {
        "metricProvider": {"type": "Prometheus", "address": PROMETHEUS["address"], "Token": TOKEN}}}]),
}


@pytest.mark.parametrize("kwargs", TOKENLESS.values(), ids=list(TOKENLESS))
def test_a_configuration_without_a_token_stays_in_a_configmap(kwargs):
    assert evaluate("secondary_scheduler__config_kind", secondary_scheduler__rendered=rendered(**kwargs)) == "ConfigMap"


@pytest.mark.parametrize("kwargs", WITH_TOKEN.values(), ids=list(WITH_TOKEN))
def test_a_configuration_with_a_token_goes_into_a_secret(kwargs):
    config = rendered(**kwargs)
    assert TOKEN in json.dumps(config["config"])
    assert evaluate("secondary_scheduler__config_kind", secondary_scheduler__rendered=config) == "Secret"


# --- the object applied -----------------------------------------------------------------------------------------

def config_object(config, **overrides):
    return plain(evaluate("secondary_scheduler__config_object", secondary_scheduler__rendered=config, **overrides))


def test_the_configmap_is_the_one_applied_before():
    """Without a token, the same object as before this change: an immutable ConfigMap of the same name, labels and
    data, so that a cluster upgraded to this role sees no change (an immutable object refuses a new content)."""
    config = rendered(leader_elect=True, lease_namespace="vmsched")
    text = evaluate("secondary_scheduler__rendered.config | ansible.builtin.to_nice_yaml(indent=2, sort_keys=true)",
                    secondary_scheduler__rendered=config)
    # Where earlier releases put it by default.
    labels = plain(evaluate("secondary_scheduler__labels", secondary_scheduler_namespace="kube-system"))
    assert config_object(config, secondary_scheduler_namespace="kube-system") == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kubevirt-scheduler-config-" + config["hash"], "namespace": "kube-system",
                     "labels": dict(labels, **{"vmsched.kubevirt.io/config-hash": config["hash"]})},
        "immutable": True,
        "data": {"config.yaml": text},
    }
    assert yaml.safe_load(text) == config["config"]


def test_a_token_goes_into_an_immutable_opaque_secret():
    config = rendered(**WITH_TOKEN["the load_aware preset's provider"])
    obj = config_object(config)
    assert obj["kind"] == "Secret" and obj["apiVersion"] == "v1"
    assert obj["type"] == "Opaque" and obj["immutable"] is True
    assert set(obj) == {"apiVersion", "kind", "metadata", "type", "immutable", "data"}  # no stringData
    assert obj["metadata"]["name"] == "kubevirt-scheduler-config-" + config["hash"]
    assert obj["metadata"]["labels"]["vmsched.kubevirt.io/config-hash"] == config["hash"]
    assert set(obj["data"]) == {"config.yaml"}
    stored = yaml.safe_load(base64.b64decode(obj["data"]["config.yaml"]))
    assert stored == config["config"]
    assert stored["profiles"][0]["pluginConfig"][0]["args"]["metricProvider"]["token"] == TOKEN
    assert TOKEN not in json.dumps(obj)  # only base64-encoded, as a Secret's data is


def test_the_deployment_mounts_the_secret():
    config = rendered(**WITH_TOKEN["the load_aware preset's provider"])
    name = "kubevirt-scheduler-config-" + config["hash"]
    without = manifests(ROLE, "deployment.yml.j2", secondary_scheduler__rendered=rendered(**LOAD_AWARE),
                        secondary_scheduler__config_name=name)[0]
    secret = manifests(ROLE, "deployment.yml.j2", secondary_scheduler__rendered=config,
                       secondary_scheduler__config_name=name)[0]
    volumes = {v["name"]: v for v in secret["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"] == {"name": "config", "secret": {"secretName": name}}
    assert {v["name"]: v for v in without["spec"]["template"]["spec"]["volumes"]}["config"] == {
        "name": "config", "configMap": {"name": name}}
    # Only the volume's source differs: same mount, same --config, the rest of the manifest the same.
    (container,) = secret["spec"]["template"]["spec"]["containers"]
    assert {"name": "config", "mountPath": "/etc/vmsched/scheduler", "readOnly": True} in container["volumeMounts"]
    assert "--config=/etc/vmsched/scheduler/config.yaml" in container["args"]
    secret["spec"]["template"]["spec"]["volumes"] = without["spec"]["template"]["spec"]["volumes"]
    assert secret == without
    assert TOKEN not in json.dumps(secret)


def previous_config(volumes):
    """The facts "Note the configuration the current Deployment uses" sets, for a Deployment with these volumes
    (None: no Deployment)."""
    task = next(task for _file, task in ALL_TASKS
                if task["name"] == "Note the configuration the current Deployment uses")
    found = {"resources": [] if volumes is None else [{"spec": {"template": {"spec": {"volumes": volumes}}}}]}
    loader, variables = role_variables(ROLE, secondary_scheduler__previous=found)
    for name, expression in task["vars"].items():
        variables[name] = Templar(loader=loader, variables=variables).template(expression)
    facts = Templar(loader=loader, variables=variables).template(task["ansible.builtin.set_fact"])
    variables.update(facts)
    ref = Templar(loader=loader, variables=variables).template(trust_as_template(
        "{{ secondary_scheduler__previous_config_ref }}"))
    return facts["secondary_scheduler__previous_config"], facts["secondary_scheduler__previous_config_kind"], ref


@pytest.mark.parametrize("volumes, expected", [
    (None, ("", "ConfigMap", "")),
    ([{"name": "tmp", "emptyDir": {}}, {"name": "config", "configMap": {"name": "k-config-1"}}],
     ("k-config-1", "ConfigMap", "ConfigMap/k-config-1")),
    ([{"name": "config", "secret": {"secretName": "k-config-2"}}, {"name": "tmp", "emptyDir": {}}],
     ("k-config-2", "Secret", "Secret/k-config-2")),
])
def test_the_configuration_the_deployment_found_uses(volumes, expected):
    assert previous_config(volumes) == expected


# --- what goes after a rollout ----------------------------------------------------------------------------------

CONFIG = "apiVersion: kubescheduler.config.k8s.io/v1\nprofiles:\n- schedulerName: kubevirt-scheduler\n"
WITH_A_TOKEN = ("apiVersion: kubescheduler.config.k8s.io/v1\nprofiles:\n- pluginConfig:\n  - args:\n"
                "      metricProvider:\n        address: http://prometheus:9090\n        token: %s\n" % TOKEN)


def config_maps(*names, tokens=()):
    """A k8s_info result of ConfigMaps with their data, as "Find the configurations in ConfigMaps" registers it."""
    return {"resources": [{"kind": "ConfigMap", "metadata": {"name": name},
                           "data": {"config.yaml": WITH_A_TOKEN if name in tokens else CONFIG}} for name in names]}


def secrets(*names):
    """A k8s_info result of Secrets without their data (hidden_fields), or a skipped task."""
    if not names:
        return {"skipped": True, "changed": False}
    return {"resources": [{"kind": "Secret", "metadata": {"name": name}} for name in names]}


# (current kind, current name, previous kind, previous name, ConfigMaps found, those holding a token, Secrets
# found, the ones deleted)
STALE = {
    "unchanged, nothing to do": ("ConfigMap", "c", "ConfigMap", "c", ("b", "c"), (), (), []),
    "unchanged, an old copy with a token": ("ConfigMap", "c", "ConfigMap", "c", ("a", "b", "c"), ("a",), (),
                                            ["ConfigMap/a"]),
    "unchanged Secret, an old ConfigMap with a token": ("Secret", "s", "Secret", "s", ("a",), ("a",), (),
                                                        ["ConfigMap/a"]),
    "a new ConfigMap: older than the previous one go": ("ConfigMap", "c", "ConfigMap", "b", ("a", "b", "c"), (), (),
                                                        ["ConfigMap/a"]),
    "the previous ConfigMap holds a token": ("ConfigMap", "c", "ConfigMap", "b", ("b", "c"), ("b",), (),
                                             ["ConfigMap/b"]),
    "a token given: every ConfigMap goes": ("Secret", "s", "ConfigMap", "b", ("a", "b"), (), ("r", "s"),
                                            ["ConfigMap/a", "ConfigMap/b", "Secret/r"]),
    "a token taken away: every Secret goes": ("ConfigMap", "c", "Secret", "s", ("a", "c"), (), ("r", "s"),
                                              ["ConfigMap/a", "Secret/r", "Secret/s"]),
    "a new token: the previous Secret stays": ("Secret", "t", "Secret", "s", (), (), ("r", "s", "t"), ["Secret/r"]),
    "an older role's ConfigMap of the same name": ("Secret", "x", "ConfigMap", "x", ("x",), ("x",), ("x",),
                                                   ["ConfigMap/x"]),
    "no Deployment before": ("ConfigMap", "c", "ConfigMap", "", ("a", "c"), (), ("s",), ["ConfigMap/a", "Secret/s"]),
}


@pytest.mark.parametrize("case", STALE.values(), ids=list(STALE))
def test_the_configurations_deleted_after_a_rollout(case):
    kind, name, previous_kind, previous, maps, tokens, found_secrets, deleted = case
    stale = plain(evaluate(
        "secondary_scheduler__stale_configs",
        secondary_scheduler__config_kind=kind, secondary_scheduler__config_name=name,
        secondary_scheduler__previous_config_kind=previous_kind, secondary_scheduler__previous_config=previous,
        secondary_scheduler__config_maps=config_maps(*maps, tokens=tokens),
        secondary_scheduler__config_secrets=secrets(*found_secrets)))
    assert sorted(stale) == deleted
    assert "%s/%s" % (kind, name) not in stale


def test_a_configmap_without_data_holds_no_token():
    maps = config_maps("a", "b", tokens=("b",))
    maps["resources"].append({"kind": "ConfigMap", "metadata": {"name": "empty"}})
    assert plain(evaluate("secondary_scheduler__token_config_maps", secondary_scheduler__config_maps=maps)) == [
        "ConfigMap/b"]


# --- nothing shows a configuration ------------------------------------------------------------------------------

# What holds the configuration's text, or reads one back: a task naming one of these must not print its arguments
# or its result.
HOLDERS = ("secondary_scheduler__rendered.config", "secondary_scheduler__config_rendering",
           "secondary_scheduler__config_text", "secondary_scheduler__config_object")
K8S = ("kubernetes.core.k8s", "kubernetes.core.k8s_info", "vmsched.kubevirt.objects_info")


def tasks(name):
    """Every task of a tasks file, blocks' tasks included."""
    found = []

    def walk(items):
        for task in items or []:
            if "block" in task:
                walk(task["block"])
                walk(task.get("rescue"))
                walk(task.get("always"))
            else:
                found.append(task)

    walk(DataLoader().load_from_file(str(ROLES / ROLE / "tasks" / name), trusted_as_template=True))
    return found


TASK_FILES = sorted(path.name for path in (ROLES / ROLE / "tasks").glob("*.yml"))
ALL_TASKS = [(name, task) for name in TASK_FILES for task in tasks(name)]


def may_touch_a_configuration(task):
    """A task reading or writing objects whose kind may be ConfigMap or Secret (named, templated, in its definition,
    or among the objects it deletes or the kinds it reads)."""
    module = next((m for m in K8S if m in task), None)
    if module is None:
        return False
    args = task[module]
    kind = str(args.get("kind", ""))
    definition = str(args.get("definition", "")) + str(task.get("vars", ""))
    return (kind in ("ConfigMap", "Secret") or "{{" in kind or "config_object" in definition
            or "__found" in definition or "__objects" in definition  # what a read found, deleted
            or "__kinds" in str(args.get("queries", "")))


def hides_data(args):
    """hidden_fields has data: the task's own, or each of an objects_info task's queries."""
    if "queries" in args:
        return "'hidden_fields': ['data']" in str(args["queries"])
    return "data" in args.get("hidden_fields", [])


def test_every_task_that_may_touch_a_configuration_hides_it():
    touching = [(file, task) for file, task in ALL_TASKS if may_touch_a_configuration(task)]
    assert len(touching) >= 7, [task["name"] for _file, task in touching]
    for file, task in touching:
        args = task[next(m for m in K8S if m in task)]
        assert task.get("no_log") is True or hides_data(args), (file, task["name"])


def test_the_tasks_that_carry_a_configuration_have_no_log():
    """Their arguments (-vvv) or their results (-v, --diff) hold the configuration: no_log, whatever else."""
    carrying = [task["name"] for _file, task in ALL_TASKS
                if any(holder in json.dumps(task, default=str) for holder in HOLDERS)
                # The check shows the filter's error, not the configuration: its value is a mapping or an error.
                and not ("ansible.builtin.assert" in task and task["ansible.builtin.assert"].get("quiet")
                         and not any(h in str(task["ansible.builtin.assert"].get("fail_msg", "")) for h in HOLDERS))]
    assert "Apply the scheduler configuration" in carrying
    reads = [task["name"] for _file, task in ALL_TASKS
             if "kubernetes.core.k8s_info" in task and task["kubernetes.core.k8s_info"].get("kind") == "ConfigMap"
             and "data" not in task["kubernetes.core.k8s_info"].get("hidden_fields", [])]
    assert reads == ["Find the configurations in ConfigMaps"]
    for name in carrying + reads:
        task = next(task for _file, task in ALL_TASKS if task["name"] == name)
        assert task.get("no_log") is True, name
