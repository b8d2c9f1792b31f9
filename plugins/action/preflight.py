# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight module's action plugin: reads the variables its spec names from the play, then runs the module.

The variables are read and templated the way ansible-core's own validate_argument_spec action reads a role's
arguments, so values AWX marks unsafe (survey answers) stay unsafe: they are checked, never templated.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        module_args = dict(self._task.args)
        try:
            options = module_args["spec"]["argument_specs"]["main"]["options"]
        except (KeyError, TypeError):
            raise AnsibleActionFail("spec is a playbook's argument spec: argument_specs.main.options")
        values = dict(module_args.get("values") or {})
        from_play = dict((name, task_vars[name]) for name in options if name not in values and name in task_vars)
        values.update(self._templar.template(from_play))
        module_args["values"] = values
        result.update(self._execute_module(module_name="vmsched.kubevirt.preflight", module_args=module_args,
                                           task_vars=task_vars))
        return result
