# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AWX's rules for job template surveys and for the extra variables of a launch, written down for tests that
have no AWX to ask (AWX needs PostgreSQL, Redis and Receptor; none is installable here).

Read from AWX 24.6's source and restated here, not copied:
- a survey spec POSTed to /api/v2/job_templates/N/survey_spec/ is refused (400) unless it has a string
  ``name`` and ``description`` and a non-empty list ``spec``; each question has string ``type``,
  ``question_name`` and ``variable`` and a boolean ``required``; variables are unique; the type is one of
  QUESTION_TYPES; a default (other than "") has the type's Python type; ``min``/``max`` are integers or null;
  multiple-choice questions list ``choices`` and their one default is among them
  (awx/api/views: JobTemplateSurveySpec._validate_spec_data);
- at launch, each answer is checked against its question (strings for text, ints for integer, bounds, choices),
  variables the survey does not ask for are refused unless the template prompts for variables, and the job's
  extra variables are the template's, then every question's default that passes the same check, then the
  answers (awx/main/models/mixins.py: SurveyJobTemplateMixin);
- the job's ``env/extravars`` is YAML in which every string is tagged ``!unsafe`` (awx/main/utils/safe_yaml.py),
  so Ansible never templates a survey answer.

Also the survey writer of `make surveys`: ``python tests/unit/awx_surveys.py --write`` regenerates
playbooks/surveys/*.json from playbooks/argument_specs/ (tests/unit/test_playbook_specs.py checks they agree).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
QUESTION_TYPES = {"text": str, "textarea": str, "password": str, "multiplechoice": str, "multiselect": str,
                  "integer": int, "float": (float, int)}
# The job templates of this collection's playbooks: (playbook, the survey's name, the playbook whose spec holds
# the variables). teardown.yml takes site.yml's variables: its survey is the part of site's it uses.
JOB_TEMPLATES = [
    ("site", "Install VM scheduling", "site"),
    ("migrate_vm", "Migrate a VM", "migrate_vm"),
    ("evacuate_node", "Evacuate a node", "evacuate_node"),
    ("rebalance", "Rebalance VMs", "rebalance"),
    ("teardown", "Remove VM scheduling", "site"),
]


def _choices(question):
    choices = question.get("choices", [])
    if isinstance(choices, str):
        choices = [c for c in choices.splitlines() if c.strip()]
    return choices


def survey_spec_errors(survey):
    """Why AWX's API would refuse this survey spec (an empty list if it would take it)."""
    errors = []
    for field, kind in (("name", str), ("description", str), ("spec", list)):
        if not isinstance(survey.get(field), kind):
            errors.append(f"{field!r} missing or not a {kind.__name__}")
    if errors:
        return errors
    if not survey["spec"]:
        return ["'spec' has no questions"]
    seen = set()
    for index, question in enumerate(survey["spec"]):
        where = f"question {index} ({question.get('variable')})"
        for field in ("type", "question_name", "variable", "required"):
            kind = bool if field == "required" else str
            if not isinstance(question.get(field), kind):
                errors.append(f"{where}: {field!r} missing or not a {kind.__name__}")
        if question.get("variable") in seen:
            errors.append(f"{where}: variable used twice")
        seen.add(question.get("variable"))
        qtype = question.get("type")
        if qtype not in QUESTION_TYPES:
            errors.append(f"{where}: type {qtype!r} is not one of {sorted(QUESTION_TYPES)}")
            continue
        default = question.get("default")
        if "default" in question and default != "" and not isinstance(default, QUESTION_TYPES[qtype]):
            errors.append(f"{where}: default {default!r} is not a {qtype} value")
        for bound in ("min", "max"):
            if question.get(bound) is not None and not isinstance(question[bound], int):
                errors.append(f"{where}: {bound} is not an integer")
        if qtype in ("multiplechoice", "multiselect"):
            if "choices" not in question:
                errors.append(f"{where}: no choices")
            elif "default" in question:
                defaults = [d for d in default.splitlines() if d.strip()] if isinstance(default, str) else default
                if qtype == "multiplechoice" and len(defaults) > 1:
                    errors.append(f"{where}: more than one default")
                if any(d not in _choices(question) for d in defaults):
                    errors.append(f"{where}: default not among the choices")
    return errors


def answer_errors(question, answers):
    """Why AWX would refuse this question's answer in `answers` at launch (an empty list if it takes it)."""
    name, qtype = question["variable"], question["type"]
    if name not in answers:
        return [f"{name!r} value missing"] if question["required"] else []
    value = answers[name]
    low, high = question.get("min"), question.get("max")
    if qtype in ("text", "textarea", "password"):
        if not isinstance(value, str):
            return [f"{name}: {value!r} is not a string"]
        size = len(value)
    elif qtype == "integer":
        if not isinstance(value, int) or isinstance(value, bool):  # AWX refuses bools too
            return [f"{name}: {value!r} is not an integer"]
        size = value
    elif qtype == "float":
        if not isinstance(value, (float, int)) or isinstance(value, bool):
            return [f"{name}: {value!r} is not a number"]
        size = value
    elif qtype == "multiplechoice":
        return [] if value in _choices(question) else [f"{name}: {value!r} is not one of {_choices(question)}"]
    else:  # multiselect
        if not isinstance(value, list):
            return [f"{name}: {value!r} is not a list"]
        return [f"{name}: {v!r} is not one of {_choices(question)}" for v in value if v not in _choices(question)]
    errors = []
    if low not in ("", None) and size < int(low):
        errors.append(f"{name}: {value!r} is below {low}")
    if high not in ("", None) and size > int(high):
        errors.append(f"{name}: {value!r} is above {high}")
    return errors


def launch_extra_vars(survey, answers, template_extra_vars=None):
    """(the job's extra variables, why AWX would refuse the launch): the template's extra vars, then each
    question's default that passes its own check, then the answers. Variables the survey does not ask for are
    refused (a template that does not prompt for extra variables)."""
    errors = [e for question in survey["spec"] for e in answer_errors(question, answers)]
    asked = {question["variable"] for question in survey["spec"]}
    errors += [f"{name}: not allowed on launch" for name in answers if name not in asked]
    extra_vars = dict(template_extra_vars or {})
    for question in survey["spec"]:
        default = question.get("default")
        if default is not None and not answer_errors(question, {question["variable"]: default}):
            extra_vars[question["variable"]] = default
    extra_vars.update(answers)
    return extra_vars, errors


class _UnsafeDumper(yaml.SafeDumper):
    def represent_str(self, data):
        return self.represent_scalar("!unsafe", data)


_UnsafeDumper.add_representer(str, _UnsafeDumper.represent_str)


def extravars_yaml(extra_vars):
    """env/extravars as AWX writes it: one YAML document per variable, every string (keys too) tagged !unsafe."""
    return "".join(yaml.dump({key: value}, Dumper=_UnsafeDumper, default_flow_style=False)
                   for key, value in extra_vars.items())


# --- the surveys of this collection's playbooks ------------------------------------------------------------

def generated_surveys():
    """{playbook: survey spec} from playbooks/argument_specs/ (needs the collection importable)."""
    from ansible_collections.vmsched.kubevirt.plugins.module_utils import playbook_vars

    surveys = {}
    for playbook, title, source in JOB_TEMPLATES:
        spec = yaml.safe_load((ROOT / "playbooks" / "argument_specs" / f"{source}.yml").read_text())
        if playbook != source:
            play_vars = yaml.safe_load((ROOT / "playbooks" / f"{playbook}.yml").read_text())[0]["vars"]
            spec = playbook_vars.subset(spec, play_vars)
        description = yaml.safe_load((ROOT / "playbooks" / f"{playbook}.yml").read_text())[0]["name"]
        surveys[playbook] = playbook_vars.survey_spec(spec, title, description)
    return surveys


def survey_file(playbook):
    return ROOT / "playbooks" / "surveys" / f"{playbook}.json"


def survey_text(survey):
    return json.dumps(survey, indent=2) + "\n"


def main():
    parser = argparse.ArgumentParser(description="regenerate playbooks/surveys/*.json from playbooks/argument_specs/")
    parser.add_argument("--write", action="store_true", help="write the files (default: say which differ)")
    args = parser.parse_args()
    # The collection loader, as pytest-ansible sets it up for the unit tests.
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    _AnsibleCollectionFinder(paths=[str(ROOT / ".build" / "collections")])._install()
    stale = []
    for playbook, survey in generated_surveys().items():
        path = survey_file(playbook)
        if not path.exists() or path.read_text() != survey_text(survey):
            stale.append(path.relative_to(ROOT))
            if args.write:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(survey_text(survey))
    verb = "wrote" if args.write else "out of date:"
    print(f"surveys: {verb} {', '.join(map(str, stale))}" if stale else "surveys: up to date")
    if stale and not args.write:
        sys.exit(1)


if __name__ == "__main__":
    main()
