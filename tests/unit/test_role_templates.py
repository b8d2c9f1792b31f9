# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every manifest template of every role, rendered as the roles render them (the ``ansible.builtin.template``
lookup, through Ansible's Templar, with the role's defaults and vars), with hostile values in the user's
variables: newlines, ``": "``, quotes, ``{{``, YAML anchors and aliases, YAML scalars of other types. Each
manifest keeps its shape and a hostile value is only ever the plain value of its own field (issue 31: a
multi-line ``descheduler_interval`` replaced the Deployment's image).

And the roles' format checks, the assert tasks that run before anything reaches the cluster, refuse those
values, naming the variable and the format expected.

Values come in untrusted, as AWX sends survey answers (``!unsafe``): Ansible does not template them.
"""
from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader

try:
    from ansible.template import Templar, trust_as_template
except ImportError as exc:  # ansible-core before 2.19: no trust model to render with as the roles do
    raise ImportError("tests/unit/test_role_templates.py renders the roles' templates as ansible-core 2.19 and later "
                      "do (trust_as_template); run it with the dev venv's ansible-core (make units)") from exc

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"

# Each would change a manifest's structure if spliced into YAML as text.
HOSTILE = [
    "5m\n  image: evil",                      # a key next to the value's own
    "5m\nimage: evil",                        # a key at the top of the document
    "x\n        - --dry-run",                 # an item in the list the value sits in
    "5m\u2028image: evil",                    # a line separator
    "multi\r\nline\ttab",
    'a": "b',
    "key: value",
    "it's \"quoted\"",
    "{{ 7 * 7 }}",                            # Jinja in a value stays text
    "&a anchored",
    "*a",
    "!!binary aGk=",
    "# comment",
    "[a, b]",
    "{a: b}",
    "| block",
    "true",                                   # scalars YAML would read as another type
    "null",
    "  padded  ",
]
# Stands for the user's value in a reference rendering: where it appears, the hostile value must appear, and
# only there.
SENTINEL = "sentinelvalue"

# The facts the roles' tasks set before they render a template (set_fact in tasks/present.yml), as the tasks
# derive them from the user's variables; values a filter computes from the cluster are fixed.
FACTS = {
    "descheduler": {
        # "Render and validate the descheduler policy"
        "descheduler__rendered": {
            "hash": "0123456789",
            "feature_gates": ["EvictionsInBackground=true"],
            "needs_metrics_api": True,
            "token_secret": {"name": "{{ descheduler_prometheus_token_secret }}",
                             "namespace": "{{ descheduler_namespace }}"},
        },
        # "Choose the image"
        "descheduler__image": "{{ descheduler_image if descheduler_image | length > 0"
                              " else 'registry.k8s.io/descheduler/descheduler:v0.34.0' }}",
    },
    "secondary_scheduler": {
        # "Render and validate the scheduler configuration", "Choose the image and name the configuration"
        "secondary_scheduler__rendered": {"hash": "0123456789", "needs_metrics": True,
                                          "config": {"apiVersion": "kubescheduler.config.k8s.io/v1",
                                                     "kind": "KubeSchedulerConfiguration"}},
        "secondary_scheduler__image": "{{ secondary_scheduler_image if secondary_scheduler_image | length > 0"
                                      " else 'registry.k8s.io/kube-scheduler:v1.34.2' }}",
        "secondary_scheduler__config_name": "{{ secondary_scheduler_name }}-config-{{"
                                            " secondary_scheduler__rendered.hash }}",
        # "Keep what was read" (the cluster's kube-scheduler ClusterRole, read with the namespace)
        "secondary_scheduler__kube_scheduler_role": {"resources": [{"rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-scheduler"],
             "verbs": ["get", "update"]}]}]},
    },
    "vm_defaults": {
        # "Choose the MutatingAdmissionPolicy apiVersion"
        "vm_defaults__api_version": "admissionregistration.k8s.io/v1",
    },
}

# (role, template, variables): every template the roles render into manifests, each with every branch taken.
CASES = [
    ("descheduler", "workload.yml.j2", {"descheduler_mode": "deployment", "descheduler_dry_run": True}),
    ("descheduler", "workload.yml.j2", {"descheduler_mode": "cronjob"}),
    ("descheduler", "preview_job.yml.j2", {}),
    ("descheduler", "rbac.yml.j2", {}),
    ("descheduler", "secret_access.yml.j2", {"descheduler_prometheus_token_secret": "token"}),
    ("secondary_scheduler", "deployment.yml.j2", {"secondary_scheduler_replicas": 2,
                                                  "secondary_scheduler_control_plane": True}),
    # A configuration holding the metric provider's token is mounted from a Secret.
    ("secondary_scheduler", "deployment.yml.j2", {"secondary_scheduler__config_kind": "Secret"}),
    ("secondary_scheduler", "rbac.yml.j2", {}),
    ("vm_defaults", "policy.yml.j2", {"vm_defaults_descheduler_evict": True}),
]
CASE_IDS = ["%s/%s%s" % (role, template, "".join("-%s" % v for v in variables.values() if isinstance(v, str)))
            for role, template, variables in CASES]
# Templates that are no manifest of their own: a macro the workloads import, a failure message.
NOT_RENDERED_ALONE = {"descheduler/pod_template.j2", "secondary_scheduler/rollout_failure.j2"}
# Options whose value only picks a branch or a table entry; their choices keep anything else out.
SELECTORS = {"descheduler_state", "descheduler_mode", "secondary_scheduler_state", "secondary_scheduler_flavor",
             "vm_defaults_state"}

# Dicts and lists of strings, each built around one string.
CONTAINERS = {
    "descheduler_pod_node_selector": lambda s: {s: s},
    "descheduler_tolerations": lambda s: [{"key": s, "operator": "Equal", "value": s, "effect": "NoSchedule"}],
    "descheduler_resources": lambda s: {"limits": {"memory": s}},
    "secondary_scheduler_node_selector": lambda s: {s: s},
    "secondary_scheduler_tolerations": lambda s: [{"key": s, "operator": "Exists"}],
    "secondary_scheduler_resources": lambda s: {"requests": {"cpu": s}},
    "secondary_scheduler_command": lambda s: [s, "--" + s],
    "vm_defaults_namespace_selector": lambda s: {"matchLabels": {s: s}},
}


def _trusted(value):
    """Role files' strings are templates (DataLoader marks them so); so are the facts above."""
    if isinstance(value, str):
        return trust_as_template(value) if "{{" in value else value
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


@functools.lru_cache(maxsize=None)
def _argument_spec(role):
    return yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def argument_spec(role):
    """The role's argument spec, parsed once (some 200 calls: a third of this file's time) and copied for each."""
    return copy.deepcopy(_argument_spec(role))


@functools.lru_cache(maxsize=None)
def _role_files(role):
    loader = DataLoader()
    variables = {}
    for part in ("defaults", "vars"):
        variables.update(loader.load_from_file(str(ROLES / role / part / "main.yml"), trusted_as_template=True))
    variables.update(_trusted(FACTS[role]))
    return variables


def role_variables(role, **overrides):
    """The variables a task of the role sees: its defaults, its vars, the facts above, the user's values."""
    loader = DataLoader()
    variables = dict(_role_files(role))
    variables.update(overrides)
    variables["ansible_search_path"] = [str(ROLES / role)]
    return loader, variables


def render(role, template, **overrides):
    """The template's text, as `lookup('ansible.builtin.template', template)` in one of the role's tasks."""
    loader, variables = role_variables(role, **overrides)
    templar = Templar(loader=loader, variables=variables)
    return str(templar.template(trust_as_template("{{ lookup('ansible.builtin.template', %r) }}" % template)))


def manifests(role, template, **overrides):
    return [doc for doc in yaml.safe_load_all(render(role, template, **overrides)) if doc is not None]


@functools.lru_cache(maxsize=None)
def default_manifests(role, template):
    return manifests(role, template)


def substitute(node, value):
    """The reference rendering with the hostile value where the sentinel was: in keys and values, and JSON-quoted
    where the template quotes it inside a string of its own (the CEL expressions of vm_defaults)."""
    if isinstance(node, str):
        return node.replace(json.dumps(SENTINEL), json.dumps(value)).replace(SENTINEL, value)
    if isinstance(node, dict):
        return {substitute(k, value): substitute(v, value) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, value) for v in node]
    return node


def user_variables(role):
    """The role's string options and the containers of strings above: what a user (or an AWX survey) sets."""
    spec = argument_spec(role)
    names = [name for name, option in spec.items() if option.get("type", "str") == "str" and name not in SELECTORS]
    names += [name for name in CONTAINERS if name.startswith(role + "_")]
    return names


def value_of(name, text):
    return CONTAINERS[name](text) if name in CONTAINERS else text


def test_every_template_is_rendered_here():
    found = {"%s/%s" % (path.parent.parent.name, path.name) for path in ROLES.glob("*/templates/*.j2")}
    covered = {"%s/%s" % (role, template) for role, template, _values in CASES}
    assert found - NOT_RENDERED_ALONE == covered
    assert not list((ROLES / "scheduler_image").glob("templates/*")), "scheduler_image renders no manifest"


@pytest.mark.parametrize("role", sorted(FACTS))
def test_selectors_have_choices(role):
    spec = argument_spec(role)
    for name in SELECTORS & set(spec):
        assert spec[name].get("choices"), name


def with_every_user_value(role, variables, text):
    """The case's variables and every user variable of the role set to (a container around) the text."""
    return dict(variables, **{name: value_of(name, text) for name in user_variables(role)})


@functools.lru_cache(maxsize=None)
def reference(index):
    role, template, variables = CASES[index]
    return manifests(role, template, **with_every_user_value(role, variables, SENTINEL))


# One rendering per case and value, every user variable set to it at once (a rendering takes ~40 ms).
@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("index", range(len(CASES)), ids=CASE_IDS)
def test_hostile_values_stay_values(index, hostile):
    role, template, variables = CASES[index]
    assert SENTINEL in json.dumps(reference(index)), "no user value reaches %s" % template
    rendered = manifests(role, template, **with_every_user_value(role, variables, hostile))
    assert rendered == substitute(reference(index), hostile)


def _container(deployment):
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("hostile", HOSTILE)
def test_descheduling_interval_is_one_argument(hostile):
    default = default_manifests("descheduler", "workload.yml.j2")[0]
    deployment = manifests("descheduler", "workload.yml.j2", descheduler_interval=hostile)[0]
    assert deployment.keys() == default.keys()
    assert _container(deployment).keys() == _container(default).keys()
    assert _container(deployment)["image"] == _container(default)["image"]
    args = _container(deployment)["args"]
    assert [arg for arg in args if "interval" in arg] == ["--descheduling-interval=" + hostile]
    assert len(args) == len(_container(default)["args"])
    assert "--dry-run" not in args


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("role, template, variable", [
    ("descheduler", "workload.yml.j2", "descheduler_priority_class_name"),
    ("secondary_scheduler", "deployment.yml.j2", "secondary_scheduler_priority_class_name"),
])
def test_priority_class_name_is_a_plain_value(hostile, role, template, variable):
    default = default_manifests(role, template)[0]["spec"]["template"]["spec"]
    spec = manifests(role, template, **{variable: hostile})[0]["spec"]["template"]["spec"]
    assert spec.keys() == default.keys()
    assert spec["priorityClassName"] == hostile
    assert spec["containers"] == default["containers"]


# Integer and boolean options reach the manifests as numbers and booleans, also when given as the strings
# argument validation accepts for them (ansible-playbook -e, AWX multiple-choice answers).
@pytest.mark.parametrize("role, template, variable, given, meant", [
    ("descheduler", "workload.yml.j2", "descheduler_secure_port", " 10258\n", 10258),
    ("descheduler", "workload.yml.j2", "descheduler_verbosity", "4", 4),
    ("descheduler", "preview_job.yml.j2", "descheduler_dry_run_timeout", "300", 300),
    ("descheduler", "workload.yml.j2", "descheduler_dry_run", "false", False),
    ("secondary_scheduler", "deployment.yml.j2", "secondary_scheduler_replicas", "2", 2),
    ("secondary_scheduler", "deployment.yml.j2", "secondary_scheduler_verbosity", "3", 3),
    ("secondary_scheduler", "deployment.yml.j2", "secondary_scheduler_control_plane", "false", False),
    ("vm_defaults", "policy.yml.j2", "vm_defaults_descheduler_evict", "no", False),
])
def test_numbers_and_booleans_stay_typed(role, template, variable, given, meant):
    result = ArgumentSpecValidator({variable: argument_spec(role)[variable]}).validate({variable: given})
    assert not result.error_messages, "argument validation accepts %r" % given
    assert manifests(role, template, **{variable: given}) == manifests(role, template, **{variable: meant})


# --- the format checks -------------------------------------------------------------------------------------

def _tasks(role, name):
    return DataLoader().load_from_file(str(ROLES / role / "tasks" / name), trusted_as_template=True)


@functools.lru_cache(maxsize=None)
def checks_before_cluster(role):
    """The assert tasks a `present` run executes before its first task of any other kind (the first that may
    reach the cluster), following include_tasks."""
    checks = []

    def walk(tasks):
        for task in tasks:
            if "ansible.builtin.assert" in task:
                checks.append(task)
                continue
            include = task.get("ansible.builtin.include_tasks")
            if include and "present" in str(task.get("when", "")):
                return walk(_tasks(role, include))
            if include:
                continue
            return True
        return False

    assert walk(_tasks(role, "main.yml")), "%s: no task after the checks" % role
    return checks


def format_errors(role, **overrides):
    """The fail_msg of every check that fails (each item of a looped one), for the role with these values."""
    loader, variables = role_variables(role, **overrides)
    errors = []
    for task in checks_before_cluster(role):
        args = task["ansible.builtin.assert"]
        that = args["that"] if isinstance(args["that"], list) else [args["that"]]
        templar = Templar(loader=loader, variables=variables)
        items = templar.template(task["loop"]) if "loop" in task else [None]
        for item in items:
            scope = dict(variables, **task.get("vars", {}))
            if item is not None:
                scope[task.get("loop_control", {}).get("loop_var", "item")] = item
            templar = Templar(loader=loader, variables=scope)
            if not all(templar.evaluate_conditional(trust_as_template(str(c))) for c in that):
                errors.append(str(templar.template(args["fail_msg"])))
    return errors


# Every string a template places in a manifest, unless picked from choices, is checked: a valid value and the
# format its error message names. Dicts and lists without a format (resources, tolerations, a command) are data
# the API server checks; the templates put them in with to_json.
CHECKED = {
    "descheduler": {
        "descheduler_namespace": ("kube-system", "DNS-1123 label"),
        "descheduler_name": ("kubevirt-descheduler", "DNS-1123 label"),
        "descheduler_image": ("registry.example.com:5000/mirror/descheduler@sha256:" + "a" * 64, "image reference"),
        "descheduler_interval": ("1h30m", "Go duration"),
        "descheduler_schedule": ("0 */2 * * 1-5", "cron schedule"),
        "descheduler_priority_class_name": ("system-node-critical", "DNS-1123 subdomain"),
        "descheduler_prometheus_token_secret": ("prometheus.token", "DNS-1123 subdomain"),
        "descheduler_pod_node_selector": ({"kubernetes.io/os": "linux"}, "label"),
        "descheduler_tolerations": ([{"key": "a", "operator": "Exists"}], None),
        "descheduler_resources": ({"requests": {"cpu": "1"}}, None),
    },
    "secondary_scheduler": {
        "secondary_scheduler_namespace": ("vmsched", "DNS-1123 label"),
        "secondary_scheduler_name": ("kubevirt-scheduler", "DNS-1123 label"),
        "secondary_scheduler_image": ("localhost:5000/kube-scheduler:v1.34.2", "image reference"),
        "secondary_scheduler_priority_class_name": ("", "DNS-1123 subdomain"),
        "secondary_scheduler_node_selector": ({"node-role.kubernetes.io/infra": ""}, "label"),
        "secondary_scheduler_tolerations": ([{"key": "a", "operator": "Exists"}], None),
        "secondary_scheduler_resources": ({"requests": {"cpu": "1"}}, None),
        "secondary_scheduler_command": (["/bin/kube-scheduler"], None),
    },
    "vm_defaults": {
        "vm_defaults_name": ("vmsched-vm-defaults", "DNS-1123 subdomain"),
        "vm_defaults_scheduler_name": ("kubevirt-scheduler", "DNS-1123 subdomain"),
        "vm_defaults_namespace_selector": ({"matchLabels": {"vms": "yes"}}, None),
    },
}
# The hostile values no checked format allows ("true" and "null" are valid names).
STRUCTURAL = [value for value in HOSTILE if value not in ("true", "null")]


@pytest.mark.parametrize("role", sorted(FACTS))
def test_every_manifest_string_is_checked(role):
    """A string option found in a rendered manifest is in CHECKED or has choices."""
    spec = argument_spec(role)
    # A sentinel of its own for each variable, all in one rendering per template.
    marks = {name: "%s%d" % (SENTINEL, number) for number, name in enumerate(user_variables(role))}
    rendered = set()
    for case_role, template, variables in CASES:
        if case_role == role:
            text = json.dumps(manifests(role, template, **dict(variables, **{
                name: value_of(name, mark) for name, mark in marks.items()})))
            rendered.update(name for name, mark in marks.items() if re.search(mark + r"(?![0-9])", text))
    unchecked = {name for name in rendered - set(CHECKED[role]) if not spec.get(name, {}).get("choices")}
    assert not unchecked, "strings that reach a manifest unchecked"


@pytest.mark.parametrize("role", sorted(FACTS))
def test_defaults_and_valid_values_pass(role):
    assert format_errors(role) == []
    assert format_errors(role, **{name: good for name, (good, _fmt) in CHECKED[role].items()}) == []


# One check per role and value, every checked variable set to it at once: each must be named.
@pytest.mark.parametrize("hostile", STRUCTURAL)
@pytest.mark.parametrize("role", sorted(FACTS))
def test_hostile_values_are_refused(role, hostile):
    checked = {name: fmt for name, (_good, fmt) in CHECKED[role].items() if fmt}
    errors = format_errors(role, **{name: value_of(name, hostile) for name in checked})
    for name, fmt in checked.items():
        assert any(re.search(r"(^|\W)%s=" % name, error) and fmt in error for error in errors), (name, errors)


@pytest.mark.parametrize("value, ok", [
    ("5m", True), ("1h30m", True), ("1.5h", True), ("300ms", True), ("10us", True), ("10\u00b5s", True),
    ("5", False), ("5 m", False), ("m", False), ("5m\n", False), ("5m ", False), ("-5m", False), ("5d", False),
])
def test_interval_is_a_go_duration(value, ok):
    assert (format_errors("descheduler", descheduler_interval=value) == []) is ok


@pytest.mark.parametrize("value, ok", [
    ("*/5 * * * *", True), ("0 3 * * MON-FRI", True), ("@hourly", True), ("@every 1h30m", True),
    ("* * * *", False), ("* * * * * *", False), ("*/5 * * * *\n", False), ("TZ=UTC 0 3 * * *", False),
    ("@often", False),
])
def test_schedule_is_a_cron_schedule(value, ok):
    assert (format_errors("descheduler", descheduler_schedule=value) == []) is ok


@pytest.mark.parametrize("role, variable", [("descheduler", "descheduler_name"),
                                            ("secondary_scheduler", "secondary_scheduler_name"),
                                            ("vm_defaults", "vm_defaults_name")])
def test_a_trailing_newline_is_refused(role, variable):
    # Python's `$` matches before a final newline: the checks match the whole value.
    assert format_errors(role, **{variable: "name\n"})


@pytest.mark.parametrize("value, ok", [
    ({"kubernetes.io/hostname": "node-1"}, True), ({"infra": ""}, True), ({"a/b/c": "x"}, False),
    ({"infra": "a b"}, False), ({"infra": 1}, False), ({"Bad_Prefix.io/x": "y"}, False), ({"x" * 64: "y"}, False),
])
def test_node_selector_labels(value, ok):
    for role in ("descheduler", "secondary_scheduler"):
        assert (format_errors(role, **{role + ("_pod" if role == "descheduler" else "") + "_node_selector": value})
                == []) is ok, role


@pytest.mark.parametrize("role, variable, hostile", [
    ("descheduler", "descheduler_image_pull_policy", "Always\n  image: evil"),
    ("descheduler", "descheduler_mode", "deployment\nkind: Pod"),
    ("secondary_scheduler", "secondary_scheduler_image_pull_policy", "Never: x"),
    ("secondary_scheduler", "secondary_scheduler_flavor", "kube-scheduler\n"),
    ("vm_defaults", "vm_defaults_failure_policy", "Fail\n  x: y"),
])
def test_argument_specs_refuse_values_outside_their_choices(role, variable, hostile):
    result = ArgumentSpecValidator({variable: argument_spec(role)[variable]}).validate({variable: hostile})
    assert result.error_messages and variable in result.error_messages[0]
