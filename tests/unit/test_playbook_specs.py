# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks' variables: their specs (playbooks/argument_specs/), the playbooks that use them, the AWX
surveys generated from them (playbooks/surveys/), and how vmsched.kubevirt.preflight checks answers.

One source: a variable, default, type or bound changed in a spec shows here as a playbook or a survey that no
longer agrees with it."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from ansible_collections.vmsched.kubevirt.plugins.module_utils import playbook_vars as pv

from .awx_surveys import (
    JOB_TEMPLATES,
    ROOT,
    answer_errors,
    extravars_yaml,
    generated_surveys,
    launch_extra_vars,
    survey_file,
    survey_spec_errors,
    survey_text,
)

SPECS = ["site", "migrate_vm", "evacuate_node", "rebalance"]
OPTION_KEYS = {"type", "default", "required", "choices", "description"} | set(pv.OWN_KEYS)


def spec_of(name):
    return yaml.safe_load((ROOT / "playbooks" / "argument_specs" / f"{name}.yml").read_text())


def play_of(name):
    return yaml.safe_load((ROOT / "playbooks" / f"{name}.yml").read_text())[0]


def public_vars(name):
    """The play's variables a user sets: not internal (PREFIX__x) nor Ansible's own (ansible_*)."""
    return {k: v for k, v in play_of(name)["vars"].items() if "__" not in k and not k.startswith("ansible_")}


@pytest.mark.parametrize("name", SPECS)
def test_spec_is_complete(name):
    options = pv.entry_point(spec_of(name))["options"]
    for var, option in options.items():
        assert var.startswith(name + "_"), f"{var}: the playbook's variables carry its name as prefix"
        assert set(option) <= OPTION_KEYS, f"{var}: unknown keys {set(option) - OPTION_KEYS}"
        assert option.get("description"), f"{var} has no description"
        assert option.get("required") or "default" in option, f"{var} needs a default or required: true"
        if option.get("survey", True):
            assert option.get("question"), f"{var} is in the survey but has no question"
        if "choices" in option:
            assert option["default"] in option["choices"], var
        if option["type"] != "int":
            assert option.get("min", 0) <= 1, f"{var}: min bounds a str's length; more than 1 is not meant here"


@pytest.mark.parametrize("name", SPECS)
def test_playbook_vars_agree_with_the_spec(name):
    options = pv.entry_point(spec_of(name))["options"]
    play_vars = public_vars(name)
    defaults = {var: option["default"] for var, option in options.items() if "default" in option}
    assert play_vars == defaults, "the play's vars: and the spec's defaults differ"
    required = [var for var, option in options.items() if option.get("required")]
    assert not set(required) & set(play_vars), "required variables have no default in the play"


def defined_by_tasks(node):
    """Names the play's tasks define themselves: registered results, loop variables, task vars (Jinja's own
    loop variables are found in the text)."""
    names = set()
    if isinstance(node, dict):
        names.update(v for k, v in node.items() if k in ("register", "loop_var"))
        if isinstance(node.get("vars"), dict) and "hosts" not in node:
            names.update(node["vars"])
        for value in node.values():
            names |= defined_by_tasks(value)
    elif isinstance(node, list):
        for item in node:
            names |= defined_by_tasks(item)
    return names


@pytest.mark.parametrize("name", SPECS)
def test_playbook_uses_only_declared_variables(name):
    text = (ROOT / "playbooks" / f"{name}.yml").read_text()
    used = {m for m in re.findall(r"\b(%s_[a-z0-9_]+)" % name, text) if "__" not in m}
    jinja_loops = set(re.findall(r"{%-?\s*for\s+(\w+)", text))
    undeclared = used - set(pv.entry_point(spec_of(name))["options"]) - defined_by_tasks(play_of(name)) - jinja_loops
    assert not undeclared, f"{name}.yml uses variables its spec does not declare: {sorted(undeclared)}"


@pytest.mark.parametrize("name", SPECS)
def test_first_task_checks_the_spec(name):
    first = play_of(name)["tasks"][0]
    assert first["name"] == "Check the survey answers"
    assert "argument_specs/%s.yml" % name in first["vmsched.kubevirt.preflight"]["spec"]


