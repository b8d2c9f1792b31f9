# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A playbook's variables as its argument spec (playbooks/argument_specs/<playbook>.yml) declares them: checking
answers against it, the cluster lookups it asks for, and the AWX survey it makes.

Private to this collection. The spec file has the shape of a role's ``meta/argument_specs.yml`` (entry point
``main``: ``short_description``, ``options`` with ``type``, ``default``, ``required``, ``choices``,
``description``), with these keys of our own, which ansible-core's argument validation ignores:

- on an option: ``question`` (the survey question; AWX's ``question_name``), ``min`` and ``max`` (bounds of an
  ``int``, the length of a ``str``, as in AWX's surveys), ``format`` (``names``: comma-separated names;
  ``selector``: ``key=value,key2=value2``), ``exists`` (``node`` or ``namespace``: each name given must exist
  in the cluster), ``created`` (with ``exists``: the one value the playbook creates, a namespace of the
  collection's own, and need not exist), ``survey: false`` (left out of the survey, e.g. kubeconfig paths AWX never needs);
- on the entry point: ``rules``, each ``{if: {VAR: VALUE, ...}, then: {VAR: [VALUES]}, msg: ...}``.

Survey answers arrive as AWX sends them: text as strings, integers as integers, booleans (AWX has no boolean
question) as the strings ``"true"`` / ``"false"`` of a multiple-choice question. ``check_values`` converts them
the way ansible-core's argument validation does and says what is wrong with each.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re
import datetime

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import KubeVirtError
from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import bound_errors, missing_names

# Our keys on an option; ansible-core's validator is given the option without them.
OWN_KEYS = ("question", "min", "max", "format", "exists", "created", "survey", "description")
# The entry point keys ArgumentSpecValidator understands.
VALIDATOR_KEYS = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")
TYPES = {"str": str, "int": int, "bool": bool}
FORMATS = ("names", "selector")
LOOKUPS = ("node", "namespace")
# What a node's and a namespace's name may be (DNS-1123 subdomain, label), and how to say it.
NAME_PATTERNS = {
    "node": (r"\A(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z",
             "a node name (lower-case letters, digits, '-' and '.', at most 253)"),
    "namespace": (r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z",
                  "a namespace name (lower-case letters, digits and '-', at most 63)"),
}
# AWX's text questions: at most this long unless the spec says otherwise (what AWX's UI proposes).
TEXT_MAX = 1024
# What YAML makes of some text. AWX writes survey answers to a YAML file, each tagged !unsafe, and ansible-core 2.19
# and later read an !unsafe scalar as YAML reads a plain one: the answer 010 arrives as the number 8, yes as true,
# 2025-01-01 as a date, and a playbook's split() or a role's length check fails on it half-way through a run.
READ_AS = ((bool, "a boolean"), (int, "a number"), (float, "a number"), (datetime.date, "a date"))


class SpecError(Exception):
    """The spec itself is wrong (a bug in the playbook's spec file, not in the answers)."""


def entry_point(spec):
    """The ``main`` entry point of a spec file's content, checked for the keys this module relies on."""
    try:
        main = spec["argument_specs"]["main"]
        options = main["options"]
    except (KeyError, TypeError):
        raise SpecError("a playbook spec has argument_specs.main.options")
    for name, option in options.items():
        if option.get("type") not in TYPES:
            raise SpecError("%s: type is one of %s" % (name, ", ".join(sorted(TYPES))))
        if option.get("format") not in (None,) + FORMATS or option.get("exists") not in (None,) + LOOKUPS:
            raise SpecError("%s: format is one of %s, exists one of %s" % (name, FORMATS, LOOKUPS))
        if option.get("required") and "default" in option:
            raise SpecError("%s: a required option has no default" % name)
        bounds = [option.get(key) for key in ("min", "max") if option.get(key) is not None]
        if any(not isinstance(bound, int) or isinstance(bound, bool) for bound in bounds):
            raise SpecError("%s: min and max are integers" % name)
        if len(bounds) == 2 and bounds[0] > bounds[1]:
            raise SpecError("%s: min is more than max" % name)
    return main


def split_names(value):
    """'a, b,,c' -> ['a', 'b', 'c']"""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _not_text(name, value):
    """Why a value given for a str option is not text (None when it is text, or empty)."""
    for kind, what in READ_AS:
        if isinstance(value, kind):
            return ("%s is %s, %s, where text is expected: YAML (AWX's survey answers, -e @file) reads text such as "
                    "010, yes or 2025-01-01 as another type" % (name, value, what))
    return None


def _check_option(name, option, value):
    """What is wrong with one converted value of the option's type, as sentences."""
    errors = []
    low, high = option.get("min"), option.get("max")
    if option["type"] == "int":
        errors.extend(bound_errors(name, value, option))   # as a module's options are checked (module_runner.py)
    elif option["type"] == "str":
        if not value and (option.get("required") or (low or 0) > 0):
            errors.append("%s is empty; it needs a value" % name)
        elif low is not None and len(value) < low:
            errors.append("%s is shorter than %d characters" % (name, low))
        if high is not None and len(value) > high:
            errors.append("%s is longer than %d characters" % (name, high))
    if option.get("format") == "selector":
        bad = [item for item in split_names(value) if "=" not in item or not item.split("=", 1)[0].strip()]
        if bad:
            errors.append('%s is "key=value,key2=value2"; not of that form: %s' % (name, ", ".join(bad)))
    if option.get("exists") and value:
        # A name is looked up in a URL path: '..' would read another path, which answers.
        items = split_names(value) if option.get("format") == "names" else [value]
        bad = [item for item in items if not re.match(NAME_PATTERNS[option["exists"]][0], item)]
        if bad:
            errors.append("%s: not %s: %s" % (name, NAME_PATTERNS[option["exists"]][1], ", ".join(bad)))
    return errors


def check_values(spec, values):
    """(converted values, errors): the values of the spec's options (the others are ignored), converted to their
    types with defaults filled in, and what is wrong with them as sentences naming the variable."""
    main = entry_point(spec)
    options = main["options"]
    plain = dict((name, dict((k, v) for k, v in option.items() if k not in OWN_KEYS))
                 for name, option in options.items())
    validator = ArgumentSpecValidator(plain, **dict((k, main[k]) for k in VALIDATOR_KEYS if k in main))
    given = dict((name, value) for name, value in (values or {}).items() if name in options)
    result = validator.validate(given)
    errors = [str(error) for error in result.errors]
    # The playbook uses the value as given, not as converted here: a str option takes text only.
    not_text = dict((name, _not_text(name, value)) for name, value in given.items() if options[name]["type"] == "str")
    errors.extend(error for name, error in sorted(not_text.items()) if error)
    converted = result.validated_parameters
    for name, option in options.items():
        if not_text.get(name):
            continue
        value = converted.get(name)
        # Values the validator could not convert are reported already.
        if isinstance(value, TYPES[option["type"]]) and not (option["type"] == "int" and isinstance(value, bool)):
            errors.extend(_check_option(name, option, value))
    if not errors:
        for rule in main.get("rules", []):
            applies = all(converted.get(k) == v for k, v in rule["if"].items())
            if applies and not all(converted.get(k) in allowed for k, allowed in rule["then"].items()):
                errors.append(rule["msg"])
    return converted, errors


def lookups(spec, converted):
    """{'node': [(name, variable), ...], 'namespace': [...]}: what must exist in the cluster."""
    wanted = dict((kind, []) for kind in LOOKUPS)
    for name, option in entry_point(spec)["options"].items():
        kind = option.get("exists")
        value = converted.get(name)
        if kind and value:
            items = split_names(value) if option.get("format") == "names" else [value]
            wanted[kind].extend((item, name) for item in items if item != option.get("created"))
    return wanted


def _text(description):
    if isinstance(description, (list, tuple)):
        return " ".join(description)
    return description or ""


def survey_question(name, option):
    """One AWX survey question (the JSON AWX's API takes) for one option."""
    kind = option["type"]
    question = {"question_name": option.get("question") or name, "question_description": _text(option.get("description")),
                "variable": name, "required": bool(option.get("required"))}
    default = option.get("default")
    if kind == "bool":
        question.update(type="multiplechoice", choices=["true", "false"], default="true" if default else "false")
    elif option.get("choices"):
        question.update(type="multiplechoice", choices=[str(c) for c in option["choices"]], default=str(default))
    elif kind == "int":
        question.update(type="integer", min=option.get("min"), max=option.get("max"))
        if default is not None:
            question["default"] = default
    else:
        question.update(type="text", min=option.get("min", 1 if option.get("required") else 0),
                        max=option.get("max", TEXT_MAX), default=default if default is not None else "")
    return question


def survey_spec(spec, name, description=None):
    """The AWX survey (``{name, description, spec: [questions]}``) of a playbook spec, its options in file order,
    without those marked ``survey: false``."""
    main = entry_point(spec)
    questions = [survey_question(var, option) for var, option in main["options"].items()
                 if option.get("survey", True)]
    return {"name": name, "description": description or main.get("short_description", ""), "spec": questions}


def subset(spec, names):
    """A copy of the spec with only the named options (and no rules that mention others)."""
    result = copy.deepcopy(spec)
    main = result["argument_specs"]["main"]
    main["options"] = dict((k, v) for k, v in main["options"].items() if k in names)
    main["rules"] = [rule for rule in main.get("rules", [])
                     if set(rule["if"]) | set(rule["then"]) <= set(main["options"])]
    return result


class Preflight:
    """The preflight module's engine: answers first (before any client exists), then the cluster lookups."""

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.cluster = cluster
        self.spec = params["spec"]
        self.values, _errors = check_values(self.spec, params["values"])
        self.warnings = []
        self.result = {"changed": False, "variables": self.values, "checked": {"node": [], "namespace": []}}

    @staticmethod
    def check_params(params):
        try:
            _values, errors = check_values(params["spec"], params["values"])
        except SpecError as exc:
            raise KubeVirtError("the playbook's spec is invalid: %s" % exc)
        if errors:
            raise KubeVirtError("The variables do not fit the playbook: %s." % "; ".join(errors))

    def run(self):
        wanted = [(kind, item, variable) for kind, items in sorted(lookups(self.spec, self.values).items())
                  for item, variable in items]
        missing, unreadable = missing_names(self.cluster, wanted)
        for kind, item, variable in unreadable:
            self.warnings.append("not allowed to read %s %s (%s): not checked" % (kind, item, variable))
        for kind, item, variable in wanted:
            if (kind, item, variable) not in unreadable:
                self.result["checked"][kind].append(item)
        if missing:
            raise KubeVirtError("The variables do not fit the cluster: %s." % "; ".join(
                "%s %s (%s) does not exist" % item for item in missing))
