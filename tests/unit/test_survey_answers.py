# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every question of every AWX survey (playbooks/surveys/), answered with hostile values, as a job gets the answer:
through AWX (its own check of the answer, then the extra vars it writes as ``!unsafe`` YAML, loaded the way
Ansible loads them) and as ``ansible-playbook -e``. Each answer is refused before any write by the check the job
runs first (the playbook's ``vmsched.kubevirt.preflight`` task, against the playbook's argument spec), with an
error naming the variable, or it goes only where it stays plain data (issue 31).

Where an accepted answer goes is written down below (SINKS) and compared with the playbook itself: every place
the playbook uses the variable, or a variable made from it (play vars, task vars, set_fact, loop items), is a
role variable, a module argument, a condition or output. A role variable is one tests/unit/test_role_templates.py
renders with hostile values, and here each accepted answer is also taken the way the playbook hands it to the
role (its include_role expression, templated as Ansible does) and then refused by the role's format checks,
naming the role variable, or rendered into every manifest as the plain value of its field; or the role, run with
that state, renders no manifest (no template, no from_yaml: state absent, scheduler_image), so its variables
reach module arguments only. A module argument is data: the module's argument spec declares it, of a type that is
never a document to parse. Conditions and output (debug, fail) never reach the cluster.
"""
from __future__ import annotations

import functools
import importlib
import json
import re

import pytest
import yaml

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import BOOLEANS
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.block import Block
from ansible.playbook.task import Task
from ansible.template import Templar, trust_as_template

from ansible_collections.vmsched.kubevirt.plugins.module_utils import playbook_vars as pv

from .awx_surveys import JOB_TEMPLATES, ROOT, answer_errors, extravars_yaml, launch_extra_vars
from .test_role_templates import (
    CASES,
    CONTAINERS,
    HOSTILE,
    ROLES,
    SENTINEL,
    argument_spec,
    checks_before_cluster,
    manifests,
    role_variables,
    user_variables,
    value_of,
)

PLAYBOOKS = ROOT / "playbooks"
SURVEYS = {path.stem: json.loads(path.read_text()) for path in sorted((PLAYBOOKS / "surveys").glob("*.json"))}
QUESTIONS = [(playbook, question["variable"]) for playbook, survey in SURVEYS.items() for question in survey["spec"]]

# Besides the values that would change a manifest's structure: what a survey answer may hold that a field of a
# Kubernetes object, an API path or a selector must not.
SURVEY_HOSTILE = HOSTILE + [
    "db01\nkind: Pod",                        # a name with a key after it
    "node03\n",                               # a trailing newline
    "..",                                     # an API path's parent
    "../kube-system",
    "a/b",
    "prod, ../etc,",                          # a list of names with a path in it
    "zone=a\nimage: evil",                    # a selector whose value goes on
    "app=web,tier!=db\n- --dry-run",
    "x" * 254,                                # longer than any Kubernetes name
    "x" * 5000,                               # longer than AWX's text answers
    "$(id) `id` ${HOME}",
    "{% raw %}x{% endraw %}",
    "nul\x00byte",
    "next\x85line",                           # YAML reads NEL as a line break
    "\u202eevil",
    "1",                                      # what YAML reads as a number,
    "010",                                    # as another number (8),
    "2025-01-01",                             # as a date
]

# Free-text answers the job's check accepts, where they go besides conditions and output, by playbook: what the
# playbook uses the variable (or a variable made from it) for, each a role variable ("role ROLE (STATE):
# VARIABLE") or a module argument ("module MODULE: ARGUMENT"). An empty set: only conditions and output.
SINKS = {
    "site": {
        "site_image_ref": {"role secondary_scheduler (present): secondary_scheduler_image"},
        # Offline (site_image_lookup=false) the registry also makes the version-matched references (set_fact
        # site__scheduler_image, site__descheduler_image).
        "site_image_source_registry": {"role scheduler_image: scheduler_image_source_registry",
                                       "role secondary_scheduler (present): secondary_scheduler_image",
                                       "role descheduler (present): descheduler_image"},
        "site_image_target_registry": {"role scheduler_image: scheduler_image_target_registry"},
        "site_scheduler_name": {"role secondary_scheduler (present): secondary_scheduler_name",
                                "role vm_defaults (present): vm_defaults_scheduler_name",
                                "module vmsched.kubevirt.vm_placement: scheduler_name"},
        "site_scheduler_namespace": {"role secondary_scheduler (present): secondary_scheduler_namespace"},
        "site_vm_defaults_name": {"role vm_defaults (present): vm_defaults_name"},
        "site_vm_defaults_namespaces": {"role vm_defaults (present): vm_defaults_namespace_selector"},
        "site_descheduler_name": {"role descheduler (present): descheduler_name"},
        "site_descheduler_namespace": {"role descheduler (present): descheduler_namespace"},
        "site_descheduler_interval": {"role descheduler (present): descheduler_interval"},
        "site_descheduler_schedule": {"role descheduler (present): descheduler_schedule"},
        "site_descheduler_image": {"role descheduler (present): descheduler_image"},
        # The opt-in's namespace is also that of the defaults for new VMs when the opt-in takes it whole; a label
        # selector or names only decide whether it does.
        "site_vms_namespace": {"module vmsched.kubevirt.vm_placement: namespace",
                               "module vmsched.kubevirt.vm_placement: all_namespaces",
                               "role vm_defaults (present): vm_defaults_namespace_selector"},
        "site_vms_label_selector": {"module vmsched.kubevirt.vm_placement: label_selectors",
                                    "role vm_defaults (present): vm_defaults_namespace_selector"},
        "site_vms_names": {"module vmsched.kubevirt.vm_placement: names",
                           "role vm_defaults (present): vm_defaults_namespace_selector"},
        # A regular expression on label keys, in the report's output.
        "site_node_label_pattern": set(),
    },
    "migrate_vm": {
        "migrate_vm_name": {"module vmsched.kubevirt.vmi_migration: name"},
        "migrate_vm_namespace": {"module vmsched.kubevirt.vmi_migration: namespace"},
        "migrate_vm_target_node": {"module vmsched.kubevirt.vmi_migration: target_node"},
        "migrate_vm_node_selector": {"module vmsched.kubevirt.vmi_migration: added_node_selector"},
    },
    "evacuate_node": {
        "evacuate_node_name": {"module vmsched.kubevirt.vmi_evacuation: node"},
        "evacuate_node_namespace": {"module vmsched.kubevirt.vmi_evacuation: namespace"},
        "evacuate_node_label_selector": {"module vmsched.kubevirt.vmi_evacuation: label_selector"},
        "evacuate_node_node_selector": {"module vmsched.kubevirt.vmi_evacuation: added_node_selector"},
        "evacuate_node_target_nodes": {"module vmsched.kubevirt.vmi_evacuation: target_nodes"},
    },
    "rebalance": {
        "rebalance_namespaces": {"module vmsched.kubevirt.vm_rebalance: namespaces"},
        "rebalance_label_selector": {"module vmsched.kubevirt.vm_rebalance: label_selector"},
        "rebalance_nodes": {"module vmsched.kubevirt.vm_rebalance: nodes"},
    },
    # teardown.yml runs no preflight: every answer reaches it as given, booleans included (used in conditions).
    # The roles run with state absent, which renders no manifest: their variables reach k8s_info's label
    # selectors and k8s's names, and descheduler and secondary_scheduler check their formats first.
    "teardown": {
        "site_scheduler": set(),
        "site_scheduler_name": {"role secondary_scheduler (absent): secondary_scheduler_name",
                                "module kubernetes.core.k8s_info: label_selectors"},
        "site_scheduler_namespace": {"role secondary_scheduler (absent): secondary_scheduler_namespace"},
        "site_scheduler_remove_in_use": set(),
        "site_vm_defaults": set(),
        "site_vm_defaults_name": {"role vm_defaults (absent): vm_defaults_name"},
        "site_descheduler": set(),
        "site_descheduler_name": {"role descheduler (absent): descheduler_name"},
        "site_descheduler_namespace": {"role descheduler (absent): descheduler_namespace"},
        "site_vms": set(),
        "site_vms_namespace": {"module vmsched.kubevirt.vm_placement: namespace",
                               "module vmsched.kubevirt.vm_placement: all_namespaces"},
        "site_vms_label_selector": {"module vmsched.kubevirt.vm_placement: label_selectors"},
        "site_vms_names": {"module vmsched.kubevirt.vm_placement: names"},
    },
}
# What a use never sends to the cluster: a condition (when, assert's that), output (debug, fail, task names).
HARMLESS = {"condition", "output"}
# Module argument types that are values: never a document, a path or JSON text the module would parse.
DATA_TYPES = {"str", "list", "dict", "bool", "int", "float"}

INCLUDE_ROLE = {"ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"}
SET_FACT = {"ansible.builtin.set_fact", "set_fact"}
OUTPUT = {"ansible.builtin.debug", "ansible.builtin.fail", "debug", "fail"}
ASSERT = {"ansible.builtin.assert", "assert"}
CONDITIONS = ("when", "changed_when", "failed_when", "until")
KEYWORDS = set(Task.fattributes) | set(Block.fattributes)
# Role task files that turn text into objects.
TEXT_TO_DATA = re.compile(r"ansible\.builtin\.template|from_yaml|from_json")


@functools.lru_cache(maxsize=None)
def play_of(playbook):
    return yaml.safe_load((PLAYBOOKS / f"{playbook}.yml").read_text())[0]


@functools.lru_cache(maxsize=None)
def job_spec(playbook):
    """The argument spec the playbook's first task checks the answers against (vmsched.kubevirt.preflight), or
    None when its first task is no such check."""
    first = play_of(playbook)["tasks"][0]
    check = first.get("vmsched.kubevirt.preflight")
    if check is None:
        return None
    (name,) = re.findall(r"argument_specs/([\w-]+\.yml)", check["spec"])
    return yaml.safe_load((PLAYBOOKS / "argument_specs" / name).read_text())


def validated(spec, variable):
    """Whether the check converts the answer to a value of a closed set: a boolean, an integer, a choice."""
    option = pv.entry_point(spec)["options"][variable] if spec else {}
    return bool(option.get("choices")) or option.get("type") in ("bool", "int")


# --- where a variable goes in a playbook -------------------------------------------------------------------

def _module(task):
    names = [key for key in task if key not in KEYWORDS and key not in ("block", "rescue", "always")
             and not key.startswith("with_")]
    assert len(names) <= 1, f"task {task.get('name')!r}: which of {names} is its module?"
    return names[0] if names else None


def _pattern(names):
    return re.compile(r"(?<!\w)(%s)(?!\w)" % "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True)))


def _mentions(node, names):
    pattern = _pattern(names)

    def walk(value):
        if isinstance(value, str):
            return bool(pattern.search(value))
        if isinstance(value, dict):
            return any(walk(k) or walk(v) for k, v in value.items())
        if isinstance(value, list):
            return any(walk(v) for v in value)
        return False
    return walk(node)


def _scope(task, names):
    """The names made from `names` as seen inside a task or block: plus its own vars (an include_role's are the
    role's variables instead) and its loop items (`item.key` for a key of a literal item made from them)."""
    names = set(names)
    own_vars = {} if _module(task) in INCLUDE_ROLE else (task.get("vars") or {})
    loop_var = (task.get("loop_control") or {}).get("loop_var", "item")
    while True:
        before = len(names)
        names.update(name for name, value in own_vars.items() if _mentions(value, names))
        loop = task.get("loop")
        if isinstance(loop, list):
            for item in loop:
                if isinstance(item, dict):
                    names.update(f"{loop_var}.{key}" for key, value in item.items() if _mentions(value, names))
                elif _mentions(item, names):
                    names.add(loop_var)
        elif _mentions(loop, names):
            names.add(loop_var)
        if len(names) == before:
            return names


def _tasks(tasks, names):
    """(task or block, the names made from `names` in its scope), depth first."""
    for task in tasks or []:
        scope = _scope(task, names)
        yield task, scope
        for part in ("block", "rescue", "always"):
            yield from _tasks(task.get(part), scope)


def made_from(play, variable):
    """The variable and every play var, task var, fact and loop item made from it (transitively)."""
    names = {variable}
    while True:
        before = len(names)
        names.update(name for name, value in (play.get("vars") or {}).items() if _mentions(value, names))
        for task, scope in _tasks(play["tasks"], names):
            if _module(task) in SET_FACT:
                names.update(name for name, value in task[_module(task)].items() if _mentions(value, scope))
        if len(names) == before:
            return names


def _role_state(role, task_vars):
    state = task_vars.get(f"{role}_state")
    if state is None:
        state = argument_spec(role).get(f"{role}_state", {}).get("default")
    return state


@functools.lru_cache(maxsize=None)
def uses(playbook, variable):
    """{use: [the include_role expressions, for a role variable]}: every place the playbook uses the variable or a
    variable made from it, as a role variable, a module argument, a condition, output, or the play's own keys."""
    play = play_of(playbook)
    names = made_from(play, variable)
    found = {}

    def add(use, expression=None):
        found.setdefault(use, [])
        if expression is not None:
            found[use].append(expression)

    for key in ("hosts", "module_defaults"):
        if _mentions(play.get(key), names):
            add(f"play {key}")
    for task, scope in _tasks(play["tasks"], names):
        if any(_mentions(task.get(key), scope) for key in CONDITIONS):
            add("condition")
        if _mentions(task.get("name"), scope) or _mentions((task.get("loop_control") or {}).get("label"), scope):
            add("output")
        module = _module(task)
        args = task.get(module) if module else None
        if module in INCLUDE_ROLE:
            role = args["name"].split(".")[-1]
            state = _role_state(role, task.get("vars") or {})
            for name, value in (task.get("vars") or {}).items():
                if _mentions(value, scope):
                    add(f"role {role} ({state}): {name}" if state else f"role {role}: {name}", value)
        elif module in SET_FACT:
            continue    # a fact made from it: its uses are found under its own name
        elif module in OUTPUT:
            if _mentions(args, scope):
                add("output")
        elif module in ASSERT:
            if _mentions(args.get("that"), scope):
                add("condition")
            if _mentions({k: v for k, v in args.items() if k != "that"}, scope):
                add("output")
        elif module:
            for name, value in (args or {}).items() if isinstance(args, dict) else [("(free form)", args)]:
                if _mentions(value, scope):
                    add(f"module {module}: {name}")
    return found


# --- whether a use keeps the answer plain data -------------------------------------------------------------

def _task_files(role, state):
    """The task files of the role a run with this state goes through: main.yml and what it includes (for that
    state, or unconditionally), transitively."""
    seen, todo = [], ["main.yml"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        for task in DataLoader().load_from_file(str(ROLES / role / "tasks" / name)) or []:
            include = task.get("ansible.builtin.include_tasks") or task.get("ansible.builtin.import_tasks")
            when = str(task.get("when", ""))
            if not include or ("_state" in when and state is not None and repr(state) not in when):
                continue
            if "{{" in include:                     # a templated file name: every task file may run
                todo.extend(path.name for path in (ROLES / role / "tasks").glob("*.yml"))
            else:
                todo.append(include)
    return seen


@functools.lru_cache(maxsize=None)
def renders_manifests(role, state):
    return any(TEXT_TO_DATA.search((ROLES / role / "tasks" / name).read_text()) for name in _task_files(role, state))


@functools.lru_cache(maxsize=None)
def _module_argument_spec(module):
    namespace, collection, name = module.split(".")
    code = importlib.import_module(f"ansible_collections.{namespace}.{collection}.plugins.modules.{name}")
    spec = getattr(code, "argspec", None) or getattr(code, "argument_spec")     # kubernetes.core's, ours
    return spec() if callable(spec) else spec


def use_problem(use):
    """Why the use may not keep an answer plain data (None when it does)."""
    if use in HARMLESS:
        return None
    role = re.fullmatch(r"role (\w+)(?: \((\w+)\))?: (\w+)", use)
    if role:
        name, state, variable = role.groups()
        if not renders_manifests(name, state):
            return None     # it reaches the cluster through module arguments only
        if name not in {case[0] for case in CASES}:
            return f"{use}: the role renders manifests that tests/unit/test_role_templates.py does not"
        if variable not in user_variables(name) and variable not in CONTAINERS:
            return f"{use}: tests/unit/test_role_templates.py does not render {variable} with hostile values"
        return None
    module = re.fullmatch(r"module ([\w.]+): (\w+)", use)
    if module:
        spec = _module_argument_spec(module.group(1))
        option = spec.get(module.group(2)) or next(
            (option for option in spec.values() if module.group(2) in option.get("aliases", [])), None)
        if option is None:
            return f"{use}: the module takes no such argument"
        if option.get("type", "str") not in DATA_TYPES:
            return f"{use}: an argument of type {option.get('type')} may be parsed as text"
        return None
    return f"{use}: neither a role variable, a module argument, a condition nor output"


def _marked(value, marks):
    """The value with each string (keys too) replaced by a placeholder of its own, recorded in marks."""
    if isinstance(value, str) and value:       # empty is no value: a role's default takes its place
        mark = "sentinel%dvalue" % len(marks)
        marks[mark] = value
        return mark
    if isinstance(value, dict):
        return {_marked(k, marks): _marked(v, marks) for k, v in value.items()}
    if isinstance(value, list):
        return [_marked(v, marks) for v in value]
    return value


def _unmarked(node, marks):
    """A rendering with placeholders, each replaced by its string (JSON-quoted where the template quotes it inside
    a string of its own, as test_role_templates.substitute does)."""
    if isinstance(node, str):
        for mark in sorted(marks, key=len, reverse=True):
            node = node.replace(json.dumps(mark), json.dumps(marks[mark])).replace(mark, marks[mark])
        return node
    if isinstance(node, dict):
        return {_unmarked(k, marks): _unmarked(v, marks) for k, v in node.items()}
    if isinstance(node, list):
        return [_unmarked(v, marks) for v in node]
    return node


@functools.lru_cache(maxsize=None)
def _checks(role):
    """(assert arguments, task vars, loop variable, items) of each check the role runs before the cluster, its
    loop templated once (the format tables do not depend on the user's values); items [None] without a loop."""
    loader, variables = role_variables(role)
    checks = []
    for task in checks_before_cluster(role):
        items = Templar(loader=loader, variables=variables).template(task["loop"]) if "loop" in task else [None]
        loop_var = task.get("loop_control", {}).get("loop_var", "item")
        checks.append((task["ansible.builtin.assert"], task.get("vars", {}), loop_var, items))
    return checks


def refused_by_role(role, variable, value):
    """Whether a check the role runs before anything reaches the cluster fails for this value, naming the variable
    (test_role_templates.format_errors, for this variable's checks only)."""
    loader, variables = role_variables(role, **{variable: value})
    for args, task_vars, loop_var, items in _checks(role):
        that = args["that"] if isinstance(args["that"], list) else [args["that"]]
        for item in items:
            # A format table's row is that of one variable; a check of its own mentions the variable.
            if isinstance(item, dict) and "var" in item:
                if item["var"] != variable:
                    continue
            elif not _mentions(that, {variable}):
                continue
            scope = dict(variables, **task_vars)
            if item is not None:
                scope[loop_var] = item
            templar = Templar(loader=loader, variables=scope)
            if not all(templar.evaluate_conditional(trust_as_template(str(c))) for c in that):
                if re.search(r"(^|\W)%s=" % variable, str(templar.template(args["fail_msg"]))):
                    return True
    return False


def _by_repr(function):
    """functools.lru_cache for arguments that may not be hashable (a role variable's value): keyed by their repr,
    which tells apart the types a value may arrive as ('1', 1, a date)."""
    cache = {}

    @functools.wraps(function)
    def cached(*args):
        key = repr(args)
        if key not in cache:
            cache[key] = function(*args)
        return cache[key]
    return cached


@functools.lru_cache(maxsize=None)
def reaching_cases(role, variable):
    """The indexes of the CASES of test_role_templates whose manifests the variable reaches (a sentinel in its
    place)."""
    return [index for index, case in enumerate(CASES)
            if case[0] == role and SENTINEL in json.dumps(_rendering(index, variable, value_of(variable, SENTINEL)))]


@_by_repr
def role_verdict(role, variable, value):
    """How the role takes this value of one of its variables: 'refused' (a format check names the variable before
    anything reaches the cluster), 'plain' (each manifest it reaches is the one rendered with a placeholder in its
    place, the value put where the placeholder was), else what went wrong."""
    if refused_by_role(role, variable, value):
        return "refused"
    marks = {}
    marked = _marked(value, marks)
    for index in reaching_cases(role, variable):
        try:
            rendered = _rendering(index, variable, value)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # a value that breaks the template
            return f"{CASES[index][1]} does not render: {exc}"
        if rendered != _unmarked(_rendering(index, variable, marked), marks):
            return f"{CASES[index][1]} is not the plain rendering"
    return "plain"


@_by_repr
def _rendering(index, variable, value):
    """The manifests of CASES[index] with the variable set to the value (a placeholder rendering is asked for many
    times)."""
    role, template, variables = CASES[index]
    return manifests(role, template, **dict(variables, **{variable: value}))


@functools.lru_cache(maxsize=None)
def _play_vars(playbook):
    loader = DataLoader()
    return loader, loader.load_from_file(str(PLAYBOOKS / f"{playbook}.yml"), trusted_as_template=True)[0].get("vars") or {}


def role_value(playbook, expression, answers):
    """A role variable as the playbook's include_role gives it: its expression templated with the play's vars
    (trusted, as Ansible loads the playbook) and the answers (extra vars, untrusted)."""
    loader, play_vars = _play_vars(playbook)
    templar = Templar(loader=loader, variables=dict(play_vars, **answers))
    return templar.template(trust_as_template(expression) if isinstance(expression, str) else expression)


# --- the answers as a job gets them --------------------------------------------------------------------------

REQUIRED_ANSWERS = {"migrate_vm_name": "db01", "evacuate_node_name": "node03"}


def deliveries(playbook, variable, value):
    """(how, the job's extra vars or None, AWX's refusal): the answer through AWX (its launch check, then the
    extra vars file as Ansible loads it) and through `ansible-playbook -e`."""
    survey = SURVEYS[playbook]
    (question,) = [q for q in survey["spec"] if q["variable"] == variable]
    others = {q["variable"]: REQUIRED_ANSWERS[q["variable"]] for q in survey["spec"]
              if q["required"] and q["variable"] != variable}
    refusal = answer_errors(question, {variable: value})
    if refusal:
        yield "AWX", None, refusal
    else:
        extra_vars, errors = launch_extra_vars(survey, dict(others, **{variable: value}))
        assert errors == [], errors
        yield "AWX", DataLoader().load(extravars_yaml(extra_vars)), []
    yield "-e", dict(others, **{variable: value}), []


def _names(variable, errors):
    return any(re.search(r"(?<!\w)%s(?!\w)" % variable, error) for error in errors)


def _canonical(spec, variable, raw, converted):
    """Whether an accepted answer of a closed set is itself one of its values, as the playbook uses it raw."""
    option = pv.entry_point(spec)["options"][variable]
    if option.get("choices"):
        return raw in option["choices"] and converted == raw
    if option["type"] == "bool":
        return raw in BOOLEANS and isinstance(converted, bool)
    return isinstance(converted, int) and re.fullmatch(r"-?[0-9]+", str(raw).strip()) is not None


def answer_problems(playbook, variable, value):
    """What is wrong with how the job takes this answer (an empty list when it is refused, naming the variable,
    or goes only where it stays plain data)."""
    spec = job_spec(playbook)
    problems = []
    for how, extra_vars, refusal in deliveries(playbook, variable, value):
        if refusal:
            if not _names(variable, refusal):
                problems.append(f"{how}: refused without naming {variable}: {refusal}")
            continue
        raw = extra_vars.get(variable)
        errors = pv.check_values(spec, extra_vars)[1] if spec else []
        if errors:
            if not _names(variable, errors):
                problems.append(f"{how}: refused without naming {variable}: {errors}")
            continue
        if spec and validated(spec, variable):
            converted = pv.check_values(spec, extra_vars)[0][variable]
            if not _canonical(spec, variable, raw, converted):
                problems.append(f"{how}: {raw!r} is accepted as {converted!r}")
            continue
        if variable not in SINKS.get(playbook, {}):
            problems.append(f"{how}: {playbook}.yml accepts {variable}={raw!r}, which is neither validated by the "
                            f"job's check nor mapped in SINKS to where it stays plain data")
            break
        for use, expressions in uses(playbook, variable).items():
            role = re.fullmatch(r"role (\w+) \(present\): (\w+)", use)
            if not role or not renders_manifests(role.group(1), "present"):
                continue
            for expression in expressions:
                try:
                    given = role_value(playbook, expression, extra_vars)
                except AnsibleError as exc:     # the job fails there, after what ran before it
                    problems.append(f"{how}: {variable}={raw!r}: {playbook}.yml cannot make {role.group(2)}: {exc}")
                    continue
                verdict = role_verdict(role.group(1), role.group(2), given)
                if verdict not in ("refused", "plain"):
                    problems.append(f"{how}: {variable}={raw!r} as {role.group(2)}={given!r}: {verdict}")
    return problems


# --- the tests -----------------------------------------------------------------------------------------------

def test_every_job_template_survey_is_here():
    listed = yaml.safe_load((PLAYBOOKS / "awx_job_templates.yml").read_text())[0]["vars"]["awx_job_templates__playbooks"]
    assert listed and set(SURVEYS) == set(listed) == {template[0] for template in JOB_TEMPLATES}
    assert all((PLAYBOOKS / f"{playbook}.yml").exists() and survey["spec"] for playbook, survey in SURVEYS.items())
    assert set(SINKS) == set(SURVEYS)
    # Every playbook whose first task checks survey answers has a survey.
    checking = {path.stem for path in PLAYBOOKS.glob("*.yml") if job_spec(path.stem) is not None}
    assert checking and checking <= set(SURVEYS)


def test_the_mapping_names_only_free_text_questions():
    for playbook, mapped in SINKS.items():
        asked = {variable for survey_playbook, variable in QUESTIONS if survey_playbook == playbook}
        assert set(mapped) <= asked, f"{playbook}: SINKS names variables its survey does not ask for"
        spec = job_spec(playbook)
        assert not [v for v in mapped if validated(spec, v)], f"{playbook}: SINKS names variables the check validates"


@pytest.mark.parametrize("playbook, variable", QUESTIONS, ids=["%s-%s" % q for q in QUESTIONS])
def test_mapping_is_where_the_playbook_sends_the_answer(playbook, variable):
    if validated(job_spec(playbook), variable):
        assert variable not in SINKS[playbook]
        return
    assert variable in SINKS[playbook], (
        f"{playbook}.yml takes {variable} as free text (its check does not validate it): add it to SINKS with "
        f"where it goes, or give it a format in the playbook's argument spec")
    found = uses(playbook, variable)
    assert set(found) - HARMLESS == SINKS[playbook][variable], f"{variable}: where {playbook}.yml sends it"
    problems = [problem for problem in map(use_problem, found) if problem]
    assert not problems, f"{playbook}.yml: {variable}: {problems}"


@pytest.mark.parametrize("playbook, variable", QUESTIONS, ids=["%s-%s" % q for q in QUESTIONS])
def test_hostile_answers_are_refused_or_stay_plain_data(playbook, variable):
    problems = [(value, problem) for value in SURVEY_HOSTILE for problem in answer_problems(playbook, variable, value)]
    assert not problems, problems


# --- the checks above can fail -------------------------------------------------------------------------------

def test_uses_are_found_through_vars_facts_and_loop_items():
    found = uses("teardown", "site_scheduler_name")
    assert "module kubernetes.core.k8s_info: label_selectors" in found      # a literal loop item's key
    assert "module kubernetes.core.k8s_info: kind" not in found             # not the other keys of that item
    assert {"condition", "output"} <= set(found)                            # through teardown__vms_in_use
    found = uses("site", "site_image_source_registry")                      # through set_fact site__scheduler_image
    assert "role secondary_scheduler (present): secondary_scheduler_image" in found
    assert "module vmsched.kubevirt.vm_placement: names" in uses("site", "site_vms_names")    # through site__vm_names


@pytest.mark.parametrize("use, problem", [
    ("module kubernetes.core.k8s: definition", "may be parsed as text"),
    ("module vmsched.kubevirt.vm_placement: no_such_option", "takes no such argument"),
    ("role descheduler (present): descheduler_state", "does not render descheduler_state"),
    ("play hosts", "neither a role variable"),
])
def test_a_use_that_may_not_stay_data_is_named(use, problem):
    assert problem in (use_problem(use) or "")


def test_role_uses_without_manifests():
    assert renders_manifests("vm_defaults", "present") and not renders_manifests("vm_defaults", "absent")
    assert not renders_manifests("scheduler_image", None)
    assert use_problem("role descheduler (absent): descheduler_name") is None


def test_role_verdicts():
    assert role_verdict("descheduler", "descheduler_interval", "5m\n  image: evil") == "refused"
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": ["a\nkind: Pod", "{{ 7 * 7 }}"]}]}
    assert role_verdict("vm_defaults", "vm_defaults_namespace_selector", selector) == "plain"


def test_an_unmapped_free_text_answer_is_named(monkeypatch):
    monkeypatch.setitem(SINKS, "migrate_vm", {k: v for k, v in SINKS["migrate_vm"].items() if k != "migrate_vm_name"})
    problems = answer_problems("migrate_vm", "migrate_vm_name", "db01\nkind: Pod")
    assert problems and all("migrate_vm_name" in p and "neither validated" in p for p in problems)


@pytest.mark.parametrize("answer, read_as", [
    ("010", "8, a number"), ("yes", "True, a boolean"), ("1.5", "1.5, a number"), ("2025-01-01", "2025-01-01, a date"),
])
def test_text_that_yaml_reads_as_another_type_is_refused(answer, read_as):
    spec = job_spec("rebalance")
    (_awx, awx_vars, _refusal), (_cli, cli_vars, _none) = deliveries("rebalance", "rebalance_nodes", answer)
    assert pv.check_values(spec, awx_vars)[1] == [
        f"rebalance_nodes is {read_as}, where text is expected: YAML (AWX's survey answers, -e @file) reads text such "
        "as 010, yes or 2025-01-01 as another type"]
    values, errors = pv.check_values(spec, cli_vars)        # -e name=value keeps it text
    assert errors == [] and values["rebalance_nodes"] == answer
    # An empty answer arrives as None: no value, as before.
    assert pv.check_values(spec, {"rebalance_nodes": None})[1] == []


def test_the_answers_arrive_as_ansible_loads_awx_extra_vars():
    (how, awx_vars, _refusal), (_cli, cli_vars, _none) = deliveries("migrate_vm", "migrate_vm_namespace", "null")
    assert how == "AWX" and awx_vars["migrate_vm_namespace"] is None and awx_vars["migrate_vm_name"] == "db01"
    assert cli_vars == {"migrate_vm_name": "db01", "migrate_vm_namespace": "null"}
    (how, awx_vars, refusal), _cli = deliveries("migrate_vm", "migrate_vm_strategy", "fast\nkind: Pod")
    assert awx_vars is None and refusal and "migrate_vm_strategy" in refusal[0]