def test_teardown_takes_site_variables_with_site_defaults():
    site = pv.entry_point(spec_of("site"))["options"]
    teardown = public_vars("teardown")
    assert teardown and set(teardown) <= set(site)
    assert teardown == {var: site[var]["default"] for var in teardown}


@pytest.mark.parametrize("playbook", [t[0] for t in JOB_TEMPLATES])
def test_survey_files_are_generated_from_the_specs(playbook):
    expected = generated_surveys()[playbook]
    assert survey_file(playbook).read_text() == survey_text(expected), "run `make surveys`"


@pytest.mark.parametrize("playbook", [t[0] for t in JOB_TEMPLATES])
def test_surveys_are_what_awx_accepts(playbook):
    survey = json.loads(survey_file(playbook).read_text())
    assert survey_spec_errors(survey) == []
    source = dict((t[0], t[2]) for t in JOB_TEMPLATES)[playbook]
    options = pv.entry_point(spec_of(source))["options"]
    asked = [q["variable"] for q in survey["spec"]]
    in_survey = [var for var, option in options.items() if option.get("survey", True)]
    assert asked == (in_survey if source == playbook else [v for v in in_survey if v in public_vars(playbook)])
    for question in survey["spec"]:
        option = options[question["variable"]]
        if not option.get("required"):
            # AWX drops a default that fails its own question's check; the playbook's default would then apply.
            assert answer_errors(question, {question["variable"]: question["default"]}) == [], question


@pytest.mark.parametrize("name", SPECS)
def test_defaults_as_awx_sends_them_pass_the_preflight(name):
    survey = json.loads(survey_file(name).read_text())
    required = {q["variable"]: "x" for q in survey["spec"] if q["required"]}
    extra_vars, errors = launch_extra_vars(survey, required)
    assert errors == []
    values, problems = pv.check_values(spec_of(name), extra_vars)
    assert problems == []
    options = pv.entry_point(spec_of(name))["options"]
    for var, option in options.items():
        if "default" in option:
            assert values[var] == option["default"], var  # "true"/"false" come back as booleans


def test_awx_refuses_what_the_survey_bounds():
    survey = json.loads(survey_file("migrate_vm").read_text())
    _vars, errors = launch_extra_vars(survey, {"migrate_vm_name": "db01", "migrate_vm_wait_timeout": -5,
                                               "migrate_vm_strategy": "fast"})
    assert errors == ["migrate_vm_strategy: 'fast' is not one of ['auto', 'added_node_selector', 'vm_node_selector']",
                      "migrate_vm_wait_timeout: -5 is below 1"]
    _vars, errors = launch_extra_vars(survey, {})
    assert errors == ["'migrate_vm_name' value missing"]


def test_extravars_are_written_unsafe_as_awx_writes_them():
    text = extravars_yaml({"migrate_vm_name": "{{ lookup('pipe', 'id') }}", "migrate_vm_wait_timeout": 120})
    assert text == "!unsafe 'migrate_vm_name': !unsafe '{{ lookup(''pipe'', ''id'') }}'\n" \
                   "!unsafe 'migrate_vm_wait_timeout': 120\n"


# --- how preflight checks answers ----------------------------------------------------------------------

# ansible-core's own messages (type conversion, choices, missing) differ in wording between releases:
# each expected error is a set of fragments.
@pytest.mark.parametrize("answers, errors", [
    ({"migrate_vm_name": "db01", "migrate_vm_wait_timeout": -5}, [("migrate_vm_wait_timeout is -5; the least allowed is 1",)]),
    ({"migrate_vm_name": "db01", "migrate_vm_wait_timeout": "soon"},
     [("'migrate_vm_wait_timeout'", "unable to convert to int")]),
    ({"migrate_vm_name": ""}, [("migrate_vm_name is empty; it needs a value",)]),
    ({}, [("missing required arguments: migrate_vm_name",)]),
    ({"migrate_vm_name": "db01", "migrate_vm_strategy": "fast"},
     [("value of migrate_vm_strategy must be one of: auto, added_node_selector, vm_node_selector", "got: fast")]),
    ({"migrate_vm_name": "db01", "migrate_vm_node_selector": "cpu=fast, zone"},
     [('migrate_vm_node_selector is "key=value,key2=value2"; not of that form: zone',)]),
    ({"migrate_vm_name": "db01", "migrate_vm_namespace": ""}, [("migrate_vm_namespace is empty; it needs a value",)]),
    ({"migrate_vm_name": "db01", "migrate_vm_cancel_on_timeout": "maybe"},
     [("'migrate_vm_cancel_on_timeout'", "unable to convert to bool")]),
])
def test_bad_answers_are_named(answers, errors):
    _values, found = pv.check_values(spec_of("migrate_vm"), answers)
    assert len(found) == len(errors), found
    for error, fragments in zip(found, errors):
        assert all(fragment in error for fragment in fragments), (error, fragments)


