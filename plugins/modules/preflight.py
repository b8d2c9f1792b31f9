#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: preflight
version_added: 0.1.0
short_description: Check a playbook's variables against its argument spec and the cluster before anything changes
author:
  - vmsched maintainers (@vmsched)
description:
  - The first task of this collection's playbooks. Checks the playbook's variables (survey answers, extra vars)
    against the playbook's argument spec, then that the nodes and namespaces they name exist, and fails with one
    message listing every problem. It only reads, so a bad answer stops the playbook before any write.
  - B(The spec) is the content of C(playbooks/argument_specs/<playbook>.yml), shaped like a role's
    C(meta/argument_specs.yml) (entry point C(main), C(options) with C(type) V(str), V(int) or V(bool), C(default),
    C(required), C(choices)). Values are converted as ansible-core converts role arguments (V("120") to V(120),
    V("true") to V(true)), so answers of AWX surveys, which send booleans as strings, pass. A V(str) option takes
    text only, since the playbook goes on with the value as given; a value YAML read as a number, a boolean or a
    date is refused (AWX writes survey answers as YAML, and ansible-core 2.19 and later read the answer V(010) as
    the number 8 and V(yes) as V(true)).
  - Keys of our own on an option, ignored by ansible-core, add checks. C(min) and C(max) bound an V(int), or the
    length of a V(str). C(format=names) is a comma-separated list of names, C(format=selector) is
    C(key=value,key2=value2). C(exists=node) or C(exists=namespace) makes each name given one that must exist in the
    cluster (an empty value is not looked up). C(question) and C(survey) only shape the AWX survey
    (C(playbooks/surveys/)). On the entry point, C(rules) relate variables after conversion; each rule has C(if)
    (variables and their values), C(then) (variables and the values they may then take) and C(msg).
  - With the action plugin of the same name, the variables named in the spec are read from the play's variables,
    so a task needs only O(spec). Names given in O(values) win.
  - Variables not in the spec are ignored. A read the user may not make (401 or 403) skips that lookup with a
    warning, as this collection's other modules do.
  - Before any request, as every module of this collection does, it checks that the kubeconfig file(s) and context
    it is given (for example through the playbook's C(module_defaults)) exist, and names them when they do not.
  - The bounds C(min) and C(max) of a playbook's variables are worded as the bounds of this collection's modules'
    options are (C(<variable> is -5; the least allowed is 1)); a spec whose C(min) or C(max) is not an integer, or
    whose C(min) is more than its C(max), is an error of the spec.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.info_module
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options:
  spec:
    description:
      - The playbook's argument spec, as read from its file, for example
        C({{ lookup('ansible.builtin.file', 'argument_specs/migrate_vm.yml') | from_yaml }}).
    type: dict
    required: true
  values:
    description:
      - The variables to check, by name. The action plugin fills in, from the play's variables, every name of the
        spec not given here.
    type: dict
    default: {}
notes:
  - Needs get permission on the nodes and namespaces it looks up (or gets a warning instead of the check).
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - module: ansible.builtin.validate_argument_spec
  - name: AWX surveys
    description: The survey questions AWX asks at launch and the extra variables it sends.
    link: https://docs.ansible.com/automation-controller/latest/html/userguide/job_templates.html#surveys
"""

EXAMPLES = r"""
- name: Check the survey answers
  vmsched.kubevirt.preflight:
    spec: "{{ lookup('ansible.builtin.file', 'argument_specs/migrate_vm.yml') | from_yaml }}"

- name: Check values given explicitly against an inline spec
  vmsched.kubevirt.preflight:
    spec:
      argument_specs:
        main:
          options:
            drain_node:
              type: str
              required: true
              exists: node
            drain_timeout:
              type: int
              default: 600
              min: 1
    values:
      drain_node: node03
      drain_timeout: "120"
"""

RETURN = r"""
variables:
  description:
    - The spec's variables, converted to their types, defaults filled in.
    - Not named C(values), which Jinja's dot notation could not reach (C(result.values) is the dict method).
  returned: success
  type: dict
  sample: {"migrate_vm_name": "db01", "migrate_vm_wait_timeout": 120, "migrate_vm_cancel_on_timeout": true}
checked:
  description: The names looked up in the cluster, by kind (those skipped for lack of permission are not listed).
  returned: success
  type: dict
  contains:
    node:
      description: Node names that were looked up.
      type: list
      elements: str
    namespace:
      description: Namespace names that were looked up.
      type: list
      elements: str
  sample: {"node": ["node04"], "namespace": ["prod"]}
"""

import copy

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine
from ansible_collections.vmsched.kubevirt.plugins.module_utils.playbook_vars import Preflight


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(spec=dict(type="dict", required=True), values=dict(type="dict", default={}))
    return spec


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_engine(module, Preflight, "vmsched.kubevirt/preflight", timed=False)


if __name__ == "__main__":
    main()
