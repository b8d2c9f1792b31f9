# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of vmi_migration, vmi_evacuation, vm_rebalance and preflight: documentation and argument spec agree (type, default,
choices, required, elements), every numeric option has bounds that its engine checks before any client exists and
its documentation states, and the playbooks' variables feeding these options are bounded at least as tightly."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.vmsched.kubevirt.plugins.module_utils import module_runner as mr
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import KubeVirtError
from ansible_collections.vmsched.kubevirt.plugins.module_utils.evacuation import Evacuation
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import Migration
from ansible_collections.vmsched.kubevirt.plugins.module_utils.playbook_vars import Preflight
from ansible_collections.vmsched.kubevirt.plugins.module_utils.rebalance import Rebalance
from ansible_collections.vmsched.kubevirt.plugins.modules import preflight, vm_rebalance, vmi_evacuation, vmi_migration

ROOT = Path(__file__).resolve().parents[4]
MODULES = {"vmi_migration": (vmi_migration, Migration), "vmi_evacuation": (vmi_evacuation, Evacuation),
           "vm_rebalance": (vm_rebalance, Rebalance), "preflight": (preflight, Preflight)}
# The playbooks that run these modules, and their variables' spec.
PLAYBOOKS = {"migrate_vm": "vmi_migration", "evacuate_node": "vmi_evacuation", "rebalance": "vm_rebalance"}


def own_options(module):
    return dict((k, v) for k, v in module.argument_spec().items() if k not in AUTH_ARG_SPEC)


def documented(module):
    return yaml.safe_load(module.DOCUMENTATION)["options"]


def text(description):
    return " ".join(description) if isinstance(description, list) else description


@pytest.mark.parametrize("name", sorted(MODULES))
def test_documentation_matches_the_argument_spec(name):
    module = MODULES[name][0]
    spec, docs = own_options(module), documented(module)
    assert sorted(spec) == sorted(docs)
    for option, arg in spec.items():
        doc = docs[option]
        for key, default in (("type", "str"), ("default", None), ("choices", None), ("required", False),
                             ("elements", None)):
            assert doc.get(key, default) == arg.get(key, default), "%s: %s differs" % (option, key)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_numeric_option_is_bounded_checked_and_documented(name):
    module, engine_class = MODULES[name]
    numeric = sorted(option for option, arg in own_options(module).items() if arg.get("type") in ("int", "float"))
    bounds = getattr(engine_class, "BOUNDS", {})
    assert sorted(bounds) == numeric
    docs = documented(module)
    for option, bound in bounds.items():
        words = text(docs[option]["description"])
        low = bound["min"]
        assert "At least V(%d)" % low in words or "V(%d) or more" % low in words, option
        # Below the bound: refused by the check that runs before any client exists, naming the option.
        params = dict((k, v.get("default")) for k, v in module.argument_spec().items())
        params.update({"name": "web", "namespace": "ns", "node": "n1", option: low - 1})
        with pytest.raises(KubeVirtError, match="^%s is %d; the least allowed is %d$" % (option, low - 1, low)):
            mr.check_input(params, engine_class, {"K8S_AUTH_HOST": "https://k8s", "K8S_AUTH_API_KEY": "t"})


def task_args(playbook, module):
    play = yaml.safe_load((ROOT / "playbooks" / ("%s.yml" % playbook)).read_text())[0]
    [task] = [t for t in play["tasks"] if "vmsched.kubevirt.%s" % module in t]
    return task["vmsched.kubevirt.%s" % module]


@pytest.mark.parametrize("playbook", sorted(PLAYBOOKS))
def test_survey_answers_get_the_modules_ranges(playbook):
    """A variable passed to a bounded option has a min in the playbook's spec (checked by the preflight task) no
    lower than the option's, unless a falsy answer (0) leaves the option out (`or omit`)."""
    module, engine_class = MODULES[PLAYBOOKS[playbook]]
    spec = yaml.safe_load((ROOT / "playbooks" / "argument_specs" / ("%s.yml" % playbook)).read_text())
    variables = spec["argument_specs"]["main"]["options"]
    args = task_args(playbook, PLAYBOOKS[playbook])
    checked = []
    for option, bound in engine_class.BOUNDS.items():
        if option not in args:
            continue
        [variable] = re.findall(r"\b(%s_[a-z0-9_]+)" % playbook, args[option])
        low = variables[variable].get("min")
        assert low is not None, "%s feeds %s but has no min" % (variable, option)
        omitted = "or omit" in args[option]
        assert low >= bound["min"] or (omitted and low == 0), "%s: min %s, %s needs %s" % (
            variable, low, option, bound["min"])
        checked.append(option)
    assert "wait_timeout" in checked