def test_good_answers_are_converted_and_other_variables_ignored():
    values, errors = pv.check_values(spec_of("migrate_vm"), {
        "migrate_vm_name": "db01", "migrate_vm_wait_timeout": "120", "migrate_vm_cancel_on_timeout": "true",
        "awx_job_id": 12, "site_scheduler_name": ""})
    assert errors == []
    assert values["migrate_vm_wait_timeout"] == 120 and values["migrate_vm_cancel_on_timeout"] is True
    assert values["migrate_vm_namespace"] == "default" and "awx_job_id" not in values


def test_rules_relate_variables():
    _values, errors = pv.check_values(spec_of("site"), {"site_image_lookup": "false", "site_image_mode": "mirror"})
    assert errors == [spec_of("site")["argument_specs"]["main"]["rules"][0]["msg"]]
    _values, errors = pv.check_values(spec_of("site"), {"site_image_lookup": "false"})
    assert errors == []


def test_lookups_name_what_must_exist():
    values, _errors = pv.check_values(spec_of("evacuate_node"), {
        "evacuate_node_name": "node03", "evacuate_node_target_nodes": "node02, node04,", "evacuate_node_namespace": ""})
    assert pv.lookups(spec_of("evacuate_node"), values) == {
        "node": [("node03", "evacuate_node_name"), ("node02", "evacuate_node_target_nodes"),
                 ("node04", "evacuate_node_target_nodes")],
        "namespace": []}


@pytest.mark.parametrize("name", ["..", ".", "a/b", "Node03", "node03 ", "-x", "a" * 254])
def test_a_name_to_look_up_must_be_a_name(name):
    _values, errors = pv.check_values(spec_of("evacuate_node"), {"evacuate_node_name": name})
    assert any(e.startswith("evacuate_node_name: not a node name") for e in errors), errors
    _values, errors = pv.check_values(spec_of("site"), {"site_scheduler_namespace": name})
    assert any(e.startswith("site_scheduler_namespace: not a namespace name") for e in errors), errors


def test_the_namespace_a_playbook_creates_need_not_exist():
    spec = spec_of("site")
    values, _errors = pv.check_values(spec, {})
    assert values["site_scheduler_namespace"] == "vmsched-scheduler"
    assert ("vmsched-scheduler", "site_scheduler_namespace") not in pv.lookups(spec, values)["namespace"]
    values, _errors = pv.check_values(spec, {"site_scheduler_namespace": "team-a"})
    assert ("team-a", "site_scheduler_namespace") in pv.lookups(spec, values)["namespace"]


@pytest.mark.parametrize("option, message", [
    ({"type": "list"}, "type is one of"),
    ({"type": "str", "exists": "pod"}, "exists one of"),
    ({"type": "str", "required": True, "default": ""}, "a required option has no default"),
    ({"type": "int", "default": 1, "min": "1"}, "min and max are integers"),
    ({"type": "int", "default": 1, "max": True}, "min and max are integers"),
    ({"type": "int", "default": 1, "min": 5, "max": 1}, "min is more than max"),
])
def test_a_broken_spec_is_a_spec_error(option, message):
    with pytest.raises(pv.SpecError, match=message):
        pv.check_values({"argument_specs": {"main": {"options": {"x": option}}}}, {})
